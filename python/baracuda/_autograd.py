"""Launch helpers and the torch.autograd.Function classes behind baracuda.functional.

Everything here is generic over the rows of elementwise_ops.def (``_C.ops()``): what a backward
needs (inputs, output or both), which inputs receive a gradient (grad_mask) and which dtypes the
backward accepts come from the table.
"""
from . import _C

try:  # torch is needed only when an op is called
    import torch
except ImportError:  # pragma: no cover - exercised by the CPU smoke test
    torch = None

OPS = {row["name"]: row for row in _C.ops()}


def require_torch(what="baracuda.functional"):
    if torch is None:
        raise ImportError(f"{what} needs PyTorch (pip install torch): outputs are allocated as torch tensors")


def grad_indices(row):
    """Input positions that receive a gradient, in order (the backward's outputs)."""
    return [i for i in range(row["nin"]) if (row["grad_mask"] >> i) & 1]


def needs_inputs(row):  # bw "dy": the backward needs grad_output only
    return row["bw"] in ("in", "inout")


def needs_output(row):
    return row["bw"] in ("out", "inout")


# ---- DLPack hand-off -------------------------------------------------------------------------
# Dtypes a framework may be unable to export through DLPack travel as a same-size carrier plus
# the real dtype's name; _C reinterprets the storage.
_REINTERPRET = {}
_to_dlpack = _raw_stream = None
if torch is not None:
    for _name, _carrier in (("float8_e4m3fn", "uint8"), ("float8_e5m2", "uint8"), ("uint32", "int32")):
        if hasattr(torch, _name):
            _REINTERPRET[getattr(torch, _name)] = (getattr(torch, _carrier), _name)
    # torch._C._to_dlpack skips Tensor.__dlpack__'s Python-level stream handshake: the kernels run
    # on torch's current stream anyway.
    _to_dlpack = getattr(torch._C, "_to_dlpack", None) or torch.utils.dlpack.to_dlpack
    _raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # cheaper than current_stream()
_DL_SPECIAL = set(_REINTERPRET)
if torch is not None:
    _DL_SPECIAL |= {d for d in (getattr(torch, n, None) for n in ("complex32", "complex64", "complex128")) if d}


def philox_seed(generator=None, bound=1 << 62):
    """A Philox key for in-kernel noise in [0, bound), drawn from `generator` (torch's default CPU
    generator when None), so torch.manual_seed makes the RNG path reproducible. rrelu's key is a
    double parameter of the elementwise table and takes bound=2**53 (exact in a double)."""
    if generator is None:
        return int(torch.randint(0, bound, (), dtype=torch.int64).item())
    return int(torch.randint(0, bound, (), dtype=torch.int64, generator=generator, device=generator.device).item())


def current_stream(device):
    """torch's current cudaStream_t on `device` (a torch.device or a device index), as an integer."""
    if isinstance(device, int):
        return _raw_stream(device) if _raw_stream is not None else torch.cuda.current_stream(device).cuda_stream
    if _raw_stream is not None:
        return _raw_stream(device.index if device.index is not None else torch.cuda.current_device())
    return torch.cuda.current_stream(device).cuda_stream


def _dl_special(t):
    """dl() of the dtypes that need more than an export: complex (lazy conj/neg bits resolved)
    and the dtypes DLPack cannot carry (a same-size carrier plus the real dtype's name)."""
    if t.is_complex() and (t.is_conj() or t.is_neg()):
        t = t.resolve_conj().resolve_neg()
    r = _REINTERPRET.get(t.dtype)
    if r is not None:
        return (_to_dlpack(t.view(r[0])), r[1])
    return _to_dlpack(t)


def dl(t):
    """A torch tensor as something _C accepts. On every call's path: one dict probe decides
    whether the dtype needs more than torch's C-level export."""
    if t.requires_grad:
        t = t.detach()
    if t.dtype in _DL_SPECIAL:
        return _dl_special(t)
    return _to_dlpack(t)


def launch(name, backward, ins, outs, params, device):
    """Runs one plan on torch's current stream of `device`; allocates the backward workspace."""
    stream = current_stream(device)
    ws = None
    if backward and outs and any(o.numel() != ins[0].numel() for o in outs):
        n = _C.workspace_size(name, True, [dl(t) for t in ins], [dl(t) for t in outs], params)
        if n:
            ws = dl(torch.empty(n, dtype=torch.uint8, device=device))
    _C.elementwise(name, backward, [dl(t) for t in ins], [dl(t) for t in outs], params, stream, ws)


def run_backward(name, params, grad_output, saved, in_shapes, grads=None):
    """Backward plan: inputs [grad_output] + saved (table order), one gradient per grad_mask bit
    with its input's shape. Returns the list of gradients (allocated unless `grads` is given)."""
    row = OPS[name]
    if grads is None:
        grads = [torch.empty(in_shapes[i], dtype=grad_output.dtype, device=grad_output.device)
                 for i in grad_indices(row)]
    launch(name, True, [grad_output, *saved], grads, params, grad_output.device)
    return grads


def halves(name, x, dim):
    """The two halves of `x` along `dim` (views), for the gated activations."""
    if x.dim() == 0:
        raise RuntimeError(f"{name}: expected a tensor of rank >= 1 to split in halves, got a 0-dim tensor")
    d = dim + x.dim() if dim < 0 else dim
    if not 0 <= d < x.dim():
        raise IndexError(f"{name}: dim expected in [{-x.dim()}, {x.dim()}), got {dim}")
    n = x.shape[d]
    if n % 2:
        raise RuntimeError(f"{name}: halving dimension must be even, but dimension {d} is size {n}")
    return x.narrow(d, 0, n // 2), x.narrow(d, n // 2, n // 2), d


def gated_grad_buffers(x, d, dtype):
    """grad_x of x's shape whose two halves along `d` occupy disjoint memory ranges (the library
    refuses outputs whose address ranges interleave): allocated with `d` outermost."""
    shape = list(x.shape)
    buf = torch.empty([shape[d]] + shape[:d] + shape[d + 1:], dtype=dtype, device=x.device)
    gx = buf.movedim(0, d)
    h = shape[d] // 2
    return gx, gx.narrow(d, 0, h), gx.narrow(d, h, h)


def cast_raw(x, dtype, saturate=False):
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    launch("cast", False, [x], [out], [1.0 if saturate else 0.0], x.device)
    return out


if torch is not None:
    from torch.autograd.function import once_differentiable

    class EwFunction(torch.autograd.Function):
        """Any differentiable table op whose inputs are the op's own tensor inputs."""

        @staticmethod
        def forward(ctx, name, params, out_shape, *inputs):
            row = OPS[name]
            dtype = next(t.dtype for i, t in enumerate(inputs) if not (row["bool_inputs"] >> i) & 1)
            out = torch.empty(out_shape, dtype=dtype, device=inputs[0].device)
            launch(name, False, list(inputs), [out], params, out.device)
            saved = (tuple(inputs) if needs_inputs(row) else ()) + ((out,) if needs_output(row) else ())
            ctx.save_for_backward(*saved)
            ctx.name, ctx.params, ctx.in_shapes = name, params, [t.shape for t in inputs]
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            row = OPS[ctx.name]
            grads = run_backward(ctx.name, ctx.params, grad, ctx.saved_tensors, ctx.in_shapes)
            res = [None] * row["nin"]
            for i, g in zip(grad_indices(row), grads):
                if ctx.needs_input_grad[3 + i]:
                    res[i] = g
            return (None, None, None, *res)

    class GatedFunction(torch.autograd.Function):
        """glu / reglu / geglu / swiglu: one tensor split in halves along `dim`; the backward writes
        both halves of one grad_x."""

        @staticmethod
        def forward(ctx, name, params, dim, x):
            a, b, d = halves(name, x, dim)
            out = torch.empty(a.shape, dtype=x.dtype, device=x.device)
            launch(name, False, [a, b], [out], params, x.device)
            ctx.save_for_backward(x)
            ctx.name, ctx.params, ctx.d = name, params, d
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return (None, None, None, gated_backward(ctx.name, ctx.params, grad, x, ctx.d))

    class CastFunction(torch.autograd.Function):
        """Casts with baracuda's cast; the gradient is cast back to the source dtype."""

        @staticmethod
        def forward(ctx, x, dtype, saturate):
            ctx.src = x.dtype
            return cast_raw(x, dtype, saturate)

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            return cast_raw(grad, ctx.src), None, None
else:  # pragma: no cover
    EwFunction = GatedFunction = CastFunction = None


def gated_backward(name, params, grad_output, x, dim):
    a, b, d = halves(name, x, dim)
    gx, ga, gb = gated_grad_buffers(x, d, grad_output.dtype)
    run_backward(name, params, grad_output, [a, b], None, grads=[ga, gb])
    return gx


# ---- out-of-range reports (index and loss families) ----------------------------------------------------
# A plan that reads indices or class targets sets an int32 device flag when one is out of range (it
# never dereferences it). The families' check switches (baracuda.index.check_indices,
# baracuda.loss.check_targets) take True, False or "deferred":
#   True        a fresh flag per call, read right after it: the call itself raises (one host
#               synchronization per call);
#   "deferred"  one sticky flag per device, copied to pinned host memory asynchronously after each
#               call: a later checked call raises once that copy has landed, and sync_errors()
#               raises at once (torch's device-side assert semantics: the error surfaces later, and
#               no call waits for the GPU);
#   False       no flag (out-of-range gathers read zeros, scatters drop the element, losses are NaN).
_DEFERRED = {}  # device index -> [device flag, pinned host copy, name of the last call that copied it]


def _deferred_error(idx, st):
    torch.cuda.synchronize(idx)
    st[0].zero_()
    st[1].zero_()
    return IndexError(f"baracuda: an index or class target out of range was reported on cuda:{idx} by a call "
                      f"checked in 'deferred' mode (the last such call: {st[2]}); its outputs hold zeros or NaN "
                      "where the value was out of range, and no memory outside the tensors was touched")


def error_flag(mode, device):
    """The flag to hand a plan for check mode `mode` (None when off). "deferred" first raises an
    earlier call's error whose copy has landed."""
    if not mode:
        return None
    if mode != "deferred":
        return torch.zeros(1, dtype=torch.int32, device=device)
    idx = device.index if device.index is not None else torch.cuda.current_device()
    st = _DEFERRED.get(idx)
    if st is None:
        st = _DEFERRED[idx] = [torch.zeros(1, dtype=torch.int32, device=device),
                               torch.zeros(1, dtype=torch.int32, pin_memory=True), ""]
    elif int(st[1][0]) != 0:
        raise _deferred_error(idx, st)
    return st[0]


def check_flag(mode, flag, name, message):
    """After the call: True mode raises IndexError(message()) when the plan set `flag`; "deferred"
    queues the flag's copy to the host behind the call (on the current stream)."""
    if flag is None:
        return
    if mode == "deferred":
        st = _DEFERRED[flag.device.index]
        st[1].copy_(flag, non_blocking=True)
        st[2] = name
    elif int(flag.item()) != 0:
        raise IndexError(message())


def sync_errors(device=None):
    """Waits for `device` (every device with deferred checks when None) and raises the IndexError
    of any earlier call checked in "deferred" mode."""
    if device is None:
        idxs = list(_DEFERRED)
    elif isinstance(device, int):
        idxs = [device]
    else:
        d = torch.device(device)
        idxs = [d.index if d.index is not None else torch.cuda.current_device()]
    for idx in idxs:
        st = _DEFERRED.get(idx)
        if st is None:
            continue
        torch.cuda.synchronize(idx)
        if int(st[1][0]) != 0:
            raise _deferred_error(idx, st)
