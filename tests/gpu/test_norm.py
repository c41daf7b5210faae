"""GPU conformance of the softmax/normalization family (include/baracuda/ops/norm_ops.def) vs PyTorch.

Reference = torch on the same inputs upcast (f64 for f32/f64, f32 for f16/bf16), cast back;
tolerances = torch.testing's defaults per dtype times the row's ``tol`` (from ``_C.norm_ops()``),
times 2 for backward. Backward references take baracuda's own forward results where the
backward reads them (softmax's output), so the comparison isolates the backward arithmetic.
Row lengths 1, 7, 129, 4097, 65537 and 2^20; strided and non-innermost axes; empty batches;
determinism of the parameter gradients; poisoned outputs catch unwritten elements.
"""
import math
import zlib

import pytest


from gpu_skip import skip_unless_ready  # noqa: E402

skip_unless_ready('norm_ops')

import torch  # noqa: E402
import torch.nn.functional as tF  # noqa: E402

import baracuda.functional as F  # noqa: E402
from baracuda import _C  # noqa: E402
from baracuda._autograd import dl  # noqa: E402

ROWS = {r["name"]: r for r in _C.norm_ops()}
DEV = "cuda"
FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
UP = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float64,
      torch.float64: torch.float64}
BASE_TOL = {torch.float32: (1.3e-6, 1e-5), torch.float64: (1e-7, 1e-7), torch.float16: (1e-3, 1e-5),
            torch.bfloat16: (1.6e-2, 1e-5)}
SMALLEST = {torch.float16: 6e-8, torch.bfloat16: 1e-38, torch.float32: 1e-44, torch.float64: 1e-300}
LENGTHS = [1, 7, 129, 4097, 65537]


def tol(op, dt, bw=False):
    rtol, atol = BASE_TOL[dt]
    k = ROWS[op]["tol"] * (2.0 if bw else 1.0)
    return rtol * k, atol * k


def gen(*parts):
    return torch.Generator(device="cpu").manual_seed(zlib.crc32("/".join(map(str, parts)).encode()))


def randn(shape, dt, *seed, scale=1.0, shift=0.0):
    g = gen(*seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale + shift).to(dt).to(DEV)


def close(got, ref, rtol, atol, what):
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    assert got.dtype == ref.dtype, f"{what}: dtype {got.dtype} vs {ref.dtype}"
    torch.testing.assert_close(got, ref, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"{what}: {m}")


def close_cancelling(got, ref, terms, k, rtol, atol, what):
    """close() for a result that is a difference of terms which may cancel: element i may also be
    off by k * terms[i], where terms[i] is the sum of the magnitudes of the terms that make it
    (each carries its own rounding, so a result that cancels to ~0 keeps an absolute error of a
    few ulps of the terms, not of itself). ref in got's dtype, cast as for close() (an f16
    gradient of 1e12 is inf in both); terms in the reference's precision; NaN matches NaN."""
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    assert got.dtype == ref.dtype, f"{what}: dtype {got.dtype} vs {ref.dtype}"
    g, r = got.detach().double(), ref.detach().double()
    allowed = atol + rtol * r.abs() + k * terms.detach().double()
    ok = ((g - r).abs() <= allowed) | (g == r) | (g.isnan() & r.isnan())
    if not ok.all():
        excess = torch.where(ok, torch.zeros_like(g), (g - r).abs() / allowed)  # NaN (a NaN got) ranks first
        i = tuple(int(v) for v in torch.unravel_index(excess.flatten().argmax(), g.shape))
        raise AssertionError(f"{what}: {(~ok).sum().item()} / {ok.numel()} elements differ beyond the rounding of "
                             f"their terms; worst at {i}: got {g[i].item():.6g}, ref {r[i].item():.6g}, allowed "
                             f"{allowed[i].item():.3g} (terms {terms[i].item():.3g})")


def not_degenerate(ref, what):
    if ref.numel() > 8:
        frac = (ref != 0).double().mean().item()
        assert frac > 0.5, f"{what}: reference is mostly zeros ({frac:.2f} non-zero): degenerate test data"


def rows_for(n):
    """Few rows for long rows, more for short ones (and odd counts)."""
    return 2 if n >= 1 << 20 else (3 if n > 4096 else 33)


# ---- softmax / log_softmax -------------------------------------------------------------------------
def softmax_ref(op, x, dim):
    up = UP[x.dtype]
    fn = torch.softmax if op == "softmax" else torch.log_softmax
    return fn(x.to(up), dim).to(x.dtype)


def softmax_tol(op, dt, n):
    rtol, atol = tol(op, dt)
    if op in ("softmax", "gumbel_softmax"):  # outputs ~1/n: scale atol so it does not swamp them
        atol = max(atol / max(n, 1), 2 * SMALLEST[dt])
    return rtol, atol


def scaled_tol(op, dt, ref, bw=False):
    """tol(), with atol scaled by the reference's magnitude when it is below 1 (normalize with
    p < 1 or p = 0 gives outputs ~1e-10..1e-5, which an unscaled atol would swamp)."""
    rtol, atol = tol(op, dt, bw)
    mag = ref.detach().abs().max().item() if ref.numel() else 1.0
    return rtol, max(atol * min(1.0, mag), 2 * SMALLEST[dt])


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("n", LENGTHS + [1 << 20])
def test_softmax_forward(op, dt, n):
    if n == 1 << 20 and dt in (torch.float16, torch.float64):
        pytest.skip("2^20-element rows: f32 and bf16 cover the streaming path")
    x = randn((rows_for(n), n), dt, op, dt, n, scale=2.0)
    y = getattr(F, op)(x, dim=-1)
    ref = softmax_ref(op, x, -1)
    if n > 1:  # log_softmax of one element is 0
        not_degenerate(ref, op)
    close(y, ref, *softmax_tol(op, dt, n), f"{op} {dt} n={n}")


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("n", LENGTHS + [1 << 20])
def test_softmax_backward(op, dt, n):
    if n == 1 << 20 and dt in (torch.float16, torch.float64):
        pytest.skip("2^20-element rows: f32 and bf16 cover the streaming path")
    x = randn((rows_for(n), n), dt, op, "bw", dt, n, scale=2.0)
    dy = randn(x.shape, dt, op, "dy", dt, n)
    xr = x.clone().requires_grad_()
    y = getattr(F, op)(xr, dim=-1)
    y.backward(dy)
    up = UP[dt]
    bw = torch._softmax_backward_data if op == "softmax" else torch._log_softmax_backward_data
    ref = bw(dy.to(up), y.detach().to(up), 1, up).to(dt)
    if n > 1:  # one element: the gradient is 0
        not_degenerate(ref, op + "_backward")
    rtol, atol = tol(op, dt, bw=True)
    close(xr.grad, ref, rtol, atol, f"{op}_backward {dt} n={n}")
    direct = getattr(F, op + "_backward")(dy, y.detach(), -1)
    assert torch.equal(direct, xr.grad), "autograd and the direct backward call must run the same kernel"


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("case", ["dim0", "transposed", "sliced", "middle", "0d", "expanded_grad", "dim0_many",
                                  "middle_many"])
def test_softmax_strided(op, case):
    dt = torch.float32
    if case == "dim0":
        x, dim = randn((129, 33), dt, op, case), 0
    elif case == "dim0_many":  # >= 4096 rows over a non-innermost axis: the column mapping
        x, dim = randn((64, 8192), dt, op, case), 0
    elif case == "middle_many":
        x, dim = randn((4, 9, 4096), dt, op, case), 1
    elif case == "transposed":
        x, dim = randn((33, 129), dt, op, case).t(), -1
    elif case == "sliced":
        x, dim = randn((33, 258), dt, op, case)[:, ::2], -1
    elif case == "middle":
        x, dim = randn((4, 129, 5), dt, op, case), 1
    elif case == "0d":
        x, dim = randn((), dt, op, case), 0
    else:
        x, dim = randn((7, 65), dt, op, case), -1
    ref = softmax_ref(op, x, dim)
    close(getattr(F, op)(x, dim=dim), ref, *softmax_tol(op, dt, x.shape[dim] if x.dim() else 1), f"{op} {case}")
    if case == "0d":
        return
    # backward through autograd with a broadcast (stride-0) gradient, as sum().backward() gives
    xr = x.clone().requires_grad_()
    y = getattr(F, op)(xr, dim=dim)
    dy = torch.ones((), dtype=dt, device=DEV).expand(y.shape) if case == "expanded_grad" else torch.ones_like(y)
    y.backward(dy)
    bw = torch._softmax_backward_data if op == "softmax" else torch._log_softmax_backward_data
    ref_g = bw(dy.double(), y.detach().double(), dim if dim >= 0 else dim + max(x.dim(), 1), torch.float64).to(dt)
    close(xr.grad, ref_g, *tol(op, dt, bw=True), f"{op}_backward {case}")


def test_softmax_special_values():
    x = torch.tensor([[0.0, float("-inf"), 1.0], [float("-inf")] * 3, [float("nan"), 0.0, 1.0]], device=DEV)
    for op in ("softmax", "log_softmax"):
        close(getattr(F, op)(x, dim=-1), softmax_ref(op, x, -1), 1e-6, 1e-6, f"{op} special values")


def test_softmax_dtype_arg_and_errors():
    x = randn((4, 9), torch.float16, "dtype")
    close(F.softmax(x, dim=1, dtype=torch.float32), torch.softmax(x.float(), 1), 1.3e-6, 1e-6, "softmax dtype=")
    with pytest.raises(IndexError):
        F.softmax(x, dim=2)
    with pytest.raises(RuntimeError):
        F.softmax(torch.ones(3, 3, dtype=torch.int32, device=DEV), dim=1)


@pytest.mark.parametrize("shape", [(0, 64), (3, 0)])
def test_softmax_empty(shape):
    x = torch.empty(shape, device=DEV)
    assert F.softmax(x, dim=-1).shape == x.shape
    assert F.log_softmax(x, dim=0).shape == x.shape


@pytest.mark.sanitizer
def test_softmax_poisoned_output():
    x = randn((33, 4097), torch.bfloat16, "poison")
    y = torch.full_like(x, float("nan"))
    _C.norm("softmax", False, {"x": dl(x), "out": dl(y)}, -1, 1, 0.0, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    assert torch.isfinite(y.float()).all(), "softmax left elements unwritten"


# ---- layer_norm / rms_norm -------------------------------------------------------------------------
def norm_ref(op, x, shape, w, b, eps, residual=None):
    """Upcast reference with autograd: returns (y, h, leaves) where leaves are upcast tensors."""
    up = UP[x.dtype]
    xs = x if residual is None else (x + residual)  # torch's sum in the input dtype
    xu = xs.detach().to(up).requires_grad_()
    wu = w.detach().to(up).requires_grad_() if w is not None else None
    bu = b.detach().to(up).requires_grad_() if b is not None else None
    if op == "layer_norm":
        y = tF.layer_norm(xu, shape, wu, bu, eps)
    else:
        dims = tuple(range(x.dim() - len(shape), x.dim()))
        y = xu * torch.rsqrt(xu.pow(2).mean(dims, keepdim=True) + eps)
        if wu is not None:
            y = y * wu
    return y, xs, (xu, wu, bu)


AFFINE = ["none", "weight", "weight_bias", "mixed"]


def make_params(op, affine, dt, n, *seed):
    pdt = torch.float32 if affine == "mixed" else dt
    w = b = None
    if affine != "none":
        w = randn((n,), pdt, "w", *seed, scale=0.5, shift=1.0)
    if affine in ("weight_bias", "mixed") and op == "layer_norm":
        b = randn((n,), pdt, "b", *seed, scale=0.5)
    return w, b


def call_norm(op, x, shape, w, b, eps):
    if op == "layer_norm":
        return F.layer_norm(x, shape, w, b, eps)
    return F.rms_norm(x, shape, w, eps)


# LENGTHS are odd, so their rows take the scalar kernels; 64 and 4096 take the vectorized ones (one
# vector a thread; a CTA of 32 / 16 items a thread), which are instantiated per parameter dtype for
# the 16-bit forward (kParamF32: the "mixed" cases).
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("n", LENGTHS + [64, 4096, 1 << 20])
@pytest.mark.parametrize("affine", AFFINE)
def test_norm_forward_backward(op, dt, n, affine):
    if affine == "mixed" and dt not in (torch.float16, torch.bfloat16):
        pytest.skip("mixed precision: f16/bf16 inputs with f32 parameters")
    if n == 1 << 20 and (dt in (torch.float16, torch.float64) or affine == "none"):
        pytest.skip("2^20-element rows: f32 and bf16 with parameters cover the streaming path")
    eps = 1e-5 if op == "layer_norm" else 1e-6
    x = randn((rows_for(n), n), dt, op, dt, n, affine, scale=1.5, shift=0.3)
    w, b = make_params(op, affine, dt, n, op, dt, n)
    xr = x.clone().requires_grad_()
    wr = w.clone().requires_grad_() if w is not None else None
    br = b.clone().requires_grad_() if b is not None else None
    y = call_norm(op, xr, (n,), wr, br, eps)
    yref, _, (xu, wu, bu) = norm_ref(op, x, (n,), w, b, eps)
    assert y.dtype == dt
    rtol, atol = tol(op, dt)
    if not (op == "layer_norm" and n == 1 and b is None):
        not_degenerate(yref, op)
    close(y, yref.detach().to(dt), rtol, atol, f"{op} {dt} n={n} {affine}")

    dy = randn(x.shape, dt, op, "dy", dt, n)
    y.backward(dy)
    yref.backward(dy.to(yref.dtype))
    rtol, atol = tol(op, dt, bw=True)
    if n > 1:  # a row of one element has a zero input gradient
        close(xr.grad, xu.grad.to(dt), rtol, atol, f"{op}_backward dx {dt} n={n} {affine}")
    if wr is not None:
        gw_tol = (rtol, atol * rows_for(n))  # a sum over rows
        close(wr.grad, wu.grad.to(wr.dtype), *gw_tol, f"{op}_backward dweight {dt} n={n} {affine}")
    if br is not None:
        close(br.grad, bu.grad.to(br.dtype), rtol, atol * rows_for(n), f"{op}_backward dbias {dt} n={n} {affine}")


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_norm_statistics(op, dt):
    n = 4097
    x = randn((33, n), dt, "stats", op, dt, shift=0.5)
    xu = x.to(UP[dt])
    rstd_ref = torch.rsqrt((xu.var(-1, unbiased=False) if op == "layer_norm" else xu.pow(2).mean(-1)) + 1e-5)
    if op == "layer_norm":
        _, mean, rstd = F.layer_norm_stats(x, (n,), eps=1e-5)
        close(mean, xu.mean(-1).float(), 1e-5, 1e-6, "layer_norm mean")
    else:
        _, rstd = F.rms_norm_stats(x, (n,), eps=1e-5)
    assert rstd.dtype == torch.float32
    close(rstd, rstd_ref.float(), 1e-5, 1e-6, f"{op} rstd")


# Rows that fill every thread's share exactly (n = threads x items): layer_norm's one-reduction path
# (per-thread centred moments merged pairwise at equal counts, LayerNormFw::kFullRowPass) in sub-warp
# (n <= 512 for 16-bit), warp, CTA and 512-thread groups; 37 rows leave CTAs with idle groups. "offset":
# a mean 256 spreads above the values' spread (f32/f64 inputs): a merge that lost the centring (a sum
# of squares minus the squared sum) would be off by ~256^2 ulps in rstd, far outside the tolerance.
# "strided": every other column (the scalar variant; its short rows also take the path).
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("n", [8, 64, 256, 512, 1024, 8192, 16384])
@pytest.mark.parametrize("case", ["plain", "offset", "strided"])
def test_layer_norm_full_rows(dt, n, case):
    if case == "offset" and dt in (torch.float16, torch.bfloat16):
        pytest.skip("16-bit inputs cannot hold a small spread around a large offset")
    scale, shift = (0.25, 64.0) if case == "offset" else (1.5, 0.3)
    cols = 2 * n if case == "strided" else n
    x = randn((37, cols), dt, "full", dt, n, case, scale=scale, shift=shift)
    if case == "strided":
        x = x[:, ::2]
    w, b = make_params("layer_norm", "weight_bias", dt, n, "full", dt, n)
    y, mean, rstd = F.layer_norm_stats(x, (n,), w, b, eps=1e-5)
    xu = x.to(torch.float64)
    mean_ref, rstd_ref = xu.mean(-1), torch.rsqrt(xu.var(-1, unbiased=False) + 1e-5)
    st = torch.float64 if dt == torch.float64 else torch.float32
    srtol = 1e-12 if dt == torch.float64 else 1e-5
    close(mean, mean_ref.to(st), srtol, srtol * (shift + scale), f"layer_norm mean {dt} n={n} {case}")
    close(rstd, rstd_ref.to(st), srtol, 0.0, f"layer_norm rstd {dt} n={n} {case}")
    yref, _, _ = norm_ref("layer_norm", x, (n,), w, b, 1e-5)
    rtol, atol = tol("layer_norm", dt)
    if case == "offset":  # x - mean cancels: the math type's rounding of x and mean, times rstd
        eps_m = 2.0**-53 if dt == torch.float64 else 2.0**-24
        atol += 8 * eps_m * shift / scale * 2.5
    close(y, yref.detach().to(dt), rtol, atol, f"layer_norm {dt} n={n} {case}")


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("n", [129, 4096, 65537])
def test_norm_fused_residual(op, dt, n):
    x = randn((5, n), dt, "res", op, dt, n)
    r = randn((5, n), dt, "res2", op, dt, n)
    w, b = make_params(op, "weight_bias", dt, n, "res", op)
    xr, rr = x.clone().requires_grad_(), r.clone().requires_grad_()
    if op == "layer_norm":
        y, h = F.add_layer_norm(xr, rr, (n,), w, b, 1e-5)
    else:
        y, h = F.add_rms_norm(xr, rr, (n,), w, 1e-5)
    assert torch.equal(h, x + r), "the summed residual must equal torch's x + residual exactly"
    yref, _, (hu, _, _) = norm_ref(op, x, (n,), w, b, 1e-5, residual=r)
    close(y, yref.detach().to(dt), *tol(op, dt), f"add_{op} {dt} n={n}")
    dy = randn(x.shape, dt, "resdy", op, dt, n)
    dh = randn(x.shape, dt, "resdh", op, dt, n)
    torch.autograd.backward([y, h], [dy, dh])
    yref.backward(dy.to(yref.dtype))
    # torch's own graph rounds the norm's dx to dt before adding dh (in dt): so do we, and so does
    # the reference (an upcast sum would hold two roundings against one where the terms cancel).
    ref = (hu.grad.to(dt).to(hu.dtype) + dh.to(hu.dtype)).to(dt)
    rtol, atol = tol(op, dt, bw=True)
    close(xr.grad, ref, rtol, atol, f"add_{op} dx")
    assert torch.equal(xr.grad, rr.grad)


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("case", ["batch_inner", "batch_inner_many", "sliced", "two_dims", "two_dims_permuted"])
def test_norm_strided(op, case):
    dt = torch.float32
    if case == "batch_inner":  # rows are the innermost dim: the strided path
        x, shape = randn((64, 8), dt, op, case).t(), (64,)
    elif case == "batch_inner_many":  # >= 4096 such rows: the column mapping (forward)
        x, shape = randn((64, 4100), dt, op, case).t(), (64,)
    elif case == "sliced":
        x, shape = randn((9, 258), dt, op, case)[:, ::2], (129,)
    elif case == "two_dims":
        x, shape = randn((5, 6, 7), dt, op, case), (6, 7)
    else:  # normalized dims that do not merge: copied to contiguous by the Python layer
        x, shape = randn((5, 7, 6), dt, op, case).transpose(1, 2), (6, 7)
    n = math.prod(shape)
    w, b = make_params(op, "weight_bias", dt, n, op, case)
    w = w.reshape(shape)
    b = b.reshape(shape) if b is not None else None
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    y = call_norm(op, xr, shape, wr, b, 1e-5)
    yref, _, (xu, wu, _) = norm_ref(op, x, shape, w, b, 1e-5)
    close(y, yref.detach().to(dt), *tol(op, dt), f"{op} {case}")
    dy = randn(x.shape, dt, op, case, "dy")
    if case == "batch_inner_many":  # the same layout as x, so the backward's tensors all take the column mapping
        dy = dy.t().contiguous().t()
    y.backward(dy)
    yref.backward(dy.to(yref.dtype))
    rtol, atol = tol(op, dt, bw=True)
    close(xr.grad, xu.grad.to(dt), rtol, atol, f"{op}_backward {case} dx")
    close(wr.grad, wu.grad.to(dt), rtol, atol * 64 * (64 if case == "batch_inner_many" else 1),
          f"{op}_backward {case} dweight")
    if case == "batch_inner_many":  # backward without parameter gradients takes the column mapping too
        xr2 = x.clone().requires_grad_()
        call_norm(op, xr2, shape, w, b, 1e-5).backward(dy)
        close(xr2.grad, xu.grad.to(dt), rtol, atol, f"{op}_backward {case} dx (no dweight)")


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("n", [4096, 65537])
def test_norm_param_grads_deterministic(op, n):
    dt = torch.bfloat16
    x = randn((1031, n) if n == 4096 else (67, n), dt, "det", op, n)
    w, b = make_params(op, "mixed", dt, n, "det", op)
    dy = randn(x.shape, dt, "det-dy", op, n)
    grads = []
    for _ in range(3):
        wr = w.clone().requires_grad_()
        br = b.clone().requires_grad_() if b is not None else None
        call_norm(op, x, (n,), wr, br, 1e-5).backward(dy)
        grads.append((wr.grad.clone(), br.grad.clone() if br is not None else None))
    for g in grads[1:]:
        assert torch.equal(g[0], grads[0][0]), "dweight differs between runs"
        if g[1] is not None:
            assert torch.equal(g[1], grads[0][1]), "dbias differs between runs"


# The dense-rows backward (16-bit rows, n = 16 x the threads of a row, parameter gradients asked for:
# norm_kernel.cuh dense_bw_kernel): layer_norm's variant that loads the next row ahead at 128 / 256
# threads a row, the plain one at 512 (n = 8192) and for rms_norm. Rows: fewer than the 528
# partial-sum slots (3) and more (600: some slots sum two rows); rows strided (a slice of a wider
# tensor); layer_norm with a bias only (weight ones); f32 parameters. Against torch, the SKU, and
# bit-identical results on a second run.
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("n", [2048, 4096, 8192])
@pytest.mark.parametrize("case", ["rows3", "rows600", "strided", "bias_only", "mixed"])
def test_norm_dense_rows_backward(op, dt, n, case):
    if op == "rms_norm" and case == "bias_only":
        pytest.skip("rms_norm has no bias: without a weight it has no parameter gradient")
    rows = {"rows3": 3, "rows600": 600}.get(case, 37)
    cols = n + 64 if case == "strided" else n
    x = randn((rows, cols), dt, "dense", op, dt, n, case, scale=1.5, shift=0.3)[:, :n]
    dy = randn((rows, cols), dt, "dense-dy", op, dt, n, case)[:, :n]
    w, b = make_params(op, "mixed" if case == "mixed" else "weight_bias", dt, n, "dense", op, dt, n)
    if case == "bias_only":
        w = None
    eps = 1e-5
    if op == "layer_norm":
        _, mean, rstd = F.layer_norm_stats(x, (n,), w, b, eps=eps)
        run = lambda: F.layer_norm_backward(dy, x, (n,), mean, rstd, w, (True, w is not None, True))  # noqa: E731
    else:
        mean = None
        _, rstd = F.rms_norm_stats(x, (n,), w, eps=eps)
        run = lambda: F.rms_norm_backward(dy, x, (n,), rstd, w, (True, True)) + (None,)  # noqa: E731
    dx, dw, db = run()
    yref, _, (xu, wu, bu) = norm_ref(op, x, (n,), w, b, eps)
    yref.backward(dy.to(yref.dtype))
    rtol, atol = tol(op, dt, bw=True)
    what = f"{op}_backward {dt} n={n} {case}"
    close(dx, xu.grad.to(dt), rtol, atol, f"{what} dx")
    if w is not None:
        close(dw, wu.grad.to(w.dtype), rtol, atol * rows, f"{what} dweight")
    if b is not None:
        close(db, bu.grad.to(b.dtype), rtol, atol * rows, f"{what} dbias")
    again = run()
    for got, first, name in zip(again, (dx, dw, db), ("dx", "dweight", "dbias")):
        assert first is None or torch.equal(got, first), f"{what}: {name} differs between runs"
    tensors = {"dy": dl(dy), "x": dl(x), "rstd": dl(rstd), "out": dl(dx)}
    for role, t in (("mean", mean), ("weight", w), ("dweight", dw), ("dbias", db)):
        if t is not None:
            tensors[role] = dl(t)
    layout = _C.norm_sku(op, True, tensors, -1, 1, eps, True, {}).split("layout=")[-1]
    want = "cta-dense-rows-ahead-vec16" if op == "layer_norm" and n <= 4096 else "cta-dense-rows-vec16"
    assert layout == want, f"{what}: layout {layout}, expected {want}"


# ---- cluster rows (rows past one CTA's registers, sm_90+) ------------------------------------------
# 16-bit/f32 forward rows hold 512 x 32 elements a CTA and backward rows 512 x 16, so these lengths
# take clusters of 2 / 4 / 8 / 16 CTAs holding the row (fw 16385 -> 2, 40000 -> 4, 128256 -> 8;
# bw 16385 -> 4, 40000 -> 8, 128256 -> 16) and 300000 streams through 16 CTAs. 19 rows: more
# than the backward's 16-32 parameter-gradient slots, so a cluster sums several rows.
CLUSTER_LENGTHS = [16385, 40000, 128256, 300000]


def _is_hopper():
    return torch.cuda.get_device_capability()[0] >= 9


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "layer_norm", "rms_norm"])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32], ids=["bfloat16", "float32"])
@pytest.mark.parametrize("n", CLUSTER_LENGTHS)
def test_cluster_rows(op, dt, n):
    rows = 19
    x = randn((rows, n), dt, "cl", op, dt, n, scale=1.5, shift=0.3)
    dy = randn(x.shape, dt, "cl-dy", op, dt, n)
    xr = x.clone().requires_grad_()
    if op in ("softmax", "log_softmax"):
        y = getattr(F, op)(xr, dim=-1)
        close(y, softmax_ref(op, x, -1), *softmax_tol(op, dt, n), f"{op} {dt} n={n}")
        y.backward(dy)
        up = UP[dt]  # the reference backward reads our forward's output, as test_softmax_backward
        bw = torch._softmax_backward_data if op == "softmax" else torch._log_softmax_backward_data
        ref = bw(dy.to(up), y.detach().to(up), 1, up).to(dt)
        close(xr.grad, ref, *tol(op, dt, bw=True), f"{op}_backward {dt} n={n}")
        tensors = {"x": dl(x), "out": dl(y.detach())}
    else:
        w, b = make_params(op, "weight_bias", dt, n, "cl", op, dt, n)
        wr = w.clone().requires_grad_()
        br = b.clone().requires_grad_() if b is not None else None
        y = call_norm(op, xr, (n,), wr, br, 1e-5)
        yref, _, (xu, wu, bu) = norm_ref(op, x, (n,), w, b, 1e-5)
        rtol, atol = tol(op, dt)
        close(y, yref.detach().to(dt), rtol, atol, f"{op} {dt} n={n}")
        y.backward(dy)
        yref.backward(dy.to(yref.dtype))
        rtol, atol = tol(op, dt, bw=True)
        close(xr.grad, xu.grad.to(dt), rtol, atol, f"{op}_backward dx {dt} n={n}")
        close(wr.grad, wu.grad.to(dt), rtol, atol * rows, f"{op}_backward dweight {dt} n={n}")
        if br is not None:
            close(br.grad, bu.grad.to(dt), rtol, atol * rows, f"{op}_backward dbias {dt} n={n}")
        # Bit-identical parameter gradients on a second run (the fixed slot partition).
        wr2 = w.clone().requires_grad_()
        br2 = b.clone().requires_grad_() if b is not None else None
        call_norm(op, x.clone().requires_grad_(), (n,), wr2, br2, 1e-5).backward(dy)
        assert torch.equal(wr2.grad, wr.grad), f"{op} n={n}: dweight differs between runs"
        if br is not None:
            assert torch.equal(br2.grad, br.grad), f"{op} n={n}: dbias differs between runs"
        tensors = {"x": dl(x), "weight": dl(w), "out": dl(y.detach())}
        if b is not None:
            tensors["bias"] = dl(b)
    layout = _C.norm_sku(op, False, tensors, -1, 1, 1e-5, True, {}).split("layout=")[-1]
    if _is_hopper():
        assert layout.startswith("cluster-"), f"{op} n={n}: expected the cluster-rows variant, got {layout}"


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32], ids=["bfloat16", "float32"])
def test_streamed_rows_many(op, dt):
    """More than 256 rows past one CTA's registers: softmax / log_softmax stream each row through
    one CTA (faster there than cluster rows, plan.cpp), forward and backward."""
    n = 20000
    x = randn((300, n), dt, "many", op, dt, scale=2.0)
    dy = randn(x.shape, dt, "many-dy", op, dt)
    xr = x.clone().requires_grad_()
    y = getattr(F, op)(xr, dim=-1)
    close(y, softmax_ref(op, x, -1), *softmax_tol(op, dt, n), f"{op} {dt} many rows")
    y.backward(dy)
    up = UP[dt]
    bw = torch._softmax_backward_data if op == "softmax" else torch._log_softmax_backward_data
    close(xr.grad, bw(dy.to(up), y.detach().to(up), 1, up).to(dt), *tol(op, dt, bw=True), f"{op}_backward many rows")
    layout = _C.norm_sku(op, False, {"x": dl(x), "out": dl(y.detach())}, -1, 1, 1e-5, True, {}).split("layout=")[-1]
    assert layout == "cta-streaming-vec16", layout


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_norm_empty_batch(op):
    x = torch.empty((0, 64), device=DEV, requires_grad=True)
    w = torch.ones(64, device=DEV, requires_grad=True)
    y = call_norm(op, x, (64,), w, None, 1e-5)
    assert y.shape == (0, 64)
    y.sum().backward()
    assert torch.equal(w.grad, torch.zeros_like(w)), "dweight of an empty batch is zero (torch)"


def test_norm_errors():
    x = randn((4, 16), torch.float32, "err")
    with pytest.raises(RuntimeError, match="weight"):
        F.layer_norm(x, (16,), torch.ones(15, device=DEV))
    with pytest.raises(RuntimeError, match="normalized_shape"):
        F.layer_norm(x, (8,))
    with pytest.raises(RuntimeError, match="eps"):
        F.layer_norm(x, (16,), eps=float("nan"))
    with pytest.raises(RuntimeError, match="eps"):
        F.rms_norm(x, (16,), eps=float("inf"))
    with pytest.raises(RuntimeError, match="normalized_shape"):
        F.rms_norm(x, ())


def test_norm_rms_default_eps():
    x = randn((3, 33), torch.bfloat16, "eps")
    ref, _, _ = norm_ref("rms_norm", x, (33,), None, None, torch.finfo(torch.bfloat16).eps)
    close(F.rms_norm(x, (33,)), ref.detach().to(x.dtype), *tol("rms_norm", x.dtype), "rms_norm eps=None")


# ---- masked softmax --------------------------------------------------------------------------------
def mask_bits(shape, *seed):
    """30% of the elements excluded; mshape "row" (seed[2]) excludes one whole row. Returns the
    bits on the device and the generator (the additive masks draw their values from it next)."""
    g = gen(*seed)
    bits = torch.rand(shape, generator=g) < 0.3
    if seed[2] == "row":  # whole rows excluded
        bits = torch.zeros(shape, dtype=torch.bool)
        bits[0, 1, 2, 0] = True
    return bits.to(DEV), g


@pytest.mark.parametrize("kind", ["bool", "additive"])
@pytest.mark.parametrize("mshape", ["full", "key_padding", "row", "col"])
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("n", [7, 129, 4096, 20000])
def test_masked_softmax(kind, mshape, dt, n):
    B, H, S = 2, 3, 5  # x [B, H, S, n], softmax over n
    x = randn((B, H, S, n), dt, "mask", kind, mshape, n, scale=2.0)
    shape = {"full": (B, H, S, n), "key_padding": (B, 1, 1, n), "row": (B, H, S, 1), "col": (n,)}[mshape]
    bits, g = mask_bits(shape, "maskbits", kind, mshape, n)
    if kind == "bool":
        mask = bits
        z = x.to(UP[dt]).masked_fill(bits, float("-inf"))
    else:
        mask = torch.where(bits, float("-inf"), torch.randn(shape, generator=g).to(DEV)).to(dt)
        z = x.to(UP[dt]) + mask.to(UP[dt])
    ref = torch.softmax(z, -1)
    if kind == "bool":  # torch._masked_softmax: rows with every element excluded give 0
        ref = torch.nan_to_num(ref, nan=0.0)
    ref = ref.to(dt)
    xr = x.clone().requires_grad_()
    y = F.masked_softmax(xr, mask, dim=-1)
    close(y, ref, *softmax_tol("softmax", dt, n), f"masked_softmax {kind} {mshape} {dt} n={n}")
    dy = randn(x.shape, dt, "maskdy", kind, mshape, n)
    y.backward(dy)
    up = UP[dt]
    gref = torch._softmax_backward_data(dy.to(up), y.detach().to(up), 3, up).to(dt)
    close(xr.grad, gref, *tol("softmax", dt, bw=True), f"masked_softmax backward {kind} {mshape}")
    if kind == "bool":
        assert torch.all(xr.grad.masked_select(bits.expand(x.shape)) == 0), "excluded elements get no gradient"


@pytest.mark.parametrize("kind", ["bool", "additive"])
@pytest.mark.parametrize("mshape", ["full", "key_padding", "row"])
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16, torch.float16], ids=["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("n", [7, 129, 4096, 20000])
def test_masked_log_softmax(kind, mshape, dt, n):
    """Against torch's log_softmax of the masked input, autograd included: a bool mask is
    masked_fill(mask, -inf) (excluded elements get no gradient); a row with every element excluded
    gives -inf (the log of masked_softmax's zeros) where torch gives NaN, and a zero gradient as
    torch's masked_fill backward does. An additive mask is input + mask."""
    B, H, S = 2, 3, 5
    x = randn((B, H, S, n), dt, "lmask", kind, mshape, n, scale=2.0)
    shape = {"full": (B, H, S, n), "key_padding": (B, 1, 1, n), "row": (B, H, S, 1)}[mshape]
    bits, g = mask_bits(shape, "lmaskbits", kind, mshape, n)
    up = UP[dt]
    xu = x.to(up).requires_grad_()
    if kind == "bool":
        mask = bits
        z = xu.masked_fill(bits, float("-inf"))
    else:
        mask = torch.where(bits, float("-inf"), torch.randn(shape, generator=g).to(DEV)).to(dt)
        z = xu + mask.to(up)
    ref = torch.log_softmax(z, -1)
    dy = randn(x.shape, dt, "lmaskdy", kind, mshape, n)
    ref.backward(dy.to(up))
    ref = ref.detach()
    if kind == "bool":
        ref = torch.nan_to_num(ref, nan=float("-inf"))  # all excluded: -inf, not torch's NaN
    xr = x.clone().requires_grad_()
    y = F.masked_log_softmax(xr, mask, dim=-1)
    close(y, ref.to(dt), *softmax_tol("log_softmax", dt, n), f"masked_log_softmax {kind} {mshape} {dt} n={n}")
    y.backward(dy)
    # torch's own 16-bit autograd differentiates from the rounded output, as ours does: the
    # reference gradient is torch's log_softmax backward on our y (upcast), masked as autograd of
    # masked_fill masks it. For f32 it is also checked against autograd of the masked input.
    gref = torch._log_softmax_backward_data(dy.to(up), y.detach().to(up), 3, up)
    if kind == "bool":
        assert torch.all(xr.grad.masked_select(bits.expand(x.shape)) == 0), "excluded elements get no gradient"
        gref = gref.masked_fill(bits, 0.0)
    close(xr.grad, gref.to(dt), *tol("log_softmax", dt, bw=True), f"masked_log_softmax backward {kind} {mshape}")
    if dt == torch.float32:
        close(xr.grad, xu.grad.to(dt), *tol("log_softmax", dt, bw=True), f"masked_log_softmax autograd {kind} {mshape}")


def test_masked_softmax_errors():
    x = randn((4, 8), torch.float32, "maskerr")
    with pytest.raises(RuntimeError, match="mask"):
        F.masked_softmax(x, torch.zeros((3, 8), dtype=torch.bool, device=DEV))
    with pytest.raises(RuntimeError, match="mask"):
        F.masked_softmax(x, torch.zeros((2, 4, 8), dtype=torch.bool, device=DEV))


@pytest.mark.sanitizer
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("n", [7, 4096, 20000])
def test_norm_poisoned_outputs(op, n):
    """Every output element (y, stats, dx, dweight, dbias) is written: outputs start as NaN."""
    dt = torch.bfloat16
    rows = 600 if n == 7 else 5  # 600 rows: more rows than parameter-gradient slots
    x = randn((rows, n), dt, "poison", op, n)
    w = randn((n,), torch.float32, "poison-w", op, n, shift=1.0)
    b = randn((n,), torch.float32, "poison-b", op, n) if op == "layer_norm" else None
    nan = float("nan")
    y = torch.full_like(x, nan)
    mean = torch.full((rows,), nan, device=DEV) if op == "layer_norm" else None
    rstd = torch.full((rows,), nan, device=DEV)
    stream = torch.cuda.current_stream().cuda_stream
    fw = {"x": x, "weight": w, "bias": b, "out": y, "save_mean": mean, "save_rstd": rstd}
    _C.norm(op, False, {k: dl(v) for k, v in fw.items() if v is not None}, -1, 1, 1e-5, stream)
    dx = torch.full_like(x, nan)
    dw = torch.full_like(w, nan)
    db = torch.full_like(b, nan) if b is not None else None
    bw = {"dy": torch.ones_like(x), "x": x, "mean": mean, "rstd": rstd, "weight": w, "out": dx, "dweight": dw,
          "dbias": db}
    bw = {k: v for k, v in bw.items() if v is not None}
    nws = _C.norm_workspace_size(op, True, {k: dl(v) for k, v in bw.items()}, -1, 1, 1e-5)  # capsules: single use
    ws = torch.full((nws,), 255, dtype=torch.uint8, device=DEV)  # NaN-ish garbage in the partial sums
    _C.norm(op, True, {k: dl(v) for k, v in bw.items()}, -1, 1, 1e-5, stream, dl(ws))
    torch.cuda.synchronize()
    for name, t in (("y", y), ("mean", mean), ("rstd", rstd), ("dx", dx), ("dweight", dw), ("dbias", db)):
        if t is not None:
            assert torch.isfinite(t.float()).all(), f"{op} n={n}: {name} has unwritten (NaN) elements"


# ---- normalize ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dim", [-1, 0])
def test_normalize(dt, n, dim):
    rows = rows_for(n) if dim == -1 else 9
    shape = (rows, n) if dim == -1 else (n, rows)
    x = randn(shape, dt, "normalize", dt, n, dim)
    if dim == -1:
        x[0] = 0  # a zero row: the norm is clamped to eps
    xr = x.clone().requires_grad_()
    y = F.normalize(xr, dim=dim)
    up = UP[dt]
    xu = x.detach().to(up).requires_grad_()
    yref = tF.normalize(xu, dim=dim)
    rtol, atol = tol("normalize", dt)
    close(y, yref.detach().to(dt), rtol, atol, f"normalize {dt} n={n} dim={dim}")
    dy = randn(shape, dt, "normalize-dy", dt, n, dim)
    y.backward(dy)
    yref.backward(dy.to(up))
    rtol, atol = tol("normalize", dt, bw=True)
    close(xr.grad, xu.grad.to(dt), rtol, atol, f"normalize backward {dt} n={n} dim={dim}")


def normalize_bw_terms(xu, dyu, p, dim, eps=1e-12):
    """|dy / d| + |the norm's term| of F.normalize's gradient, elementwise (d = max(||x||_p, eps)):
    dx = dy / d - [||x|| >= eps] sum(dy x) / d^2 * d||x||/dx. The two cancel wherever the norm is
    dominated by the element itself: exactly (in exact arithmetic) for a single element along the
    dim, where y = sign(x) is constant; torch's own f32 result there is 1-2 ulps of dy / d, not 0
    (fl(dy / d) - fl(dy fl(fl(x / d) / d)) does not cancel), its f64 reference ~1e-16."""
    d = torch.linalg.vector_norm(xu.detach(), p, dim, keepdim=True).clamp_min(eps)
    first = dyu / d
    return first.abs() + (xu.grad - first).abs()


def normalize_cancel_tol(dt, p):
    """Ulps of the compute precision (f32 for 16-bit dtypes, whose inputs are exact in it) that the
    cancelling terms carry: the roundings of dy / d, sum(dy x) / d^2 and sign(x) (|x| / N)^(p-1),
    and for p not in (0, 1, inf) the pow errors of N = (sum |x|^p)^(1/p), which the cancellation
    scales by p (first GPU run, n = 1: ours up to 13 ulps of dy / d at p = 3 in bf16, torch's f32
    on the CPU up to 4)."""
    u = 2.0 ** -53 if dt == torch.float64 else 2.0 ** -24
    pe = 1.0 if p in (0.0, 1.0) or math.isinf(p) else p
    return 16 * (2 + pe) * u


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dim", [-1, 0])
@pytest.mark.parametrize("p", [1.0, 3.0, 0.5, 1.5, 0.0, math.inf])
def test_normalize_p(dt, n, dim, p):
    """Any p vs F.normalize (upcast), forward and torch's backward (p = inf splits the gradient
    over tied maxima, which row 1 has; row 0 is zero: the norm is clamped to eps). The backward
    may also be off by a few ulps of its cancelling terms (normalize_bw_terms): n = 1 along dim 0
    is 0 in exact arithmetic and rounding noise of the size of dy / d in torch and here alike."""
    rows = rows_for(n) if dim == -1 else 9
    shape = (rows, n) if dim == -1 else (n, rows)
    x = randn(shape, dt, "normalize_p", dt, n, dim, p)
    if dim == -1:
        x[0] = 0
        if n >= 3:
            x[1, 0], x[1, -1] = 3.0, -3.0  # |x| ties at the max
    xr = x.clone().requires_grad_()
    y = F.normalize(xr, p=p, dim=dim)
    up = UP[dt]
    xu = x.detach().to(up).requires_grad_()
    yref = tF.normalize(xu, p=p, dim=dim)
    close(y, yref.detach().to(dt), *scaled_tol("normalize", dt, yref), f"normalize p={p} {dt} n={n} dim={dim}")
    dy = randn(shape, dt, "normalize_p-dy", dt, n, dim, p)
    y.backward(dy)
    yref.backward(dy.to(up))
    close_cancelling(xr.grad, xu.grad.to(dt), normalize_bw_terms(xu, dy.to(up), p, dim), normalize_cancel_tol(dt, p),
                     *scaled_tol("normalize", dt, xu.grad, bw=True), f"normalize p={p} backward {dt} n={n} dim={dim}")


@pytest.mark.parametrize("p", [1.0, 3.0, math.inf])
@pytest.mark.parametrize("case", ["transposed", "sliced", "middle_many", "empty"])
def test_normalize_p_strided(p, case):
    dt = torch.float32
    if case == "transposed":
        x, dim = randn((33, 129), dt, "np", case, p).t(), -1
    elif case == "sliced":
        x, dim = randn((33, 258), dt, "np", case, p)[:, ::2], -1
    elif case == "middle_many":  # >= 4096 rows over a middle axis: the column mapping
        x, dim = randn((4, 9, 4096), dt, "np", case, p), 1
    else:
        x, dim = torch.empty((0, 7), device=DEV), 1
    xr = x.clone().requires_grad_()
    y = F.normalize(xr, p=p, dim=dim)
    xu = x.detach().double().requires_grad_()
    yref = tF.normalize(xu, p=p, dim=dim)
    close(y, yref.detach().to(dt), *tol("normalize", dt), f"normalize p={p} {case}")
    dy = torch.ones_like(y) if case != "sliced" else torch.ones((), device=DEV).expand(y.shape)
    y.backward(dy)
    yref.backward(dy.double())
    close(xr.grad, xu.grad.to(dt), *tol("normalize", dt, bw=True), f"normalize p={p} backward {case}")


def test_normalize_errors():
    x = randn((4, 8), torch.float32, "normerr")
    with pytest.raises(RuntimeError, match="p expected >= 0"):
        F.normalize(x, p=-1.0)
    with pytest.raises(RuntimeError, match="p expected >= 0"):
        F.normalize(x, p=float("nan"))
    with pytest.raises(IndexError):
        F.normalize(x, dim=2)


# ---- sparsemax ---------------------------------------------------------------------------------------
def sparsemax_ref(x, dim):
    """Sort-based sparsemax (Martins & Astudillo 2016) in float64 with autograd: the support is the
    top k with 1 + k z_(k) > sum_{i<=k} z_(i); tau = (sum of the support - 1) / k; y = z - tau
    strictly above tau (torch.where, so the gradient mask is z > tau). Finite rows only: k = 1
    always qualifies in exact arithmetic, but 1 + z > z fails where z >= 2^53 (and for NaN), and
    k = 0 would gather index -1 (a device-side assert on CUDA that poisons the context), so k is
    clamped to 1 there."""
    z = x.movedim(dim, -1)
    n = z.shape[-1]
    zs, _ = torch.sort(z, dim=-1, descending=True)
    cs = zs.cumsum(-1)
    k = torch.arange(1, n + 1, device=z.device, dtype=z.dtype)
    ks = (1 + k * zs > cs).sum(-1, keepdim=True).clamp_min(1)
    tau = (cs.gather(-1, ks - 1) - 1) / ks.to(z.dtype)
    y = torch.where(z > tau, z - tau, torch.zeros_like(z))
    return y.movedim(-1, dim)


def sparsemax_grad_on(support, dy, dim):
    """sparsemax's vector-Jacobian product on a given support (Martins & Astudillo 2016, eq. 14),
    in float64: dy minus its mean over the support, on the support; 0 off it."""
    s = support.to(torch.float64)
    d = dy.to(torch.float64)
    mean = (d * s).sum(dim, keepdim=True) / s.sum(dim, keepdim=True).clamp_min(1)
    return (d - mean) * s


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("spread", ["dense", "sparse"])
def test_sparsemax(dt, n, spread):
    """dense: x ~ N(0, 1/n^2), about 80% of each row in the support (the degenerate-data check
    applies); sparse: x ~ N(0, 1), a handful of elements in it.

    The backward reads the stored output, so its support is {y > 0} of y as rounded to dt: an
    element whose x - tau is below half the dtype's smallest positive value stores 0 and is
    outside it (f16 dense rows of 65537: y ~ 2e-5 is subnormal in f16, and ~50 elements a row
    lie within 2^-25 above tau), which moves the support's mean of dy for every other element.
    Where the supports differ (only at elements the forward check allows to be 0), the
    reference is the same Jacobian on the stored support."""
    scale = 1.0 / n if spread == "dense" else 1.0
    x = randn((rows_for(n), n), dt, "sparsemax", dt, n, spread, scale=scale)
    xr = x.clone().requires_grad_()
    y = F.sparsemax(xr, dim=-1)
    xu = x.detach().double().requires_grad_()
    yref = sparsemax_ref(xu, -1)
    if spread == "dense" and n > 1:
        not_degenerate(yref, "sparsemax")
    rtol, atol = tol("sparsemax", dt)
    fw_atol = max(atol * scale, 2 * SMALLEST[dt])
    close(y, yref.detach().to(dt), rtol, fw_atol, f"sparsemax {dt} n={n} {spread}")
    assert torch.allclose(y.double().sum(-1), torch.ones(x.shape[0], dtype=torch.float64, device=DEV),
                          atol=1e-2 if dt in (torch.float16, torch.bfloat16) else 1e-5), "rows must sum to 1"
    dy = randn(x.shape, dt, "sparsemax-dy", dt, n, spread)
    y.backward(dy)
    yref.backward(dy.double())
    rtol, atol = tol("sparsemax", dt, bw=True)
    if n > 1:
        stored = y.detach() > 0
        flip = stored != (yref.detach() > 0)
        assert torch.all(yref.detach()[flip] <= fw_atol), \
            f"sparsemax {dt} n={n} {spread}: the support differs from the reference's beyond the forward's rounding"
        ref = sparsemax_grad_on(stored, dy, -1) if flip.any() else xu.grad
        close(xr.grad, ref.to(dt), rtol, atol, f"sparsemax backward {dt} n={n} {spread}")
    direct = F.sparsemax(x, dim=-1)
    assert torch.equal(direct, y.detach()), "no-grad and autograd forwards run the same kernel"


@pytest.mark.parametrize("case", ["dim0", "transposed", "sliced", "middle", "middle_many", "0d", "expanded_grad"])
def test_sparsemax_strided(case):
    dt = torch.float32
    if case == "dim0":
        x, dim = randn((129, 33), dt, "sm", case, scale=0.01), 0
    elif case == "transposed":
        x, dim = randn((33, 129), dt, "sm", case, scale=0.01).t(), -1
    elif case == "sliced":
        x, dim = randn((33, 258), dt, "sm", case, scale=0.01)[:, ::2], -1
    elif case == "middle":
        x, dim = randn((4, 129, 5), dt, "sm", case, scale=0.01), 1
    elif case == "middle_many":  # >= 4096 rows over a middle axis: the column mapping
        x, dim = randn((4, 9, 4096), dt, "sm", case, scale=0.1), 1
    elif case == "0d":
        x, dim = randn((), dt, "sm", case), 0
    else:
        x, dim = randn((7, 65), dt, "sm", case, scale=0.02), -1
    xr = x.clone().requires_grad_()
    y = F.sparsemax(xr, dim=dim)
    xu = x.detach().double().requires_grad_()
    yref = sparsemax_ref(xu.reshape(1) if case == "0d" else xu, 0 if case == "0d" else dim)
    yref = yref.reshape(x.shape)
    close(y, yref.detach().to(dt), *tol("sparsemax", dt), f"sparsemax {case}")
    if case == "0d":
        return
    dy = torch.ones((), dtype=dt, device=DEV).expand(y.shape) if case == "expanded_grad" else \
        randn(y.shape, dt, "sm-dy", case)
    y.backward(dy)
    yref.backward(dy.double())
    close(xr.grad, xu.grad.to(dt), *tol("sparsemax", dt, bw=True), f"sparsemax backward {case}")


def test_sparsemax_special_values():
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[0.5, -inf, 0.2, 0.4], [nan, 0.0, 1.0, 2.0], [0.3, 0.3, 0.3, 0.3], [1.0, inf, 0.0, 0.0],
                      [3.0, 0.0, -1.0, 2.5]], device=DEV)
    y = F.sparsemax(x, dim=-1)
    finite = [0, 2, 4]  # rows 1 and 3 (NaN, +inf) give NaN: the sort-based reference has no support there
    ref = torch.full_like(x, nan, dtype=torch.float64)
    ref[finite] = sparsemax_ref(x[finite].double().clamp_min(-1e300), -1)  # -inf: excluded
    close(y, ref.float(), 1e-6, 1e-6, "sparsemax special values")  # row 2: ties share the mass (0.25 each)


def test_sparsemax_empty_and_errors():
    for shape, dim in (((0, 64), -1), ((3, 0), -1), ((3, 0), 0)):
        x = torch.empty(shape, device=DEV, requires_grad=True)
        y = F.sparsemax(x, dim=dim)
        assert y.shape == x.shape
        y.sum().backward()
        assert x.grad.shape == x.shape
    with pytest.raises(IndexError):
        F.sparsemax(torch.ones(3, 4, device=DEV), dim=2)
    with pytest.raises(RuntimeError):
        F.sparsemax(torch.ones(3, 4, dtype=torch.int32, device=DEV))


# ---- gumbel_softmax ----------------------------------------------------------------------------------
def gumbel_noise(shape, dt, *seed):
    """torch's noise: -log(Exponential(1)), drawn on the CPU from a seeded generator."""
    e = torch.empty(shape, dtype=torch.float64).exponential_(generator=gen("gumbel-noise", *seed))
    return (-e.log()).to(dt).to(DEV)


def gumbel_ref(x, g, tau, hard, dim):
    """torch.nn.functional.gumbel_softmax's formula with the given noise, upcast, with autograd:
    returns (output, y_soft, leaf)."""
    up = UP[x.dtype]
    xu = x.detach().to(up).requires_grad_()
    y_soft = ((xu + g.to(up)) / tau).softmax(dim)
    if not hard:
        return y_soft, y_soft, xu
    index = y_soft.detach().to(x.dtype).argmax(dim, keepdim=True)  # torch: max of the stored y_soft
    y_hard = torch.zeros_like(y_soft).scatter_(dim, index, 1.0)
    return y_hard - y_soft.detach() + y_soft, y_soft, xu


def check_one_hot(y, y_soft_ref, dt, dim, what):
    """y is one-hot along dim; where its 1 is not at the reference's argmax, the two soft values
    must tie within the dtype's rounding (the kernel's soft values may round to the other side)."""
    assert torch.all((y == 0) | (y == 1)), f"{what}: not 0/1"
    assert torch.all(y.sum(dim) == 1), f"{what}: not one-hot"
    got = y.argmax(dim, keepdim=True)
    ref = y_soft_ref.to(dt).argmax(dim, keepdim=True)
    vg = y_soft_ref.gather(dim, got)
    vr = y_soft_ref.gather(dim, ref)
    eps = torch.finfo(dt).eps
    ok = (got == ref) | ((vr - vg).abs() <= 2 * eps * vr)
    assert torch.all(ok), f"{what}: argmax differs beyond a rounding tie in {(~ok).sum().item()} rows"


def softmax_bw_terms(y, dy, dim, tau):
    """(|y dy| + |y| sum |y dy|) / tau: the magnitudes of the two terms of the softmax backward
    y (dy - sum(y dy)) / tau. The backward reads the soft sample as stored (rounded to the
    dtype, an ulp of relative error in every y) where the upcast reference has it unrounded, so
    an element where dy ~ sum(y dy) cancels keeps an error of an ulp of its terms (bf16, n = 7:
    ~5e-3 against an atol of 8e-5)."""
    yd = (y * dy).abs()
    return (yd + y.abs() * yd.sum(dim, keepdim=True)) / tau


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("hard", [False, True], ids=["soft", "hard"])
@pytest.mark.parametrize("tau", [1.0, 0.5])
def test_gumbel_softmax_given_noise(dt, n, hard, tau):
    """With torch's noise passed in: forward and backward vs torch's formula (upcast); the
    backward may also be off by an ulp of its terms (softmax_bw_terms)."""
    x = randn((rows_for(n), n), dt, "gumbel", dt, n, scale=2.0)
    g = gumbel_noise(x.shape, dt, dt, n)
    xr = x.clone().requires_grad_()
    y = F.gumbel_softmax(xr, tau=tau, hard=hard, dim=-1, noise=g)
    yref, ysoft_ref, xu = gumbel_ref(x, g, tau, hard, -1)
    what = f"gumbel_softmax {dt} n={n} hard={hard} tau={tau}"
    if hard:
        check_one_hot(y.detach(), ysoft_ref.detach(), dt, -1, what)
    else:
        if n > 1:
            not_degenerate(ysoft_ref, what)
        close(y, ysoft_ref.detach().to(dt), *softmax_tol("gumbel_softmax", dt, n), what)
    dy = randn(x.shape, dt, "gumbel-dy", dt, n)
    y.backward(dy)
    yref.backward(dy.to(yref.dtype))
    if n > 1:
        close_cancelling(xr.grad, xu.grad.to(dt), softmax_bw_terms(ysoft_ref.detach(), dy.to(yref.dtype), -1, tau),
                         torch.finfo(dt).eps, *tol("gumbel_softmax", dt, bw=True), what + " backward")


@pytest.mark.parametrize("case", ["dim0", "transposed", "sliced", "middle_many", "broadcast_noise"])
def test_gumbel_softmax_strided(case):
    dt = torch.float32
    if case == "dim0":
        x, dim = randn((129, 33), dt, "gs", case), 0
    elif case == "transposed":
        x, dim = randn((33, 129), dt, "gs", case).t(), -1
    elif case == "sliced":
        x, dim = randn((33, 258), dt, "gs", case)[:, ::2], -1
    elif case == "middle_many":
        x, dim = randn((4, 9, 4096), dt, "gs", case), 1
    else:
        x, dim = randn((7, 65), dt, "gs", case), -1
    g = gumbel_noise((65,) if case == "broadcast_noise" else x.shape, dt, case)
    for hard in (False, True):
        xr = x.clone().requires_grad_()
        y = F.gumbel_softmax(xr, tau=0.7, hard=hard, dim=dim, noise=g)
        yref, ysoft_ref, xu = gumbel_ref(x, g.expand(x.shape), 0.7, hard, dim)
        if hard:
            check_one_hot(y.detach(), ysoft_ref.detach(), dt, dim, f"gumbel_softmax {case}")
        else:
            close(y, ysoft_ref.detach().to(dt), *softmax_tol("gumbel_softmax", dt, x.shape[dim]), f"gumbel {case}")
        dy = randn(x.shape, dt, "gs-dy", case)
        y.backward(dy)
        yref.backward(dy.double())
        close(xr.grad, xu.grad.to(dt), *tol("gumbel_softmax", dt, bw=True), f"gumbel_softmax backward {case}")


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: str(d).replace("torch.", ""))
def test_gumbel_softmax_rng_reproducible(dt):
    x = randn((257, 129), dt, "gumbel-rng", dt)
    a = F.gumbel_softmax(x, seed=1234, hard=True)
    b = F.gumbel_softmax(x, seed=1234, hard=True)
    c = F.gumbel_softmax(x, seed=1235, hard=True)
    d = F.gumbel_softmax(x, seed=1234, offset=1, hard=True)
    assert torch.equal(a, b), "the same (seed, offset) must give the same sample"
    assert not torch.equal(a, c), "another seed must give another sample"
    assert not torch.equal(a, d), "another offset must give another sample"
    # The noise depends on the logical position only: a transposed copy (strided kernel) agrees.
    xt = x.t().contiguous().t()
    assert torch.equal(F.gumbel_softmax(xt, seed=1234, hard=True), a), "noise must not depend on strides"
    s = F.gumbel_softmax(x, seed=1234)
    close(s.sum(-1), torch.ones(257, dtype=dt, device=DEV), 1e-2, 1e-2, "soft samples sum to 1")
    assert torch.equal(s.argmax(-1), a.argmax(-1)) or dt in (torch.float16, torch.bfloat16)
    # generator / torch.manual_seed drive the key when no seed is given
    torch.manual_seed(7)
    e = F.gumbel_softmax(x, hard=True)
    torch.manual_seed(7)
    f = F.gumbel_softmax(x, hard=True)
    assert torch.equal(e, f), "torch.manual_seed must make the default path reproducible"
    g1 = torch.Generator().manual_seed(3)
    g2 = torch.Generator().manual_seed(3)
    assert torch.equal(F.gumbel_softmax(x, hard=True, generator=g1), F.gumbel_softmax(x, hard=True, generator=g2))


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16, torch.float64], ids=["float32", "bfloat16", "float64"])
def test_gumbel_softmax_rng_statistics(dt):
    """The kernel's noise is Gumbel(0, 1): (a) argmax frequencies over 2^16 rows match
    softmax(logits) (Gumbel-max trick; chi-square with 7 dof below 40, p ~ 1e-6, where uniform
    noise gives thousands); (b) with two zero logits, log(y0 / y1) = g0 - g1 is Logistic(0, 1):
    mean 0, variance pi^2 / 3 (uniform noise: 1/6)."""
    rows = 1 << 16
    logits = torch.tensor([0.5, -1.0, 2.0, 0.0, 1.0, -0.5, 0.25, -2.0], dtype=torch.float64)
    x = logits.to(dt).to(DEV).expand(rows, 8).contiguous()
    y = F.gumbel_softmax(x, hard=True, seed=99)
    counts = y.double().sum(0).cpu()
    expect = torch.softmax(logits.to(dt).double(), 0) * rows
    chi2 = ((counts - expect) ** 2 / expect).sum().item()
    assert chi2 < 40, f"argmax frequencies {counts.tolist()} vs {expect.tolist()}: chi2 {chi2:.1f}"
    z = torch.zeros((rows, 2), dtype=torch.float32, device=DEV)
    s = F.gumbel_softmax(z, seed=5).double()
    d = (s[:, 0].log() - s[:, 1].log())
    assert abs(d.mean().item()) < 0.05, f"logistic mean {d.mean().item():.4f}"
    assert abs(d.var().item() - math.pi ** 2 / 3) < 0.1, f"logistic variance {d.var().item():.4f}"


def test_gumbel_softmax_empty_and_errors():
    x = torch.empty((0, 16), device=DEV, requires_grad=True)
    y = F.gumbel_softmax(x, hard=True, seed=1)
    assert y.shape == x.shape
    y.sum().backward()
    z = torch.ones((3, 4), device=DEV)
    with pytest.raises(RuntimeError, match="tau"):
        F.gumbel_softmax(z, tau=0.0, seed=1)
    with pytest.raises(RuntimeError, match="tau"):
        F.gumbel_softmax(z, tau=-1.0, seed=1)
    with pytest.raises(IndexError):
        F.gumbel_softmax(z, dim=2, seed=1)
    with pytest.warns(UserWarning, match="eps"):
        F.gumbel_softmax(z, eps=1e-5, seed=1)


@pytest.mark.sanitizer
@pytest.mark.parametrize("op", ["sparsemax", "gumbel_softmax"])
@pytest.mark.parametrize("n", [7, 4097, 20000])
def test_axis_ops_poisoned_output(op, n):
    """Every output element (y; gumbel's y_soft) is written: outputs start as NaN."""
    x = randn((33, n), torch.bfloat16, "poison", op, n, scale=1.0 / n if op == "sparsemax" else 1.0)
    y = torch.full_like(x, float("nan"))
    t = {"x": dl(x), "out": dl(y)}
    params = None
    ys = None
    if op == "gumbel_softmax":
        ys = torch.full_like(x, float("nan"))
        t["y_soft"] = dl(ys)
        params = {"hard": True, "seed": 1}
    _C.norm(op, False, t, -1, 1, 0.0, torch.cuda.current_stream().cuda_stream, None, True, params)
    torch.cuda.synchronize()
    assert torch.isfinite(y.float()).all(), f"{op} left elements unwritten"
    if ys is not None:
        assert torch.isfinite(ys.float()).all(), "gumbel_softmax left y_soft elements unwritten"


# ---- channel normalizations: batch_norm, instance_norm, group_norm, local_response_norm -----------
CH_OPS = ["batch_norm", "instance_norm", "group_norm"]
CH_LAYOUTS = ["nchw", "channels_last", "strided"]
CH_MODES = ["train", "train_running", "eval"]
CH_GROUPS = 4  # group_norm's num_groups in the tests (C = 16: 4 channels a group)


def ch_layout(x, layout):
    """x in a layout: contiguous NCHW, channels-last (any rank), or every other element of a
    twice-as-long last dim (the strided fallback)."""
    if layout == "channels_last":
        return x.movedim(1, -1).contiguous().movedim(-1, 1)
    if layout == "strided":
        big = torch.zeros(x.shape[:-1] + (2 * x.shape[-1],), dtype=x.dtype, device=x.device)
        big[..., ::2] = x
        return big[..., ::2]
    return x.contiguous()


def ch_params(op, affine, dt, C, *seed):
    pdt = torch.float32 if affine == "mixed" else dt
    w = b = None
    if affine != "none":
        w = randn((C,), pdt, "chw", op, *seed, scale=0.5, shift=1.0)
        b = randn((C,), pdt, "chb", op, *seed, scale=0.5)
    return w, b, pdt


def ch_running(C, pdt, *seed):
    return (randn((C,), pdt, "rm", *seed, scale=0.3),
            (torch.rand((C,), generator=gen("rv", *seed), dtype=torch.float64) + 0.5).to(pdt).to(DEV))


def ch_call(lib, op, x, w, b, rm, rv, training, momentum=0.1, eps=1e-5, groups=CH_GROUPS):
    if op == "batch_norm":
        return lib.batch_norm(x, rm, rv, w, b, training, momentum, eps)
    if op == "instance_norm":
        return lib.instance_norm(x, rm, rv, w, b, training, momentum, eps)
    return lib.group_norm(x, groups, w, b, eps)


def ch_check(op, dt, x, w, b, rm, rv, training, what, eps=1e-5, groups=CH_GROUPS, momentum=0.1):
    """Forward, running stats and backward (dx, dweight, dbias) of baracuda vs torch upcast."""
    up = UP[dt]
    xr = x.clone().requires_grad_()  # clone keeps x's strides (preserve_format) when x is dense
    if x.stride() != xr.stride():
        xr = x.detach().requires_grad_()
    wr = w.clone().requires_grad_() if w is not None else None
    br = b.clone().requires_grad_() if b is not None else None
    rmr = rm.clone() if rm is not None else None
    rvr = rv.clone() if rv is not None else None
    y = ch_call(F, op, xr, wr, br, rmr, rvr, training, momentum, eps, groups)
    xu = x.detach().to(up).requires_grad_()
    wu = w.detach().to(up).requires_grad_() if w is not None else None
    bu = b.detach().to(up).requires_grad_() if b is not None else None
    rmu = rm.to(up) if rm is not None else None
    rvu = rv.to(up) if rv is not None else None
    yref = ch_call(tF, op, xu, wu, bu, rmu, rvu, training, momentum, eps, groups)
    assert y.dtype == dt and y.shape == x.shape
    rtol, atol = tol(op, dt)
    not_degenerate(yref, what)
    close(y, yref.detach().to(dt), rtol, atol, f"{what}: y")
    if rm is not None:
        close(rmr, rmu.to(rm.dtype), rtol, atol, f"{what}: running_mean")
        close(rvr, rvu.to(rv.dtype), rtol, atol, f"{what}: running_var")
    dy = randn(x.shape, dt, "chdy", what)
    y.backward(dy)
    yref.backward(dy.to(up))
    rtol, atol = tol(op, dt, bw=True)
    count = x.numel() // x.shape[1]  # elements summed into a parameter gradient
    close(xr.grad, xu.grad.to(dt), rtol, atol, f"{what}: dx")
    if w is not None:
        close(wr.grad, wu.grad.to(w.dtype), rtol, atol * count, f"{what}: dweight")
        close(br.grad, bu.grad.to(b.dtype), rtol, atol * count, f"{what}: dbias")


@pytest.mark.parametrize("op", CH_OPS)
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("layout", CH_LAYOUTS)
@pytest.mark.parametrize("mode", CH_MODES)
@pytest.mark.parametrize("affine", ["none", "weight_bias", "mixed"])
def test_channel_norm(op, dt, layout, mode, affine):
    if affine == "mixed" and dt not in (torch.float16, torch.bfloat16):
        pytest.skip("mixed precision: f16/bf16 inputs with f32 parameters")
    if op == "group_norm" and mode != "train":
        pytest.skip("group_norm has no running statistics")
    shape = (4, 16, 5, 7)  # 35 spatial elements: the scalar planes path; channels-last vectorizes
    x = ch_layout(randn(shape, dt, "ch", op, dt, layout, mode, affine, scale=1.5, shift=0.7), layout)
    w, b, pdt = ch_params(op, affine, dt, shape[1], dt, layout, mode)
    rm = rv = None
    if mode != "train":
        rm, rv = ch_running(shape[1], pdt, op, dt, layout, mode)
    ch_check(op, dt, x, w, b, rm, rv, mode != "eval", f"{op} {dt} {layout} {mode} {affine}")


@pytest.mark.parametrize("op", CH_OPS)
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("shape", [(2, 32, 8, 8), (3, 24, 9), (6, 16), (2, 8, 3, 4, 5), (1, 16, 64, 64),
                                   (2, 16, 32, 33), (33, 8, 1, 1), (2, 64, 40, 40)], ids=str)
def test_channel_norm_shapes(op, dt, layout, shape):
    """Vectorized planes (S % 8 == 0), 3-d / 2-d / 5-d inputs, spatial 1, a small batch of large
    planes (chunks within a plane), and group rows past the on-chip budget (f32 [2, 64, 40, 40] with 4
    groups: 16 x 1600 x 4 bytes a row forward, twice that backward)."""
    if op == "instance_norm" and math.prod(shape[2:]) == 1:
        pytest.skip("instance_norm needs more than one spatial element")
    C = shape[1]
    x = ch_layout(randn(shape, dt, "chs", op, dt, layout, shape, shift=-0.4), layout)
    w, b, pdt = ch_params(op, "weight_bias", dt, C, "shapes", shape)
    rm, rv = ch_running(C, pdt, "shapes", op, shape) if op != "group_norm" else (None, None)
    # Spatial 1: 2 groups (4 channels a group), since the gradient of a 2-element group is
    # ill-conditioned (torch's own f32 misses an f64 reference by 3e-4 there).
    groups = 2 if math.prod(shape[2:]) == 1 else CH_GROUPS
    ch_check(op, dt, x, w, b, rm, rv, True, f"{op} {dt} {layout} {list(shape)}", groups=groups)


@pytest.mark.parametrize("groups", [1, 2, 32, 64])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_group_norm_groups(groups, layout):
    """One group (layer norm over C x S), a few large groups (past the on-chip rows in f32), one
    channel a group."""
    dt = torch.float32
    x = ch_layout(randn((3, 64, 20, 20), dt, "gng", groups, layout, scale=2.0, shift=3.0), layout)
    w, b, _ = ch_params("group_norm", "weight_bias", dt, 64, "gng", groups)
    ch_check("group_norm", dt, x, w, b, None, None, True, f"group_norm G={groups} {layout}", groups=groups)


def test_batch_norm_large_mean():
    """|mean| >> std: the shifted sums keep the variance (plain sums of x and x^2 would cancel)."""
    dt = torch.float32
    x = randn((8, 4, 16, 16), dt, "bnmean", scale=0.01, shift=1000.0)
    for layout in ("nchw", "channels_last"):
        y = F.batch_norm(ch_layout(x, layout), None, None, training=True)
        ref = tF.batch_norm(x.double(), None, None, training=True).float()
        close(y, ref, 2e-3, 2e-3, f"batch_norm large mean {layout}")


@pytest.mark.parametrize("op", CH_OPS)
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_channel_norm_param_grads_deterministic(op, layout):
    dt = torch.bfloat16
    x = ch_layout(randn((8, 64, 28, 28), dt, "chdet", op), layout)
    w, b, _ = ch_params(op, "mixed", dt, 64, "chdet", op)
    dy = ch_layout(randn(x.shape, dt, "chdet-dy", op), layout)
    grads = []
    for _ in range(3):
        wr, br = w.clone().requires_grad_(), b.clone().requires_grad_()
        xr = x.clone().requires_grad_()
        ch_call(F, op, xr, wr, br, None, None, True, groups=32).backward(dy)
        grads.append((xr.grad.clone(), wr.grad.clone(), br.grad.clone()))
    for g in grads[1:]:
        for k, name in enumerate(("dx", "dweight", "dbias")):
            assert torch.equal(g[k], grads[0][k]), f"{op} {layout}: {name} differs between runs"


@pytest.mark.parametrize("op", CH_OPS)
def test_channel_norm_empty_batch(op):
    x = torch.empty((0, 8, 3, 3), device=DEV, requires_grad=True)
    w = torch.ones(8, device=DEV, requires_grad=True)
    b = torch.zeros(8, device=DEV, requires_grad=True)
    rm, rv = torch.zeros(8, device=DEV), torch.ones(8, device=DEV)
    y = ch_call(F, op, x, w, b, rm if op != "group_norm" else None, rv if op != "group_norm" else None, True,
                groups=2)
    assert y.shape == x.shape
    y.sum().backward()
    assert torch.equal(w.grad, torch.zeros_like(w)) and torch.equal(b.grad, torch.zeros_like(b)), \
        "parameter gradients of an empty batch are zero (torch)"
    assert torch.equal(rm, torch.zeros(8, device=DEV)), "an empty batch leaves the running stats alone (torch)"


def test_channel_norm_edge_cases():
    dt = torch.float32
    # N = 1 (batch_norm over the spatial dims of one sample), spatial 1 (batch_norm of [N, C]).
    for shape in ((1, 8, 5, 5), (7, 8), (7, 8, 1)):
        x = randn(shape, dt, "edge", shape)
        w, b, _ = ch_params("batch_norm", "weight_bias", dt, 8, "edge", shape)
        rm, rv = ch_running(8, dt, "edge", shape)
        ch_check("batch_norm", dt, x, w, b, rm, rv, True, f"batch_norm {list(shape)}")
    # group_norm of [N, C] (spatial 1) and of one channel a group.
    x = randn((5, 6), dt, "edge-gn")
    ch_check("group_norm", dt, x, None, None, None, None, True, "group_norm [5, 6]", groups=3)
    # A gradient laid out differently from x (expanded, then channels-last vs NCHW).
    x = randn((2, 8, 4, 4), dt, "edge-dy")
    xr = x.clone().requires_grad_()
    F.batch_norm(xr, None, None, training=True).sum().backward()
    xu = x.double().requires_grad_()
    tF.batch_norm(xu, None, None, training=True).sum().backward()
    close(xr.grad, xu.grad.float(), 1e-5, 1e-5, "batch_norm dx of an expanded gradient")


def test_channel_norm_errors():
    x = randn((2, 6, 3, 3), torch.float32, "cherr")
    with pytest.raises(RuntimeError, match="num_groups"):
        F.group_norm(x, 4)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.batch_norm(randn((1, 6), torch.float32, "cherr1"), None, None, training=True)
    with pytest.raises(ValueError, match="more than 1 spatial element"):
        F.instance_norm(randn((2, 6, 1), torch.float32, "cherr2"))
    with pytest.raises(RuntimeError, match="running_mean"):
        F.batch_norm(x, None, None, training=False)
    with pytest.raises(RuntimeError, match="weight"):
        F.batch_norm(x, None, None, torch.ones(5, device=DEV), training=True)
    with pytest.raises(ValueError, match="3D"):
        F.local_response_norm(randn((2, 6), torch.float32, "cherr3"), 3)
    with pytest.raises(RuntimeError, match="eps"):
        F.group_norm(x, 2, eps=float("nan"))


@pytest.mark.sanitizer
@pytest.mark.parametrize("op,groups", [("batch_norm", 1), ("group_norm", 4), ("group_norm", 1),
                                       ("instance_norm", 1)])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_channel_norm_poisoned_outputs(op, groups, layout):
    """Every output element (y, statistics, running stats, dx, dweight, dbias) is written: outputs
    start as NaN, the workspace as 0xff. group_norm with one group over [2, 64, 40, 40] f32 takes the
    three-kernel path; with 4 groups, rows on chip (NCHW)."""
    dt = torch.float32
    N, C = 2, 64
    x = ch_layout(randn((N, C, 40, 40), dt, "chpoison", op, groups, layout), layout)
    w = randn((C,), dt, "chpoison-w", shift=1.0)
    b = randn((C,), dt, "chpoison-b")
    nan = float("nan")
    stat = N * (groups if op == "group_norm" else C) if op != "batch_norm" else C
    y = torch.full_like(x, nan)
    mean = torch.full((stat,), nan, device=DEV)
    rstd = torch.full((stat,), nan, device=DEV)
    rm = torch.zeros(C, device=DEV) if op == "instance_norm" else None
    rv = torch.ones(C, device=DEV) if op == "instance_norm" else None
    stream = torch.cuda.current_stream().cuda_stream
    params = {"num_groups": groups if op == "group_norm" else 1, "training": True, "momentum": 0.1}
    fw = {k: v for k, v in {"x": x, "weight": w, "bias": b, "out": y, "save_mean": mean, "save_rstd": rstd,
                            "running_mean": rm, "running_var": rv}.items() if v is not None}
    nws = _C.norm_workspace_size(op, False, {k: dl(v) for k, v in fw.items()}, -1, 1, 1e-5, params)
    ws = torch.full((max(nws, 1),), 255, dtype=torch.uint8, device=DEV)
    _C.norm(op, False, {k: dl(v) for k, v in fw.items()}, -1, 1, 1e-5, stream, dl(ws), True, params)
    dx = torch.full_like(x, nan)
    dw = torch.full_like(w, nan)
    db = torch.full_like(b, nan)
    bw = {"dy": ch_layout(torch.ones(x.shape, device=DEV), layout), "x": x, "mean": mean, "rstd": rstd,
          "weight": w, "out": dx, "dweight": dw, "dbias": db}
    nws = _C.norm_workspace_size(op, True, {k: dl(v) for k, v in bw.items()}, -1, 1, 1e-5, params)
    ws = torch.full((max(nws, 1),), 255, dtype=torch.uint8, device=DEV)
    _C.norm(op, True, {k: dl(v) for k, v in bw.items()}, -1, 1, 1e-5, stream, dl(ws), True, params)
    torch.cuda.synchronize()
    for name, t in (("y", y), ("mean", mean), ("rstd", rstd), ("running_mean", rm), ("running_var", rv), ("dx", dx),
                    ("dweight", dw), ("dbias", db)):
        if t is not None:
            assert torch.isfinite(t).all(), f"{op} G={groups} {layout}: {name} has unwritten (NaN) elements"


def test_channel_norm_layouts_reported():
    """The variant each layout takes (the SKU's layout string)."""
    def layout_of(op, x, **params):
        C = x.shape[1]
        t = {"x": dl(x), "weight": dl(torch.ones(C, device=DEV)), "out": dl(torch.empty_like(x))}
        return _C.norm_sku(op, False, t, -1, 1, 1e-5, True, {"training": True, **params}).split("layout=")[-1]
    x = randn((2, 16, 8, 8), torch.bfloat16, "chlay")
    assert layout_of("batch_norm", x) == "planes-vec16"
    assert layout_of("batch_norm", ch_layout(x, "channels_last")) == "pixels-vec16"
    assert layout_of("batch_norm", ch_layout(x, "strided")) == "strided-scalar"
    assert layout_of("group_norm", x, num_groups=4) == "smem-rows-vec16"
    assert layout_of("group_norm", ch_layout(x, "channels_last"), num_groups=4) == "pixels-vec16"
    assert layout_of("batch_norm", randn((2, 16, 5, 7), torch.bfloat16, "chlay2")) == "planes-scalar"


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("layout", CH_LAYOUTS)
@pytest.mark.parametrize("size", [1, 2, 5])
def test_local_response_norm(dt, layout, size):
    shape = (3, 10, 4, 5)
    x = ch_layout(randn(shape, dt, "lrn", dt, layout, size, scale=2.0), layout)
    xr = x.clone().requires_grad_() if x.is_contiguous() or layout == "channels_last" else x.detach().requires_grad_()
    y = F.local_response_norm(xr, size, alpha=1e-2, beta=0.75, k=1.5)
    up = UP[dt]
    xu = x.detach().to(up).requires_grad_()
    yref = tF.local_response_norm(xu, size, alpha=1e-2, beta=0.75, k=1.5)
    what = f"local_response_norm {dt} {layout} size={size}"
    close(y, yref.detach().to(dt), *tol("local_response_norm", dt), what)
    dy = randn(shape, dt, "lrn-dy", dt, layout, size)
    y.backward(dy)
    yref.backward(dy.to(up))
    close(xr.grad, xu.grad.to(dt), *tol("local_response_norm", dt, bw=True), what + " dx")


def test_local_response_norm_3d_5d_and_empty():
    for shape in ((2, 7, 9), (2, 6, 3, 2, 4)):
        x = randn(shape, torch.float32, "lrn35", shape)
        close(F.local_response_norm(x, 3), tF.local_response_norm(x.double(), 3).float(), 1e-5, 1e-6,
              f"local_response_norm {list(shape)}")
    x = torch.empty((0, 4, 3), device=DEV)
    assert F.local_response_norm(x, 2) is x  # torch returns its input when empty


def test_native_batch_and_group_norm():
    """The ATen-named direct calls against torch.ops.aten."""
    dt = torch.float32
    x = randn((4, 8, 6, 6), dt, "native")
    w, b, _ = ch_params("batch_norm", "weight_bias", dt, 8, "native")
    rm, rv = ch_running(8, dt, "native")
    rm2, rv2 = rm.clone(), rv.clone()
    y, m, r = F.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
    yr, mr, rr = torch.ops.aten.native_batch_norm(x, w, b, rm2, rv2, True, 0.1, 1e-5)
    close(y, yr, 1e-5, 1e-5, "native_batch_norm y")
    close(m, mr, 1e-5, 1e-6, "native_batch_norm save_mean")
    close(r, rr, 1e-5, 1e-6, "native_batch_norm save_invstd")
    close(rm, rm2, 1e-5, 1e-6, "native_batch_norm running_mean")
    dy = randn(x.shape, dt, "native-dy")
    got = F.native_batch_norm_backward(dy, x, w, rm, rv, m, r, True, 1e-5, (True, True, True))
    ref = torch.ops.aten.native_batch_norm_backward(dy, x, w, rm2, rv2, mr, rr, True, 1e-5, [True, True, True])
    for g, rf, name in zip(got, ref, ("dx", "dweight", "dbias")):
        close(g, rf, 1e-4, 1e-4, f"native_batch_norm_backward {name}")
    y, m, r = F.native_group_norm(x, w, b, 4, 8, 36, 2, 1e-5)
    yr, mr, rr = torch.ops.aten.native_group_norm(x, w, b, 4, 8, 36, 2, 1e-5)
    close(y, yr, 1e-5, 1e-5, "native_group_norm y")
    close(m, mr, 1e-5, 1e-6, "native_group_norm mean")
    close(r, rr, 1e-5, 1e-6, "native_group_norm rstd")
    got = F.native_group_norm_backward(dy, x, m, r, w, 4, 8, 36, 2, (True, True, True))
    ref = torch.ops.aten.native_group_norm_backward(dy, x, mr, rr, w, 4, 8, 36, 2, [True, True, True])
    for g, rf, name in zip(got, ref, ("dx", "dweight", "dbias")):
        close(g, rf, 1e-4, 1e-4, f"native_group_norm_backward {name}")
