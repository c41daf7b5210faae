"""Indexing, shape, embedding and segment ops under their torch names (JAX names for the segment
ops), with autograd.

Rows of ``_C.index_ops()`` (include/baracuda/ops/index_ops.def). Forward kernels: the mapped
copy (contiguous / permute / transpose copies, cat, stack, pad, flip, roll, tile, triu, tril,
slice writes), the gather (gather, take_along_dim, index_select, embedding) and the scatter
(scatter_add, index_add, segment_sum, segment_max). Backward passes reuse them: gather's is a
scatter_add, index_select's an index_add, segment_sum's a row gather; pad and embedding have
backward plans of their own.

Out-of-range indices are never dereferenced. The kernels raise a device flag; this module reads
it after the call and raises ``IndexError`` (one host synchronization per call, like torch's
device-side assert surfacing at the next sync). Set ``baracuda.index.check_indices = False`` to
skip the check (out-of-range gathers then read zeros, scatters drop the element).

Scatter-style sums run with atomics unless ``deterministic=True`` is passed or
``torch.use_deterministic_algorithms(True)`` is on; then a stable sort of the destinations and
fixed-order sums make the result bit-identical run to run (``index_sku`` says which ran).
Embedding's backward is always the sorted path.
"""
from . import _C
from ._autograd import current_stream, dl, require_torch, torch

__all__ = ["contiguous", "permute_copy", "transpose_copy", "cat", "concat", "concatenate", "stack", "split", "chunk",
           "pad", "flip", "roll", "rot90", "tile", "repeat_interleave", "triu", "tril", "slice_scatter", "slice_write_",
           "diagonal", "diag_embed", "diag", "gather", "take_along_dim", "take", "put", "index_select", "scatter",
           "scatter_add", "index_copy", "index_fill", "index_add", "one_hot", "dynamic_slice", "dynamic_update_slice",
           "embedding", "embedding_bag",
           "segment_sum", "segment_max", "segment_min"]

# An extension built before this family existed has no index bindings: the other families must
# still import (functional.py imports every family), and the calls here then fail clearly.
INDEX_OPS = {row["name"]: row for row in _C.index_ops()} if hasattr(_C, "index_ops") else {}

check_indices = True


# ---- launch helpers ----------------------------------------------------------------------------
def _deterministic(flag):
    if flag is not None:
        return bool(flag)
    return torch.are_deterministic_algorithms_enabled()


def _export(tensors):
    """DLPack capsules are single-use: export afresh for every _C call."""
    out = {}
    for k, v in tensors.items():
        if v is None:
            continue
        out[k] = [dl(t) for t in v] if isinstance(v, (list, tuple)) else dl(v)
    return out


def _run(op, tensors, params=None, backward=False, deterministic=False):
    """Runs one plan on torch's current stream; checks the out-of-range flag for indexed ops."""
    if not INDEX_OPS:
        raise RuntimeError("baracuda._C has no index bindings: rebuild the extension (python/src/index_bindings.cpp)")
    params = params or {}
    out = tensors["out"]
    device = out.device
    flag = None
    if INDEX_OPS[op]["index"] and check_indices:
        flag = torch.zeros(1, dtype=torch.int32, device=device)
        tensors = dict(tensors, error=flag)
    ws = None
    if INDEX_OPS[op]["engine"] == "scatter" or (op == "embedding" and backward):
        n = _C.index_workspace_size(op, backward, _export(tensors), params, deterministic)
        if n:
            ws = dl(torch.empty(n, dtype=torch.uint8, device=device))
    _C.index(op, backward, _export(tensors), params, current_stream(device), ws, deterministic)
    if flag is not None and int(flag.item()) != 0:
        raise IndexError(f"baracuda.functional.{op}: index out of range (the output may be partially written; "
                         "inputs are untouched)")
    return out


def index_sku(op, tensors, params=None, backward=False, deterministic=False):
    """The plan's SKU and the kernel variant it would launch for these tensors."""
    return _C.index_sku(op, backward, _export(tensors), params or {}, deterministic)


def _check_cuda(name, *ts):
    for x in ts:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"baracuda.functional.{name}: expected a tensor, got {type(x).__name__}")
        if x.device.type != "cuda":
            raise RuntimeError(f"baracuda.functional.{name}: tensors must be on a CUDA device, got {x.device}")


def _check_index(name, index):
    if index.dtype not in (torch.int32, torch.int64):
        raise RuntimeError(f"{name}(): Expected dtype int32/int64 for index, got {index.dtype}")


def _wrap_dim(dim, ndim):
    r = max(ndim, 1)
    if not -r <= dim < r:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-r}, {r - 1}], but got {dim})")
    return dim % r


def _grad_mode(*ts):
    return torch.is_grad_enabled() and any(t is not None and isinstance(t, torch.Tensor) and t.requires_grad
                                           for t in ts)


# ---- raw forward ops -----------------------------------------------------------------------------
def _copy_into(out, x):
    if out.numel():
        _run("copy", {"x": x, "out": out})
    return out


def _contiguous(x):
    return _copy_into(torch.empty(x.shape, dtype=x.dtype, device=x.device), x)


def _gather(x, dim, index):
    out = torch.empty(index.shape, dtype=x.dtype, device=x.device)
    if out.numel():
        _run("gather", {"x": x, "index": index, "out": out}, {"dim": dim})
    return out


def _scatter_add(x, dim, index, src, deterministic):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.numel():
        _run("scatter_add", {"x": x, "index": index, "src": src, "out": out}, {"dim": dim},
             deterministic=deterministic)
    return out


def _index_select(x, dim, index):
    shape = list(x.shape)
    shape[dim] = index.numel()
    out = torch.empty(shape, dtype=x.dtype, device=x.device)
    if out.numel():
        _run("index_select", {"x": x, "index": index.reshape(-1), "out": out}, {"dim": dim})
    return out


def _assign(op, x, dim, index, src, deterministic):
    """scatter / index_copy into a copy of x (src may be an expanded scalar)."""
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.numel():
        _run(op, {"x": x, "index": index if op == "scatter" else index.reshape(-1), "src": src, "out": out},
             {"dim": dim}, deterministic=deterministic)
    return out


def _scalar(value, dtype, device):
    """A 0-d tensor of `value` in `dtype`, through a cast (torch has no fill kernel for fp8)."""
    return torch.tensor(value, device=device).to(dtype)


def _filled(x, dim, index, value, deterministic):
    """index_fill: index_copy from the value expanded (stride 0) to the source's shape."""
    shape = list(x.shape)
    shape[dim] = index.numel()
    src = _scalar(value, x.dtype, x.device).expand(shape)
    return _assign("index_copy", x, dim, index, src, deterministic)


def _index_add(x, dim, index, src, deterministic):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.numel():
        _run("index_add", {"x": x, "index": index.reshape(-1), "src": src, "out": out}, {"dim": dim},
             deterministic=deterministic)
    return out


def _segment(op, data, ids, num_segments, deterministic):
    out = torch.empty((num_segments,) + tuple(data.shape[1:]), dtype=data.dtype, device=data.device)
    if out.numel():
        _run(op, {"x": data, "index": ids, "out": out}, {"num_segments": num_segments}, deterministic=deterministic)
    return out


def _pad_pairs(name, x, pad):
    """torch's pad tuple (last dim first) -> (before, after) for every dim in order."""
    pad = [int(p) for p in pad]
    if len(pad) % 2 or len(pad) // 2 > x.dim():
        raise RuntimeError(f"{name}: Padding length must be divisible by 2 and at most 2 * input.dim() "
                           f"({2 * x.dim()}), got {len(pad)}")
    pairs = [0] * (2 * x.dim())
    for i in range(len(pad) // 2):
        d = x.dim() - 1 - i
        pairs[2 * d], pairs[2 * d + 1] = pad[2 * i], pad[2 * i + 1]
    return pairs


def _pad_fw(x, pairs, mode, value):
    shape = [x.shape[d] + pairs[2 * d] + pairs[2 * d + 1] for d in range(x.dim())]
    out = torch.empty(shape, dtype=x.dtype, device=x.device)
    if out.numel():
        _run("pad", {"x": x, "out": out}, {"pads": pairs, "mode": mode, "value": float(value)})
    return out


def _pad_bw(grad, shape, pairs, mode):
    gin = torch.empty(shape, dtype=grad.dtype, device=grad.device)
    if gin.numel():
        _run("pad", {"x": grad, "out": gin}, {"pads": pairs, "mode": mode}, backward=True)
    return gin


def _mapped(op, x, params):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.numel():
        _run(op, {"x": x, "out": out}, params)
    return out


def _embedding_bw(grad, ids, num_weights, padding_idx):
    gw = torch.empty((num_weights, grad.shape[-1]), dtype=grad.dtype, device=grad.device)
    if gw.numel():
        _run("embedding", {"x": grad, "index": ids, "out": gw}, {"padding_idx": padding_idx}, backward=True)
    return gw


# ---- autograd --------------------------------------------------------------------------------------
if torch is not None:
    from torch.autograd.function import once_differentiable

    class _CopyFunction(torch.autograd.Function):
        """out = x viewed through a permutation (identity for contiguous)."""

        @staticmethod
        def forward(ctx, x, dims):
            ctx.dims = dims
            return _contiguous(x.permute(dims) if dims is not None else x)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            if ctx.dims is None:
                return g, None
            inv = [0] * len(ctx.dims)
            for i, d in enumerate(ctx.dims):
                inv[d] = i
            return _contiguous(g.permute(inv)), None

    class _CatFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, dim, stacked, *xs):
            ctx.dim, ctx.stacked = dim, stacked
            ctx.sizes = [x.shape[dim] if not stacked else 1 for x in xs]
            if stacked:
                shape = list(xs[0].shape)
                shape.insert(dim, len(xs))
            else:
                shape = list(xs[0].shape)
                shape[dim] = sum(ctx.sizes)
            out = torch.empty(shape, dtype=xs[0].dtype, device=xs[0].device)
            if out.numel():
                _run("stack" if stacked else "cat", {"inputs": list(xs), "out": out}, {"dim": dim})
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            grads, off = [], 0
            for n in ctx.sizes:
                piece = g.narrow(ctx.dim, off, n)
                grads.append(piece.squeeze(ctx.dim) if ctx.stacked else piece)
                off += n
            return (None, None) + tuple(grads)

    class _PadFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, pairs, mode, value):
            ctx.pairs, ctx.mode, ctx.shape = pairs, mode, tuple(x.shape)
            return _pad_fw(x, pairs, mode, value)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            return _pad_bw(g, ctx.shape, ctx.pairs, ctx.mode), None, None, None

    class _MappedFunction(torch.autograd.Function):
        """flip / roll / triu / tril: the backward is the same map (inverted for roll)."""

        @staticmethod
        def forward(ctx, x, op, params, back_params):
            ctx.op, ctx.back = op, back_params
            return _mapped(op, x, params)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            return _mapped(ctx.op, g, ctx.back), None, None, None

    class _RepeatInterleaveFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, repeats, dim):
            ctx.repeats, ctx.dim, ctx.shape = repeats, dim, tuple(x.shape)
            shape = list(x.shape)
            shape[dim] *= repeats
            out = torch.empty(shape, dtype=x.dtype, device=x.device)
            if out.numel():
                _run("repeat_interleave", {"x": x, "out": out}, {"repeats": repeats, "dim": dim})
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            # Sum each run of `repeats` copies: g viewed as [..., n, repeats, ...].
            shape = list(ctx.shape)
            shape.insert(ctx.dim + 1, ctx.repeats)
            if not g.numel():
                return torch.zeros(ctx.shape, dtype=g.dtype, device=g.device), None, None
            return g.reshape(shape).sum(ctx.dim + 1), None, None

    class _TileFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, reps):
            ctx.reps, ctx.shape = reps, tuple(x.shape)
            shape = [s * r for s, r in zip(x.shape, reps)]
            out = torch.empty(shape, dtype=x.dtype, device=x.device)
            if out.numel():
                _run("tile", {"x": x, "out": out}, {"repeats": list(reps)})
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            # Sum over the repetitions: g viewed as [r0, s0, r1, s1, ...].
            view = []
            for r, s in zip(ctx.reps, ctx.shape):
                view += [r, s]
            g = g.reshape(view).sum(dim=tuple(range(0, 2 * len(ctx.reps), 2))) if g.numel() else \
                torch.zeros(ctx.shape, dtype=g.dtype, device=g.device)
            return g, None

    class _GatherFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, dim, index, deterministic):
            ctx.save_for_backward(index)
            ctx.dim, ctx.shape, ctx.det = dim, tuple(x.shape), deterministic
            return _gather(x, dim, index)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (index,) = ctx.saved_tensors
            zeros = torch.zeros(ctx.shape, dtype=g.dtype, device=g.device)
            return _scatter_add(zeros, ctx.dim, index, g, ctx.det), None, None, None

    class _IndexSelectFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, dim, index, deterministic):
            ctx.save_for_backward(index)
            ctx.dim, ctx.shape, ctx.det = dim, tuple(x.shape), deterministic
            return _index_select(x, dim, index)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (index,) = ctx.saved_tensors
            zeros = torch.zeros(ctx.shape, dtype=g.dtype, device=g.device)
            return _index_add(zeros, ctx.dim, index, g, ctx.det), None, None, None

    class _ScatterAddFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, dim, index, src, deterministic):
            ctx.save_for_backward(index)
            ctx.dim, ctx.src_shape = dim, tuple(src.shape)
            return _scatter_add(x, dim, index, src, deterministic)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (index,) = ctx.saved_tensors
            gsrc = None
            if ctx.needs_input_grad[3]:
                part = _gather(g, ctx.dim, index)
                if tuple(part.shape) == ctx.src_shape:
                    gsrc = part
                else:  # src larger than index: the rest received nothing
                    gsrc = torch.zeros(ctx.src_shape, dtype=g.dtype, device=g.device)
                    gsrc[tuple(slice(0, s) for s in part.shape)] = part
            return g, None, None, gsrc, None

    class _DiagEmbedFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, offset, d1, d2):
            ctx.args = (offset, d1, d2)
            return _diag_embed(x, offset, d1, d2)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            return _contiguous(torch.diagonal(g, *ctx.args)), None, None, None

    class _ScatterFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, dim, index, src, deterministic):
            ctx.save_for_backward(index)
            ctx.dim, ctx.src_shape, ctx.det = dim, tuple(src.shape), deterministic
            return _assign("scatter", x, dim, index, src, deterministic)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (index,) = ctx.saved_tensors
            zero = torch.zeros((), dtype=g.dtype, device=g.device).expand(index.shape)
            gx = _assign("scatter", g, ctx.dim, index, zero, ctx.det) if ctx.needs_input_grad[0] else None
            gsrc = None
            if ctx.needs_input_grad[3]:
                part = _gather(g, ctx.dim, index)
                gsrc = part
                if tuple(part.shape) != ctx.src_shape:  # src larger than index: the rest received nothing
                    gsrc = torch.zeros(ctx.src_shape, dtype=g.dtype, device=g.device)
                    gsrc[tuple(slice(0, s) for s in part.shape)] = part
            return gx, None, None, gsrc, None

    class _IndexCopyFunction(torch.autograd.Function):
        """index_copy (src given) and index_fill (src None: a constant)."""

        @staticmethod
        def forward(ctx, x, dim, index, src, value, deterministic):
            ctx.save_for_backward(index)
            ctx.dim, ctx.det = dim, deterministic
            if src is None:
                return _filled(x, dim, index, value, deterministic)
            return _assign("index_copy", x, dim, index, src, deterministic)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (index,) = ctx.saved_tensors
            gx = _filled(g, ctx.dim, index, 0, ctx.det) if ctx.needs_input_grad[0] else None
            gsrc = _index_select(g, ctx.dim, index) if ctx.needs_input_grad[3] else None
            return gx, None, None, gsrc, None, None

    class _IndexAddFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, dim, index, src, alpha, deterministic):
            ctx.save_for_backward(index)
            ctx.dim, ctx.alpha = dim, alpha
            return _index_add(x, dim, index, src if alpha == 1 else src * alpha, deterministic)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (index,) = ctx.saved_tensors
            gsrc = None
            if ctx.needs_input_grad[3]:
                gsrc = _index_select(g, ctx.dim, index)
                if ctx.alpha != 1:
                    gsrc = gsrc * ctx.alpha
            return g, None, None, gsrc, None, None

    class _EmbeddingFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, ids, weight, padding_idx):
            ctx.save_for_backward(ids)
            ctx.n, ctx.padding_idx = weight.shape[0], padding_idx
            out = torch.empty(tuple(ids.shape) + (weight.shape[1],), dtype=weight.dtype, device=weight.device)
            if out.numel():
                _run("embedding", {"x": weight, "index": ids, "out": out}, {"padding_idx": padding_idx})
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (ids,) = ctx.saved_tensors
            return None, _embedding_bw(g, ids, ctx.n, ctx.padding_idx), None

    class _SegmentSumFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, data, ids, num_segments, deterministic):
            ctx.save_for_backward(ids)
            return _segment("segment_sum", data, ids, num_segments, deterministic)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (ids,) = ctx.saved_tensors
            return _rows_of(g, ids), None, None, None

    class _SegmentExtremumFunction(torch.autograd.Function):
        """segment_max / segment_min. Tie rule (forward and backward agree): every element equal
        to its segment's extremum is an arg-extremum, and the segment's gradient is split equally
        among them (torch's scatter_reduce amax/amin and JAX's segment_max/min do the same)."""

        @staticmethod
        def forward(ctx, data, ids, num_segments, deterministic, op):
            y = _segment(op, data, ids, num_segments, deterministic)
            ctx.save_for_backward(data, ids, y)
            ctx.num_segments, ctx.det = num_segments, deterministic
            return y

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            data, ids, y = ctx.saved_tensors
            hit = (data == _rows_of(y, ids)).to(g.dtype)
            count = _segment("segment_sum", hit, ids, ctx.num_segments, True).clamp_min(1)
            return hit * _rows_of(g / count, ids), None, None, None, None
else:  # pragma: no cover
    _CopyFunction = None


def _rows_of(t, ids):
    """t[ids] along dim 0, zero rows for ids outside [0, len(t)) (JAX drops those segment ids)."""
    shape = (ids.numel(),) + tuple(t.shape[1:])
    out = torch.empty(shape, dtype=t.dtype, device=t.device)
    if out.numel():
        # No error flag: out-of-range ids read zeros by design here.
        _C.index("index_select", False, _export({"x": t, "index": ids, "out": out}), {"dim": 0},
                 current_stream(t.device), None, False)
    return out


# ---- public functions ----------------------------------------------------------------------------
def contiguous(input):
    """A contiguous copy of any strided view (torch.Tensor.contiguous, always copying)."""
    require_torch()
    _check_cuda("contiguous", input)
    if _grad_mode(input):
        return _CopyFunction.apply(input, None)
    return _contiguous(input)


def permute_copy(input, dims):
    """torch.permute_copy: the permuted view materialised (tiled transpose when the innermost
    axis changes)."""
    require_torch()
    _check_cuda("permute_copy", input)
    dims = [_wrap_dim(int(d), input.dim()) for d in dims]
    if sorted(dims) != list(range(input.dim())):
        raise RuntimeError(f"permute_copy: dims {dims} is not a permutation of {input.dim()} dims")
    if _grad_mode(input):
        return _CopyFunction.apply(input, tuple(dims))
    return _contiguous(input.permute(dims))


def transpose_copy(input, dim0, dim1):
    dims = list(range(input.dim()))
    a, b = _wrap_dim(dim0, input.dim()), _wrap_dim(dim1, input.dim())
    dims[a], dims[b] = dims[b], dims[a]
    return permute_copy(input, dims)


def cat(tensors, dim=0, *, out=None):
    require_torch()
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("cat(): expected a non-empty list of Tensors")
    _check_cuda("cat", *tensors)
    # torch skips legacy empty 1-d tensors of shape [0]
    ref = next((t for t in tensors if not (t.dim() == 1 and t.numel() == 0)), tensors[0])
    tensors = [t for t in tensors if not (t.dim() == 1 and t.numel() == 0 and ref.dim() != 1)]
    dim = _wrap_dim(dim, ref.dim())
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    tensors = [t.to(dtype) for t in tensors]
    for i, t in enumerate(tensors):
        if t.dim() != ref.dim() or any(t.shape[d] != ref.shape[d] for d in range(ref.dim()) if d != dim):
            raise RuntimeError(f"cat(): Sizes of tensors must match except in dimension {dim}. Expected "
                               f"{list(ref.shape)} but got {list(t.shape)} for tensor number {i} in the list.")
    if out is None and _grad_mode(*tensors):
        return _CatFunction.apply(dim, False, *tensors)
    res = _CatFunction.forward(_Ctx(), dim, False, *tensors)
    if out is not None:
        out.copy_(res)
        return out
    return res


concat = concatenate = cat


def stack(tensors, dim=0, *, out=None):
    require_torch()
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    _check_cuda("stack", *tensors)
    dim = _wrap_dim(dim, tensors[0].dim() + 1)
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    tensors = [t.to(dtype) for t in tensors]
    for i, t in enumerate(tensors):
        if t.shape != tensors[0].shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(tensors[0].shape)} at "
                               f"entry 0 and {list(t.shape)} at entry {i}")
    if out is None and _grad_mode(*tensors):
        return _CatFunction.apply(dim, True, *tensors)
    res = _CatFunction.forward(_Ctx(), dim, True, *tensors)
    if out is not None:
        out.copy_(res)
        return out
    return res


class _Ctx:
    """Stands in for an autograd context when a Function's forward runs without autograd."""

    def save_for_backward(self, *ts):
        pass


def pad(input, pad, mode="constant", value=None):
    """torch.nn.functional.pad: constant (negative pads crop), reflect, replicate, circular, on
    any number of trailing dims."""
    require_torch()
    _check_cuda("pad", input)
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise NotImplementedError(f"pad: mode '{mode}' is not supported")
    if mode != "constant" and value not in (None, 0):
        raise RuntimeError(f"Padding mode \"{mode}\" doesn't take in value argument.")
    pairs = _pad_pairs("pad", input, pad)
    value = 0.0 if value is None else value
    if _grad_mode(input) and input.dtype.is_floating_point:
        return _PadFunction.apply(input, pairs, mode, value)
    return _pad_fw(input, pairs, mode, value)


def flip(input, dims):
    require_torch()
    _check_cuda("flip", input)
    dims = [_wrap_dim(int(d), input.dim()) for d in ([dims] if isinstance(dims, int) else dims)]
    if len(set(dims)) != len(dims):
        raise RuntimeError(f"flip: dims has duplicates: {dims}")
    params = {"flip_dims": dims}
    if _grad_mode(input):
        return _MappedFunction.apply(input, "flip", params, params)
    return _mapped("flip", input, params)


def roll(input, shifts, dims=None):
    require_torch()
    _check_cuda("roll", input)
    shifts = [shifts] if isinstance(shifts, int) else [int(s) for s in shifts]
    if dims is None:
        if len(shifts) != 1:
            raise RuntimeError("roll: shifts must be a single value when dims is not given")
        flat = input.reshape(-1)
        return roll(flat, shifts, [0]).view(input.shape)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if len(dims) != len(shifts):
        raise RuntimeError(f"roll: shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    per = [0] * input.dim()
    for s, d in zip(shifts, dims):
        per[_wrap_dim(d, input.dim())] += s
    params, back = {"shifts": per}, {"shifts": [-s for s in per]}
    if _grad_mode(input):
        return _MappedFunction.apply(input, "roll", params, back)
    return _mapped("roll", input, params)


def split(tensor, split_size_or_sections, dim=0):
    """torch.split: views, no copy (nothing to launch)."""
    return torch.split(tensor, split_size_or_sections, dim)


def chunk(input, chunks, dim=0):
    """torch.chunk: views, no copy."""
    return torch.chunk(input, chunks, dim)


def rot90(input, k=1, dims=(0, 1)):
    """torch.rot90: one mapped copy (a flip of a transposed view)."""
    require_torch()
    _check_cuda("rot90", input)
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    d0, d1 = _wrap_dim(dims[0], input.dim()), _wrap_dim(dims[1], input.dim())
    if d0 == d1:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {d0} and dim1 = {d1}")
    k %= 4
    if k == 0:
        return contiguous(input)
    if k == 2:
        return flip(input, (d0, d1))
    # k = 1: flip(d1) then swap = flip of the swapped view along d0; k = 3: along d1.
    return flip(input.transpose(d0, d1), (d0,) if k == 1 else (d1,))


def repeat_interleave(input, repeats, dim=None, *, output_size=None):
    """torch.repeat_interleave. An integer count is one mapped copy; a tensor of counts gathers
    rows through index_select (the index is built with torch.repeat_interleave on an arange)."""
    require_torch()
    _check_cuda("repeat_interleave", input)
    if dim is None:
        input, dim = input.reshape(-1), 0
    dim = _wrap_dim(dim, input.dim())
    if isinstance(repeats, torch.Tensor) and repeats.numel() == 1:
        repeats = int(repeats.item())
    if isinstance(repeats, torch.Tensor):
        index = torch.repeat_interleave(torch.arange(input.shape[dim], device=input.device), repeats.to(input.device),
                                        output_size=output_size)
        return index_select(input, dim, index)
    repeats = int(repeats)
    if repeats < 0:
        raise RuntimeError("repeat_interleave: repeats can not be negative")
    if _grad_mode(input):
        return _RepeatInterleaveFunction.apply(input, repeats, dim)
    return _RepeatInterleaveFunction.forward(_Ctx(), input, repeats, dim)


def tile(input, dims):
    require_torch()
    _check_cuda("tile", input)
    dims = [int(d) for d in dims]
    if len(dims) < input.dim():
        dims = [1] * (input.dim() - len(dims)) + dims
    x = input.reshape((1,) * (len(dims) - input.dim()) + tuple(input.shape))
    if _grad_mode(input):
        return _TileFunction.apply(x, tuple(dims))
    return _TileFunction.forward(_Ctx(), x, tuple(dims))


def _tri(op, input, diagonal):
    require_torch()
    _check_cuda(op, input)
    if input.dim() < 2:
        raise RuntimeError(f"{op}: input tensor must have at least 2 dimensions")
    params = {"diagonal": int(diagonal)}
    if _grad_mode(input):
        return _MappedFunction.apply(input, op, params, params)
    return _mapped(op, input, params)


def triu(input, diagonal=0):
    return _tri("triu", input, diagonal)


def tril(input, diagonal=0):
    return _tri("tril", input, diagonal)


def slice_write_(dst, src, dim=0, start=None, end=None):
    """dst[..., start:end, ...] = src along `dim`, in place (the KV-cache write); no autograd.
    `src` broadcasts to the slice (expand, stride 0)."""
    require_torch()
    _check_cuda("slice_write_", dst, src)
    dim = _wrap_dim(dim, dst.dim())
    view = dst[(slice(None),) * dim + (slice(start, end),)]
    _copy_into(view, src.to(dst.dtype).expand(view.shape))
    return dst


def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """torch.slice_scatter (out of place): input with input[..., start:end:step, ...] = src."""
    require_torch()
    _check_cuda("slice_scatter", input, src)
    dim = _wrap_dim(dim, input.dim())
    index = (slice(None),) * dim + (slice(start, end, step),)
    if _grad_mode(input, src):  # compose differentiably through torch's autograd of views
        out = contiguous(input).clone()
        out[index] = src
        return out
    out = _contiguous(input)
    view = out[index]
    if tuple(view.shape) != tuple(src.shape):
        raise RuntimeError(f"slice_scatter: expected src to have a size equal to the slice of self. src size = "
                           f"{list(src.shape)}, slice size = {list(view.shape)}")
    _copy_into(view, src.to(out.dtype))
    return out


def _diag_embed(x, offset, d1, d2):
    n = x.shape[-1] + abs(offset)
    shape = list(x.shape[:-1])
    for d in sorted((d1, d2)):
        shape.insert(d, n)
    out = torch.zeros(shape, dtype=x.dtype, device=x.device)
    view = torch.diagonal(out, offset, d1, d2)  # a strided view of out: one copy writes it
    if view.numel():
        _copy_into(view, x)
    return out


def diagonal(input, offset=0, dim1=0, dim2=1):
    """torch.diagonal, materialised (torch returns a view; this is its contiguous copy)."""
    return contiguous(torch.diagonal(input, offset, dim1, dim2))


def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    require_torch()
    _check_cuda("diag_embed", input)
    r = input.dim() + 1
    d1, d2 = _wrap_dim(dim1, r), _wrap_dim(dim2, r)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    if _grad_mode(input):
        return _DiagEmbedFunction.apply(input, offset, d1, d2)
    return _diag_embed(input, offset, d1, d2)


def diag(input, diagonal=0):
    """torch.diag: a 1-D input becomes a matrix with it on `diagonal`, a 2-D input gives that
    diagonal."""
    if input.dim() == 1:
        return diag_embed(input, diagonal, 0, 1)
    if input.dim() != 2:
        raise RuntimeError("diag(): Supports 1D or 2D tensors. Got " + str(input.dim()) + "D")
    return contiguous(torch.diagonal(input, diagonal))


def gather(input, dim, index, *, sparse_grad=False, out=None, deterministic=None):
    require_torch()
    _check_cuda("gather", input, index)
    _check_index("gather", index)
    if sparse_grad:
        raise NotImplementedError("gather: sparse_grad is not supported")
    dim = _wrap_dim(dim, input.dim())
    x, idx = (input.reshape(1), index.reshape(1)) if input.dim() == 0 else (input, index)
    if idx.dim() != x.dim():
        raise RuntimeError("gather(): Index tensor must have the same number of dimensions as input tensor")
    det = _deterministic(deterministic)
    if out is None and _grad_mode(input):
        res = _GatherFunction.apply(x, dim, idx, det)
    else:
        res = _gather(x.detach(), dim, idx)
    res = res.reshape(index.shape) if input.dim() == 0 else res
    if out is not None:
        out.copy_(res)
        return out
    return res


def take_along_dim(input, indices, dim=None, *, out=None):
    require_torch()
    _check_cuda("take_along_dim", input, indices)
    _check_index("take_along_dim", indices)
    if dim is None:
        return gather(input.reshape(-1), 0, indices.reshape(-1), out=out)
    dim = _wrap_dim(dim, input.dim())
    if input.dim() != indices.dim():
        raise RuntimeError("torch.take_along_dim(): input and indices should have the same number of dimensions")
    # Broadcast every dim but `dim` (expand: stride 0, no copy).
    xs, js = list(input.shape), list(indices.shape)
    for d in range(input.dim()):
        if d == dim:
            continue
        n = max(xs[d], js[d]) if 1 in (xs[d], js[d]) else xs[d]
        if xs[d] != js[d] and 1 not in (xs[d], js[d]):
            raise RuntimeError(f"take_along_dim: shapes {list(input.shape)} and {list(indices.shape)} do not "
                               f"broadcast at dim {d}")
        xs[d] = js[d] = n
    js[dim] = indices.shape[dim]
    xs[dim] = input.shape[dim]
    return gather(input.expand(xs), dim, indices.expand(js), out=out)


def _wrap_flat(name, index, n):
    """take/put: negative flat indices count from the end (torch); the rest is checked on the
    device."""
    return torch.where(index < 0, index + n, index)


def take(input, index):
    """torch.take: input viewed as 1-D (negative indices wrap); differentiable through gather."""
    require_torch()
    _check_cuda("take", input, index)
    _check_index("take", index)
    flat = _wrap_flat("take", index.reshape(-1), input.numel())
    return gather(input.reshape(-1), 0, flat).view(index.shape)


def put(input, index, source, accumulate=False, *, deterministic=None):
    """torch.put (out of place; no autograd): input viewed as 1-D, negative indices wrap."""
    require_torch()
    _check_cuda("put", input, index, source)
    _check_index("put", index)
    flat = _wrap_flat("put", index.reshape(-1), input.numel())
    x = input.detach().reshape(-1)
    src = source.detach().reshape(-1).to(input.dtype)
    det = _deterministic(deterministic)
    out = _index_add(x, 0, flat, src, det) if accumulate else _assign("index_copy", x, 0, flat, src, det)
    return out.view(input.shape)


def one_hot(tensor, num_classes=-1):
    """torch.nn.functional.one_hot: int64 [*, num_classes]; classes outside [0, num_classes)
    raise IndexError (device flag)."""
    require_torch()
    _check_cuda("one_hot", tensor)
    if tensor.dtype != torch.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if num_classes == -1:
        num_classes = int(tensor.max().item()) + 1 if tensor.numel() else 0
    out = torch.zeros(tuple(tensor.shape) + (num_classes,), dtype=torch.int64, device=tensor.device)
    if out.numel():
        index = tensor.unsqueeze(-1)
        one = _scalar(1, torch.int64, tensor.device).expand(index.shape)
        _run("scatter", {"x": out, "index": index, "src": one, "out": out}, {"dim": out.dim() - 1})
    return out


def _starts(operand, start_indices, sizes):
    """JAX's clamping: each start lands in [0, dim - size]."""
    if isinstance(start_indices, torch.Tensor):
        start_indices = start_indices.tolist()  # a host read, as with concrete JAX values
    starts = [int(s) for s in start_indices]
    if len(starts) != operand.dim():
        raise TypeError(f"dynamic slice: start_indices expected {operand.dim()} values, got {len(starts)}")
    return [min(max(s, 0), operand.shape[d] - sizes[d]) for d, s in enumerate(starts)]


def dynamic_slice(operand, start_indices, slice_sizes):
    """jax.lax.dynamic_slice: one strided copy of the clamped window."""
    require_torch()
    sizes = [int(n) for n in slice_sizes]
    if len(sizes) != operand.dim() or any(n < 0 or n > operand.shape[d] for d, n in enumerate(sizes)):
        raise TypeError(f"dynamic_slice: slice_sizes {sizes} must fit operand shape {list(operand.shape)}")
    view = operand
    for d, s in enumerate(_starts(operand, start_indices, sizes)):
        view = view.narrow(d, s, sizes[d])
    return contiguous(view)


def dynamic_update_slice(operand, update, start_indices):
    """jax.lax.dynamic_update_slice: a copy of operand with the clamped window replaced (two
    copies; no autograd)."""
    require_torch()
    _check_cuda("dynamic_update_slice", operand, update)
    if update.dim() != operand.dim() or any(update.shape[d] > operand.shape[d] for d in range(operand.dim())):
        raise TypeError(f"dynamic_update_slice: update shape {list(update.shape)} must fit operand shape "
                        f"{list(operand.shape)}")
    out = _contiguous(operand.detach())
    view = out
    for d, s in enumerate(_starts(operand, start_indices, list(update.shape))):
        view = view.narrow(d, s, update.shape[d])
    if view.numel():
        _copy_into(view, update.detach().to(out.dtype))
    return out


def index_select(input, dim, index, *, out=None, deterministic=None):
    require_torch()
    _check_cuda("index_select", input, index)
    _check_index("index_select", index)
    if index.dim() > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    x = input.reshape(1) if input.dim() == 0 else input
    dim = _wrap_dim(dim, x.dim())
    idx = index.reshape(-1)
    if out is None and _grad_mode(input):
        res = _IndexSelectFunction.apply(x, dim, idx, _deterministic(deterministic))
    else:
        res = _index_select(x.detach(), dim, idx)
    res = res.reshape(()) if input.dim() == 0 else res
    if out is not None:
        out.copy_(res)
        return out
    return res


def scatter_add(input, dim, index, src, *, deterministic=None):
    require_torch()
    _check_cuda("scatter_add", input, index, src)
    _check_index("scatter_add", index)
    dim = _wrap_dim(dim, input.dim())
    src = src.to(input.dtype)
    det = _deterministic(deterministic)
    if _grad_mode(input, src):
        return _ScatterAddFunction.apply(input, dim, index, src, det)
    return _scatter_add(input, dim, index, src, det)


def scatter(input, dim, index, src=None, value=None, *, reduce=None, deterministic=None):
    """torch.scatter (src tensor or scalar value). Duplicate indices: unspecified winner, or the
    last one in index order with deterministic=True."""
    require_torch()
    _check_cuda("scatter", input, index)
    _check_index("scatter", index)
    if src is not None and not isinstance(src, torch.Tensor):
        src, value = None, src
    if reduce is not None:
        if reduce == "add":
            return scatter_add(input, dim, index, src if src is not None else
                               _scalar(value, input.dtype, input.device).expand(index.shape),
                               deterministic=deterministic)
        raise NotImplementedError(f"scatter: reduce='{reduce}' is not supported")
    dim = _wrap_dim(dim, input.dim())
    if src is None:
        if value is None:
            raise TypeError("scatter() needs src or value")
        src = _scalar(value, input.dtype, input.device).expand(index.shape)
    src = src.to(input.dtype)
    det = _deterministic(deterministic)
    if _grad_mode(input, src):
        return _ScatterFunction.apply(input, dim, index, src, det)
    return _assign("scatter", input, dim, index, src, det)


def index_copy(input, dim, index, source, *, deterministic=None):
    """torch.index_copy. Duplicate indices: unspecified winner, or the last one in index order
    with deterministic=True."""
    require_torch()
    _check_cuda("index_copy", input, index, source)
    _check_index("index_copy", index)
    if index.dim() > 1:
        raise IndexError("index_copy_(): Index should have dimension 1 or 0")
    dim = _wrap_dim(dim, input.dim())
    source = source.to(input.dtype)
    det = _deterministic(deterministic)
    if _grad_mode(input, source):
        return _IndexCopyFunction.apply(input, dim, index.reshape(-1), source, None, det)
    return _assign("index_copy", input, dim, index.reshape(-1), source, det)


def index_fill(input, dim, index, value):
    """torch.index_fill (a scalar value)."""
    require_torch()
    _check_cuda("index_fill", input, index)
    _check_index("index_fill", index)
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise RuntimeError("index_fill_ only supports a 0-dimensional value tensor")
        value = value.item()
    dim = _wrap_dim(dim, max(input.dim(), 1))
    x = input.reshape(1) if input.dim() == 0 else input
    if _grad_mode(input):
        res = _IndexCopyFunction.apply(x, dim, index.reshape(-1), None, value, False)
    else:
        res = _filled(x, dim, index.reshape(-1), value, False)
    return res.reshape(()) if input.dim() == 0 else res


def index_add(input, dim, index, source, *, alpha=1, deterministic=None):
    require_torch()
    _check_cuda("index_add", input, index, source)
    _check_index("index_add", index)
    if index.dim() > 1:
        raise IndexError("index_add_(): Index is supposed to be a vector")
    dim = _wrap_dim(dim, input.dim())
    source = source.to(input.dtype)
    det = _deterministic(deterministic)
    if _grad_mode(input, source):
        return _IndexAddFunction.apply(input, dim, index.reshape(-1), source, alpha, det)
    return _index_add(input, dim, index.reshape(-1), source if alpha == 1 else source * alpha, det)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
              sparse=False):
    """torch.nn.functional.embedding (dense gradient, sorted and deterministic backward)."""
    require_torch()
    _check_cuda("embedding", input, weight)
    _check_index("embedding", input)
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding: max_norm, scale_grad_by_freq and sparse are not supported yet")
    if weight.dim() != 2:
        raise RuntimeError("'weight' must be 2-D")
    if padding_idx is None:
        padding_idx = -1
    else:
        if not -weight.shape[0] <= padding_idx < weight.shape[0]:
            raise AssertionError("Padding_idx must be within num_embeddings")
        padding_idx %= weight.shape[0]
    if _grad_mode(weight):
        return _EmbeddingFunction.apply(input, weight, padding_idx)
    return _EmbeddingFunction.forward(_Ctx(), input, weight.detach(), padding_idx)


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False, mode="mean",
                  sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None, *,
                  deterministic=None):
    """torch.nn.functional.embedding_bag (sum, mean, max), composed from this family: a row
    gather (embedding) and a segment reduction over bag ids (segment_sum / segment_max), so its
    backward is embedding's sorted backward after the segment op's. Entries equal to padding_idx
    (and positions outside every bag) are left out of their bag and out of mean's count; empty
    bags give zeros. max: ties split the gradient equally (segment_max's rule; torch routes it to
    the first maximum)."""
    require_torch()
    _check_cuda("embedding_bag", input, weight)
    _check_index("embedding_bag", input)
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding_bag: max_norm, scale_grad_by_freq and sparse are not supported yet")
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"embedding_bag: mode has to be one of sum, mean or max, got {mode}")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                  f"supported for mode='sum' (got mode='{mode}')")
    dev = weight.device
    if input.dim() == 2:
        if offsets is not None:
            raise ValueError("embedding_bag: if input is 2D, then offsets has to be None")
        bags, n = input.shape
        ids = input.reshape(-1)
        bag = torch.arange(bags, device=dev).repeat_interleave(n)
    elif input.dim() == 1:
        if offsets is None or offsets.dim() != 1:
            raise ValueError("embedding_bag: offsets has to be a 1D Tensor when input is 1D")
        bags = offsets.shape[0] - (1 if include_last_offset else 0)
        ids = input
        # bag of position l: the last offset <= l (positions past the last bag's end drop out)
        bag = torch.bucketize(torch.arange(ids.shape[0], device=dev), offsets.to(dev).long(), right=True) - 1
    else:
        raise ValueError(f"embedding_bag: input has to be 1D or 2D Tensor, but got Tensor of dimension {input.dim()}")
    if padding_idx is not None:
        if not -weight.shape[0] <= padding_idx < weight.shape[0]:
            raise AssertionError("padding_idx must be within num_embeddings")
        bag = torch.where(ids == padding_idx % weight.shape[0], torch.full_like(bag, -1), bag)
    rows = embedding(ids, weight)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.reshape(-1, 1).to(rows.dtype)
    if mode == "max":
        out = segment_max(rows, bag, bags, deterministic=deterministic)
    else:
        out = segment_sum(rows, bag, bags, deterministic=deterministic)
    if mode != "sum":
        ones = torch.ones((ids.shape[0], 1), dtype=rows.dtype, device=dev)
        count = segment_sum(ones, bag, bags, deterministic=True)
        out = out / count.clamp_min(1) if mode == "mean" else torch.where(count > 0, out, torch.zeros_like(out))
    return out


def _segment_args(name, data, segment_ids, num_segments):
    _check_cuda(name, data, segment_ids)
    _check_index(name, segment_ids)
    if segment_ids.dim() != 1 or data.dim() < 1 or segment_ids.shape[0] != data.shape[0]:
        raise ValueError(f"{name}: segment_ids expected 1-d with data.shape[0]={data.shape[0] if data.dim() else 0} "
                         f"entries, got shape {list(segment_ids.shape)}")
    if num_segments is None:  # JAX: max(ids) + 1 (a host read, as in JAX without jit)
        num_segments = int(segment_ids.max().item()) + 1 if segment_ids.numel() else 0
    return int(num_segments)


def segment_sum(data, segment_ids, num_segments=None, indices_are_sorted=False, unique_indices=False,
                *, deterministic=None):
    """jax.ops.segment_sum: ids outside [0, num_segments) are dropped."""
    require_torch()
    n = _segment_args("segment_sum", data, segment_ids, num_segments)
    det = _deterministic(deterministic)
    if _grad_mode(data):
        return _SegmentSumFunction.apply(data, segment_ids, n, det)
    return _segment("segment_sum", data, segment_ids, n, det)


def segment_max(data, segment_ids, num_segments=None, indices_are_sorted=False, unique_indices=False,
                *, deterministic=None):
    """jax.ops.segment_max: empty segments are -inf (the dtype's lowest integer); NaN wins."""
    require_torch()
    n = _segment_args("segment_max", data, segment_ids, num_segments)
    det = _deterministic(deterministic)
    if _grad_mode(data):
        return _SegmentExtremumFunction.apply(data, segment_ids, n, det, "segment_max")
    return _segment("segment_max", data, segment_ids, n, det)


def segment_min(data, segment_ids, num_segments=None, indices_are_sorted=False, unique_indices=False,
                *, deterministic=None):
    """jax.ops.segment_min: empty segments are +inf (the dtype's largest integer); NaN wins."""
    require_torch()
    n = _segment_args("segment_min", data, segment_ids, num_segments)
    det = _deterministic(deterministic)
    if _grad_mode(data):
        return _SegmentExtremumFunction.apply(data, segment_ids, n, det, "segment_min")
    return _segment("segment_min", data, segment_ids, n, det)
