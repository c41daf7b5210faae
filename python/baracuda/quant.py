"""Quantization under torch's names, with autograd where torch has gradients.

Rows of ``_C.quant_ops()`` (include/baracuda/ops/quant_ops.def): quantize, dequantize, fake_quantize,
fake_quantize_learnable (per tensor, channel, group), dynamic_quantize (per token / group, symmetric or
asymmetric; per-tensor fp8), quantized_linear (W8A8), w4a16_linear (int4 weight-only). The formulas (bit for bit
against torch's CUDA kernels) are in include/baracuda/ops/quant.hpp.

Quantized tensors are plain tensors, not torch's quantized type (which DLPack cannot carry):
``torch.int8`` for int8 / qint8, ``torch.uint8`` for uint8 / quint8, ``torch.uint8`` holding two
4-bit values a byte for int4 / uint4 / quint4x2 (element 2j in the low nibble, 2j + 1 in the high
one, along the last dim, which must be even; the returned tensor's last dim is halved), and
``torch.float8_e4m3fn`` / ``torch.float8_e5m2`` for fp8. ``torch.quantize_per_tensor(...).int_repr()``
equals ``quantize_per_tensor(...)`` here for float32 inputs; float16 / bfloat16 / float64 inputs are
quantized as ``x.float()`` would be (torch's quantizers take float32 only).

Scales are float32 (torch's float64 per-channel scales are converted, exact when they are float32
values), zero points int32 (fake_quantize also takes float zero points, as torch does). A
per-tensor scale given as a Python number is checked on the host (finite, > 0); a scale tensor
is used as given, so zero or non-finite scales produce what torch's formula produces.
Kernels run on ``torch.cuda.current_stream()``; outputs are allocated on the input's device.
"""
from . import _C
from ._autograd import current_stream, dl, require_torch, torch

__all__ = ["quantize_per_tensor", "quantize_per_channel", "quantize_per_token", "quantize_per_group",
           "dequantize_per_tensor", "dequantize_per_channel", "dequantize_per_token", "dequantize_per_group",
           "dynamic_quantize_per_token", "dynamic_quantize_per_group", "dynamic_quantize_per_token_asymmetric",
           "dynamic_quantize_per_group_asymmetric", "dynamic_quantize_backward", "fake_quantize_per_tensor_affine",
           "fake_quantize_per_channel_affine", "fake_quantize_per_group_affine",
           "fake_quantize_learnable_per_tensor_affine", "fake_quantize_learnable_per_channel_affine",
           "fake_quantize_learnable_per_group_affine", "quantize_backward", "dequantize_backward", "cast_to_fp8",
           "fp8_delayed_cast", "quantized_linear", "w4a16_linear"]

QUANT_OPS = {row["name"]: row for row in _C.quant_ops()}

_FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}


# ---- dtypes ---------------------------------------------------------------------------------------
def _q_name(dtype):
    """The baracuda name of a quantized dtype given as a torch dtype or a string."""
    if isinstance(dtype, str):
        names = {"int8": "int8", "qint8": "int8", "uint8": "uint8", "quint8": "uint8", "int4": "int4",
                 "uint4": "uint4", "quint4x2": "uint4", "float8_e4m3fn": "float8_e4m3fn",
                 "float8_e5m2": "float8_e5m2"}
        if dtype not in names:
            raise ValueError(f"baracuda.quant: unknown quantized dtype {dtype!r}")
        return names[dtype]
    table = {torch.int8: "int8", torch.uint8: "uint8", torch.qint8: "int8", torch.quint8: "uint8"}
    if hasattr(torch, "quint4x2"):
        table[torch.quint4x2] = "uint4"
    for n in ("float8_e4m3fn", "float8_e5m2"):
        if hasattr(torch, n):
            table[getattr(torch, n)] = n
    if dtype not in table:
        raise ValueError(f"baracuda.quant: unsupported quantized dtype {dtype} (int8, uint8, qint8, quint8, "
                         "quint4x2, 'int4', 'uint4', float8_e4m3fn, float8_e5m2)")
    return table[dtype]


def _packed(q):
    return q in ("int4", "uint4")


def _storage_dtype(q):
    """The torch dtype that carries a quantized dtype."""
    if q == "int8":
        return torch.int8
    if q in ("uint8", "int4", "uint4"):
        return torch.uint8
    return getattr(torch, q)


def _q_shape(shape, q):
    shape = list(shape)
    if _packed(q):
        if not shape or shape[-1] % 2:
            raise RuntimeError(f"baracuda.quant: {q} packs two elements per byte along the last dim, which must be "
                               f"even; got shape {shape}")
        shape[-1] //= 2
    return shape


def _logical_shape(qt, q):
    shape = list(qt.shape)
    if _packed(q):
        shape[-1] *= 2
    return shape


# ---- launch helpers -------------------------------------------------------------------------------
def _check_cuda(name, x):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"baracuda.functional.{name}: expected a tensor, got {type(x).__name__}")
    if x.device.type != "cuda":
        raise RuntimeError(f"baracuda.functional.{name}: tensors must be on a CUDA device, got {x.device}")


def _check_float(name, x):
    _check_cuda(name, x)
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        raise RuntimeError(f"baracuda.functional.{name}: expected a float32/float16/bfloat16/float64 input, got {x.dtype}")


def _run(op, backward, tensors, params, device, want_workspace=False):
    """Runs one plan; `tensors` maps QuantArgs roles to torch tensors (None entries are dropped)."""
    live = {k: v for k, v in tensors.items() if v is not None}
    ws = None
    if want_workspace:  # DLPack capsules are single-use: each _C call gets its own export
        n = _C.quant_workspace_size(op, backward, {k: dl(v) for k, v in live.items()}, params)
        if n:
            ws = dl(torch.empty(n, dtype=torch.uint8, device=device))
    _C.quant(op, backward, {k: dl(v) for k, v in live.items()}, params, current_stream(device), ws)


def _scale_arg(name, scale, device, count=None):
    """A Python number stays on the host (None tensor); a tensor becomes float32 contiguous."""
    if isinstance(scale, torch.Tensor):
        s = scale.detach().to(device=device, dtype=torch.float32).contiguous().reshape(-1)
        if count is not None and s.numel() != count:
            raise RuntimeError(f"baracuda.functional.{name}: expected {count} scale(s), got {s.numel()}")
        return None, s
    return float(scale), None


def _zp_tensor(zero_points, device, count, float_ok=False):
    if zero_points is None:
        return None
    if not isinstance(zero_points, torch.Tensor):
        zero_points = torch.tensor(zero_points, device=device)
    zp = zero_points.detach().to(device)
    if zp.is_floating_point() and float_ok:
        zp = zp.to(torch.float32)
    else:
        zp = zp.round().to(torch.int32) if zp.is_floating_point() else zp.to(torch.int32)
    zp = zp.contiguous().reshape(-1)
    if zp.numel() != count:
        raise RuntimeError(f"baracuda.quant: expected {count} zero point(s), got {zp.numel()}")
    return zp


def _num_scales(shape, granularity, axis, group_size):
    n = 1
    for s in shape:
        n *= s
    if granularity == "per_tensor":
        return 1
    if granularity == "per_token":
        return n // shape[-1] if shape[-1] else _prod(shape[:-1])
    a = axis % len(shape)
    if granularity == "per_channel":
        return shape[a]
    return _prod(shape[:a]) * (shape[a] // group_size) * _prod(shape[a + 1:])


def _prod(xs):
    n = 1
    for s in xs:
        n *= s
    return n


def _quantize(name, x, scale, zero_point, dtype, granularity, axis=-1, group_size=0, q_min=None, q_max=None):
    require_torch()
    _check_float(name, x)
    q = _q_name(dtype)
    shape = list(x.shape)
    count = _num_scales(shape, granularity, axis, group_size) if x.dim() else 1
    host, s = _scale_arg(name, scale, x.device, count)
    params = {"q_dtype": q, "granularity": granularity, "axis": axis, "group_size": group_size}
    if q_min is not None:
        params["q_min"] = int(q_min)
    if q_max is not None:
        params["q_max"] = int(q_max)
    zp = None
    if host is not None:
        params["scale"] = host
        params["zero_point"] = int(zero_point or 0)
        if zero_point is None or q.startswith("float8"):
            params["zero_point_kind"] = "none"
    else:
        zp = _zp_tensor(zero_point, x.device, s.numel())
    out = torch.empty(_q_shape(shape, q), dtype=_storage_dtype(q), device=x.device)
    _run("quantize", False, {"x": x, "scale": s, "zero_point": zp, "out": out}, params, x.device)
    return out


def _dequantize(name, qt, scale, zero_point, dtype, granularity, axis=-1, group_size=0, out_dtype=None):
    require_torch()
    _check_cuda(name, qt)
    q = _q_name(dtype if dtype is not None else qt.dtype)
    shape = _logical_shape(qt, q)
    out_dtype = out_dtype or torch.float32
    count = _num_scales(shape, granularity, axis, group_size) if shape else 1
    host, s = _scale_arg(name, scale, qt.device, count)
    params = {"q_dtype": q, "granularity": granularity, "axis": axis, "group_size": group_size}
    zp = None
    if host is not None:
        params["scale"] = host
        params["zero_point"] = int(zero_point or 0)
        if zero_point is None or q.startswith("float8"):
            params["zero_point_kind"] = "none"
    else:
        zp = _zp_tensor(zero_point, qt.device, s.numel())
    y = torch.empty(shape, dtype=out_dtype, device=qt.device)
    _run("dequantize", False, {"q": qt.contiguous(), "scale": s, "zero_point": zp, "out": y}, params, qt.device)
    return y


# ---- quantize / dequantize ----------------------------------------------------------------------------
def quantize_per_tensor(input, scale, zero_point, dtype):
    """torch.quantize_per_tensor(...).int_repr(): clamp(rint(x / scale) + zero_point) over the dtype's range.
    `scale` a number (or a one-element tensor); dtype int8/uint8/qint8/quint8/'int4'/'uint4'/quint4x2/fp8
    (fp8: x / scale saturated to the finite range, no zero point)."""
    return _quantize("quantize_per_tensor", input, scale, zero_point, dtype, "per_tensor")


def quantize_per_channel(input, scales, zero_points, axis, dtype):
    """torch.quantize_per_channel(...).int_repr(): one (scale, zero point) per index of `axis`."""
    return _quantize("quantize_per_channel", input, scales, zero_points, dtype, "per_channel", axis)


def quantize_per_token(input, scales, zero_points=None, dtype=torch.int8 if torch is not None else None):
    """One (scale, zero point) per row of the last dim: scales have input.numel() / input.shape[-1] elements."""
    return _quantize("quantize_per_token", input, scales, zero_points, dtype, "per_token")


def quantize_per_group(input, scales, zero_points=None, group_size=128, axis=-1, dtype="int4"):
    """Groups of `group_size` consecutive elements along `axis` (which it must divide) share a scale:
    scales have input's shape with shape[axis] divided by group_size (GPTQ/AWQ weight layout for
    axis=-1)."""
    return _quantize("quantize_per_group", input, scales, zero_points, dtype, "per_group", axis, group_size)


def dequantize_per_tensor(input, scale, zero_point, dtype=None, out_dtype=None):
    """torch.dequantize of a per-tensor quantized tensor: (q - zero_point) * scale (float32 unless
    out_dtype). `dtype` names the quantized dtype when `input`'s torch dtype does not ('int4',
    'uint4' for packed uint8 storage)."""
    return _dequantize("dequantize_per_tensor", input, scale, zero_point, dtype, "per_tensor", out_dtype=out_dtype)


def dequantize_per_channel(input, scales, zero_points, axis, dtype=None, out_dtype=None):
    return _dequantize("dequantize_per_channel", input, scales, zero_points, dtype, "per_channel", axis,
                       out_dtype=out_dtype)


def dequantize_per_token(input, scales, zero_points=None, dtype=None, out_dtype=None):
    return _dequantize("dequantize_per_token", input, scales, zero_points, dtype, "per_token", out_dtype=out_dtype)


def dequantize_per_group(input, scales, zero_points=None, group_size=128, axis=-1, dtype=None, out_dtype=None):
    return _dequantize("dequantize_per_group", input, scales, zero_points, dtype, "per_group", axis, group_size,
                       out_dtype)


def quantize_backward(grad_output, input, scale, zero_point=None, dtype=torch.int8 if torch is not None else None,
                      granularity="per_tensor", axis=-1, group_size=0):
    """Straight-through gradient of quantize: grad * 1[q_min <= rint(x / scale) + zp <= q_max]
    (fp8: 1[|x / scale| <= max])."""
    require_torch()
    _check_float("quantize_backward", input)
    q = _q_name(dtype)
    count = _num_scales(list(input.shape), granularity, axis, group_size) if input.dim() else 1
    host, s = _scale_arg("quantize_backward", scale, input.device, count)
    params = {"q_dtype": q, "granularity": granularity, "axis": axis, "group_size": group_size}
    zp = None
    if host is not None:
        params["scale"] = host
        params["zero_point"] = int(zero_point or 0)
        if zero_point is None or q.startswith("float8"):
            params["zero_point_kind"] = "none"
    else:
        zp = _zp_tensor(zero_point, input.device, s.numel())
    dx = torch.empty_like(input)
    if input.numel():
        _run("quantize", True, {"dy": grad_output.to(input.dtype), "x": input, "scale": s, "zero_point": zp,
                                "out": dx}, params, input.device)
    return dx


def dequantize_backward(grad_output, scale, dtype=torch.int8 if torch is not None else None,
                        granularity="per_tensor", axis=-1, group_size=0):
    """Straight-through gradient of dequantize with respect to q taken as real: grad * scale."""
    require_torch()
    _check_float("dequantize_backward", grad_output)
    q = _q_name(dtype)
    count = _num_scales(list(grad_output.shape), granularity, axis, group_size) if grad_output.dim() else 1
    host, s = _scale_arg("dequantize_backward", scale, grad_output.device, count)
    params = {"q_dtype": q, "granularity": granularity, "axis": axis, "group_size": group_size,
              "zero_point_kind": "none"}
    if host is not None:
        params["scale"] = host
    dq = torch.empty_like(grad_output)
    if grad_output.numel():
        _run("dequantize", True, {"dy": grad_output, "scale": s, "out": dq}, params, grad_output.device)
    return dq


# ---- dynamic ------------------------------------------------------------------------------------------
def _rows_merge(x):
    """Whether the leading dims of x collapse into one row stride (else the kernel refuses)."""
    expect = None
    for d in range(x.dim() - 2, -1, -1):
        if x.shape[d] == 1:
            continue
        if expect is not None and x.stride(d) != expect:
            return False
        expect = x.stride(d) * x.shape[d]
    return True


def _dynamic_rows(name, input, dtype, granularity, group_size=0, asymmetric=False):
    """The rows kernel: per-token (group_size 0) or per-group scales (and zero points) and codes in one pass.
    Returns (q, scales) or (q, scales, zero_points); scales / zero points [..., 1] per token, [..., D / G] per
    group."""
    require_torch()
    _check_float(name, input)
    if input.dim() == 0:
        raise RuntimeError(f"{name}: expected an input of rank >= 1 (rows of the last dim)")
    q = _q_name(dtype)
    x = input if _rows_merge(input) else input.contiguous()
    d = x.shape[-1]
    # A group size the plan refuses still reaches it (for its message) with a placeholder count.
    per_row = 1 if granularity == "per_token" else (d // group_size if group_size > 0 and d % group_size == 0 else 1)
    out = torch.empty(_q_shape(x.shape, q), dtype=_storage_dtype(q), device=x.device)
    scales = torch.empty(list(x.shape[:-1]) + [per_row], dtype=torch.float32, device=x.device)
    zps = torch.empty(scales.shape, dtype=torch.int32, device=x.device) if asymmetric else None
    if scales.numel() or granularity != "per_token":
        _run("dynamic_quantize", False, {"x": x, "out": out, "scale_out": scales, "zero_point_out": zps},
             {"q_dtype": q, "granularity": granularity, "axis": -1, "group_size": group_size}, x.device)
    return (out, scales, zps) if asymmetric else (out, scales)


def dynamic_quantize_per_token(input, dtype=torch.int8 if torch is not None else None):
    """Symmetric per-row quantization with the scale computed in the same kernel: scale = max|row| / 127
    (448 / 57344 for fp8, 7 for 'int4'; 1 for an all-zero or non-finite row), q = rint(x / scale). Returns
    (q, scales) with scales of shape input.shape[:-1] + (1,), float32. The W8A8 activation quantizer;
    also the per-output-channel weight quantizer of an nn.Linear weight [N, K]."""
    return _dynamic_rows("dynamic_quantize_per_token", input, dtype, "per_token")


def dynamic_quantize_per_group(input, group_size, dtype=torch.int8 if torch is not None else None):
    """Symmetric quantization of groups of `group_size` consecutive elements along the last dim (which it must
    divide), scale and codes in one kernel: scale = max|group| / q_max (127 int8, 7 'int4', 448 / 57344 fp8; 1 for
    an all-zero or non-finite group), q = rint(x / scale) (fp8: x / scale saturated). Returns (q, scales) with
    scales input.shape[:-1] + (D / group_size,) float32; 'int4' codes packed two a byte (last dim halved)."""
    return _dynamic_rows("dynamic_quantize_per_group", input, dtype, "per_group", int(group_size))


def dynamic_quantize_per_token_asymmetric(input, dtype=torch.int8 if torch is not None else None):
    """Asymmetric per-row quantization, bit for bit torch.ops.quantized_decomposed.choose_qparams_per_token_asymmetric
    (scale = (max(x, 0) - min(x, 0)) / (q_max - q_min), clamped to float32 eps; zero point from the min / max error
    rule, clamped and rounded; computed in the input's dtype as torch does) followed by quantize_per_token
    (round(x * (1 / scale) + zero_point) in float64, clamped). torch's op is int8's [-128, 127]; uint8 / 'int4' /
    'uint4' use the same formulas on their range. float64 inputs are taken as input.float(). Returns (q, scales,
    zero_points): scales float32 [..., 1] (the values torch's float64 scales hold), zero points int32 [..., 1]."""
    return _dynamic_rows("dynamic_quantize_per_token_asymmetric", input, dtype, "per_token", asymmetric=True)


def dynamic_quantize_per_group_asymmetric(input, group_size, dtype=torch.int8 if torch is not None else None):
    """dynamic_quantize_per_token_asymmetric applied to each group of `group_size` consecutive elements along the
    last dim (as if the input were viewed as [-1, group_size]). Returns (q, scales, zero_points) with
    [..., D / group_size] scales (float32) and zero points (int32)."""
    return _dynamic_rows("dynamic_quantize_per_group_asymmetric", input, dtype, "per_group", int(group_size),
                         asymmetric=True)


def dynamic_quantize_backward(grad_output, input, scales, zero_points=None, dtype=torch.int8 if torch is not None
                              else None, granularity="per_token", group_size=0):
    """Straight-through gradient of the dynamic quantizers (the codes taken as real), with the scales (and zero
    points) their forward returned: grad * 1[q_min <= rint(x / scale) + zp <= q_max] (fp8: 1[|x / scale| <= max]),
    quantize's STE. granularity: 'per_token', 'per_group' (group_size along the last dim) or 'per_tensor'."""
    require_torch()
    _check_float("dynamic_quantize_backward", input)
    q = _q_name(dtype)
    s = scales.detach().to(device=input.device, dtype=torch.float32).contiguous().reshape(-1)
    zp = None if zero_points is None else _zp_tensor(zero_points, input.device, zero_points.numel())
    dx = torch.empty_like(input)
    if input.numel():
        _run("dynamic_quantize", True, {"dy": grad_output.to(input.dtype), "x": input, "scale": s, "zero_point": zp,
                                        "out": dx},
             {"q_dtype": q, "granularity": granularity, "axis": -1, "group_size": int(group_size)}, input.device)
    return dx


def _fp8_name(dtype):
    q = _q_name(dtype)
    if not q.startswith("float8"):
        raise ValueError(f"baracuda.quant: expected an fp8 dtype, got {dtype}")
    return q


def cast_to_fp8(x, dtype=None, scale=None, return_scale=False):
    """Per-tensor fp8 cast. scale=None: current scaling, scale = amax / 448 (57344 for e5m2; 1 when
    amax is 0 or not finite), computed on the device (two launches). Otherwise `scale` (a number or a
    one-element tensor) is used. q = fp8(clamp(x / scale, -max, max)). Returns (q, amax) with amax =
    max|x| (float32 [1]), or (q, amax, scale) with return_scale."""
    require_torch()
    _check_float("cast_to_fp8", x)
    q = _fp8_name(dtype if dtype is not None else torch.float8_e4m3fn)
    out = torch.empty(list(x.shape), dtype=_storage_dtype(q), device=x.device)
    amax = torch.empty(1, dtype=torch.float32, device=x.device)
    if scale is None:
        s = torch.empty(1, dtype=torch.float32, device=x.device)
        _run("dynamic_quantize", False, {"x": x, "out": out, "scale_out": s, "amax_out": amax},
             {"q_dtype": q, "granularity": "per_tensor"}, x.device, want_workspace=True)
    else:
        host, st = _scale_arg("cast_to_fp8", scale, x.device, 1)
        params = {"q_dtype": q, "granularity": "per_tensor", "zero_point_kind": "none"}
        if host is not None:
            params["scale"] = host
        _run("quantize", False, {"x": x, "scale": st, "out": out, "amax_out": amax}, params, x.device,
             want_workspace=True)
        s = st if st is not None else torch.full((1,), host, dtype=torch.float32, device=x.device)
    return (out, amax, s) if return_scale else (out, amax)


def fp8_delayed_cast(x, amax_history, scale, dtype=None):
    """Delayed scaling (Transformer Engine's amax history, algorithm 'max'): `scale` ([1] float32, in
    place) becomes max(amax_history) / fp8_max (kept when that max is 0 or not finite), x is cast with
    it, then amax_history ([H] float32, newest first) shifts by one and amax_history[0] = max|x|.
    Returns q."""
    require_torch()
    _check_float("fp8_delayed_cast", x)
    q = _fp8_name(dtype if dtype is not None else torch.float8_e4m3fn)
    for t, what in ((amax_history, "amax_history"), (scale, "scale")):
        _check_cuda("fp8_delayed_cast", t)
        if t.dtype != torch.float32 or not t.is_contiguous():
            raise RuntimeError(f"fp8_delayed_cast: {what} expected a contiguous float32 tensor")
    out = torch.empty(list(x.shape), dtype=_storage_dtype(q), device=x.device)
    _run("dynamic_quantize", False, {"x": x, "out": out, "scale_out": scale.reshape(-1),
                                     "amax_history": amax_history.reshape(-1)},
         {"q_dtype": q, "granularity": "per_tensor"}, x.device, want_workspace=True)
    return out


# ---- fake quantize (autograd) ------------------------------------------------------------------------------
def _fake_params(granularity, axis, group_size, quant_min, quant_max, host_scale=None, host_zp=None, grad_factor=1.0):
    p = {"q_dtype": "int32", "granularity": granularity, "axis": axis, "group_size": group_size,
         "q_min": int(quant_min), "q_max": int(quant_max), "grad_factor": float(grad_factor)}
    if host_scale is not None:
        p["scale"] = float(host_scale)
        p["zero_point"] = int(host_zp)
    return p


def _fake_fw(op, x, s, zp, params):
    y = torch.empty_like(x)
    if x.numel():
        _run(op, False, {"x": x, "scale": s, "zero_point": zp, "out": y}, params, x.device)
    return y


def _fake_bw(op, grad, x, s, zp, params):
    dx = torch.empty_like(x)
    if x.numel():
        _run(op, True, {"dy": grad.to(x.dtype), "x": x, "scale": s, "zero_point": zp, "out": dx}, params, x.device)
    return dx


if torch is not None:
    from torch.autograd.function import once_differentiable

    class FakeQuantizeFunction(torch.autograd.Function):
        """fake_quantize with the straight-through backward dx = dy * mask (mask recomputed from x)."""

        @staticmethod
        def forward(ctx, x, s, zp, params):
            ctx.save_for_backward(x, s, zp)
            ctx.params = params
            return _fake_fw("fake_quantize", x, s, zp, params)

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            x, s, zp = ctx.saved_tensors
            return _fake_bw("fake_quantize", grad, x, s, zp, ctx.params), None, None, None

    class FakeQuantizeLearnableFunction(torch.autograd.Function):
        """LSQ: gradients for x (STE), the scale and the zero point (torch._fake_quantize_learnable_*)."""

        @staticmethod
        def forward(ctx, x, scale, zero_point, params):
            s = scale.detach().to(torch.float32).contiguous().reshape(-1)
            zp = zero_point.detach().to(torch.float32).contiguous().reshape(-1)
            ctx.save_for_backward(x, s, zp)
            ctx.params = params
            ctx.shapes = (scale.shape, scale.dtype, zero_point.shape, zero_point.dtype)
            return _fake_fw("fake_quantize_learnable", x, s, zp, params)

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            x, s, zp = ctx.saved_tensors
            dx = torch.empty_like(x)
            ds = torch.empty(s.numel(), dtype=torch.float32, device=x.device)
            dz = torch.empty(zp.numel(), dtype=torch.float32, device=x.device)
            _run("fake_quantize_learnable", True, {"dy": grad.to(x.dtype), "x": x, "scale": s, "zero_point": zp,
                                                   "out": dx, "dscale": ds, "dzero_point": dz}, ctx.params, x.device,
                 want_workspace=True)
            sshape, sdt, zshape, zdt = ctx.shapes
            return dx, ds.reshape(sshape).to(sdt), dz.reshape(zshape).to(zdt), None
else:  # pragma: no cover
    FakeQuantizeFunction = FakeQuantizeLearnableFunction = None


def _grad_mode(*ts):
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in ts)


def _fake_common(name, input, scale, zero_point, granularity, axis, group_size, quant_min, quant_max):
    require_torch()
    _check_float(name, input)
    if quant_min > quant_max:
        raise RuntimeError("`quant_min` should be less than or equal to `quant_max`.")
    if granularity == "per_tensor":
        host, s = _scale_arg(name, scale, input.device, 1)
        if host is not None:
            if not quant_min <= int(zero_point) <= quant_max:
                raise RuntimeError("`zero_point` must be between `quant_min` and `quant_max`.")
            params = _fake_params(granularity, axis, group_size, quant_min, quant_max, host, int(zero_point))
            zp = None
        else:
            params = _fake_params(granularity, axis, group_size, quant_min, quant_max)
            zp = _zp_tensor(zero_point, input.device, 1)
    else:
        count = _num_scales(list(input.shape), granularity, axis, group_size)
        _, s = _scale_arg(name, scale if isinstance(scale, torch.Tensor) else torch.tensor(scale), input.device, count)
        params = _fake_params(granularity, axis, group_size, quant_min, quant_max)
        zp = _zp_tensor(zero_point, input.device, count, float_ok=True)
    if _grad_mode(input):
        return FakeQuantizeFunction.apply(input, s, zp, params)
    return _fake_fw("fake_quantize", input, s, zp, params)


def fake_quantize_per_tensor_affine(input, scale, zero_point, quant_min, quant_max):
    """torch.fake_quantize_per_tensor_affine, bit for bit: (clamp(rint(x * (1/scale)) + zp) - zp) * scale
    in float32; backward dx = dy * 1[in range]. scale/zero_point: numbers, or one-element tensors
    (float32 / int32, torch's tensor-qparams overload)."""
    return _fake_common("fake_quantize_per_tensor_affine", input, scale, zero_point, "per_tensor", -1, 0,
                        quant_min, quant_max)


def fake_quantize_per_channel_affine(input, scale, zero_point, axis, quant_min, quant_max):
    """torch.fake_quantize_per_channel_affine, bit for bit (zero point added before rounding; int or
    float zero points)."""
    return _fake_common("fake_quantize_per_channel_affine", input, scale, zero_point, "per_channel", axis, 0,
                        quant_min, quant_max)


def fake_quantize_per_group_affine(input, scale, zero_point, group_size, axis, quant_min, quant_max):
    """fake_quantize with one (scale, zero point) per group of `group_size` along `axis` (per-channel's
    formula); scale/zero_point have input's shape with shape[axis] / group_size."""
    return _fake_common("fake_quantize_per_group_affine", input, scale, zero_point, "per_group", axis, group_size,
                        quant_min, quant_max)


def _learnable(name, input, scale, zero_point, granularity, axis, quant_min, quant_max, grad_factor, group_size=0):
    require_torch()
    _check_float(name, input)
    for t in (scale, zero_point):
        _check_cuda(name, t)
    params = _fake_params(granularity, axis, group_size, quant_min, quant_max, grad_factor=grad_factor)
    if _grad_mode(input, scale, zero_point):
        return FakeQuantizeLearnableFunction.apply(input, scale, zero_point, params)
    s = scale.detach().to(torch.float32).contiguous().reshape(-1)
    zp = zero_point.detach().to(torch.float32).contiguous().reshape(-1)
    return _fake_fw("fake_quantize_learnable", input, s, zp, params)


def fake_quantize_learnable_per_tensor_affine(input, scale, zero_point, quant_min, quant_max, grad_factor=1.0):
    """torch._fake_quantize_learnable_per_tensor_affine: forward with zero point clamp(rint(zp)); the
    backward gives dx (STE), dscale and dzero_point (LSQ, summed deterministically)."""
    return _learnable("fake_quantize_learnable_per_tensor_affine", input, scale, zero_point, "per_tensor", -1,
                      quant_min, quant_max, grad_factor)


def fake_quantize_learnable_per_channel_affine(input, scale, zero_point, axis, quant_min, quant_max,
                                               grad_factor=1.0):
    """torch._fake_quantize_learnable_per_channel_affine (scale and zero point float tensors [shape[axis]])."""
    return _learnable("fake_quantize_learnable_per_channel_affine", input, scale, zero_point, "per_channel", axis,
                      quant_min, quant_max, grad_factor)


def fake_quantize_learnable_per_group_affine(input, scale, zero_point, axis, group_size, quant_min, quant_max,
                                             grad_factor=1.0):
    """LSQ per group: torch._fake_quantize_learnable_per_channel_affine with each group of `group_size`
    consecutive elements along `axis` a channel (scale / zero_point float tensors of input's shape with
    shape[axis] / group_size). Forward zero point clamp(rint(zp)); backward dx (STE), dscale and dzero_point
    summed per group in a fixed order (deterministic)."""
    return _learnable("fake_quantize_learnable_per_group_affine", input, scale, zero_point, "per_group", axis,
                      quant_min, quant_max, grad_factor, int(group_size))


# ---- W8A8 linear ---------------------------------------------------------------------------------------------
def quantized_linear(x, w_int8, w_scale, bias=None):
    """y = (q(x) @ w_int8^T) * x_scale[m] * w_scale[n] (+ bias): x [*, K] (bf16/f16/f32) is quantized per
    token to int8 (dynamic_quantize_per_token) inside the plan; w_int8 [N, K] int8 and w_scale [N]
    float32 (e.g. from dynamic_quantize_per_token(weight)). Inference only (no autograd)."""
    require_torch()
    _check_float("quantized_linear", x)
    if w_int8.dtype != torch.int8 or w_int8.dim() != 2:
        raise RuntimeError(f"quantized_linear: w_int8 expected a 2-D int8 tensor, got {w_int8.dtype} "
                           f"{list(w_int8.shape)}")
    k = x.shape[-1]
    n = w_int8.shape[0]
    x2 = x.reshape(-1, k)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    t = {"x": x2, "weight": w_int8.contiguous(), "w_scale": w_scale.detach().to(torch.float32).reshape(-1).contiguous(),
         "bias": bias.detach().to(x.dtype).contiguous() if bias is not None else None, "y": y}
    live = {k_: v for k_, v in t.items() if v is not None}
    nws = _C.quantized_linear_workspace_size({k_: dl(v) for k_, v in live.items()})
    ws = dl(torch.empty(max(nws, 1), dtype=torch.uint8, device=x.device))
    _C.quantized_linear({k_: dl(v) for k_, v in live.items()}, current_stream(x.device), ws)
    return y.reshape(*x.shape[:-1], n)


# ---- W4A16 linear ----------------------------------------------------------------------------------------------
def w4a16_linear(x, weight, scales, zeros=None, group_size=128, bias=None, weight_dtype="uint4"):
    """y = x @ W.T (+ bias) with W[n, k] = (q[n, k] - zeros[n, k // group_size]) * scales[n, k // group_size]:
    x [*, K] (float16 / bfloat16); weight [N, K / 2] uint8 holding two 4-bit codes a byte along K (even k in the
    low nibble: what quantize_per_group(w, scales, zeros, group_size, -1, 'uint4' / 'int4') returns);
    scales [N, K / group_size] (converted to float32); zeros the same shape (integers within the codes' range;
    None: symmetric); group_size a multiple of 32 dividing K (K itself: per output channel). Rows of x up to 16
    run a decode kernel that streams the packed weight once (exact integer codes on tensor cores, float32 group
    sums times float32 scales); more rows dequantize the weight to x's dtype and call the GEMM. Inference only."""
    require_torch()
    _check_float("w4a16_linear", x)
    if x.dtype not in (torch.float16, torch.bfloat16):
        raise RuntimeError(f"w4a16_linear: x expected float16 or bfloat16, got {x.dtype}")
    q = _q_name(weight_dtype)
    if q not in ("int4", "uint4"):
        raise ValueError(f"w4a16_linear: weight_dtype expected 'int4' or 'uint4', got {weight_dtype!r}")
    _check_cuda("w4a16_linear", weight)
    if weight.dtype not in (torch.uint8, torch.int8) or weight.dim() != 2:
        raise RuntimeError(f"w4a16_linear: weight expected a 2-D uint8 tensor [N, K/2], got {weight.dtype} "
                           f"{list(weight.shape)}")
    k = x.shape[-1]
    n = weight.shape[0]
    x2 = x.reshape(-1, k)
    if x2.stride(-1) != 1 or (x2.shape[0] > 1 and x2.stride(0) % 8) or x2.data_ptr() % 16:
        x2 = x2.clone(memory_format=torch.contiguous_format)  # the decode kernel reads 16-byte rows
    y = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    # [N, K / group_size]; a group size the plan refuses is passed through for its message.
    shape = [n, k // group_size] if group_size > 0 and k % group_size == 0 else [-1]
    count = n * (k // group_size) if shape != [-1] else None
    if count is not None and (scales.numel() != count or (zeros is not None and zeros.numel() != count)):
        raise RuntimeError(f"w4a16_linear: scales (and zeros) expected {shape[0]} x {shape[1]} = {count} elements "
                           f"([N, K / group_size]), got {scales.numel()}"
                           + (f" and {zeros.numel()}" if zeros is not None else ""))
    t = {"x": x2, "weight": weight.contiguous(),
         "scale": scales.detach().to(device=x.device, dtype=torch.float32).reshape(shape).contiguous(),
         "zero_point": (_zp_tensor(zeros, x.device, zeros.numel()).reshape(shape) if zeros is not None else None),
         "bias": bias.detach().to(x.dtype).contiguous() if bias is not None else None, "y": y}
    params = {"weight_dtype": q, "group_size": int(group_size)}
    live = {k_: v for k_, v in t.items() if v is not None}
    nws = _C.w4a16_linear_workspace_size({k_: dl(v) for k_, v in live.items()}, params)
    ws = dl(torch.empty(nws, dtype=torch.uint8, device=x.device)) if nws else None
    _C.w4a16_linear({k_: dl(v) for k_, v in live.items()}, params, current_stream(x.device), ws)
    return y.reshape(*x.shape[:-1], n)
