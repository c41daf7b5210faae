"""GPU conformance of the quantization family (include/baracuda/ops/quant_ops.def) vs PyTorch.

Bit-exact where torch has the op: torch.quantize_per_tensor / quantize_per_channel (.int_repr() and
.dequantize()), torch.fake_quantize_per_tensor_affine / fake_quantize_per_channel_affine (forward,
and the STE backward through torch autograd), torch._fake_quantize_learnable_* (forward and dx exact;
dscale / dzero_point are sums, compared at a tolerance, and checked bit-identical run to run).
Per-token, per-group, packed int4 and fp8 against a torch reference computed upcast (float64
division, torch.round's half-to-even; fp8 through (x / scale).clamp(-M, M).to(float8)), compared
exactly (bytes). Dynamic asymmetric quantization against torch.ops.quantized_decomposed
(choose_qparams_per_token_asymmetric + quantize_per_token) for int8, and the same ops with other ranges
and per group; dynamic per-group symmetric against the per-token formula on groups; learnable per-group
against torch._fake_quantize_learnable_per_channel_affine with each group a channel. The W4A16 linear against torch's dequantize-then-matmul in float32, within the
output dtype's rounding (plus the weights' rounding on the m > 16 GEMM path). Inputs include exact rounding ties, strided / transposed views, every floating
dtype, empty tensors, and one tensor past 2^31 elements (marked slow). Outputs are poisoned before
the raw calls so unwritten elements show.
"""
import math
import zlib

import pytest

from gpu_skip import skip_unless_ready  # noqa: E402

skip_unless_ready('quant_ops')

import torch  # noqa: E402

from baracuda import _C  # noqa: E402
from baracuda import quant as Q  # noqa: E402

DEV = "cuda"
FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
ROWS = {r["name"]: r for r in _C.quant_ops()}
HAS_FP8 = hasattr(torch, "float8_e4m3fn")
FP8 = [getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)]
FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int4": (-8, 7), "uint4": (0, 15)}


def gen(*parts):
    return torch.Generator(device="cpu").manual_seed(zlib.crc32("/".join(map(str, parts)).encode()))


def randn(shape, dt, *seed, scale=1.0):
    g = gen(*seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dt).to(DEV)


def with_ties(x, step):
    """Every third element becomes an exact rounding tie (k + 0.5) * step of x's dtype."""
    flat = x.reshape(-1).clone()
    k = torch.floor(flat[::3].double() / step)
    flat[::3] = ((k + 0.5) * step).to(x.dtype)
    return flat.reshape(x.shape)


def same_bytes(got, ref, what):
    """Bit-identical, except that NaN matches NaN whatever its payload and sign (positions must match)."""
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    assert got.dtype == ref.dtype, f"{what}: dtype {got.dtype} vs {ref.dtype}"
    es = got.element_size()
    g = got.contiguous().reshape(-1).view(torch.uint8).reshape(-1, es)
    r = ref.contiguous().reshape(-1).view(torch.uint8).reshape(-1, es)
    if got.is_floating_point():
        gn, rn = got.reshape(-1).float().isnan(), ref.reshape(-1).float().isnan()
        assert torch.equal(gn, rn), f"{what}: NaN positions differ ({int(gn.sum())} vs {int(rn.sum())})"
        g, r = g[~gn], r[~rn]
    bad = (g != r).any(-1).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} element(s) differ, first at flat index {bad[0].item()}"


def not_degenerate(q, what):
    if q.numel() > 16:
        frac = (q.reshape(-1).to(torch.int32) != 0).double().mean().item()
        assert frac > 0.3, f"{what}: quantized output mostly zeros ({frac:.2f}): degenerate test data"


def views(x):
    """x itself, and a transposed (non-contiguous) view holding the same values."""
    yield "contiguous", x
    if x.dim() >= 2:
        yield "transposed", x.transpose(-1, -2).contiguous().transpose(-1, -2)


def pack4(q):
    """int tensor [..., 2k] in [lo, hi] -> uint8 [..., k]: element 2j low nibble, 2j + 1 high nibble."""
    u = (q.to(torch.int32) & 15).to(torch.uint8)
    return u[..., 0::2] | (u[..., 1::2] << 4)


def ref_quant(x, s, zp, lo, hi):
    """torch's CUDA quantizer on x.float(): clamp(rint(double(x) / s) + zp)."""
    return torch.clamp(torch.round(x.float().double() / s.double()) + zp, lo, hi).to(torch.int64)


# ---- per-tensor / per-channel vs torch's quantized tensors ---------------------------------------------------
@pytest.mark.parametrize("qdt", [torch.quint8, torch.qint8])
@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (129, 33), (4, 7, 97)])
@pytest.mark.parametrize("scale", [0.25, 0.1, 3.7e-3])
def test_quantize_per_tensor_vs_torch(qdt, dt, shape, scale):
    zp = 3 if qdt == torch.quint8 else -5
    x = with_ties(randn(shape, dt, "qpt", shape, dt, scale=0.3), scale)  # x / scale = k + 0.5 (or near it)
    for kind, xv in views(x):
        ref_q = torch.quantize_per_tensor(xv.float(), scale, zp, qdt)
        got = Q.quantize_per_tensor(xv, scale, zp, qdt)
        same_bytes(got, ref_q.int_repr(), f"quantize_per_tensor {dt} {qdt} {shape} {kind}")
        not_degenerate(got.to(torch.int32) - zp, "quantize_per_tensor")
        y = Q.dequantize_per_tensor(got, scale, zp, qdt)
        same_bytes(y, ref_q.dequantize(), f"dequantize_per_tensor {qdt} {shape}")
        yb = Q.dequantize_per_tensor(got, scale, zp, qdt, out_dtype=dt)
        # float64 outputs keep the double product (torch's dequantize stops at float32)
        yref = (ref_q.int_repr().double() - zp) * scale if dt == torch.float64 else ref_q.dequantize().to(dt)
        same_bytes(yb, yref, f"dequantize_per_tensor -> {dt}")


@pytest.mark.sanitizer  # (the launch shapes: partial CTAs, sub-warp groups, streaming)
@pytest.mark.parametrize("qdt", [torch.quint8, torch.qint8])
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_quantize_per_channel_vs_torch(qdt, dt, axis):
    shape = (7, 13, 33)
    x = with_ties(randn(shape, dt, "qpc", dt, axis), 0.125)  # ties for the channel with scale 0.125
    c = shape[axis]
    g = gen("qpc-s", axis)
    scales = (torch.rand(c, generator=g) * 0.05 + 0.01).float().to(DEV)
    scales[0] = 0.125  # ties
    lo, hi = (0, 255) if qdt == torch.quint8 else (-128, 127)
    zlo, zhi = (30, 60) if qdt == torch.quint8 else (-20, 20)
    zps = torch.randint(zlo, zhi, (c,), generator=g).to(DEV)
    for kind, xv in views(x):
        ref_q = torch.quantize_per_channel(xv.float(), scales.double(), zps, axis % 3, qdt)
        got = Q.quantize_per_channel(xv, scales, zps, axis, qdt)
        same_bytes(got, ref_q.int_repr(), f"quantize_per_channel {dt} {qdt} axis={axis} {kind}")
        y = Q.dequantize_per_channel(got, scales, zps, axis, qdt)
        same_bytes(y, ref_q.dequantize(), f"dequantize_per_channel axis={axis}")


# The 16-byte kernel's whole-step loop (a CTA step is 512 or 1024 units of 8 16-bit elements) and its
# tail, with ties, odd zero points and "round" scales (0.01, 0.1: quotients near ties), a power of two
# and random ones: the bracketing reciprocals (QParams::inv_lo) must flag every tie.
@pytest.mark.sanitizer
@pytest.mark.parametrize("qdt", [torch.quint8, torch.qint8])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("scale", [0.01, 0.1, 0.0625, 3.7e-3, 0.0123457])
def test_quantize_whole_steps_vs_torch(qdt, dt, scale):
    zp = 7 if qdt == torch.quint8 else -3
    x = with_ties(randn((37, 4104), dt, "qws", dt, scale=scale * 60), scale)
    x[5, :4] = torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0]).to(dt)
    ref_q = torch.quantize_per_tensor(x.float(), scale, zp, qdt)
    got = Q.quantize_per_tensor(x, scale, zp, qdt)
    same_bytes(got, ref_q.int_repr(), f"quantize_per_tensor whole steps {dt} {qdt} {scale}")
    not_degenerate(got.to(torch.int32) - zp, "quantize whole steps")
    g = gen("qws-s", dt, scale)
    scales = (torch.rand(37, generator=g) * scale + scale * 0.5).float().to(DEV)
    scales[::3] = scale  # rows of the round scale, with ties
    zps = torch.randint(-9, 10, (37,), generator=g).to(DEV) + (30 if qdt == torch.quint8 else 0)
    ref_c = torch.quantize_per_channel(x.float(), scales.double(), zps, 0, qdt)
    got_c = Q.quantize_per_channel(x, scales, zps, 0, qdt)
    same_bytes(got_c, ref_c.int_repr(), f"quantize_per_channel whole steps {dt} {qdt} {scale}")
    same_bytes(Q.dequantize_per_channel(got_c, scales, zps, 0, qdt), ref_c.dequantize(), "dequantize whole steps")


@pytest.mark.sanitizer
@pytest.mark.skipif(not HAS_FP8, reason="torch without float8 dtypes")
@pytest.mark.parametrize("f8", FP8)
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("scale", [1.0, 0.0625, 0.01, 1 / 3, 0.37, 0.011928, 3.0])
def test_fp8_rounding_boundaries(f8, dt, scale):
    """fp8 quantize where x / s sits on, or within an ulp of, fp8 rounding boundaries (the midpoints
    between fp8 values, and the subnormal ones), for power-of-two, "round" and random scales: the
    kernel's bracketing products must agree with torch's (x.float() / s) wherever they do not flag."""
    M = FP8_MAX[str(f8).split(".")[-1]]
    mant = 3 if f8 == torch.float8_e4m3fn else 2
    g = gen("fp8b", f8, dt, scale)
    n = 3 * 8192 + 13
    e = torch.randint(-12, 9, (n,), generator=g).double()
    m = torch.randint(0, 2 ** mant, (n,), generator=g).double()
    mid = (1 + (m + 0.5) / 2 ** mant) * torch.exp2(e)  # midpoints between neighbours (normal and below)
    sign = torch.randint(0, 2, (n,), generator=g).double() * 2 - 1
    x = (sign * mid * scale).to(dt)  # the boundary times s, rounded to dt: on it or an ulp away
    step = torch.randint(-2, 3, (n,), generator=g)
    xi = x.view(torch.int16 if dt != torch.float32 else torch.int32)
    x = (xi + step.to(xi.dtype)).view(dt)  # and up to two ulps of dt either side
    x[::7] = randn((x[::7].numel(),), dt, "fp8b-r", f8, dt, scale=scale * 40).cpu()
    x = x.to(DEV)
    ref = (x.float() / torch.tensor(scale, dtype=torch.float32, device=DEV)).clamp(-M, M).to(f8)
    got = Q.quantize_per_tensor(x, torch.tensor([scale], device=DEV), None, f8)
    same_bytes(got, ref, f"fp8 boundaries {f8} {dt} s={scale}")
    rows = x[: 3 * 8192].reshape(24, 1024)
    sc = torch.full((24,), scale, dtype=torch.float32)
    sc[1::2] = (torch.rand(12, generator=g) + 0.5).float() * scale
    sc = sc.to(DEV)
    got_c = Q.quantize_per_channel(rows, sc, None, 0, f8)
    same_bytes(got_c, (rows.float() / sc[:, None]).clamp(-M, M).to(f8), f"fp8 boundaries per_channel {f8} {dt}")


# ---- per-token, per-group, int4 (upcast reference, exact) --------------------------------------------------
@pytest.mark.parametrize("q", ["int8", "uint8", "int4", "uint4"])
@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("symmetric", [True, False])
def test_quantize_per_token(q, dt, symmetric):
    shape = (5, 9, 66)
    x = with_ties(randn(shape, dt, "tok", q, dt), 1 / 32)  # ties in the row with scale 1/32
    rows = 45
    lo, hi = RANGE[q]
    g = gen("tok-s", q)
    s = (torch.rand(rows, generator=g) * 0.02 + 0.005).float().to(DEV)
    s[0] = 1 / 32
    zp = None if symmetric else torch.randint(lo, hi + 1, (rows,), generator=g).to(DEV).to(torch.int32)
    if symmetric and lo == 0:
        pytest.skip("symmetric unsigned: every negative value clamps")
    z = 0 if zp is None else zp.view(5, 9, 1).to(torch.float64)
    for kind, xv in views(x):
        got = Q.quantize_per_token(xv, s, zp, q)
        ref = ref_quant(xv, s.view(5, 9, 1), z, lo, hi)
        want = pack4(ref) if q in ("int4", "uint4") else ref.to(torch.int8 if q == "int8" else torch.uint8)
        same_bytes(got, want, f"quantize_per_token {q} {dt} {kind}")
        not_degenerate(ref - (0 if zp is None else zp.view(5, 9, 1)), "per_token")
        y = Q.dequantize_per_token(got, s, zp, dtype=q, out_dtype=dt)
        yref = ((ref.double() - z) * s.view(5, 9, 1).double())
        yref = yref if dt == torch.float64 else yref.float().to(dt)
        same_bytes(y, yref, f"dequantize_per_token {q} {dt}")


@pytest.mark.parametrize("q", ["int8", "int4", "uint4"])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("axis,group", [(-1, 32), (-1, 128), (0, 4), (1, 3)])
def test_quantize_per_group(q, dt, axis, group):
    shape = (12, 9, 256) if axis != 1 else (4, 12, 64)
    x = with_ties(randn(shape, dt, "grp", q, dt, axis), 1 / 128)
    a = axis % 3
    sshape = list(shape)
    sshape[a] //= group
    lo, hi = RANGE[q]
    g = gen("grp-s", q, axis)
    s = (torch.rand(sshape, generator=g) * 0.05 + 0.01).float().to(DEV)
    zp = torch.randint(lo, hi + 1, sshape, generator=g).to(torch.int32).to(DEV)
    sx = s.repeat_interleave(group, dim=a)
    zx = zp.repeat_interleave(group, dim=a).double()
    for kind, xv in views(x):
        got = Q.quantize_per_group(xv, s, zp, group_size=group, axis=axis, dtype=q)
        ref = ref_quant(xv, sx, zx, lo, hi)
        want = pack4(ref) if q in ("int4", "uint4") else ref.to(torch.int8)
        same_bytes(got, want, f"quantize_per_group {q} {dt} axis={axis} group={group} {kind}")
        y = Q.dequantize_per_group(got, s, zp, group_size=group, axis=axis, dtype=q, out_dtype=dt)
        same_bytes(y, ((ref.double() - zx) * sx.double()).float().to(dt), f"dequantize_per_group {q}")


def test_int4_packing_order():
    """Element 2j in the low nibble, 2j + 1 in the high nibble (torch.quint4x2's order)."""
    x = torch.tensor([[1.0, 2.0, -3.0, 7.0]], device=DEV)
    q = Q.quantize_per_tensor(x, 1.0, 0, "int4")
    assert q.tolist() == [[0x21, 0x7D]]
    q = Q.quantize_per_tensor(x, 1.0, 8, torch.quint4x2 if hasattr(torch, "quint4x2") else "uint4")
    assert q.tolist() == [[(10 << 4) | 9, (15 << 4) | 5]]


# ---- fp8 --------------------------------------------------------------------------------------------
@pytest.mark.skipif(not HAS_FP8, reason="torch without float8 dtypes")
@pytest.mark.parametrize("f8", FP8)
@pytest.mark.parametrize("dt", FLOATS)
def test_fp8_per_tensor_and_per_channel(f8, dt):
    M = FP8_MAX[str(f8).split(".")[-1]]
    x = randn((33, 130), dt, "fp8", f8, dt, scale=300.0)
    x[0, :4] = torch.tensor([float("inf"), -float("inf"), float("nan"), 1e30]).to(dt)
    s = torch.tensor([0.37], device=DEV)
    got = Q.quantize_per_tensor(x, s, None, f8)
    ref = (x.float() / s).clamp(-M, M).to(f8)
    same_bytes(got, ref, f"fp8 per_tensor {f8} {dt}")
    y = Q.dequantize_per_tensor(got, s, None, f8, out_dtype=dt)
    yref = got.double() * s.double() if dt == torch.float64 else (got.float() * s).to(dt)
    same_bytes(y, yref, f"fp8 dequantize {f8} {dt}")
    sc = (torch.rand(130, generator=gen("fp8c")) + 0.1).float().to(DEV)
    for kind, xv in views(x):
        got = Q.quantize_per_channel(xv, sc, None, 1, f8)
        same_bytes(got, (xv.float() / sc).clamp(-M, M).to(f8), f"fp8 per_channel {kind}")


@pytest.mark.skipif(not HAS_FP8, reason="torch without float8 dtypes")
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n", [0, 1, 1000, 3 * 1024 * 1024 + 7])
def test_cast_to_fp8_current_scaling(dt, n):
    x = randn((n,), dt, "cur", n, dt, scale=40.0)
    q, amax = Q.cast_to_fp8(x, torch.float8_e4m3fn)
    ref_amax = x.float().abs().max() if n else torch.tensor(0.0, device=DEV)
    assert amax.item() == ref_amax.item()
    s = ref_amax / 448 if ref_amax > 0 else torch.tensor(1.0, device=DEV)
    same_bytes(q, (x.float() / s).clamp(-448, 448).to(torch.float8_e4m3fn), "cast_to_fp8 current")
    # With a given scale: the cast plus the recorded amax.
    q2, amax2 = Q.cast_to_fp8(x, torch.float8_e4m3fn, scale=torch.tensor([0.5], device=DEV))
    assert amax2.item() == ref_amax.item()
    same_bytes(q2, (x.float() / 0.5).clamp(-448, 448).to(torch.float8_e4m3fn), "cast_to_fp8 given scale")


@pytest.mark.skipif(not HAS_FP8, reason="torch without float8 dtypes")
def test_fp8_delayed_scaling():
    x = randn((4097,), torch.bfloat16, "delayed", scale=10.0)
    hist = torch.tensor([3.0, 900.0, 0.0, 12.0], device=DEV)
    scale = torch.tensor([5.0], device=DEV)
    q = Q.fp8_delayed_cast(x, hist, scale)
    # torch's max(history) / 448 on the device: ATen divides by a scalar as a product with its reciprocal
    expect = torch.tensor([900.0], device=DEV) / 448.0
    assert scale.item() == expect.item()
    same_bytes(q, (x.float() / scale).clamp(-448, 448).to(torch.float8_e4m3fn), "delayed cast")
    assert hist.tolist() == [x.float().abs().max().item(), 3.0, 900.0, 0.0]
    zero = torch.zeros(4, device=DEV)
    scale.fill_(2.0)
    Q.fp8_delayed_cast(x, zero, scale)
    assert scale.item() == 2.0, "an all-zero history keeps the previous scale"


# ---- dynamic per-token -------------------------------------------------------------------------------------
def dyn_ref(x, qmax, f8=None):
    xf = x.float()
    if x.shape[-1] == 0:  # rows of nothing: amax 0, scale 1
        amax = torch.zeros(list(x.shape[:-1]) + [1], device=x.device)
    else:
        amax = xf.abs().amax(-1, keepdim=True)
    s = torch.where((amax > 0) & torch.isfinite(amax), amax / qmax, torch.ones_like(amax))
    if f8 is not None:
        return (xf / s).clamp(-qmax, qmax).to(f8), s
    return torch.clamp(torch.round(xf.double() / s.double()), -128, 127).to(torch.int8), s


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("shape", [(1, 1), (7, 129), (33, 4097), (16, 4096), (3, 65537), (2, 3, 24), (0, 8), (4, 0)])
def test_dynamic_per_token_int8(dt, shape):
    x = randn(shape, dt, "dyn", dt, shape, scale=2.0)
    if x.numel() and shape[0] > 1:
        x[1] = 0  # an all-zero row: scale 1, q 0
    q, s = Q.dynamic_quantize_per_token(x)
    qr, sr = dyn_ref(x, 127.0)
    same_bytes(s, sr, f"dynamic scales {dt} {shape}")
    same_bytes(q, qr, f"dynamic q {dt} {shape}")
    not_degenerate(qr, "dynamic")


@pytest.mark.sanitizer  # (the launch shapes: partial CTAs, sub-warp groups, streaming)
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32])
def test_dynamic_per_token_strided_and_poisoned(dt):
    base = randn((37, 300), dt, "dyns", dt)
    for name_, x in (("padded rows", base[:, :256]), ("column stride 2", base[:, ::2]), ("transposed", base.t())):
        q = torch.empty(x.shape, dtype=torch.int8, device=DEV).fill_(0x5A)
        s = torch.empty(list(x.shape[:-1]) + [1], device=DEV).fill_(float("nan"))
        xx = x if Q._rows_merge(x) else x.contiguous()
        Q._run("dynamic_quantize", False, {"x": xx, "out": q, "scale_out": s}, {"q_dtype": "int8",
                                                                               "granularity": "per_token"}, x.device)
        qr, sr = dyn_ref(x, 127.0)
        same_bytes(s, sr, f"dynamic scales {name_}")
        same_bytes(q, qr, f"dynamic q {name_}")


@pytest.mark.skipif(not HAS_FP8, reason="torch without float8 dtypes")
@pytest.mark.parametrize("f8", FP8)
@pytest.mark.parametrize("n", [64, 4096, 20000])
def test_dynamic_per_token_fp8(f8, n):
    M = FP8_MAX[str(f8).split(".")[-1]]
    x = randn((9, n), torch.bfloat16, "dynf8", f8, n, scale=5.0)
    q, s = Q.dynamic_quantize_per_token(x, f8)
    qr, sr = dyn_ref(x, M, f8)
    same_bytes(s, sr, "fp8 per-token scales")
    same_bytes(q, qr, "fp8 per-token q")


# ---- fake quantize (torch, bit for bit, forward and STE backward) --------------------------------------------
@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("qrange,zp", [((0, 255), 7), ((-128, 127), 0), ((0, 15), 15), ((-8, 7), -8)])
@pytest.mark.parametrize("tensor_qparams", [False, True])
def test_fake_quantize_per_tensor(dt, qrange, zp, tensor_qparams):
    lo, hi = qrange
    scale = 0.0625 if not tensor_qparams else 0.043
    x = with_ties(randn((65, 131), dt, "fq", dt, qrange, tensor_qparams, scale=2.0), scale)
    for kind, xv in views(x):
        xa = xv.detach().clone().requires_grad_()
        xb = xv.detach().clone().requires_grad_()
        if tensor_qparams:
            st = torch.tensor([scale], device=DEV)
            zt = torch.tensor([zp], dtype=torch.int32, device=DEV)
            ref = torch.fake_quantize_per_tensor_affine(xa, st, zt, lo, hi)
            got = Q.fake_quantize_per_tensor_affine(xb, st, zt, lo, hi)
        else:
            ref = torch.fake_quantize_per_tensor_affine(xa, scale, zp, lo, hi)
            got = Q.fake_quantize_per_tensor_affine(xb, scale, zp, lo, hi)
        same_bytes(got.detach(), ref.detach(), f"fake per_tensor {dt} {qrange} {kind}")
        g = randn(x.shape, dt, "fqg", dt)
        ref.backward(g)
        got.backward(g)
        same_bytes(xb.grad, xa.grad, f"fake per_tensor backward {dt} {kind}")


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("zp_dtype", [torch.int32, torch.float32])
def test_fake_quantize_per_channel(dt, axis, zp_dtype):
    shape = (9, 17, 40)
    x = with_ties(randn(shape, dt, "fqc", dt, axis, zp_dtype, scale=1.5), 1 / 16)
    c = shape[axis]
    g = gen("fqc-s", axis)
    scale = (torch.rand(c, generator=g) * 0.1 + 0.02).float().to(DEV)
    scale[0] = 1 / 16
    if zp_dtype == torch.int32:
        zp = torch.randint(0, 16, (c,), generator=g).to(torch.int32).to(DEV)
    else:
        zp = (torch.rand(c, generator=g) * 15).float().to(DEV)
    for kind, xv in views(x):
        xa = xv.detach().clone().requires_grad_()
        xb = xv.detach().clone().requires_grad_()
        ref = torch.fake_quantize_per_channel_affine(xa, scale, zp, axis % 3, 0, 15)
        got = Q.fake_quantize_per_channel_affine(xb, scale, zp, axis, 0, 15)
        same_bytes(got.detach(), ref.detach(), f"fake per_channel {dt} axis={axis} zp={zp_dtype} {kind}")
        gr = randn(shape, dt, "fqcg", dt)
        ref.backward(gr)
        got.backward(gr)
        same_bytes(xb.grad, xa.grad, f"fake per_channel backward {dt} {kind}")


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
def test_fake_quantize_per_group_matches_per_channel_rule(dt):
    """Per-group uses per-channel's formula with the group's (scale, zero point)."""
    x = randn((6, 64), dt, "fqg", dt)
    s = (torch.rand(6, 4, generator=gen("fqgs")) * 0.1 + 0.02).float().to(DEV)
    zp = torch.randint(0, 16, (6, 4), generator=gen("fqgz")).to(torch.int32).to(DEV)
    got = Q.fake_quantize_per_group_affine(x, s, zp, 16, -1, 0, 15)
    ref = torch.cat([torch.fake_quantize_per_channel_affine(x[:, 16 * j:16 * (j + 1)].contiguous(), s[:, j].contiguous(),
                                                            zp[:, j].contiguous(), 0, 0, 15) for j in range(4)], 1)
    same_bytes(got, ref, f"fake per_group {dt}")


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape,axis", [((64, 257), 0), ((300, 48), 1), ((4, 10, 33), 1)])
def test_fake_quantize_learnable(per_channel, dt, shape, axis):
    if not per_channel and dt != torch.float32:
        pytest.skip("torch's learnable per-tensor backward takes float32 only")
    x = randn(shape, dt, "lsq", per_channel, dt, shape, scale=0.5)
    c = shape[axis] if per_channel else 1
    s0 = (torch.rand(c, generator=gen("lsq-s", shape)) * 0.05 + 0.02).float().to(DEV)
    z0 = (torch.rand(c, generator=gen("lsq-z", shape)) * 6 - 3).float().to(DEV)
    dy = randn(shape, dt, "lsq-g", dt, shape)
    res = []
    for impl in ("torch", "baracuda", "baracuda"):
        xi = x.detach().clone().requires_grad_()
        si = s0.detach().clone().requires_grad_()
        zi = z0.detach().clone().requires_grad_()
        if per_channel:
            f = torch._fake_quantize_learnable_per_channel_affine if impl == "torch" else \
                Q.fake_quantize_learnable_per_channel_affine
            y = f(xi, si, zi, axis, -8, 7, 0.5)
        else:
            f = torch._fake_quantize_learnable_per_tensor_affine if impl == "torch" else \
                Q.fake_quantize_learnable_per_tensor_affine
            y = f(xi, si, zi, -8, 7, 0.5)
        y.backward(dy)
        res.append((y.detach(), xi.grad, si.grad, zi.grad))
    (yr, dxr, dsr, dzr), (yb, dxb, dsb, dzb), (_, _, ds2, dz2) = res
    same_bytes(yb, yr, "learnable forward")
    same_bytes(dxb, dxr.to(dxb.dtype), "learnable dx")
    tol = dict(rtol=1e-3, atol=1e-3 * max(1.0, dsr.abs().max().item()))
    torch.testing.assert_close(dsb, dsr, **tol)
    torch.testing.assert_close(dzb, dzr, rtol=1e-3, atol=1e-3 * max(1.0, dzr.abs().max().item()))
    same_bytes(ds2, dsb, "learnable dscale run to run")
    same_bytes(dz2, dzb, "learnable dzero_point run to run")


# ---- dynamic per-group (symmetric) ---------------------------------------------------------------------------
def run_dynamic(x, q, granularity, group=0, asym=False):
    """The rows kernel through the raw call, with poisoned outputs (unwritten elements show)."""
    qn = Q._q_name(q)
    xx = x if Q._rows_merge(x) else x.contiguous()
    per = 1 if granularity == "per_token" else x.shape[-1] // group
    out = torch.empty(Q._q_shape(x.shape, qn), dtype=Q._storage_dtype(qn), device=DEV)
    out.view(torch.uint8).fill_(0x5A)
    s = torch.full(list(x.shape[:-1]) + [per], float("nan"), device=DEV)
    zp = torch.full(s.shape, -12345, dtype=torch.int32, device=DEV) if asym else None
    Q._run("dynamic_quantize", False, {"x": xx, "out": out, "scale_out": s, "zero_point_out": zp},
           {"q_dtype": qn, "granularity": granularity, "axis": -1, "group_size": group}, x.device)
    return out, s, zp


def row_views(x):
    """views(x), and a view with column stride 2 (the rows kernel's scalar path) holding the same values."""
    yield from views(x)
    wide = torch.stack([x, torch.zeros_like(x)], -1).reshape(list(x.shape[:-1]) + [2 * x.shape[-1]])
    yield "column stride 2", wide[..., ::2]


def dyn_group_ref(x, group, q):
    """Symmetric per-group reference: dyn_ref's per-token formula (torch's amax / q_max, 1 for an all-zero group)
    on x.float() viewed as [-1, group]; codes as int64 (fp8: the fp8 tensor)."""
    xf = x.float().reshape(-1, group)
    if q in FP8:
        M = FP8_MAX[str(q).split(".")[-1]]
        qr, s = dyn_ref(xf, M, q)
    else:
        lo, hi = RANGE[q]
        amax = xf.abs().amax(-1, keepdim=True)
        s = torch.where((amax > 0) & torch.isfinite(amax), amax / hi, torch.ones_like(amax))
        qr = torch.clamp(torch.round(xf.double() / s.double()), lo, hi).to(torch.int64)
    return qr.reshape(x.shape), s.reshape(list(x.shape[:-1]) + [x.shape[-1] // group])


def stored(ref, q):
    """A reference code tensor as the kernel stores it."""
    if q in ("int4", "uint4"):
        return pack4(ref)
    if q in FP8:
        return ref
    return ref.to(torch.int8 if q == "int8" else torch.uint8)


@pytest.mark.sanitizer  # (the launch shapes: partial CTAs, sub-warp groups, streaming)
@pytest.mark.parametrize("q", ["int8", "int4"] + FP8)
@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("group", [32, 64, 128, 48])
def test_dynamic_per_group_symmetric(q, dt, group):
    shape = (5, 7, 384)
    x = randn(shape, dt, "dyng", q, dt, group, scale=3.0)
    x[1, 2] = 0  # all-zero groups: scale 1, codes 0
    x[2, 3, :group] = x[2, 3, :group] * 1e-3  # a group far below the others
    for kind, xv in row_views(x):
        got, s, _ = run_dynamic(xv, q, "per_group", group)
        qr, sr = dyn_group_ref(xv, group, q)
        same_bytes(s, sr, f"dynamic per_group scales {q} {dt} G={group} {kind}")
        same_bytes(got, stored(qr, q), f"dynamic per_group q {q} {dt} G={group} {kind}")
        if q not in FP8:
            not_degenerate(qr, "dynamic per_group")
    q2, s2 = Q.dynamic_quantize_per_group(x, group, q)
    qr, sr = dyn_group_ref(x, group, q)
    same_bytes(s2, sr, "dynamic_quantize_per_group scales")
    same_bytes(q2, stored(qr, q), "dynamic_quantize_per_group q")


@pytest.mark.sanitizer  # (the launch shapes: partial CTAs, sub-warp groups, streaming)
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape,group", [((3, 1, 4096), 4096), ((2, 65536), 32768), ((9, 8), 2), ((0, 64), 32)])
def test_dynamic_per_group_shapes(dt, shape, group):
    """A group per row, groups longer than a warp's registers (streaming), tiny groups, empty inputs."""
    x = randn(shape, dt, "dyngs", dt, shape, group, scale=2.0)
    got, s, _ = run_dynamic(x, "int8", "per_group", group)
    qr, sr = dyn_group_ref(x, group, "int8")
    same_bytes(s, sr, f"dynamic per_group scales {shape} G={group}")
    same_bytes(got, qr.to(torch.int8), f"dynamic per_group q {shape} G={group}")


# ---- dynamic asymmetric (torch.ao choose_qparams_per_token_asymmetric + quantize_per_token) ----------------------
def decomposed_ops():
    """torch.ops.quantized_decomposed (registered by importing torch.ao.quantization.fx._decomposed), or None."""
    try:
        import torch.ao.quantization.fx._decomposed  # noqa: F401
        ops = torch.ops.quantized_decomposed
        ops.choose_qparams_per_token_asymmetric, ops.quantize_per_token  # noqa: B018 (raise if absent)
        return ops
    except Exception:
        return None


def asym_qparams_ref(x, qmin, qmax):
    """torch.ao's _choose_qparams_per_token_asymmetric_impl with its [-128, 127] as parameters: the same ops, on
    x's dtype. Returns float64 scales and int64 zero points [..., 1], as torch does."""
    min_val = torch.amin(x, dim=-1, keepdim=True)
    max_val = torch.amax(x, dim=-1, keepdim=True)
    min_val_neg = torch.min(min_val, torch.zeros_like(min_val))
    max_val_pos = torch.max(max_val, torch.zeros_like(max_val))
    eps = torch.finfo(torch.float32).eps
    scale = (max_val_pos - min_val_neg) / float(qmax - qmin)
    scale = scale.clamp(min=eps)
    descaled_min = min_val_neg / scale
    descaled_max = max_val_pos / scale
    zero_point_from_min_error = qmin + descaled_min
    zero_point_from_max_error = qmax + descaled_max
    zero_point = torch.where(zero_point_from_min_error + zero_point_from_max_error > 0, qmin - descaled_min,
                             qmax - descaled_max)
    zero_point = torch.clamp(zero_point, qmin, qmax).round()
    return scale.to(torch.float64), zero_point.to(torch.int64)


def quantize_per_token_ref(x, scales, zero_points, qmin, qmax):
    """torch.ops.quantized_decomposed.quantize_per_token's formula (float64), codes as int64."""
    return x.mul(1.0 / scales).add(zero_points).round().clamp(qmin, qmax).to(torch.int64)


def asym_ref(x, q, group=0):
    """(codes int64 [x's shape], scales float64, zero points int64 [..., per row]) for x (float64 as x.float())."""
    lo, hi = RANGE[q]
    xs = x.float() if x.dtype == torch.float64 else x
    rows = xs.reshape(-1, group) if group else xs
    s, zp = asym_qparams_ref(rows, lo, hi)
    codes = quantize_per_token_ref(rows, s, zp, lo, hi)
    per = [x.shape[-1] // group] if group else [1]
    return codes.reshape(x.shape), s.reshape(list(x.shape[:-1]) + per), zp.reshape(list(x.shape[:-1]) + per)


def asym_rows(shape, dt, *seed):
    """Random rows plus the edge rows of the min / max rule: all positive, all negative, zero, constant, tiny
    (the scale clamps to eps), a wide range."""
    x = randn(shape, dt, "asym", *seed, scale=2.0)
    flat = x.reshape(-1, shape[-1])
    if flat.shape[0] >= 7 and shape[-1] > 0:
        flat[1] = flat[1].abs() + 0.5
        flat[2] = -flat[2].abs() - 0.25
        flat[3] = 0
        flat[4] = 1.375
        flat[5] = flat[5] * 1e-7
        flat[6] = flat[6] * 300
    return flat.reshape(shape)


def check_asym(got, s, zp, x, q, group, what):
    qr, sr, zr = asym_ref(x, q, group)
    same_bytes(s.double(), sr, f"{what}: scales")
    same_bytes(zp.to(torch.int64), zr, f"{what}: zero points")
    same_bytes(got, stored(qr, q), f"{what}: codes")
    not_degenerate(qr - zr.repeat_interleave(group if group else x.shape[-1], -1), what)


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("shape", [(7, 129), (33, 4097), (16, 4096), (3, 65537), (2, 3, 24), (1, 1)])
def test_dynamic_per_token_asymmetric_vs_torch(dt, shape):
    """int8: torch.ops.quantized_decomposed.choose_qparams_per_token_asymmetric + quantize_per_token, bit for bit."""
    x = asym_rows(shape, dt, "tok", dt, shape)
    ops = decomposed_ops()
    for kind, xv in row_views(x):
        got, s, zp = run_dynamic(xv, "int8", "per_token", asym=True)
        check_asym(got, s, zp, xv, "int8", 0, f"asym per_token int8 {dt} {shape} {kind}")
        if ops is not None:  # the composite reference is torch's op
            xs = xv.float() if dt == torch.float64 else xv
            ts, tz = ops.choose_qparams_per_token_asymmetric(xs, torch.int8)
            same_bytes(s.double(), ts.reshape(s.shape), f"torch op scales {dt} {shape}")
            same_bytes(zp.to(torch.int64), tz.reshape(zp.shape), f"torch op zero points {dt} {shape}")
            tq = ops.quantize_per_token(xs, ts, tz, -128, 127, torch.int8)
            same_bytes(got, tq, f"torch op codes {dt} {shape}")
    q2, s2, z2 = Q.dynamic_quantize_per_token_asymmetric(x)
    check_asym(q2, s2, z2, x, "int8", 0, f"dynamic_quantize_per_token_asymmetric {dt} {shape}")


@pytest.mark.parametrize("q", ["uint8", "int4", "uint4", "int8"])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("group", [0, 32, 128, 48])
def test_dynamic_asymmetric_ranges_and_groups(q, dt, group):
    """Other ranges and per-group: the same formulas (the composite above, anchored to torch's op for int8)."""
    shape = (11, 3, 384)
    x = asym_rows(shape, dt, "rng", q, dt, group)
    for kind, xv in row_views(x):
        got, s, zp = run_dynamic(xv, q, "per_group" if group else "per_token", group, asym=True)
        check_asym(got, s, zp, xv, q, group, f"asym {q} {dt} G={group} {kind}")
    if group:
        q2, s2, z2 = Q.dynamic_quantize_per_group_asymmetric(x, group, q)
    else:
        q2, s2, z2 = Q.dynamic_quantize_per_token_asymmetric(x, q)
    check_asym(q2, s2, z2, x, q, group, f"python asym {q} G={group}")


def test_dynamic_asymmetric_non_finite_rows():
    """inf / NaN rows follow the float formulas; NaN zero points and codes are written as 0 (documented)."""
    x = randn((4, 64), torch.float32, "asymnan")
    x[1, 5] = float("inf")
    x[2, 7] = float("nan")
    got, s, zp = run_dynamic(x, "uint8", "per_token", asym=True)
    _, sr, _ = asym_ref(x, "uint8")
    same_bytes(s.double(), sr, "non-finite rows: scales")
    assert torch.isinf(s[1]).all() and torch.isnan(s[2]).all()
    assert zp[2].item() == 0 and (got[2] == 0).all()
    check_asym(got[[0, 3]], s[[0, 3]], zp[[0, 3]], x[[0, 3]], "uint8", 0, "finite rows beside them")


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
def test_dynamic_backward_ste(dt):
    """quantize's STE with the forward's qparams: dy * 1[q_min <= rint(x / s) + zp <= q_max]; halved scales push
    the tails out of range."""
    x = randn((6, 256), dt, "dynbw", dt, scale=2.0)
    dy = randn((6, 256), dt, "dynbw-g", dt)
    _, s, zp = Q.dynamic_quantize_per_group_asymmetric(x, 64, torch.uint8)
    _, ss = Q.dynamic_quantize_per_token(x)
    cases = [("per_group", 64, s * 0.5, zp, "uint8", (0, 255)), ("per_group", 64, s, zp, "uint8", (0, 255)),
             ("per_token", 0, ss * 0.25, None, "int8", (-128, 127))]
    for gran, group, sc, z, q, (lo, hi) in cases:
        dx = Q.dynamic_quantize_backward(dy, x, sc, z, q, gran, group)
        rep = group if group else x.shape[-1]
        v = torch.round(x.float().double() / sc.repeat_interleave(rep, -1).double())
        if z is not None:
            v = v + z.repeat_interleave(rep, -1)
        mask = (v >= lo) & (v <= hi)
        same_bytes(dx, (dy.float() * mask.float()).to(dt), f"dynamic STE {gran} {q}")
        if sc is not s:
            assert not mask.all(), "degenerate: every element in range"


# ---- learnable per-group (LSQ) ----------------------------------------------------------------------------
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape,axis,group", [((64, 256), -1, 32), ((6, 40, 16), 1, 8), ((128, 96), 0, 16),
                                              ((4, 9000), -1, 9000), ((96, 40), 0, 3)])
def test_fake_quantize_learnable_per_group(dt, shape, axis, group):
    """torch._fake_quantize_learnable_per_channel_affine on x viewed as [groups, G] (each group a channel):
    forward and dx exact, dscale / dzero_point at a tolerance (sums), bit-identical run to run."""
    a = axis % len(shape)
    O, A, I = math.prod(shape[:a]), shape[a], math.prod(shape[a + 1:])
    sshape = list(shape)
    sshape[a] //= group

    def as_channels(t):  # [.., A, ..] -> [O * A/G * I, G], rows in the scales' order (o, g, i)
        return t.reshape(O, A // group, group, I).permute(0, 1, 3, 2).reshape(-1, group)

    def from_channels(t):
        return t.reshape(O, A // group, I, group).permute(0, 1, 3, 2).reshape(shape)

    x = randn(shape, dt, "lsqg", dt, shape, axis, scale=0.5)
    s0 = (torch.rand(sshape, generator=gen("lsqg-s", shape)) * 0.05 + 0.02).float().to(DEV)
    z0 = (torch.rand(sshape, generator=gen("lsqg-z", shape)) * 6 - 3).float().to(DEV)
    dy = randn(shape, dt, "lsqg-g", dt, shape)
    res = []
    for impl in ("torch", "baracuda", "baracuda"):
        xi = x.detach().clone().requires_grad_()
        si = s0.detach().clone().requires_grad_()
        zi = z0.detach().clone().requires_grad_()
        if impl == "torch":
            yc = torch._fake_quantize_learnable_per_channel_affine(as_channels(xi), si.reshape(-1), zi.reshape(-1), 0,
                                                                   -8, 7, 0.5)
            yc.backward(as_channels(dy))
            y = from_channels(yc.detach())
        else:
            y = Q.fake_quantize_learnable_per_group_affine(xi, si, zi, axis, group, -8, 7, 0.5)
            y.backward(dy)
        res.append((y.detach(), xi.grad, si.grad, zi.grad))
    (yr, dxr, dsr, dzr), (yb, dxb, dsb, dzb), (_, _, ds2, dz2) = res
    same_bytes(yb, yr, f"learnable per_group forward {dt} {shape} axis={axis}")
    same_bytes(dxb, dxr.to(dxb.dtype), "learnable per_group dx")
    assert dsb.shape == s0.shape and dzb.shape == z0.shape
    torch.testing.assert_close(dsb, dsr, rtol=1e-3, atol=1e-3 * max(1.0, dsr.abs().max().item()))
    torch.testing.assert_close(dzb, dzr, rtol=1e-3, atol=1e-3 * max(1.0, dzr.abs().max().item()))
    same_bytes(ds2, dsb, "learnable per_group dscale run to run")
    same_bytes(dz2, dzb, "learnable per_group dzero_point run to run")
    assert (dsr != 0).double().mean() > 0.5, "degenerate: dscale mostly zero"


# ---- STE backward of quantize / dequantize ----------------------------------------------------------------
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
def test_quantize_and_dequantize_backward(dt):
    x = randn((33, 70), dt, "ste", dt, scale=30.0)
    dy = randn((33, 70), dt, "ste-g", dt)
    dx = Q.quantize_backward(dy, x, 0.1, 100, torch.uint8)
    v = torch.round(x.float().double() / 0.1) + 100
    same_bytes(dx, (dy.float() * ((v >= 0) & (v <= 255)).float()).to(dt), "quantize STE")
    s = (torch.rand(33, 7, generator=gen("ste-s")) + 0.5).float().to(DEV)
    dq = Q.dequantize_backward(dy, s, "int4", granularity="per_group", axis=-1, group_size=10)
    same_bytes(dq, (dy.float() * s.repeat_interleave(10, 1)).to(dt), "dequantize STE")


# ---- W8A8 linear ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mnk", [(1, 256, 512), (129, 384, 1024), (512, 512, 4096)])
def test_quantized_linear(dt, mnk):
    m, n, k = mnk
    x = randn((m, k), dt, "w8a8x", dt, mnk)
    w = randn((n, k), dt, "w8a8w", dt, mnk, scale=0.05)
    b = randn((n,), dt, "w8a8b", dt, mnk)
    wq, ws = Q.dynamic_quantize_per_token(w)
    try:
        y = Q.quantized_linear(x, wq, ws.reshape(-1), b)
    except RuntimeError as e:
        if "int8 x int8 GEMM" in str(e):
            pytest.skip(f"GemmPlan has no int8 -> {dt} scaled variant yet: {e}")
        raise
    xq, xs = Q.dynamic_quantize_per_token(x)
    acc = xq.double() @ wq.double().t()  # exact int32 products
    ref = (acc * xs.double() * ws.reshape(1, -1).double() + b.double()).to(dt)
    torch.testing.assert_close(y, ref, rtol=1.6e-2, atol=1e-2)


def test_quantized_linear_has_no_backward():
    x = randn((4, 64), torch.bfloat16, "w8bw").requires_grad_()
    wq, ws = Q.dynamic_quantize_per_token(randn((8, 64), torch.bfloat16, "w8bww"))
    try:
        y = Q.quantized_linear(x, wq, ws.reshape(-1))
    except RuntimeError as e:
        if "int8 x int8 GEMM" in str(e):
            pytest.skip("GemmPlan has no int8 scaled variant yet")
        raise
    assert not y.requires_grad


# ---- W4A16 linear (int4 weight-only) ---------------------------------------------------------------------
def w4_case(n, k, group, wdt, zp, seed):
    """Random codes (the weight dtype's range), packed [n, k / 2]; scales [n, k / group]; zeros or None."""
    g = gen("w4", n, k, group, wdt, zp, *seed)
    lo, hi = RANGE[wdt]
    codes = torch.randint(lo, hi + 1, (n, k), generator=g).to(DEV)
    scales = (torch.rand(n, k // group, generator=g) * 0.02 + 0.002).float().to(DEV)
    zeros = torch.randint(lo, hi + 1, (n, k // group), generator=g).to(DEV) if zp else None
    return codes, pack4(codes), scales, zeros


def w4_ref(x, codes, scales, zeros, group, bias):
    """The upcast reference: W = (q - z) * s in float32 (torch), then x.float() @ W.T (+ bias) in float32. Also
    |x| @ |W|.T, the scale of the sum's rounding errors."""
    z = zeros.repeat_interleave(group, 1).float() if zeros is not None else 0.0
    w = (codes.float() - z) * scales.repeat_interleave(group, 1)
    ref = x.float() @ w.t()
    if bias is not None:
        ref = ref + bias.float()
    return ref, x.float().abs() @ w.abs().t()


def w4_check(y, ref, mag, dt, m, what):
    """Decode (m <= 16): float32 sums, one rounding to dt. GEMM path: the weights were rounded to dt too."""
    eps = 2.0 ** -8 if dt == torch.bfloat16 else 2.0 ** -11
    allowed = eps * ref.abs() + (1e-5 if m <= 16 else eps) * mag + 1e-6
    err = (y.float() - ref).abs()
    bad = (err > allowed).nonzero()
    assert bad.numel() == 0, (f"{what}: {bad.shape[0]} element(s) off, first {tuple(bad[0].tolist())}: "
                              f"got {y.float()[tuple(bad[0])].item()} want {ref[tuple(bad[0])].item()}")


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("wdt", ["uint4", "int4"])
@pytest.mark.parametrize("m", [1, 5, 16, 17, 64])
@pytest.mark.parametrize("nkg", [(4096, 4096, 128), (264, 512, 32), (200, 384, 384), (96, 320, 64), (72, 288, 96)])
@pytest.mark.parametrize("zp,with_bias", [(False, False), (True, True), (False, True)])
def test_w4a16_linear(dt, wdt, m, nkg, zp, with_bias):
    n, k, group = nkg
    codes, w, scales, zeros = w4_case(n, k, group, wdt, zp, (m, str(dt)))
    x = randn((m, k), dt, "w4x", dt, m, nkg)
    bias = randn((n,), dt, "w4b", dt, nkg) if with_bias else None
    y = Q.w4a16_linear(x, w, scales, zeros, group, bias, wdt)
    assert y.dtype == dt and y.shape == (m, n)
    ref, mag = w4_ref(x, codes, scales, zeros, group, bias)
    w4_check(y, ref, mag, dt, m, f"w4a16 {dt} {wdt} m={m} n,k,G={nkg} zp={zp} bias={with_bias}")


def test_w4a16_decode_is_deterministic_and_takes_views():
    n, k, group = 512, 14336, 128  # a long K: 448 steps over 8 warps
    codes, w, scales, zeros = w4_case(n, k, group, "uint4", True, ("det",))
    base = randn((k, 3), torch.bfloat16, "w4det")
    x = base.t()[:2]  # [2, k] with column stride 3: the Python layer copies it contiguous
    y1 = Q.w4a16_linear(x, w, scales, zeros, group)
    y2 = Q.w4a16_linear(x.contiguous(), w, scales, zeros, group)
    same_bytes(y1, y2, "w4a16 run to run")
    ref, mag = w4_ref(x, codes, scales, zeros, group, None)
    w4_check(y1, ref, mag, torch.bfloat16, 2, "w4a16 long K")
    x3 = randn((2, 3, k), torch.bfloat16, "w4b3")  # leading dims flatten into rows
    y3 = Q.w4a16_linear(x3, w, scales, zeros, group)
    assert y3.shape == (2, 3, n)
    ref3, mag3 = w4_ref(x3.reshape(6, k), codes, scales, zeros, group, None)
    w4_check(y3.reshape(6, n), ref3, mag3, torch.bfloat16, 6, "w4a16 3-D x")


def test_w4a16_matches_quantize_per_group():
    """The weight layout is quantize_per_group's (axis -1): quantize an nn.Linear weight, then run it."""
    n, k, group = 128, 256, 64
    wf = randn((n, k), torch.float32, "w4w", scale=0.05)
    s = wf.abs().reshape(n, k // group, group).amax(-1) / 7
    wq = Q.quantize_per_group(wf, s, None, group, -1, "int4")
    x = randn((3, k), torch.float16, "w4q")
    y = Q.w4a16_linear(x, wq, s, None, group, weight_dtype="int4")
    codes = torch.clamp(torch.round(wf.double() / s.repeat_interleave(group, 1).double()), -8, 7)
    ref, mag = w4_ref(x, codes, s, None, group, None)
    w4_check(y, ref, mag, torch.float16, 3, "w4a16 from quantize_per_group")


def test_w4a16_errors():
    codes, w, scales, _ = w4_case(64, 256, 128, "uint4", False, ("err",))
    x = randn((2, 256), torch.bfloat16, "w4e")
    with pytest.raises(RuntimeError, match="group_size expected a positive multiple of 32, got 48"):
        Q.w4a16_linear(x, w, scales, None, 48)
    with pytest.raises(RuntimeError, match="float16 or bfloat16"):
        Q.w4a16_linear(x.float(), w, scales)
    with pytest.raises(RuntimeError, match="scales"):
        Q.w4a16_linear(x, w, scales[:, :1])


# ---- errors ------------------------------------------------------------------------------------------------
def test_errors():
    x = randn((4, 10), torch.float32, "err")
    with pytest.raises(RuntimeError, match="group_size=4"):
        Q.quantize_per_group(x, torch.ones(4, 2, device=DEV), None, group_size=4, axis=-1, dtype="int8")
    with pytest.raises(RuntimeError, match="even"):
        Q.quantize_per_tensor(randn((4, 7), torch.float32, "err2"), 0.1, 0, "int4")
    with pytest.raises(RuntimeError, match="scale expected finite"):
        Q.quantize_per_tensor(x, 0.0, 0, torch.qint8)
    with pytest.raises(RuntimeError, match="scale expected finite"):
        Q.quantize_per_tensor(x, float("nan"), 0, torch.qint8)
    with pytest.raises(RuntimeError, match="zero_point expected in"):
        Q.quantize_per_tensor(x, 0.1, 300, torch.quint8)
    with pytest.raises(RuntimeError, match="quant_min"):
        Q.fake_quantize_per_tensor_affine(x, 0.1, 0, 10, 5)
    with pytest.raises(RuntimeError, match="q_max expected >= q_min"):
        Q._run("quantize", False, {"x": x, "out": torch.empty(4, 10, dtype=torch.int8, device=DEV)},
               {"q_dtype": "int8", "q_min": 5, "q_max": 1, "scale": 0.1, "zero_point": 3}, x.device)
    with pytest.raises(RuntimeError, match="last dim halved"):
        Q._run("quantize", False, {"x": x[:, :8], "out": torch.empty(4, 8, dtype=torch.uint8, device=DEV)},
               {"q_dtype": "int4", "scale": 0.1}, x.device)
    with pytest.raises(RuntimeError, match="shape\\[axis\\]=10.*group_size=4"):
        Q.dynamic_quantize_per_group(x, 4)
    with pytest.raises(RuntimeError, match="group_size expected even, got 5"):
        Q.dynamic_quantize_per_group(x, 5, "int4")
    with pytest.raises(RuntimeError, match="would clamp every negative value"):
        Q.dynamic_quantize_per_token(x, torch.uint8)
    with pytest.raises(RuntimeError, match="takes no zero point"):
        Q.dynamic_quantize_per_token_asymmetric(x, torch.float8_e4m3fn)


# ---- determinism / big tensors ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_past_2_31_elements():
    rows, n = (1 << 16) + 1, 1 << 15  # 2^31 + 2^15 elements
    try:
        x = torch.empty((rows, n), dtype=torch.bfloat16, device=DEV)
        x.normal_(generator=torch.Generator(device=DEV).manual_seed(7))
        s = (torch.rand(rows, device=DEV) * 0.02 + 0.01)
        q = Q.quantize_per_channel(x, s, None, 0, torch.int8)
        qd, sd = Q.dynamic_quantize_per_token(x)
        qg, sg, zg = Q.dynamic_quantize_per_group_asymmetric(x, 128, torch.uint8)
    except torch.cuda.OutOfMemoryError:
        pytest.skip("not enough GPU memory for a 2^31-element case")
    for r in (0, rows // 2, rows - 1):
        same_bytes(q[r], ref_quant(x[r], s[r], 0, -128, 127).to(torch.int8), f"big per_channel row {r}")
        qr, sr = dyn_ref(x[r:r + 1], 127.0)
        same_bytes(qd[r:r + 1], qr, f"big dynamic row {r}")
        same_bytes(sd[r:r + 1], sr, f"big dynamic scale {r}")
        check_asym(qg[r:r + 1], sg[r:r + 1], zg[r:r + 1], x[r:r + 1], "uint8", 128, f"big asym per_group row {r}")


def test_sku_strings():
    x = randn((16, 4096), torch.bfloat16, "sku")
    out = torch.empty_like(x, dtype=torch.int8)
    sc = torch.empty(16, 1, device=DEV)
    sku = _C.quant_sku("dynamic_quantize", False, {"x": Q.dl(x), "out": Q.dl(out), "scale_out": Q.dl(sc)},
                       {"q_dtype": "int8", "granularity": "per_token"}, True)
    assert "rows-registers-vec16" in sku, sku
    sc = torch.empty(16, 32, device=DEV)
    zp = torch.empty(16, 32, dtype=torch.int32, device=DEV)
    out = torch.empty_like(x, dtype=torch.uint8)
    sku = _C.quant_sku("dynamic_quantize", False, {"x": Q.dl(x), "out": Q.dl(out), "scale_out": Q.dl(sc),
                                                   "zero_point_out": Q.dl(zp)},
                       {"q_dtype": "uint8", "granularity": "per_group", "group_size": 128}, True)
    assert "rows-registers-vec16(tpr=4)" in sku and "int32 zero point" in sku, sku
    assert ROWS["quantize"]["torch"].startswith("torch.quantize_per_tensor")
    assert "group" in ROWS["dynamic_quantize"]["granularities"] and ROWS["dynamic_quantize"]["bw_dtypes"]
