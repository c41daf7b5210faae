"""Softmax and normalization under their torch names (torch.nn.functional signatures), with autograd.

Rows of ``_C.norm_ops()`` (include/baracuda/ops/norm_ops.def): softmax, log_softmax, normalize (any
p >= 0 and inf), sparsemax, gumbel_softmax, layer_norm, rms_norm, batch_norm, instance_norm,
group_norm, local_response_norm, forward and backward, plus ``masked_softmax`` (bool or additive
mask, broadcast). The channel normalizations take [N, C, *spatial] inputs in any layout (NCHW and
channels-last run vectorized kernels) and update running statistics in place like torch;
``native_batch_norm`` / ``native_group_norm`` and their ``*_backward`` mirror ATen's functions for
direct calls.
Beyond torch: ``add_rms_norm`` / ``add_layer_norm`` normalize
``input + residual`` and also return that sum (the fused residual add of transformer blocks),
and ``*_backward`` functions expose the backward plans directly.

Outputs are torch tensors on the input's device; kernels run on ``torch.cuda.current_stream()``.
The reduced axis may be any axis and any stride (a strided path); normalized dims of layer/rms
norm that do not merge into one strided dim are copied to a contiguous tensor first.
"""
import math

from . import _C
from ._autograd import current_stream, dl, philox_seed, require_torch, torch

__all__ = ["softmax", "log_softmax", "masked_softmax", "masked_log_softmax", "normalize", "sparsemax",
           "gumbel_softmax", "layer_norm",
           "rms_norm", "add_rms_norm", "add_layer_norm", "softmax_backward", "log_softmax_backward",
           "layer_norm_backward", "rms_norm_backward",
           "batch_norm", "instance_norm", "group_norm", "local_response_norm", "native_batch_norm",
           "native_batch_norm_backward", "native_group_norm", "native_group_norm_backward"]

NORM_OPS = {row["name"]: row for row in _C.norm_ops()}


# ---- launch helpers ----------------------------------------------------------------------------
def _run(op, backward, tensors, device, axis=-1, norm_ndim=1, eps=1e-5, want_workspace=False, params=None):
    """Runs one plan; `tensors` maps NormArgs roles to torch tensors (None entries are dropped);
    `params` holds the other scalars: normalize's p, gumbel_softmax's tau, hard, seed, offset, the
    channel ops' num_groups, training, momentum, size, alpha, beta, k."""
    ws = None
    if want_workspace:  # DLPack capsules are single-use: each _C call gets its own export
        n = _C.norm_workspace_size(op, backward, {k: dl(v) for k, v in tensors.items() if v is not None}, axis,
                                   norm_ndim, float(eps), params)
        if n:
            ws = dl(torch.empty(n, dtype=torch.uint8, device=device))
    _C.norm(op, backward, {k: dl(v) for k, v in tensors.items() if v is not None}, axis, norm_ndim, float(eps),
            current_stream(device), ws, True, params)


def _like(x):
    """An output with x's strides when x is dense (torch's preserve_format), else contiguous."""
    return torch.empty_like(x)


def _check_cuda(name, x):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"baracuda.functional.{name}: expected a tensor, got {type(x).__name__}")
    if not x.is_cuda:  # (is_cuda: a flag; x.device builds an object)
        raise RuntimeError(f"baracuda.functional.{name}: tensors must be on a CUDA device, got {x.device}")


def _softmax_dim(name, dim, ndim):
    """torch's implicit dim (deprecated): 0 for 0-, 1- and 3-d inputs, else 1."""
    if dim is None:
        import warnings
        warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X "
                      "as an argument.", stacklevel=3)
        return 0 if ndim in (0, 1, 3) else 1
    r = max(ndim, 1)
    if not -r <= dim < r:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-r}, {r - 1}], but got {dim})")
    return dim


def _normalized_ndim(name, x, normalized_shape):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    shape = tuple(normalized_shape)
    if not all(type(s) is int for s in shape):
        shape = tuple(int(s) for s in shape)
    k = len(shape)
    if k == 0:
        raise RuntimeError(f"{name}: Expected normalized_shape to be at least 1-dimensional, i.e., containing at "
                           "least one element, but got normalized_shape = []")
    if x.dim() < k or x.shape[x.dim() - k:] != shape:
        raise RuntimeError(f"{name}: Given normalized_shape={list(shape)}, expected input with shape "
                           f"[*, {', '.join(map(str, shape))}], but got input of size{list(x.shape)}")
    return k, shape


def _merges(x, k):
    """Whether the trailing k dims of x collapse into one strided dim (else the kernel refuses)."""
    if x.is_contiguous():
        return True
    expect = None
    for d in range(x.dim() - 1, x.dim() - k - 1, -1):
        if x.shape[d] == 1:
            continue
        if expect is not None and x.stride(d) != expect:
            return False
        expect = x.stride(d) * x.shape[d]
    return True


def _param(name, p, what, shape, x):
    if p is None:
        return None
    _check_cuda(name, p)
    if p.shape != shape:
        raise RuntimeError(f"{name}: {what} shape expected {list(shape)} (normalized_shape), got {list(p.shape)}")
    if p.dtype != x.dtype and not (p.dtype == torch.float32 and x.dtype in (torch.float16, torch.bfloat16)):
        p = p.to(x.dtype)  # torch promotes; baracuda takes x's dtype or f32 for f16/bf16 inputs
    return p if p.is_contiguous() else p.contiguous()


def _stats_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _rows(x, k):
    return math.prod(x.shape[:x.dim() - k])


# ---- raw forward / backward ----------------------------------------------------------------------
def _softmax_fw(op, x, dim, mask=None):
    y = _like(x)
    if x.numel():
        _run(op, False, {"x": x, "mask": mask, "out": y}, x.device, axis=dim)
    return y


def _softmax_bw(op, grad, y, dim):
    dx = _like(y)
    if y.numel():
        _run(op, True, {"dy": grad, "y": y, "out": dx}, y.device, axis=dim)
    return dx


def _axis_bw(op, grad, y, dim, params=None):
    """The backward of an axis op that reads its output (sparsemax; gumbel_softmax's soft sample)."""
    dx = _like(y)
    if y.numel():
        _run(op, True, {"dy": grad, "y": y, "out": dx}, y.device, axis=dim, params=params)
    return dx


def _sparsemax_fw(x, dim):
    y = _like(x)
    if x.numel():
        _run("sparsemax", False, {"x": x, "out": y}, x.device, axis=dim)
    return y


def _gumbel_fw(logits, dim, tau, hard, noise, seed, offset, need_soft=True):
    """(output, soft sample): the soft sample is the output itself unless hard (then written only
    when `need_soft`, for the backward)."""
    y = _like(logits)
    y_soft = (_like(logits) if need_soft else None) if hard else y
    if logits.numel():
        _run("gumbel_softmax", False, {"x": logits, "noise": noise, "out": y, "y_soft": y_soft if hard else None},
             logits.device, axis=dim, params={"tau": tau, "hard": hard, "seed": seed, "offset": offset})
    return y, y_soft


def _norm_fw(op, x, k, weight, bias, eps, residual=None, stats=True):
    """Returns (y, mean or None, rstd, h) where h = x + residual (or x). stats=False (nothing will
    run a backward): no statistics are allocated or written (mean and rstd are None), two
    allocations and two DLPack exports fewer on the inference path."""
    if not _merges(x, k) or (residual is not None and not _merges(residual, k)):
        x = x.contiguous()
        residual = residual.contiguous() if residual is not None else None
    rows = _rows(x, k)
    y = _like(x)
    h = _like(x) if residual is not None else None
    st = _stats_dtype(x)
    # new_empty: half torch.empty's host time
    mean = x.new_empty(rows, dtype=st) if stats and op == "layer_norm" else None
    rstd = x.new_empty(rows, dtype=st) if stats else None
    if x.numel():
        _run(op, False, {"x": x, "residual": residual, "weight": weight, "bias": bias, "out": y, "residual_out": h,
                         "save_mean": mean, "save_rstd": rstd}, x.device, norm_ndim=k, eps=eps)
    elif rows and stats:  # rows of length 0: statistics of nothing (torch gives NaN)
        rstd.fill_(float("nan"))
        if mean is not None:
            mean.fill_(float("nan"))
    return y, mean, rstd, (h if h is not None else x)


def _norm_bw(op, grad, x, k, mean, rstd, weight, need_dw, need_db, param_dtype):
    if not _merges(x, k):
        x = x.contiguous()
    if not _merges(grad, k):
        grad = grad.contiguous()
    shape = tuple(x.shape[x.dim() - k:])
    dx = _like(x)
    dw = x.new_empty(shape, dtype=param_dtype) if need_dw else None
    db = x.new_empty(shape, dtype=param_dtype) if need_db else None
    if x.numel() or dw is not None or db is not None:
        _run(op, True, {"dy": grad, "x": x, "mean": mean, "rstd": rstd, "weight": weight, "out": dx,
                        "dweight": dw, "dbias": db}, x.device, norm_ndim=k,
             want_workspace=dw is not None or db is not None)
    return dx, dw, db


# ---- channel normalizations: raw forward / backward ------------------------------------------------------
def _prod(xs):
    n = 1
    for v in xs:
        n *= int(v)
    return n


def _channel_groups(op, training, C, num_groups):
    """Stat groups a sample when statistics are per (sample, group), else None (per channel)."""
    if op == "group_norm":
        return num_groups
    if op == "instance_norm" and training:
        return C
    return None


def _channel_pdtype(x, *params):
    """The parameters' dtype: the first given one's when the kernels take it (x's dtype, or f32 for
    f16/bf16 inputs: torch's mixed batch norm), else x's dtype (torch promotes)."""
    for p in params:
        if p is not None:
            if p.dtype == x.dtype or (p.dtype == torch.float32 and x.dtype in (torch.float16, torch.bfloat16)):
                return p.dtype
            break
    return x.dtype


def _channel_param(op, p, what, C, pdt):
    if p is None:
        return None
    _check_cuda(op, p)
    if p.numel() != C:
        raise RuntimeError(f"{op}: {what} expected {C} elements (one per channel), got shape {list(p.shape)}")
    return p.reshape(C).to(pdt).contiguous()


def _match_layout(t, x):
    """t laid out like x: every tensor of a call in one layout keeps the vectorized kernels (a
    broadcast or differently strided gradient is copied once)."""
    if t.stride() == x.stride() or t.numel() == 0:
        return t
    out = torch.empty_like(x, dtype=t.dtype)
    out.copy_(t)
    return out


def _channel_fw(op, x, weight, bias, running_mean, running_var, training, momentum, eps, num_groups=1):
    """Returns (y, mean, rstd): the saved statistics (None in evaluation mode), flat, stats dtype.
    running_mean/running_var are updated in place in training mode."""
    N, C = x.shape[0], x.shape[1]
    y = _like(x)
    groups = _channel_groups(op, training, C, num_groups)
    st = _stats_dtype(x)
    mean = rstd = None
    if training:
        nstat = N * groups if groups is not None else C
        mean = torch.empty(nstat, dtype=st, device=x.device)
        rstd = torch.empty(nstat, dtype=st, device=x.device)
    if x.numel() == 0:
        return y, mean, rstd
    # The kernels take dense [C] running stats of the parameters' dtype; others go through a copy.
    pdt = weight.dtype if weight is not None else (bias.dtype if bias is not None else
                                                    _channel_pdtype(x, running_mean))
    rk = []
    for r in (running_mean, running_var):
        rk.append(None if r is None else (r if r.dtype == pdt and r.is_contiguous() else r.to(pdt).contiguous()))
    params = {"training": bool(training), "momentum": float(momentum), "num_groups": int(num_groups)}
    _run(op, False, {"x": x, "weight": weight, "bias": bias, "out": y, "save_mean": mean, "save_rstd": rstd,
                     "running_mean": rk[0], "running_var": rk[1]}, x.device, eps=eps, want_workspace=True,
         params=params)
    for r, k in zip((running_mean, running_var), rk):
        if r is not None and k is not r and training:
            r.copy_(k.reshape(r.shape))
    return y, mean, rstd


def _channel_bw(op, grad, x, weight, mean, rstd, running_mean, running_var, training, eps, num_groups,
                need_dx, need_dw, need_db, pdt):
    """(dx, dweight, dbias), each None unless asked for."""
    C = x.shape[1]
    grad = _match_layout(grad, x)
    dx = _like(x) if need_dx else None
    dw = torch.empty(C, dtype=pdt, device=x.device) if need_dw else None
    db = torch.empty(C, dtype=pdt, device=x.device) if need_db else None
    if dx is None and dw is None and db is None:
        return dx, dw, db
    if x.numel() == 0 and dw is None and db is None:
        return dx, dw, db
    t = {"dy": grad, "x": x, "weight": weight, "out": dx, "dweight": dw, "dbias": db}
    if training:
        t.update(mean=mean, rstd=rstd)
    else:
        t.update(running_mean=running_mean.to(pdt).contiguous(), running_var=running_var.to(pdt).contiguous())
    _run(op, True, t, x.device, eps=eps, want_workspace=True,
         params={"training": bool(training), "num_groups": int(num_groups)})
    return dx, dw, db


def _lrn_run(backward, x, grad, size, alpha, beta, k):
    out = _like(x)
    if x.numel():
        t = {"dy": _match_layout(grad, x), "x": x, "out": out} if backward else {"x": x, "out": out}
        _run("local_response_norm", backward, t, x.device,
             params={"size": int(size), "alpha": float(alpha), "beta": float(beta), "k": float(k)})
    return out


# ---- autograd --------------------------------------------------------------------------------------
if torch is not None:
    from torch.autograd.function import once_differentiable

    class SoftmaxFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, dim, op, mask=None):
            y = _softmax_fw(op, x, dim, mask)
            ctx.save_for_backward(y)
            ctx.dim, ctx.op = dim, op
            ctx.bool_mask = mask if mask is not None and mask.dtype == torch.bool else None
            return y

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            # A masked softmax's gradient is softmax's on its output (y = 0 where excluded). Masked
            # log_softmax's is log_softmax's, zeroed where a boolean mask excluded (constant -inf
            # outputs there; log_softmax's formula would pass dy through).
            (y,) = ctx.saved_tensors
            dx = _softmax_bw(ctx.op, grad, y, ctx.dim)
            if ctx.op == "log_softmax" and ctx.bool_mask is not None:
                from . import functional as _F  # lazily: functional imports this module

                dx = _F.masked_fill(dx, ctx.bool_mask, 0.0)
            return dx, None, None, None

    class NormalizeFunction(torch.autograd.Function):
        """F.normalize (any p); the backward reads the input."""

        @staticmethod
        def forward(ctx, x, dim, eps, p):
            y = _like(x)
            if x.numel():
                _run("normalize", False, {"x": x, "out": y}, x.device, axis=dim, eps=eps, params={"p": p})
            ctx.save_for_backward(x)
            ctx.dim, ctx.eps, ctx.p = dim, eps, p
            return y

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            dx = _like(x)
            if x.numel():
                _run("normalize", True, {"dy": grad, "x": x, "out": dx}, x.device, axis=ctx.dim, eps=ctx.eps,
                     params={"p": ctx.p})
            return dx, None, None, None

    class SparsemaxFunction(torch.autograd.Function):
        """sparsemax; the backward reads the output (its support)."""

        @staticmethod
        def forward(ctx, x, dim):
            y = _sparsemax_fw(x, dim)
            ctx.save_for_backward(y)
            ctx.dim = dim
            return y

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            return _axis_bw("sparsemax", grad, y, ctx.dim), None

    class GumbelSoftmaxFunction(torch.autograd.Function):
        """gumbel_softmax; the backward reads the soft sample (hard: the straight-through gradient)."""

        @staticmethod
        def forward(ctx, logits, dim, tau, hard, noise, seed, offset):
            y, y_soft = _gumbel_fw(logits, dim, tau, hard, noise, seed, offset)
            ctx.save_for_backward(y_soft)
            ctx.dim, ctx.tau = dim, tau
            return y

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            (y_soft,) = ctx.saved_tensors
            dx = _axis_bw("gumbel_softmax", grad, y_soft, ctx.dim, {"tau": ctx.tau})
            return dx, None, None, None, None, None, None

    class NormFunction(torch.autograd.Function):
        """layer_norm / rms_norm, optionally of x + residual (then also returns that sum)."""

        @staticmethod
        def forward(ctx, op, k, eps, x, residual, weight, bias):
            y, mean, rstd, h = _norm_fw(op, x, k, weight, bias, eps, residual)
            ctx.save_for_backward(h, mean, rstd, weight)
            ctx.op, ctx.k, ctx.has_res = op, k, residual is not None
            ctx.param_dtype = weight.dtype if weight is not None else (bias.dtype if bias is not None else x.dtype)
            return (y, h) if residual is not None else y

        @staticmethod
        @once_differentiable
        def backward(ctx, grad, grad_h=None):
            h, mean, rstd, weight = ctx.saved_tensors
            need_dw = weight is not None and ctx.needs_input_grad[5]
            need_db = ctx.needs_input_grad[6]
            dx, dw, db = _norm_bw(ctx.op, grad, h, ctx.k, mean, rstd, weight, need_dw, need_db, ctx.param_dtype)
            if ctx.has_res and grad_h is not None:
                dx = dx + grad_h
            dres = dx if ctx.has_res and ctx.needs_input_grad[4] else None
            return None, None, None, dx if ctx.needs_input_grad[3] else None, dres, dw, db
else:  # pragma: no cover
    SoftmaxFunction = NormFunction = NormalizeFunction = SparsemaxFunction = GumbelSoftmaxFunction = None


if torch is not None:
    class ChannelNormFunction(torch.autograd.Function):
        """batch_norm / instance_norm / group_norm; running stats are updated in the forward."""

        @staticmethod
        def forward(ctx, op, x, weight, bias, running_mean, running_var, training, momentum, eps, num_groups):
            y, mean, rstd = _channel_fw(op, x, weight, bias, running_mean, running_var, training, momentum, eps,
                                        num_groups)
            if training:
                ctx.save_for_backward(x, weight, mean, rstd)
            else:  # evaluation: the backward reads the running stats (unchanged by this forward)
                ctx.save_for_backward(x, weight, running_mean, running_var)
            ctx.op, ctx.training, ctx.eps, ctx.num_groups = op, training, eps, num_groups
            ctx.pdt = weight.dtype if weight is not None else (bias.dtype if bias is not None else x.dtype)
            return y

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            x, weight, a, b = ctx.saved_tensors
            mean, rstd, rm, rv = (a, b, None, None) if ctx.training else (None, None, a, b)
            dx, dw, db = _channel_bw(ctx.op, grad, x, weight, mean, rstd, rm, rv, ctx.training, ctx.eps,
                                     ctx.num_groups, ctx.needs_input_grad[1],
                                     weight is not None and ctx.needs_input_grad[2], ctx.needs_input_grad[3], ctx.pdt)
            return None, dx, dw, db, None, None, None, None, None, None

    class LocalResponseNormFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, size, alpha, beta, k):
            ctx.save_for_backward(x)
            ctx.args = (size, alpha, beta, k)
            return _lrn_run(False, x, None, size, alpha, beta, k)

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return _lrn_run(True, x, grad, *ctx.args), None, None, None, None
else:  # pragma: no cover
    ChannelNormFunction = LocalResponseNormFunction = None


def _grad_mode(*ts):
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in ts)


# ---- public functions ----------------------------------------------------------------------------
def _softmax_common(op, input, dim, dtype):
    require_torch()
    _check_cuda(op, input)
    if dtype is not None:
        input = input.to(dtype)
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"{op}: expected a floating point input, got {input.dtype}")
    dim = _softmax_dim(op, dim, input.dim())
    if _grad_mode(input):
        return SoftmaxFunction.apply(input, dim, op)
    return _softmax_fw(op, input, dim)


def _masked(op, name, input, mask, dim):
    require_torch()
    _check_cuda(name, input)
    _check_cuda(name, mask)
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"{name}: expected a floating point input, got {input.dtype}")
    if mask.dtype != torch.bool and mask.dtype != input.dtype:
        mask = mask.to(input.dtype)
    if mask.dim() > input.dim():
        raise RuntimeError(f"{name}: mask of shape {list(mask.shape)} does not broadcast to the input's "
                           f"{list(input.shape)}")
    dim = _softmax_dim(name, dim, input.dim())
    mask = mask.detach()
    if _grad_mode(input):
        return SoftmaxFunction.apply(input, dim, op, mask)
    return _softmax_fw(op, input, dim, mask)


def masked_softmax(input, mask, dim=-1):
    """Softmax over `dim` with a mask broadcast to `input` (torch rules). A bool mask excludes the
    elements where it is True (torch._masked_softmax; a row with every element excluded gives
    zeros); a float mask of input's dtype is added before the softmax (-inf excludes; a row of
    -inf gives NaN, as torch.softmax(input + mask) does). Differentiable in `input`."""
    return _masked("softmax", "masked_softmax", input, mask, dim)


def masked_log_softmax(input, mask, dim=-1):
    """log of masked_softmax, same mask conventions: a bool mask excludes where True (-inf there;
    a row with every element excluded gives -inf everywhere, and excluded elements get a zero
    gradient, as through input.masked_fill(mask, -inf)); a float mask is added in f32 first
    (torch.log_softmax(input + mask)). Differentiable in `input`."""
    return _masked("log_softmax", "masked_log_softmax", input, mask, dim)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """torch.nn.functional.normalize: input / max(||input||_p, eps) along `dim`, for any p >= 0 and
    p = inf (p = 0 counts the non-zeros, as torch.linalg.vector_norm; its gradient is zero). The
    backward is torch's: p = inf splits the gradient evenly over tied maxima."""
    require_torch()
    _check_cuda("normalize", input)
    p = float(p)
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"normalize: expected a floating point input, got {input.dtype}")
    r = max(input.dim(), 1)
    if not -r <= dim < r:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-r}, {r - 1}], but got {dim})")
    if _grad_mode(input):
        if out is not None:
            raise RuntimeError("normalize: out= arguments don't support automatic differentiation")
        return NormalizeFunction.apply(input, dim, float(eps), p)
    y = out if out is not None else _like(input)
    if input.numel():
        _run("normalize", False, {"x": input, "out": y}, input.device, axis=dim, eps=float(eps), params={"p": p})
    return y


def sparsemax(input, dim=-1):
    """Sparsemax (Martins & Astudillo, 2016) along `dim`: the Euclidean projection onto the
    simplex, max(input - tau, 0) with the threshold tau that makes each slice sum to 1. Rows
    with NaN or +inf give NaN. The gradient is (grad - its mean over the support) on the support
    {output > 0}, 0 elsewhere, of the output as stored: an element whose input - tau rounds to 0
    in the dtype (below 2^-25 in f16) is outside it."""
    require_torch()
    _check_cuda("sparsemax", input)
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"sparsemax: expected a floating point input, got {input.dtype}")
    dim = _softmax_dim("sparsemax", dim, input.dim())
    if _grad_mode(input):
        return SparsemaxFunction.apply(input, dim)
    return _sparsemax_fw(input, dim)


def gumbel_softmax(logits, tau=1.0, hard=False, eps=1e-10, dim=-1, *, generator=None, seed=None, offset=0,
                   noise=None):
    """torch.nn.functional.gumbel_softmax: softmax((logits + g) / tau) along `dim` with Gumbel(0, 1)
    noise g; hard=True returns the one-hot of its argmax (the first on ties of the stored soft
    sample; exactly 1, where torch's y_hard - y_soft.detach() + y_soft is within an ulp of 1) with
    the straight-through gradient of the soft sample.

    The noise is drawn in the kernel from Philox4x32-10 keyed by `seed` at counter block `offset`
    (the same (seed, offset) gives the same noise whatever the strides; see
    src/kernels/common/philox.hpp); without `seed` the key is drawn from `generator` (torch's default
    generator when None). `noise` (logits' shape) supplies g itself instead, e.g. to reproduce
    torch's formula exactly. `eps` is unused, as in torch."""
    require_torch()
    _check_cuda("gumbel_softmax", logits)
    if eps != 1e-10:
        import warnings
        warnings.warn("`eps` parameter is deprecated and has no effect.", stacklevel=2)
    if not logits.dtype.is_floating_point:
        raise RuntimeError(f"gumbel_softmax: expected a floating point input, got {logits.dtype}")
    dim = _softmax_dim("gumbel_softmax", dim, logits.dim())
    if noise is not None:
        _check_cuda("gumbel_softmax", noise)
        noise = noise.detach().to(logits.dtype).expand_as(logits)
        seed = 0
    elif seed is None:
        seed = philox_seed(generator)
    seed, offset = int(seed) % (1 << 64), int(offset) % (1 << 64)
    tau, hard = float(tau), bool(hard)
    if _grad_mode(logits):
        return GumbelSoftmaxFunction.apply(logits, dim, tau, hard, noise, seed, offset)
    return _gumbel_fw(logits, dim, tau, hard, noise, seed, offset, need_soft=False)[0]


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """torch.nn.functional.softmax: exp(x - max) / sum over `dim`, f32 math (f64 for f64)."""
    return _softmax_common("softmax", input, dim, dtype)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    """torch.nn.functional.log_softmax: x - max - log(sum(exp(x - max))) over `dim`."""
    return _softmax_common("log_softmax", input, dim, dtype)


def _norm_common(op, input, normalized_shape, weight, bias, eps, residual=None):
    require_torch()
    _check_cuda(op, input)
    k, shape = _normalized_ndim(op, input, normalized_shape)
    weight = _param(op, weight, "weight", shape, input)
    bias = _param(op, bias, "bias", shape, input)
    if residual is not None:
        _check_cuda(op, residual)
        if residual.shape != input.shape or residual.dtype != input.dtype:
            raise RuntimeError(f"{op}: residual expected shape {list(input.shape)} and dtype {input.dtype}, got "
                               f"{list(residual.shape)} and {residual.dtype}")
    if eps is None:  # rms_norm's default: the dtype's machine epsilon (torch)
        eps = torch.finfo(input.dtype).eps
    if _grad_mode(input, residual, weight, bias):
        return NormFunction.apply(op, k, float(eps), input, residual, weight, bias)
    y, _, _, h = _norm_fw(op, input, k, weight, bias, float(eps), residual, stats=False)
    return (y, h) if residual is not None else y


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.layer_norm over the trailing len(normalized_shape) dims."""
    return _norm_common("layer_norm", input, normalized_shape, weight, bias, eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """torch.nn.functional.rms_norm: x * rsqrt(mean(x^2) + eps) * weight; eps None = finfo(dtype).eps."""
    return _norm_common("rms_norm", input, normalized_shape, weight, None, eps)


def add_rms_norm(input, residual, normalized_shape, weight=None, eps=None):
    """rms_norm(input + residual) fused; returns (normalized, input + residual)."""
    return _norm_common("rms_norm", input, normalized_shape, weight, None, eps, residual)


def add_layer_norm(input, residual, normalized_shape, weight=None, bias=None, eps=1e-5):
    """layer_norm(input + residual) fused; returns (normalized, input + residual)."""
    return _norm_common("layer_norm", input, normalized_shape, weight, bias, eps, residual)


def softmax_backward(grad_output, output, dim):
    """grad_input of softmax from its output (ATen's _softmax_backward_data)."""
    require_torch()
    _check_cuda("softmax_backward", output)
    return _softmax_bw("softmax", grad_output, output, _softmax_dim("softmax", dim, output.dim()))


def log_softmax_backward(grad_output, output, dim):
    """grad_input of log_softmax from its output (ATen's _log_softmax_backward_data)."""
    require_torch()
    _check_cuda("log_softmax_backward", output)
    return _softmax_bw("log_softmax", grad_output, output, _softmax_dim("log_softmax", dim, output.dim()))


def layer_norm_backward(grad_output, input, normalized_shape, mean, rstd, weight=None, output_mask=(True, True, True)):
    """(grad_input, grad_weight, grad_bias) like ATen's native_layer_norm_backward; mean/rstd are the
    forward's statistics (one per row, float32; float64 for float64 inputs)."""
    require_torch()
    k, shape = _normalized_ndim("layer_norm_backward", input, normalized_shape)
    weight = _param("layer_norm_backward", weight, "weight", shape, input)
    pd = weight.dtype if weight is not None else input.dtype
    dx, dw, db = _norm_bw("layer_norm", grad_output, input, k, mean.reshape(-1), rstd.reshape(-1), weight,
                          weight is not None and output_mask[1], bool(output_mask[2]), pd)
    return dx, dw, db


def rms_norm_backward(grad_output, input, normalized_shape, rstd, weight=None, output_mask=(True, True)):
    """(grad_input, grad_weight) of rms_norm; rstd is the forward's per-row statistic."""
    require_torch()
    k, shape = _normalized_ndim("rms_norm_backward", input, normalized_shape)
    weight = _param("rms_norm_backward", weight, "weight", shape, input)
    pd = weight.dtype if weight is not None else input.dtype
    dx, dw, _ = _norm_bw("rms_norm", grad_output, input, k, None, rstd.reshape(-1), weight,
                         weight is not None and output_mask[1], False, pd)
    return dx, dw


def layer_norm_stats(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """(output, mean, rstd) like ATen's native_layer_norm (statistics flattened to one per row)."""
    require_torch()
    k, shape = _normalized_ndim("layer_norm", input, normalized_shape)
    y, mean, rstd, _ = _norm_fw("layer_norm", input, k, _param("layer_norm", weight, "weight", shape, input),
                                _param("layer_norm", bias, "bias", shape, input), float(eps))
    return y, mean, rstd


def rms_norm_stats(input, normalized_shape, weight=None, eps=None):
    """(output, rstd) of rms_norm (rstd flattened to one per row)."""
    require_torch()
    k, shape = _normalized_ndim("rms_norm", input, normalized_shape)
    eps = torch.finfo(input.dtype).eps if eps is None else eps
    y, _, rstd, _ = _norm_fw("rms_norm", input, k, _param("rms_norm", weight, "weight", shape, input), None,
                             float(eps))
    return y, rstd


# ---- channel normalizations: public functions ---------------------------------------------------------------
def _channel_common(op, input, running_mean, running_var, weight, bias, training, momentum, eps, num_groups=1):
    require_torch()
    _check_cuda(op, input)
    if input.dim() < 2:
        raise RuntimeError(f"{op}: expected an input of at least 2 dimensions [N, C, *], got {input.dim()}")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"{op}: expected a floating point input, got {input.dtype}")
    C = input.shape[1]
    for what, r in (("running_mean", running_mean), ("running_var", running_var)):
        if r is not None:
            _check_cuda(op, r)
            if r.numel() != C:
                raise RuntimeError(f"{op}: {what} expected {C} elements (one per channel), got shape {list(r.shape)}")
    pdt = _channel_pdtype(input, running_mean, weight, bias)  # running stats first: updated in place
    weight = _channel_param(op, weight, "weight", C, pdt)
    bias = _channel_param(op, bias, "bias", C, pdt)
    if _grad_mode(input, weight, bias):
        return ChannelNormFunction.apply(op, input, weight, bias, running_mean, running_var, bool(training),
                                         float(momentum), float(eps), int(num_groups))
    y, _, _ = _channel_fw(op, input, weight, bias, running_mean, running_var, bool(training), float(momentum),
                          float(eps), int(num_groups))
    return y


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """torch.nn.functional.batch_norm: statistics per channel (dim 1) over the batch and spatial dims.
    Training normalizes with the batch statistics and updates running_mean/running_var in place
    (momentum; the variance unbiased); evaluation normalizes with the running statistics."""
    if training:
        size = list(input.shape)
        if input.dim() >= 2 and size[0] * _prod(size[2:]) == 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {input.size()}")
    elif running_mean is None or running_var is None:
        raise RuntimeError("batch_norm: running_mean and running_var must be defined in evaluation mode")
    return _channel_common("batch_norm", input, running_mean, running_var, weight, bias, training, momentum, eps)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    """torch.nn.functional.instance_norm: statistics per (sample, channel) over the spatial dims;
    given running stats are updated with their batch means (use_input_stats) or used instead."""
    if use_input_stats:
        if input.dim() >= 2 and _prod(input.shape[2:]) == 1:
            raise ValueError(f"Expected more than 1 spatial element when training, got input size {input.size()}")
    elif running_mean is None or running_var is None:
        raise RuntimeError("instance_norm: Expected running_mean and running_var to be defined when use_input_stats "
                           "is false")
    return _channel_common("instance_norm", input, running_mean, running_var, weight, bias, use_input_stats, momentum,
                           eps)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.group_norm: statistics per (sample, group of C / num_groups channels)."""
    if input.dim() < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {input.dim()}")
    N, C = input.shape[0], input.shape[1]
    if num_groups > 0 and C % num_groups == 0 and N * (C // num_groups) * _prod(input.shape[2:]) == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                         f"{[N * C // num_groups, num_groups] + list(input.shape[2:])}")
    return _channel_common("group_norm", input, None, None, weight, bias, True, 0.1, eps, num_groups)


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """torch.nn.functional.local_response_norm: x / (k + alpha / size * sum of x^2 over the channel
    window [c - size // 2, c + (size - 1) // 2])^beta."""
    require_torch()
    _check_cuda("local_response_norm", input)
    if input.dim() < 3:
        raise ValueError(f"Expected 3D or higher dimensionality input (got {input.dim()} dimensions)")
    if input.numel() == 0:
        return input
    if _grad_mode(input):
        return LocalResponseNormFunction.apply(input, int(size), float(alpha), float(beta), float(k))
    return _lrn_run(False, input, None, size, alpha, beta, k)


def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """(output, save_mean, save_invstd) like ATen's native_batch_norm (evaluation: empty statistics)."""
    require_torch()
    _check_cuda("native_batch_norm", input)
    C = input.shape[1]
    pdt = _channel_pdtype(input, running_mean, weight, bias)
    y, mean, rstd = _channel_fw("batch_norm", input, _channel_param("batch_norm", weight, "weight", C, pdt),
                                _channel_param("batch_norm", bias, "bias", C, pdt), running_mean, running_var,
                                bool(training), float(momentum), float(eps))
    if mean is None:
        mean = rstd = torch.empty(0, dtype=_stats_dtype(input), device=input.device)
    return y, mean, rstd


def native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                               output_mask=(True, True, True)):
    """(grad_input, grad_weight, grad_bias) like ATen's native_batch_norm_backward."""
    require_torch()
    C = input.shape[1]
    pdt = _channel_pdtype(input, running_mean, weight)
    weight = _channel_param("batch_norm", weight, "weight", C, pdt)
    return _channel_bw("batch_norm", grad_out, input, weight, save_mean, save_invstd, running_mean, running_var,
                       bool(train), float(eps), 1, bool(output_mask[0]), weight is not None and bool(output_mask[1]),
                       bool(output_mask[2]), pdt)


def native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    """(output, mean [N, group], rstd [N, group]) like ATen's native_group_norm."""
    require_torch()
    _check_cuda("native_group_norm", input)
    x = input.reshape(N, C, HxW) if input.dim() < 2 else input
    pdt = _channel_pdtype(x, weight, bias)
    y, mean, rstd = _channel_fw("group_norm", x, _channel_param("group_norm", weight, "weight", C, pdt),
                                _channel_param("group_norm", bias, "bias", C, pdt), None, None, True, 0.1,
                                float(eps), int(group))
    return y.reshape(input.shape), mean.reshape(N, group), rstd.reshape(N, group)


def native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group,
                               output_mask=(True, True, True)):
    """(grad_input, grad_weight, grad_bias) like ATen's native_group_norm_backward."""
    require_torch()
    pdt = _channel_pdtype(input, weight)
    weight = _channel_param("group_norm", weight, "weight", C, pdt)
    return _channel_bw("group_norm", grad_out, input, weight, mean.reshape(-1), rstd.reshape(-1), None, None, True,
                       0.0, int(group), bool(output_mask[0]), weight is not None and bool(output_mask[1]),
                       bool(output_mask[2]), pdt)


__all__ += ["layer_norm_stats", "rms_norm_stats"]
