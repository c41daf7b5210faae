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
    if op == "softmax":  # outputs ~1/n: scale atol so it does not swamp them
        atol = max(atol / max(n, 1), 2 * SMALLEST[dt])
    return rtol, atol


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


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("n", LENGTHS + [1 << 20])
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
@pytest.mark.parametrize("kind", ["bool", "additive"])
@pytest.mark.parametrize("mshape", ["full", "key_padding", "row", "col"])
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("n", [7, 129, 4096, 20000])
def test_masked_softmax(kind, mshape, dt, n):
    B, H, S = 2, 3, 5  # x [B, H, S, n], softmax over n
    x = randn((B, H, S, n), dt, "mask", kind, mshape, n, scale=2.0)
    shape = {"full": (B, H, S, n), "key_padding": (B, 1, 1, n), "row": (B, H, S, 1), "col": (n,)}[mshape]
    g = gen("maskbits", kind, mshape, n)
    bits = torch.rand(shape, generator=g) < 0.3
    if mshape == "row":  # whole rows excluded
        bits = torch.zeros(shape, dtype=torch.bool)
        bits[0, 1, 2, 0] = True
    bits = bits.to(DEV)
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


def test_normalize_errors():
    x = randn((4, 8), torch.float32, "normerr")
    with pytest.raises(NotImplementedError):
        F.normalize(x, p=1.0)
    with pytest.raises(IndexError):
        F.normalize(x, dim=2)
