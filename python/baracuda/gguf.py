"""GGUF block formats (ggml / llama.cpp weight quantizations) under baracuda.functional.

Formats (``_C.gguf_formats()``, include/baracuda/ops/gguf.hpp): q4_0, q4_1, q5_0, q5_1, q8_0 (blocks of 32)
and the k-quants q2_K, q3_K, q4_K, q5_K, q6_K (blocks of 256). A format may be named as ggml spells it
("q4_K"), in any case, by its ggml type number (12), or by a gguf-py ``GGMLQuantizationType``.

A packed weight is a uint8 tensor holding the raw bytes of a GGUF tensor: a [rows, cols] matrix (ggml
shape [cols, rows]) is rows x cols / block_size blocks, row-major, exactly what gguf-py's reader returns
as ``tensor.data`` (any shape, e.g. [rows, cols / block_size * block_bytes]).

* ``gguf_dequantize(packed, fmt, shape, dtype)``: ggml's dequantize_row_* in float32, bit for bit, then
  rounded to ``dtype`` (float32 / float16 / bfloat16).
* ``gguf_linear(x, packed, fmt, out_features, in_features, bias=None)``: ``F.linear(x, W, bias)`` with W the
  dequantized [out_features, in_features] weight. Up to 8 rows of x run the decode matvec, which streams
  the packed bytes once (float32 sums, no dequantized weight); more rows dequantize W to x's dtype and
  call baracuda's GEMM. Differentiable in x and bias (the weight is frozen).

Kernels run on ``torch.cuda.current_stream()``; outputs are allocated on the input's device.
"""
import math

from . import _C
from ._autograd import current_stream, dl, require_torch, torch

__all__ = ["gguf_formats", "gguf_packed_bytes", "gguf_dequantize", "gguf_linear"]

FORMATS = {row["name"]: row for row in _C.gguf_formats()}
_BY_LOWER = {name.lower(): name for name in FORMATS}
_BY_TYPE = {row["ggml_type"]: name for name, row in FORMATS.items()}
_MATVEC_ROWS = 8  # rows of x the decode matvec takes
_FLOATS = ("float32", "float16", "bfloat16")


def gguf_formats():
    """The format table: {name: {"name", "ggml_type", "block_size", "block_bytes"}}."""
    return dict(FORMATS)


def _fmt(fmt):
    """The canonical name ("q4_K") of a format given as a name, a ggml type number or a gguf-py enum."""
    if isinstance(fmt, str):
        name = _BY_LOWER.get(fmt.lower())
    elif isinstance(fmt, int) or hasattr(fmt, "value"):  # ggml type number, GGMLQuantizationType
        name = _BY_TYPE.get(int(getattr(fmt, "value", fmt)))
    else:
        name = None
    if name is None:
        raise ValueError(f"baracuda.gguf: unknown GGUF format {fmt!r} (expected one of {', '.join(FORMATS)}, "
                         "a ggml type number or a gguf.GGMLQuantizationType)")
    return name


def gguf_packed_bytes(fmt, shape):
    """Bytes of a matrix of `shape` ([..., cols]; the leading dims are rows) in format `fmt`."""
    row = FORMATS[_fmt(fmt)]
    shape = tuple(int(s) for s in shape)
    cols = shape[-1] if shape else 1
    if cols % row["block_size"]:
        raise ValueError(f"baracuda.gguf: {row['name']} packs rows of whole {row['block_size']}-element blocks; "
                         f"the last dim {cols} is not a multiple of {row['block_size']}")
    return math.prod(shape[:-1]) * (cols // row["block_size"]) * row["block_bytes"]


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def _check_packed(name, packed, fmt, shape):
    """A dense, 16-byte aligned uint8 view of `packed` holding exactly the bytes of `shape`."""
    if not isinstance(packed, torch.Tensor):
        raise TypeError(f"baracuda.functional.{name}: packed expected a uint8 tensor, got {type(packed).__name__}")
    if packed.device.type != "cuda":
        raise RuntimeError(f"baracuda.functional.{name}: tensors must be on a CUDA device, got {packed.device}")
    if packed.dtype not in (torch.uint8, torch.int8):
        raise RuntimeError(f"baracuda.functional.{name}: packed expected uint8 GGUF bytes, got {packed.dtype}")
    want = gguf_packed_bytes(fmt, shape)
    if packed.numel() != want:
        row = FORMATS[fmt]
        raise RuntimeError(f"baracuda.functional.{name}: packed expected {want} bytes ({fmt}: shape {list(shape)} = "
                           f"{want // row['block_bytes']} blocks of {row['block_bytes']} bytes), got {packed.numel()}")
    p = packed.reshape(-1)
    if not p.is_contiguous() or p.data_ptr() % 16:
        p = p.clone()  # the kernels copy 16-byte units of an aligned buffer
    return p.view(torch.uint8)


def gguf_dequantize(packed, fmt, shape, dtype=None):
    """The [*shape] tensor (dtype float32 by default, or float16 / bfloat16) of GGUF bytes `packed`."""
    require_torch()
    fmt = _fmt(fmt)
    dtype = torch.float32 if dtype is None else dtype
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    if _dtype_name(dtype) not in _FLOATS:
        raise RuntimeError(f"baracuda.functional.gguf_dequantize: dtype expected float32, float16 or bfloat16, "
                           f"got {dtype}")
    shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list, torch.Size)) else (shape,)))
    p = _check_packed("gguf_dequantize", packed, fmt, shape)
    cols = shape[-1] if shape else 1
    rows = math.prod(shape[:-1])
    out = torch.empty(shape, dtype=dtype, device=packed.device)
    if out.numel():
        _C.gguf_dequantize(dl(p), dl(out.view(rows, cols)), fmt, current_stream(packed.device))
    return out


def _matvec(x2, p, fmt, n, bias):
    y = torch.empty((x2.shape[0], n), dtype=x2.dtype, device=x2.device)
    t = {"x": x2, "weight": p, "bias": bias, "y": y}
    live = {k: v for k, v in t.items() if v is not None}
    nws = _C.gguf_matvec_workspace_size({k: dl(v) for k, v in live.items()}, fmt)
    ws = dl(torch.empty(nws, dtype=torch.uint8, device=x2.device)) if nws else None
    _C.gguf_matvec({k: dl(v) for k, v in live.items()}, fmt, current_stream(x2.device), ws)
    return y


def _forward(x2, p, fmt, n, k, bias):
    if x2.shape[0] <= _MATVEC_ROWS:
        return _matvec(x2, p, fmt, n, bias)
    from .gemm import linear  # prefill: dequantize once to x's dtype, then the GEMM
    w = gguf_dequantize(p, fmt, (n, k), x2.dtype)
    with torch.no_grad():
        return linear(x2, w, bias)


class _GgufLinear(torch.autograd.Function if torch is not None else object):
    """y = x W^T + b with W frozen in GGUF bytes; dx = dy W (W dequantized to dy's dtype), db = sum(dy)."""

    @staticmethod
    def forward(ctx, x2, bias, p, fmt, n, k):
        ctx.save_for_backward(p)
        ctx.fmt, ctx.n, ctx.k = fmt, n, k
        ctx.has_bias = bias is not None
        return _forward(x2, p, fmt, n, k, bias.detach() if bias is not None else None)

    @staticmethod
    def backward(ctx, dy):
        (p,) = ctx.saved_tensors
        dx = db = None
        if ctx.needs_input_grad[0]:
            from .gemm import mm
            w = gguf_dequantize(p, ctx.fmt, (ctx.n, ctx.k), dy.dtype)
            dx = mm(dy.contiguous(), w)
        if ctx.has_bias and ctx.needs_input_grad[1]:
            db = dy.sum(0)  # torch's reduction: baracuda has no reduction family yet
        return dx, db, None, None, None, None


def gguf_linear(x, packed, fmt, out_features, in_features, bias=None):
    """F.linear(x, W, bias) with W [out_features, in_features] given as GGUF bytes `packed` in format `fmt`.
    x [..., in_features] float32 / float16 / bfloat16; bias [out_features] (cast to x's dtype)."""
    require_torch()
    fmt = _fmt(fmt)
    n, k = int(out_features), int(in_features)
    if not isinstance(x, torch.Tensor) or x.device.type != "cuda":
        raise RuntimeError("baracuda.functional.gguf_linear: x expected a CUDA tensor")
    if _dtype_name(x.dtype) not in _FLOATS:
        raise RuntimeError(f"baracuda.functional.gguf_linear: x expected float32, float16 or bfloat16, got {x.dtype}")
    if x.shape[-1] != k:
        raise RuntimeError(f"baracuda.functional.gguf_linear: x's last dim expected in_features={k}, got "
                           f"{x.shape[-1]}")
    p = _check_packed("gguf_linear", packed, fmt, (n, k))
    lead = x.shape[:-1]
    x2 = x.reshape(math.prod(lead), k)  # not (-1, k): K may be 0
    if x2.shape[0] and k > 1 and x2.stride(-1) != 1:
        x2 = x2.contiguous()
    b = None
    if bias is not None:
        if bias.shape != (n,):
            raise RuntimeError(f"baracuda.functional.gguf_linear: bias expected shape [{n}], got {list(bias.shape)}")
        b = bias.to(x.dtype)
        if b.stride(0) != 1:
            b = b.contiguous()
    if torch.is_grad_enabled() and (x.requires_grad or (b is not None and b.requires_grad)):
        y = _GgufLinear.apply(x2, b, p, fmt, n, k)
    else:
        y = _forward(x2, p, fmt, n, k, b)
    return y.reshape(*lead, n)
