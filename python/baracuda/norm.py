"""Softmax and normalization under their torch names (torch.nn.functional signatures), with autograd.

Rows of ``_C.norm_ops()`` (include/baracuda/ops/norm_ops.def): softmax, log_softmax, normalize (p=2),
layer_norm, rms_norm, forward and backward, plus ``masked_softmax`` (bool or additive mask, broadcast).
Beyond torch: ``add_rms_norm`` / ``add_layer_norm`` normalize
``input + residual`` and also return that sum (the fused residual add of transformer blocks),
and ``*_backward`` functions expose the backward plans directly.

Outputs are torch tensors on the input's device; kernels run on ``torch.cuda.current_stream()``.
The reduced axis may be any axis and any stride (a strided path); normalized dims of layer/rms
norm that do not merge into one strided dim are copied to a contiguous tensor first.
"""
from . import _C
from ._autograd import current_stream, dl, require_torch, torch

__all__ = ["softmax", "log_softmax", "masked_softmax", "normalize", "layer_norm", "rms_norm", "add_rms_norm",
           "add_layer_norm", "softmax_backward", "log_softmax_backward", "layer_norm_backward", "rms_norm_backward"]

NORM_OPS = {row["name"]: row for row in _C.norm_ops()}


# ---- launch helpers ----------------------------------------------------------------------------
def _run(op, backward, tensors, device, axis=-1, norm_ndim=1, eps=1e-5, want_workspace=False):
    """Runs one plan; `tensors` maps NormArgs roles to torch tensors (None entries are dropped)."""
    live = {k: v for k, v in tensors.items() if v is not None}
    ws = None
    if want_workspace:  # DLPack capsules are single-use: each _C call gets its own export
        n = _C.norm_workspace_size(op, backward, {k: dl(v) for k, v in live.items()}, axis, norm_ndim, float(eps))
        if n:
            ws = dl(torch.empty(n, dtype=torch.uint8, device=device))
    _C.norm(op, backward, {k: dl(v) for k, v in live.items()}, axis, norm_ndim, float(eps), current_stream(device), ws)


def _like(x):
    """An output with x's strides when x is dense (torch's preserve_format), else contiguous."""
    return torch.empty_like(x)


def _check_cuda(name, x):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"baracuda.functional.{name}: expected a tensor, got {type(x).__name__}")
    if x.device.type != "cuda":
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
    shape = tuple(int(s) for s in normalized_shape)
    k = len(shape)
    if k == 0:
        raise RuntimeError(f"{name}: Expected normalized_shape to be at least 1-dimensional, i.e., containing at "
                           "least one element, but got normalized_shape = []")
    if x.dim() < k or tuple(x.shape[x.dim() - k:]) != shape:
        raise RuntimeError(f"{name}: Given normalized_shape={list(shape)}, expected input with shape "
                           f"[*, {', '.join(map(str, shape))}], but got input of size{list(x.shape)}")
    return k, shape


def _merges(x, k):
    """Whether the trailing k dims of x collapse into one strided dim (else the kernel refuses)."""
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
    if tuple(p.shape) != shape:
        raise RuntimeError(f"{name}: {what} shape expected {list(shape)} (normalized_shape), got {list(p.shape)}")
    if p.dtype != x.dtype and not (p.dtype == torch.float32 and x.dtype in (torch.float16, torch.bfloat16)):
        p = p.to(x.dtype)  # torch promotes; baracuda takes x's dtype or f32 for f16/bf16 inputs
    return p.contiguous()


def _stats_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _rows(x, k):
    n = 1
    for s in x.shape[:x.dim() - k]:
        n *= s
    return n


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


def _norm_fw(op, x, k, weight, bias, eps, residual=None):
    """Returns (y, mean or None, rstd, h) where h = x + residual (or x)."""
    if not _merges(x, k) or (residual is not None and not _merges(residual, k)):
        x = x.contiguous()
        residual = residual.contiguous() if residual is not None else None
    rows = _rows(x, k)
    y = _like(x)
    h = _like(x) if residual is not None else None
    st = _stats_dtype(x)
    mean = torch.empty(rows, dtype=st, device=x.device) if op == "layer_norm" else None
    rstd = torch.empty(rows, dtype=st, device=x.device)
    if x.numel():
        _run(op, False, {"x": x, "residual": residual, "weight": weight, "bias": bias, "out": y, "residual_out": h,
                         "save_mean": mean, "save_rstd": rstd}, x.device, norm_ndim=k, eps=eps)
    elif rows:  # rows of length 0: statistics of nothing (torch gives NaN)
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
    dw = torch.empty(shape, dtype=param_dtype, device=x.device) if need_dw else None
    db = torch.empty(shape, dtype=param_dtype, device=x.device) if need_db else None
    if x.numel() or dw is not None or db is not None:
        _run(op, True, {"dy": grad, "x": x, "mean": mean, "rstd": rstd, "weight": weight, "out": dx,
                        "dweight": dw, "dbias": db}, x.device, norm_ndim=k,
             want_workspace=dw is not None or db is not None)
    return dx, dw, db


# ---- autograd --------------------------------------------------------------------------------------
if torch is not None:
    from torch.autograd.function import once_differentiable

    class SoftmaxFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, dim, op, mask=None):
            y = _softmax_fw(op, x, dim, mask)
            ctx.save_for_backward(y)
            ctx.dim, ctx.op = dim, op
            return y

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            # A masked softmax's gradient is softmax's on its output (y = 0 where excluded).
            (y,) = ctx.saved_tensors
            return _softmax_bw(ctx.op, grad, y, ctx.dim), None, None, None

    class NormalizeFunction(torch.autograd.Function):
        """F.normalize with p = 2; the backward reads the input."""

        @staticmethod
        def forward(ctx, x, dim, eps):
            y = _like(x)
            if x.numel():
                _run("normalize", False, {"x": x, "out": y}, x.device, axis=dim, eps=eps)
            ctx.save_for_backward(x)
            ctx.dim, ctx.eps = dim, eps
            return y

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            dx = _like(x)
            if x.numel():
                _run("normalize", True, {"dy": grad, "x": x, "out": dx}, x.device, axis=ctx.dim, eps=ctx.eps)
            return dx, None, None

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
    SoftmaxFunction = NormFunction = NormalizeFunction = None


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


def masked_softmax(input, mask, dim=-1):
    """Softmax over `dim` with a mask broadcast to `input` (torch rules). A bool mask excludes the
    elements where it is True (torch._masked_softmax; a row with every element excluded gives
    zeros); a float mask of input's dtype is added before the softmax (-inf excludes; a row of
    -inf gives NaN, as torch.softmax(input + mask) does). Differentiable in `input`."""
    require_torch()
    _check_cuda("masked_softmax", input)
    _check_cuda("masked_softmax", mask)
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"masked_softmax: expected a floating point input, got {input.dtype}")
    if mask.dtype != torch.bool and mask.dtype != input.dtype:
        mask = mask.to(input.dtype)
    if mask.dim() > input.dim():
        raise RuntimeError(f"masked_softmax: mask of shape {list(mask.shape)} does not broadcast to the input's "
                           f"{list(input.shape)}")
    dim = _softmax_dim("masked_softmax", dim, input.dim())
    mask = mask.detach()
    if _grad_mode(input):
        return SoftmaxFunction.apply(input, dim, "softmax", mask)
    return _softmax_fw("softmax", input, dim, mask)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """torch.nn.functional.normalize: input / max(||input||_p, eps) along `dim` (p = 2 only)."""
    require_torch()
    _check_cuda("normalize", input)
    if float(p) != 2.0:
        raise NotImplementedError(f"normalize: p={p} is not built (p=2 only)")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"normalize: expected a floating point input, got {input.dtype}")
    r = max(input.dim(), 1)
    if not -r <= dim < r:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-r}, {r - 1}], but got {dim})")
    if _grad_mode(input):
        if out is not None:
            raise RuntimeError("normalize: out= arguments don't support automatic differentiation")
        return NormalizeFunction.apply(input, dim, float(eps))
    y = out if out is not None else _like(input)
    if input.numel():
        _run("normalize", False, {"x": input, "out": y}, input.device, axis=dim, eps=float(eps))
    return y


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
    y, _, _, h = _norm_fw(op, input, k, weight, bias, float(eps), residual)
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


__all__ += ["layer_norm_stats", "rms_norm_stats"]
