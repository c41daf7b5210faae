"""GPU conformance of the loss family (include/baracuda/ops/loss_ops.def) vs PyTorch.

Reference = torch.nn.functional on the same inputs upcast (f64 for f32/f64, f32 for f16/bf16),
cast back; gradients through torch.autograd.grad of that reference. Tolerances = torch.testing's
defaults per dtype times the row's ``tol`` (from ``_C.loss_ops()``), times 2 for backward; reduced
losses add an atol proportional to the mean |loss| (a sum of many terms). Class rows of length 1, 7,
129, 4097, 65537 (and a 128256 vocabulary); ignore_index rows (also inside [0, C)), all-ignored
and empty batches, weights, label smoothing, probability targets, [N, C, d1, ...] layouts, strided
logits, out-of-range targets, the fused gradient (on sm_90 the thread-block cluster kernel of long
rows: 2 to 16 CTAs a row, special values, in place, bit-stable), bit-identical repeated mean
reductions; every pointwise loss x parameters x reduction x dtype with broadcasting and strided
inputs; poisoned outputs catch unwritten elements. linear_cross_entropy against torch's
F.cross_entropy(F.linear(x, w).to(up), t) (and entirely in the input dtype) for N in {1, 7, 300, 2049}
(chunks of 128 / 512 with a short last one), V in {7, 129, 32000} (and 128256 on the cluster kernel),
ignore_index, label smoothing, every reduction and dtype, forward and backward, with per-element bounds
for the GEMMs' rounding; the rows losses (cosine_embedding, triplet_margin, multi_margin,
multilabel_margin, multilabel_soft_margin) x parameters x dtypes x reductions over matrices, vectors,
short / long / empty rows, strided and broadcast inputs.
"""
import zlib

import pytest

from gpu_skip import skip_unless_ready  # noqa: E402

skip_unless_ready("loss_ops")

import torch  # noqa: E402
import torch.nn.functional as tF  # noqa: E402

import baracuda.loss as BL  # noqa: E402
from baracuda import _C  # noqa: E402
from baracuda._autograd import dl  # noqa: E402

import baracuda.functional as _functional  # noqa: E402

# The torch-named functions: baracuda.functional once it lists the loss family, else the module itself.
F = _functional if hasattr(_functional, "cross_entropy") else BL
ROWS = {r["name"]: r for r in _C.loss_ops()}
DEV = "cuda"
FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
IDS = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float64: "float64"}
UP = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float64,
      torch.float64: torch.float64}
BASE_TOL = {torch.float32: (1.3e-6, 1e-5), torch.float64: (1e-7, 1e-7), torch.float16: (1e-3, 1e-5),
            torch.bfloat16: (1.6e-2, 1e-5)}
LENGTHS = [1, 7, 129, 4097, 65537]
REDUCTIONS = ["none", "mean", "sum"]


def tol(op, dt, bw=False):
    rtol, atol = BASE_TOL[dt]
    k = ROWS[op]["tol"] * (2.0 if bw else 1.0)
    return rtol * k, atol * k


def gen(*parts):
    return torch.Generator(device="cpu").manual_seed(zlib.crc32("/".join(map(str, parts)).encode()))


def randn(shape, dt, *seed, scale=1.0, shift=0.0):
    g = gen(*seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale + shift).to(dt).to(DEV)


def rand(shape, dt, *seed, lo=0.0, hi=1.0):
    g = gen(*seed)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(dt).to(DEV)


def randint(shape, n, *seed):
    g = gen(*seed)
    return torch.randint(0, max(n, 1), shape, generator=g).to(DEV)


def signs(shape, dt, *seed):
    return (rand(shape, torch.float64, *seed) < 0.5).to(dt) * 2 - 1


def close(got, ref, rtol, atol, what):
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    assert got.dtype == ref.dtype, f"{what}: dtype {got.dtype} vs {ref.dtype}"
    torch.testing.assert_close(got, ref, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"{what}: {m}")


def loss_tol(op, dt, ref_up, reduction, bw=False):
    """Elementwise tolerance; a reduced loss also gets an atol of rtol x the mean |term| x a few (sums
    of terms of both signs lose relative accuracy where they cancel)."""
    rtol, atol = tol(op, dt, bw)
    if reduction != "none" and not bw:
        # Finite terms only: a NaN reference (torch's mean over no terms, e.g. every target ignored) is
        # matched NaN for NaN by close(), and must not turn the bound itself into NaN.
        a = ref_up.abs()
        a = a[torch.isfinite(a)]
        atol = atol + 4 * rtol * float(a.mean()) if a.numel() else atol
    return rtol, atol


def not_degenerate(ref, what):
    if ref.numel() > 8:
        frac = (ref != 0).double().mean().item()
        assert frac > 0.5, f"{what}: reference is mostly zeros ({frac:.2f} non-zero): degenerate test data"


def rows_for(n):
    return 2 if n > 65536 else (3 if n > 4096 else 33)


def grad_of(ref_out, leaves, dy):
    """torch.autograd.grad of the upcast reference for the leaves that require grad."""
    want = [t for t in leaves if t is not None and t.requires_grad]
    gs = torch.autograd.grad(ref_out, want, dy.to(ref_out.dtype), allow_unused=True)
    it = iter(gs)
    return [next(it) if (t is not None and t.requires_grad) else None for t in leaves]


# ---- cross_entropy / nll_loss over [N, C] -----------------------------------------------------------------
CE_VARIANTS = ["plain", "weight", "smoothing", "weight_smoothing", "ignore"]


def ce_case(dt, n, variant, rows=None, *seed):
    rows = rows or rows_for(n)
    x = randn((rows, n), dt, "ce", dt, n, variant, *seed, scale=3.0)
    t = randint((rows,), n, "ce-t", dt, n, variant, *seed)
    ignore = -100
    if variant == "ignore" and n > 1:
        # An ignore_index inside [0, C): rows whose target is 0 are skipped. Every other target
        # must then lie in [0, C): -100 is no longer ignored, and torch rejects it (IndexError on
        # the CPU, a device assert on CUDA) as baracuda does (test_ignore_index_inside_classes).
        ignore = 0
        t[::3] = 0
    w = rand((n,), dt, "ce-w", dt, n, *seed, lo=0.25, hi=2.0) if "weight" in variant else None
    ls = 0.1 if "smoothing" in variant else 0.0
    return x, t, w, ignore, ls


@pytest.fixture
def autograd_path(request):
    """'fused' (the forward writes the gradient, the backward rescales it) or 'recompute' (the
    backward recomputes the softmax from the saved log-sum-exp)."""
    old = BL.fused_autograd
    BL.fused_autograd = request.param == "fused"
    yield request.param
    BL.fused_autograd = old


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: IDS[d])
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("variant", CE_VARIANTS)
@pytest.mark.parametrize("autograd_path", ["fused", "recompute"], indirect=True)
def test_cross_entropy(dt, n, reduction, variant, autograd_path):
    if n == 65537 and dt in (torch.float16, torch.float64) and variant != "plain":
        pytest.skip("65537-long rows: f32/bf16 cover the variants")
    if reduction == "none" and autograd_path == "fused":
        pytest.skip("reduction='none' always takes the recomputing backward")
    x, t, w, ignore, ls = ce_case(dt, n, variant)
    up = UP[dt]
    xr = x.clone().requires_grad_()
    out = F.cross_entropy(xr, t, weight=w, ignore_index=ignore, reduction=reduction, label_smoothing=ls)
    xu = x.to(up).requires_grad_()
    ref = tF.cross_entropy(xu, t, weight=w.to(up) if w is not None else None, ignore_index=ignore,
                           reduction=reduction, label_smoothing=ls)
    assert out.dtype == dt
    close(out, ref.detach().to(dt), *loss_tol("cross_entropy", dt, ref.detach(), reduction),
          f"cross_entropy {IDS[dt]} n={n} {reduction} {variant}")
    dy = randn(out.shape, dt, "ce-dy", dt, n, reduction, variant)
    (gx,) = torch.autograd.grad(out, xr, dy)
    (gr,) = torch.autograd.grad(ref, xu, dy.to(up))
    rtol, atol = tol("cross_entropy", dt, bw=True)
    if reduction == "mean":
        atol = atol / max(t.numel(), 1)
    if n > 1 and variant != "ignore":
        not_degenerate(gr, "cross_entropy grad")
    close(gx, gr.to(dt), rtol, atol, f"cross_entropy_backward {IDS[dt]} n={n} {reduction} {variant}")


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: IDS[d])
@pytest.mark.parametrize("n", [1, 7, 129, 4097])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("variant", ["plain", "weight", "ignore"])
def test_nll_loss(dt, n, reduction, variant):
    x, t, w, ignore, _ = ce_case(dt, n, variant, None, "nll")
    logp = torch.log_softmax(x.to(UP[dt]), -1).to(dt)
    up = UP[dt]
    xr = logp.clone().requires_grad_()
    out = F.nll_loss(xr, t, weight=w, ignore_index=ignore, reduction=reduction)
    xu = logp.to(up).requires_grad_()
    ref = tF.nll_loss(xu, t, weight=w.to(up) if w is not None else None, ignore_index=ignore, reduction=reduction)
    close(out, ref.detach().to(dt), *loss_tol("nll_loss", dt, ref.detach(), reduction),
          f"nll_loss {IDS[dt]} n={n} {reduction} {variant}")
    dy = randn(out.shape, dt, "nll-dy", dt, n, reduction)
    (gx,) = torch.autograd.grad(out, xr, dy)
    (gr,) = torch.autograd.grad(ref, xu, dy.to(up))
    close(gx, gr.to(dt), *tol("nll_loss", dt, bw=True), f"nll_loss_backward {IDS[dt]} n={n} {reduction} {variant}")


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: IDS[d])
@pytest.mark.parametrize("n", [1, 7, 129, 4097])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("variant", ["plain", "weight", "smoothing", "weight_smoothing"])
def test_cross_entropy_probabilities(dt, n, reduction, variant):
    x, _, w, _, ls = ce_case(dt, n, variant, None, "probs")
    rows = x.shape[0]
    p = torch.softmax(randn((rows, n), torch.float64, "probs-p", dt, n, scale=2.0), -1).to(dt)
    up = UP[dt]
    xr, pr = x.clone().requires_grad_(), p.clone().requires_grad_()
    out = F.cross_entropy(xr, pr, weight=w, reduction=reduction, label_smoothing=ls)
    xu, pu = x.to(up).requires_grad_(), p.to(up).requires_grad_()
    ref = tF.cross_entropy(xu, pu, weight=w.to(up) if w is not None else None, reduction=reduction,
                           label_smoothing=ls)
    close(out, ref.detach().to(dt), *loss_tol("cross_entropy", dt, ref.detach(), reduction),
          f"cross_entropy(probs) {IDS[dt]} n={n} {reduction} {variant}")
    dy = randn(out.shape, dt, "probs-dy", dt, n, reduction)
    gx, gp = torch.autograd.grad(out, (xr, pr), dy)
    grx, grp = torch.autograd.grad(ref, (xu, pu), dy.to(up))
    rtol, atol = tol("cross_entropy", dt, bw=True)
    if reduction == "mean":
        atol = atol / rows
    close(gx, grx.to(dt), rtol, atol, f"cross_entropy(probs) d input {IDS[dt]} n={n} {reduction}")
    close(gp, grp.to(dt), rtol, atol, f"cross_entropy(probs) d target {IDS[dt]} n={n} {reduction}")


@pytest.mark.parametrize("case", ["spatial_many", "spatial_few", "unbatched", "transposed", "sliced", "3d"])
@pytest.mark.parametrize("op", ["cross_entropy", "nll_loss"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_class_layouts(case, op, reduction):
    """[N, C, d1, ...] (the class axis strided: the column mapping from 4096 positions), [C],
    non-contiguous logits."""
    dt = torch.float32
    if case == "spatial_many":
        x = randn((4, 5, 32, 40), dt, case, op)
        t = randint((4, 32, 40), 5, case, op)
    elif case == "spatial_few":
        x = randn((2, 5, 3, 4), dt, case, op)
        t = randint((2, 3, 4), 5, case, op)
    elif case == "3d":
        x = randn((3, 129, 7), dt, case, op)
        t = randint((3, 7), 129, case, op)
    elif case == "unbatched":
        x = randn((129,), dt, case, op)
        t = randint((), 129, case, op)
    elif case == "transposed":
        x = randn((129, 33), dt, case, op).t()
        t = randint((33,), 129, case, op)
    else:
        x = randn((33, 258), dt, case, op)[:, ::2]
        t = randint((33,), 129, case, op)
    if op == "nll_loss":
        x = torch.log_softmax(x, 1 if x.dim() > 1 else 0)
    if t.dim():
        t.view(-1)[0] = -100  # one ignored position
    w = rand((x.shape[1 if x.dim() > 1 else 0],), dt, case, "w", lo=0.5, hi=1.5)
    xr = x.clone().requires_grad_()
    out = getattr(F, op)(xr, t, weight=w, reduction=reduction)
    xu = x.double().requires_grad_()
    ref = getattr(tF, op)(xu, t, weight=w.double(), reduction=reduction)
    close(out, ref.detach().to(dt), *loss_tol(op, dt, ref.detach(), reduction), f"{op} {case} {reduction}")
    dy = randn(out.shape, dt, case, "dy", op)
    if reduction == "none" and out.dim():
        dy = dy[..., :1].expand(out.shape)  # an expanded (stride-0) upstream gradient
    (gx,) = torch.autograd.grad(out, xr, dy)
    (gr,) = torch.autograd.grad(ref, xu, dy.double())
    close(gx, gr.to(dt), *tol(op, dt, bw=True), f"{op}_backward {case} {reduction}")


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("op", ["cross_entropy", "nll_loss"])
def test_all_ignored_and_empty(reduction, op):
    x = randn((6, 11), torch.float32, "ign", op).requires_grad_()
    t = torch.full((6,), -100, dtype=torch.int64, device=DEV)
    out = getattr(F, op)(x, t, reduction=reduction)
    ref = getattr(tF, op)(x.detach().double(), t, reduction=reduction)
    close(out, ref.float(), 1e-6, 1e-6, f"{op} all ignored {reduction}")  # mean: NaN as torch
    (g,) = torch.autograd.grad(out.sum() if reduction == "none" else out, x)
    assert torch.equal(g, torch.zeros_like(g)), "ignored rows get no gradient"
    e = torch.empty((0, 11), device=DEV, requires_grad=True)
    te = torch.empty((0,), dtype=torch.int64, device=DEV)
    oe = getattr(F, op)(e, te, reduction=reduction)
    re = getattr(tF, op)(e.detach(), te, reduction=reduction)
    close(oe, re, 0, 0, f"{op} empty batch {reduction}")
    (ge,) = torch.autograd.grad(oe.sum(), e)
    assert ge.shape == (0, 11)


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_cross_entropy_special_values(dt):
    """A NaN logit makes its row NaN; -inf logits carry no mass; an all -inf row is NaN (torch)."""
    x = randn((4, 104), dt, "special")
    x[0, 57] = float("nan")
    x[1, ::3] = float("-inf")
    x[2] = float("-inf")
    x[3, :50] = float("nan")
    t = torch.tensor([3, 4, 5, 60], device=DEV)
    ref = tF.cross_entropy(x.to(UP[dt]), t, reduction="none").to(dt)
    close(F.cross_entropy(x, t, reduction="none"), ref, *tol("cross_entropy", dt), f"special values {IDS[dt]}")


def test_out_of_range_targets():
    x = randn((4, 10), torch.float32, "oob")
    t = torch.tensor([1, 10, -3, 2], device=DEV)
    with pytest.raises(IndexError):
        F.cross_entropy(x, t)
    with pytest.raises(IndexError):
        F.nll_loss(torch.log_softmax(x, -1), t)
    BL.check_targets = False
    try:
        out = F.cross_entropy(x, t, reduction="none")
        assert torch.isnan(out[1]) and torch.isnan(out[2]), "bad rows are NaN"
        close(out[[0, 3]], tF.cross_entropy(x[[0, 3]], t[[0, 3]], reduction="none"), 1e-5, 1e-5, "good rows")
        assert torch.isnan(F.cross_entropy(x, t))
    finally:
        BL.check_targets = True
    BL.check_targets = "deferred"
    try:
        _functional.sync_errors()
        F.cross_entropy(x, t)  # reported later, not here
        with pytest.raises(IndexError, match="deferred"):
            _functional.sync_errors()
        good = torch.tensor([1, 9, 0, 2], device=DEV)
        close(F.cross_entropy(x, good), tF.cross_entropy(x, good), 1e-5, 1e-5, "deferred: a valid call")
        _functional.sync_errors()
    finally:
        BL.check_targets = True


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("variant", ["plain", "weight_smoothing", "ignore"])
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_fused_gradient(reduction, variant, dt):
    """cross_entropy_with_grad (one fused kernel) == forward + the recomputing backward."""
    x, t, w, ignore, ls = ce_case(dt, 4097, variant, 9, "fused")
    xr = x.clone().requires_grad_()
    out = F.cross_entropy(xr, t, weight=w, ignore_index=ignore, reduction=reduction, label_smoothing=ls)
    dy = torch.ones_like(out) if reduction != "none" else randn(out.shape, dt, "fused-dy")
    (g,) = torch.autograd.grad(out, xr, dy)
    out2, g2 = F.cross_entropy_with_grad(x, t, weight=w, ignore_index=ignore, reduction=reduction,
                                         label_smoothing=ls, grad_scale=dy if reduction == "none" else None)
    # Not bit-equal: the loss alone reads a row with up to 64 threads, the fused kernel with up to 512
    # (kClassLossOnlyMaxTpr), so the row sums are added in another order (last bits; one bf16 ulp).
    lrt = 1e-6 if dt == torch.float32 else 2.0 ** -8
    close(out2, out.detach(), lrt, 1e-7, f"fused loss {reduction} {variant}")
    close(g2, g, 1e-6, 1e-7, f"fused gradient {reduction} {variant}")
    xi = x.clone()
    _, g3 = F.cross_entropy_with_grad(xi, t, weight=w, ignore_index=ignore, reduction=reduction, label_smoothing=ls,
                                      grad_scale=dy if reduction == "none" else None, inplace=True)
    assert g3.data_ptr() == xi.data_ptr()
    close(g3, g2, 0, 0, "in-place fused gradient")


@pytest.mark.parametrize("path", ["fused", "recompute", "with_grad"])
@pytest.mark.parametrize("n", [7, 4097, 128256])
def test_ignore_index_inside_classes(path, n):
    """Regression: ignore_index = 0 with every target in [0, C) (rows of class 0 skipped) raises
    nothing and matches torch on every path; a -100 target is then out of range, and raises the
    IndexError torch raises for it (on CUDA torch device-asserts, so the reference is not run)."""
    dt = torch.bfloat16 if n > 4097 else torch.float32
    x = randn((9, n), dt, "ign-in", n, scale=2.0)
    t = randint((9,), n, "ign-in-t", n)
    t[::4] = 0
    old = BL.fused_autograd
    BL.fused_autograd = path != "recompute"
    try:
        xr = x.clone().requires_grad_()
        if path == "with_grad":
            out, g = F.cross_entropy_with_grad(x, t, ignore_index=0)
        else:
            out = F.cross_entropy(xr, t, ignore_index=0)
            (g,) = torch.autograd.grad(out, xr)
        xu = x.to(UP[dt]).requires_grad_()
        ref = tF.cross_entropy(xu, t, ignore_index=0)
        (gr,) = torch.autograd.grad(ref, xu)
        close(out, ref.detach().to(dt), *loss_tol("cross_entropy", dt, ref.detach(), "mean"), f"loss {path} n={n}")
        rtol, atol = tol("cross_entropy", dt, bw=True)
        close(g, gr.to(dt), rtol, atol / 9, f"grad {path} n={n}")
        assert torch.equal(g[::4], torch.zeros_like(g[::4])), "rows whose target is ignore_index get no gradient"
        bad = t.clone()
        bad[1] = -100
        with pytest.raises(IndexError, match="ignore_index=0"):
            if path == "with_grad":
                F.cross_entropy_with_grad(x, bad, ignore_index=0)
            else:
                F.cross_entropy(x.clone().requires_grad_(), bad, ignore_index=0)
    finally:
        BL.fused_autograd = old


# ---- the cluster kernel (fused forward + gradient of long rows on sm_90) ------------------------------
def cluster_ctas(dt, n):
    """CTAs of the thread-block cluster a row of n classes takes (0: the streaming kernel); mirrors
    LossPlan::select (512 threads x 4 16-byte vectors a CTA, 2..16 CTAs)."""
    es = torch.tensor([], dtype=dt).element_size()
    per_cta = 512 * 4 * (16 // es)
    if n % (16 // es) or n <= per_cta or n > 16 * per_cta:
        return 0
    return -(-n // per_cta)


# (dtype, classes): just past one CTA, LLM vocabularies (32000, 50304, 128256, 151936: 10 CTAs, a
# non-portable cluster size), the longest a cluster holds (16 CTAs), and a length past it or not a
# multiple of a vector (the streaming kernel).
CLUSTER_CASES = [(torch.bfloat16, 16392), (torch.bfloat16, 32000), (torch.bfloat16, 128256),
                 (torch.bfloat16, 151936), (torch.bfloat16, 262144), (torch.float16, 50304),
                 (torch.float32, 8200), (torch.float32, 100000), (torch.float64, 4098),
                 (torch.float64, 65536), (torch.bfloat16, 50257), (torch.bfloat16, 262152)]


@pytest.mark.parametrize("dt,n", CLUSTER_CASES, ids=[f"{IDS[d]}-{n}" for d, n in CLUSTER_CASES])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("variant", CE_VARIANTS)
def test_cross_entropy_cluster(dt, n, reduction, variant):
    """The fused forward + gradient (autograd's path for mean/sum, cross_entropy_with_grad for
    none) of long rows vs torch; the variant it takes on an sm_90 GPU."""
    rows = 4
    x, t, w, ignore, ls = ce_case(dt, n, variant, rows, "cluster")
    up = UP[dt]
    dy = None if reduction != "none" else randn((rows,), dt, "cluster-dy", n, variant)
    if reduction == "none":
        out, gx = F.cross_entropy_with_grad(x, t, weight=w, ignore_index=ignore, reduction=reduction,
                                            label_smoothing=ls, grad_scale=dy)
    else:
        xr = x.clone().requires_grad_()
        out = F.cross_entropy(xr, t, weight=w, ignore_index=ignore, reduction=reduction, label_smoothing=ls)
        (gx,) = torch.autograd.grad(out, xr)
    xu = x.to(up).requires_grad_()
    ref = tF.cross_entropy(xu, t, weight=w.to(up) if w is not None else None, ignore_index=ignore,
                           reduction=reduction, label_smoothing=ls)
    (gr,) = torch.autograd.grad(ref, xu, dy.to(up) if dy is not None else None)
    what = f"cluster cross_entropy {IDS[dt]} n={n} {reduction} {variant}"
    close(out, ref.detach().to(dt), *loss_tol("cross_entropy", dt, ref.detach(), reduction), what)
    rtol, atol = tol("cross_entropy", dt, bw=True)
    if reduction == "mean":
        atol = atol / rows
    if variant != "ignore":
        not_degenerate(gr, what + " grad")
    close(gx, gr.to(dt), rtol, atol, what + " grad")
    if torch.cuda.get_device_capability() >= (9, 0):
        sku = BL.loss_sku("cross_entropy", {"input": x, "target": t, "weight": w, "out": out,
                                            "grad_input": torch.empty_like(x)},
                          {"ignore_index": float(ignore), "label_smoothing": ls}, reduction, fused_grad=True)
        ctas = cluster_ctas(dt, n)
        want = f"cluster-rows(ctas={ctas})-vec16" if ctas else "cta-rows(tpr=512)"
        assert want in sku, f"{what}: expected layout {want}, got {sku}"


def test_cross_entropy_cluster_special_rows():
    """The cluster kernel over rows with a NaN logit, -inf logits, an all -inf row, an ignored row
    and an out-of-range target (NaN loss and gradient, IndexError), in place and repeated: the
    loss and the gradient are bit-identical run to run."""
    dt, n = torch.bfloat16, 128256
    x = randn((6, n), dt, "cl-special", scale=2.0)
    x[0, 70000] = float("nan")
    x[1, ::3] = float("-inf")
    x[2] = float("-inf")
    t = torch.tensor([3, 4, 5, 100000, 0, 128255], device=DEV)
    t[4] = -100
    xr = x.clone().requires_grad_()
    out = F.cross_entropy(xr, t, reduction="sum")
    (g,) = torch.autograd.grad(out, xr)
    xu = x.float().requires_grad_()
    ref = tF.cross_entropy(xu, t, reduction="none")
    (gr,) = torch.autograd.grad(ref.sum(), xu)
    assert torch.isnan(out), "a NaN row makes the sum NaN"
    close(g, gr.to(dt), tol("cross_entropy", dt, True)[0], 1e-6, "special rows grad")
    o2, g2 = F.cross_entropy_with_grad(x, t, reduction="none")
    close(o2, ref.detach().to(dt), *tol("cross_entropy", dt), "special rows loss")
    o3, g3 = F.cross_entropy_with_grad(x, t, reduction="none")
    assert torch.equal(o2.nan_to_num(), o3.nan_to_num()) and torch.equal(g2.nan_to_num(), g3.nan_to_num()), \
        "the cluster kernel is not bit-stable"
    xi = x.clone()
    _, g4 = F.cross_entropy_with_grad(xi, t, reduction="none", inplace=True)
    assert g4.data_ptr() == xi.data_ptr()
    assert torch.equal(g4.nan_to_num(), g2.nan_to_num()), "in-place gradient differs"
    bad = t.clone()
    bad[5] = n
    with pytest.raises(IndexError):
        F.cross_entropy_with_grad(x, bad)
    BL.check_targets = False
    try:
        o5, g5 = F.cross_entropy_with_grad(x, bad, reduction="none")
        assert torch.isnan(o5[5]) and torch.isnan(g5[5].float()).all(), "an out-of-range row is NaN"
        assert torch.equal(o5[[1, 3, 4]], o2[[1, 3, 4]]), "other rows are untouched by a bad one"
    finally:
        BL.check_targets = True


# The persistent cluster kernel with more rows than co-resident clusters (each cluster walks
# several rows, the next row's copies in flight), ignored rows alone and in runs.
PERSIST_CASES = [(torch.bfloat16, 128256), (torch.bfloat16, 32000), (torch.float32, 100000),
                 (torch.float64, 65536)]


@pytest.mark.parametrize("dt,n", PERSIST_CASES, ids=[f"{IDS[d]}-{n}" for d, n in PERSIST_CASES])
@pytest.mark.parametrize("ls", [0.0, 0.1])
def test_cross_entropy_cluster_persistent(dt, n, ls):
    """More rows than the device co-schedules clusters, ignored rows alone and in runs, mean and
    none vs torch; bit-identical when repeated."""
    rows = 600
    x = randn((rows, n), dt, "cl-persist", n, scale=3.0)
    t = randint((rows,), n, "cl-persist-t", n)
    t[::7] = -100
    t[100:140] = -100
    xr = x.clone().requires_grad_()
    out = F.cross_entropy(xr, t, reduction="mean", label_smoothing=ls)
    (gx,) = torch.autograd.grad(out, xr)
    xu = x.to(UP[dt]).requires_grad_()
    ref = tF.cross_entropy(xu, t, reduction="mean", label_smoothing=ls)
    (gr,) = torch.autograd.grad(ref, xu)
    what = f"persistent cluster cross_entropy {IDS[dt]} n={n} ls={ls}"
    close(out, ref.detach().to(dt), *loss_tol("cross_entropy", dt, ref.detach(), "mean"), what)
    rtol, atol = tol("cross_entropy", dt, bw=True)
    not_degenerate(gr, what + " grad")
    close(gx, gr.to(dt), rtol, atol / rows, what + " grad")
    o2, g2 = F.cross_entropy_with_grad(x, t, reduction="none", label_smoothing=ls)
    ref_none = tF.cross_entropy(x.to(UP[dt]), t, reduction="none", label_smoothing=ls)
    close(o2, ref_none.to(dt), *tol("cross_entropy", dt), what + " none")
    o3, g3 = F.cross_entropy_with_grad(x, t, reduction="none", label_smoothing=ls)
    assert torch.equal(o2, o3) and torch.equal(g2, g3), f"{what}: not bit-stable"


@pytest.mark.sanitizer
def test_cluster_poisoned_outputs():
    """Every gradient element of the cluster kernel is written (3 rows of 10 CTAs: one live, one
    ignored, one out of range)."""
    dt, n = torch.bfloat16, 151936
    x = randn((3, n), dt, "cl-poison")
    t = torch.tensor([5, -100, n + 3], device=DEV)
    g = torch.full_like(x, float("nan"))
    out = torch.full((3,), float("nan"), dtype=dt, device=DEV)
    stream = torch.cuda.current_stream().cuda_stream
    _C.loss("cross_entropy", False, {"input": dl(x), "target": dl(t), "out": dl(out), "grad_input": dl(g)}, {},
            "none", stream, None, True, True)
    torch.cuda.synchronize()
    assert torch.isfinite(g[:2].float()).all() and torch.isfinite(out[:2].float()).all(), "unwritten elements"
    assert torch.isnan(g[2].float()).all() and torch.isnan(out[2]), "the out-of-range row is NaN"


def test_fused_backward_runs_once():
    x = randn((4, 10), torch.float32, "once").requires_grad_()
    t = randint((4,), 10, "once-t")
    out = F.cross_entropy(x, t)
    torch.autograd.grad(out, x, retain_graph=True)
    with pytest.raises(RuntimeError, match="fused_autograd"):
        torch.autograd.grad(out, x)


@pytest.mark.parametrize("shape", [(4096, 4097), (8, 128256)])
def test_mean_is_deterministic(shape):
    dt = torch.bfloat16
    x = randn(shape, dt, "det", *shape, scale=2.0)
    t = randint((shape[0],), shape[1], "det-t", *shape)
    outs = [F.cross_entropy(x, t) for _ in range(3)]
    xr = x.clone().requires_grad_()
    grads = [torch.autograd.grad(F.cross_entropy(xr, t), xr)[0] for _ in range(2)]
    for o in outs[1:]:
        assert torch.equal(o, outs[0]), "the mean differs between runs"
    assert torch.equal(grads[0], grads[1]), "the gradient differs between runs"
    m = [F.mse_loss(x, x.flip(0)) for _ in range(3)]
    assert torch.equal(m[0], m[1]) and torch.equal(m[1], m[2]), "mse mean differs between runs"


def test_llm_vocabulary():
    """[64, 128256] bf16 (the fused path's shape class), forward and backward vs torch."""
    dt = torch.bfloat16
    x = randn((64, 128256), dt, "llm", scale=2.0)
    t = randint((64,), 128256, "llm-t")
    t[5] = -100
    xr = x.clone().requires_grad_()
    out = F.cross_entropy(xr, t)
    xu = x.float().requires_grad_()
    ref = tF.cross_entropy(xu, t)
    close(out, ref.detach().to(dt), *tol("cross_entropy", dt), "llm loss")
    (g,) = torch.autograd.grad(out, xr)
    (gr,) = torch.autograd.grad(ref, xu)
    close(g, gr.to(dt), tol("cross_entropy", dt, True)[0], 1e-7, "llm grad")


@pytest.mark.sanitizer
@pytest.mark.parametrize("n", [7, 4097])
def test_class_poisoned_outputs(n):
    """Every gradient element and per-row output is written: outputs start as NaN."""
    dt = torch.bfloat16
    x = randn((33, n), dt, "poison", n)
    t = randint((33,), n, "poison-t", n)
    t[3] = -100
    stream = torch.cuda.current_stream().cuda_stream
    nan = float("nan")
    out = torch.full((33,), nan, dtype=dt, device=DEV)
    lse = torch.full((33,), nan, device=DEV)
    _C.loss("cross_entropy", False, {"input": dl(x), "target": dl(t), "out": dl(out), "save_lse": dl(lse)}, {},
            "none", stream)
    g = torch.full_like(x, nan)
    _C.loss("cross_entropy", True, {"dy": dl(torch.ones(33, dtype=dt, device=DEV)), "input": dl(x), "target": dl(t),
                                    "lse": dl(lse), "grad_input": dl(g)}, {}, "none", stream)
    torch.cuda.synchronize()
    for name, v in (("out", out), ("lse", lse), ("grad", g)):
        assert torch.isfinite(v.float()).all(), f"n={n}: {name} has unwritten (NaN) elements"


# ---- pointwise losses -------------------------------------------------------------------------------------
def pw_inputs(op, dt, shape, tshape, variant, transposed=False):
    """(tensor inputs in torch's positional order, keyword arguments) for one case. `transposed`
    makes the 2-D tensors of the input's shape transposed views (a strided iteration)."""
    s = (op, IDS[dt], shape, tshape, variant, transposed)

    def mk(fn, shp, *args, **kw):
        if transposed and len(shp) == 2:
            return fn(shp[::-1], *args, **kw).t()
        return fn(shp, *args, **kw)

    x = mk(randn, shape, dt, "x", *s)
    t = mk(randn, tshape, dt, "t", *s)
    kw = {}
    if op == "smooth_l1_loss":
        kw["beta"] = {"default": 1.0, "zero": 0.0, "half": 0.5}[variant]
    elif op == "huber_loss":
        kw["delta"] = {"default": 1.0, "two": 2.0}[variant]
    elif op == "binary_cross_entropy":
        x = mk(rand, shape, dt, "x", *s, lo=0.02, hi=0.98)
        t = mk(rand, tshape, dt, "t", *s)
        if variant == "weight":
            kw["weight"] = rand(shape[-1:], dt, "w", *s, lo=0.5, hi=2.0)
    elif op == "binary_cross_entropy_with_logits":
        t = mk(rand, tshape, dt, "t", *s)
        if variant in ("weight", "both"):
            kw["weight"] = rand(shape[-1:], dt, "w", *s, lo=0.5, hi=2.0)
        if variant in ("pos_weight", "both"):
            kw["pos_weight"] = rand(shape[-1:], dt, "pw", *s, lo=0.5, hi=3.0)
    elif op == "kl_div":
        x = torch.log_softmax(x.to(UP[dt]), -1).to(dt)
        t = torch.softmax(mk(randn, tshape, torch.float64, "tt", *s), -1).to(dt)
        if variant == "log_target":
            t = torch.log(t.to(UP[dt])).to(dt)
            kw["log_target"] = True
    elif op == "poisson_nll_loss":
        t = mk(rand, tshape, dt, "t", *s, lo=0.0, hi=5.0)
        kw["log_input"] = "exp" not in variant
        kw["full"] = "full" in variant
        if not kw["log_input"]:
            x = mk(rand, shape, dt, "x", *s, lo=0.1, hi=4.0)
    elif op == "gaussian_nll_loss":
        kind = variant.split("_")[0]
        vshape = {"same": shape, "short": shape[:-1], "last1": shape[:-1] + (1,)}[kind]
        kw["var"] = (mk if kind == "same" else (lambda fn, shp, *a, **k: fn(shp, *a, **k)))(
            rand, vshape, dt, "var", *s, lo=0.05, hi=2.0)
        kw["full"] = variant.endswith("full")
    elif op in ("soft_margin_loss", "hinge_embedding_loss"):
        t = mk(signs, tshape, dt, "t", *s)
        if op == "hinge_embedding_loss":
            kw["margin"] = {"default": 1.0, "half": 0.5}[variant]
    elif op == "margin_ranking_loss":
        x2 = mk(randn, shape, dt, "x2", *s)
        t = mk(signs, tshape, dt, "t", *s)
        kw["margin"] = {"default": 0.0, "margin": 0.3}[variant]
        return [x, x2, t], kw
    return [x, t], kw


PW_CASES = {  # op: (variants, torch differentiates the target, broadcast target allowed)
    "mse_loss": (["default"], True, True),
    "l1_loss": (["default"], True, True),
    "smooth_l1_loss": (["default", "zero", "half"], True, True),
    "huber_loss": (["default", "two"], True, True),
    "binary_cross_entropy": (["default", "weight"], True, False),
    "binary_cross_entropy_with_logits": (["default", "weight", "pos_weight", "both"], True, False),
    "kl_div": (["default", "log_target"], True, True),
    "poisson_nll_loss": (["log", "log_full", "exp", "exp_full"], True, True),
    "gaussian_nll_loss": (["same", "short", "last1", "same_full"], True, False),
    "soft_margin_loss": (["default"], False, True),
    "hinge_embedding_loss": (["default", "half"], False, True),
    "margin_ranking_loss": (["default", "margin"], True, False),  # torch: all three of one dimension
}
PW_PARAMS = [(op, v) for op, (vs, _, _) in PW_CASES.items() for v in vs]
PW_SHAPES = {"matrix": ((33, 129), (33, 129)), "odd1d": ((4097,), (4097,)), "broadcast": ((7, 129), (129,)),
             "transposed": ((33, 129), (33, 129))}


@pytest.mark.parametrize("op,variant", PW_PARAMS, ids=[f"{o}-{v}" for o, v in PW_PARAMS])
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: IDS[d])
@pytest.mark.parametrize("reduction", REDUCTIONS + ["batchmean"])
@pytest.mark.parametrize("layout", list(PW_SHAPES))
def test_pointwise(op, variant, dt, reduction, layout):
    if reduction == "batchmean" and op != "kl_div":
        pytest.skip("batchmean is kl_div's")
    _, target_grad, bcast_ok = PW_CASES[op]
    if layout == "broadcast" and not bcast_ok:
        pytest.skip(f"{op}: torch requires the target's shape to equal the input's")
    shape, tshape = PW_SHAPES[layout]
    tensors, kw = pw_inputs(op, dt, shape, tshape, variant, transposed=layout == "transposed")
    up = UP[dt]
    ours = [t.clone().requires_grad_() for t in tensors]  # clone keeps a transposed view's strides
    refs = [t.detach().to(up).requires_grad_() for t in tensors]
    if not target_grad:
        ours[-1].requires_grad_(False)
        refs[-1].requires_grad_(False)
    extra = {k: (v.clone().requires_grad_() if k == "var" else v) for k, v in kw.items()}
    extra_ref = {k: (v.detach().to(up).requires_grad_() if k == "var" else
                     (v.to(up) if isinstance(v, torch.Tensor) else v)) for k, v in kw.items()}
    red = {"reduction": reduction}
    with _nowarn():
        out = getattr(F, op)(*ours, **extra, **red)
        ref = getattr(tF, op)(*refs, **extra_ref, **red)
    what = f"{op}[{variant}] {IDS[dt]} {reduction} {layout}"
    close(out, ref.detach().to(dt), *loss_tol(op, dt, ref.detach(), reduction), what)
    dy = randn(out.shape, dt, "dy", op, variant, IDS[dt], reduction, layout)
    leaves = [t for t in ours if t.requires_grad] + ([extra["var"]] if "var" in extra else [])
    rleaves = [t for t in refs if t.requires_grad] + ([extra_ref["var"]] if "var" in extra_ref else [])
    gs = torch.autograd.grad(out, leaves, dy)
    grs = torch.autograd.grad(ref, rleaves, dy.to(up))
    rtol, atol = tol(op, dt, bw=True)
    if reduction in ("mean", "batchmean"):
        atol = atol / max(1, tensors[0].numel() if reduction == "mean" else tensors[0].shape[0])
    if dt == torch.float16:  # a mean's gradient can sit among f16's subnormals: one step is 2^-24
        atol = max(atol, 2.0**-24)
    bounds = _broadcast_grad_bounds(op, ours, extra, red, dy, dt, [t.shape for t in leaves])
    for i, (g, gr) in enumerate(zip(gs, grs)):
        if bounds[i] is None:
            close(g, gr.to(dt), rtol, atol, f"{what} grad {i}")
        else:  # |ours - exact| <= rtol |exact| + atol + the rounding of every summed term
            err = (g.to(gr.dtype) - gr).abs()
            lim = rtol * gr.abs() + atol + bounds[i]
            assert bool((err <= lim).all()), f"{what} grad {i}: {int((err > lim).sum())} element(s) past the bound"


def _broadcast_grad_bounds(op, tensors, kw, red, dy, dt, leaf_shapes):
    """For 16-bit dtypes, the gradient of a broadcast input is a sum of per-element terms, each
    rounded to the storage dtype before the (f32) sum, as torch's own autograd does; bound that
    rounding by u * sum |term| (u = half an ulp). None for leaves that are not broadcast."""
    u = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}.get(dt)
    full = tuple(tensors[0].shape)
    if u is None or all(tuple(s) == full for s in leaf_shapes):
        return [None] * len(leaf_shapes)

    def materialize(t):  # an upcast copy at the full shape (gaussian's short var is [..., 1])
        t = t.detach().double()
        if t.dim() == len(full) - 1 and tuple(t.shape) == full[:-1]:
            t = t.unsqueeze(-1)
        return t.expand(full).clone().requires_grad_()

    mats = [materialize(t) if t.requires_grad else t.detach().double() for t in tensors]
    extra = {k: (materialize(v) if k == "var" else (v.double() if isinstance(v, torch.Tensor) else v))
             for k, v in kw.items()}
    with _nowarn():
        loss = getattr(tF, op)(*mats, **extra, **red)
    mleaves = [m for m in mats if m.requires_grad] + ([extra["var"]] if "var" in extra else [])
    terms = torch.autograd.grad(loss, mleaves, dy.double())
    out = []
    for term, shape in zip(terms, leaf_shapes):
        if tuple(shape) == full:
            out.append(None)
            continue
        a = term.abs()
        a = a.sum(-1) if len(shape) == len(full) - 1 and tuple(shape) == full[:-1] else a.sum_to_size(shape)
        # Each term rounds by at most u |term|, or half a subnormal step (f16: 2^-25) below the normals.
        floor = (2.0**-25 if dt == torch.float16 else 0.0) * (term.numel() / max(1, a.numel()))
        out.append(u * a.reshape(shape) + floor)
    return out


class _nowarn:
    """Silences torch's (and our) broadcasting / kl_div 'mean' warnings inside a test."""

    def __enter__(self):
        import warnings
        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *a):
        return self._w.__exit__(*a)


@pytest.mark.sanitizer
@pytest.mark.parametrize("op", ["mse_loss", "binary_cross_entropy_with_logits", "gaussian_nll_loss"])
def test_pointwise_poisoned_outputs(op):
    dt = torch.bfloat16
    tensors, kw = pw_inputs(op, dt, (33, 129), (33, 129), {"mse_loss": "default",
                                                          "binary_cross_entropy_with_logits": "both",
                                                          "gaussian_nll_loss": "last1"}[op])
    names = ROWS[op]["inputs"]
    roles = dict(zip(names, tensors))
    roles.update({k: v for k, v in kw.items() if isinstance(v, torch.Tensor)})
    stream = torch.cuda.current_stream().cuda_stream
    params = {k: float(v) for k, v in kw.items() if not isinstance(v, torch.Tensor)}
    out = torch.full((33, 129), float("nan"), dtype=dt, device=DEV)
    _C.loss(op, False, {**{k: dl(v) for k, v in roles.items()}, "out": dl(out)}, params, "none", stream)
    grads = {f"grad_{g}": torch.full_like(roles[g], float("nan")) for g in ROWS[op]["grads"]}
    bw = {**{k: dl(v) for k, v in roles.items()}, "dy": dl(torch.ones((33, 129), dtype=dt, device=DEV)),
          **{k: dl(v) for k, v in grads.items()}}
    n = _C.loss_workspace_size(op, True, {**{k: dl(v) for k, v in roles.items()},
                                          "dy": dl(torch.ones((33, 129), dtype=dt, device=DEV)),
                                          **{k: dl(v) for k, v in grads.items()}}, params, "none")
    ws = torch.full((max(n, 1),), 255, dtype=torch.uint8, device=DEV)
    _C.loss(op, True, bw, params, "none", stream, dl(ws))
    torch.cuda.synchronize()
    assert torch.isfinite(out.float()).all(), f"{op}: out has unwritten elements"
    for k, v in grads.items():
        assert torch.isfinite(v.float()).all(), f"{op}: {k} has unwritten elements"


def test_pointwise_empty_and_errors():
    e = torch.empty((0, 5), device=DEV)
    assert torch.isnan(F.mse_loss(e, e)), "mean over zero elements is NaN (torch)"
    assert F.mse_loss(e, e, reduction="sum").item() == 0
    assert F.mse_loss(e, e, reduction="none").shape == (0, 5)
    x = randn((4, 5), torch.float32, "err")
    with pytest.raises(ValueError):
        F.binary_cross_entropy(torch.sigmoid(x), torch.rand(4, 1, device=DEV))
    with pytest.raises(ValueError):
        F.binary_cross_entropy_with_logits(x, torch.rand(5, device=DEV))
    with pytest.raises(ValueError):
        F.gaussian_nll_loss(x, x, torch.ones(3, device=DEV))
    with pytest.raises(ValueError):
        F.gaussian_nll_loss(x, x, -torch.ones(4, 5, device=DEV))
    with pytest.raises(RuntimeError):
        F.margin_ranking_loss(x, x, torch.ones(5, device=DEV))
    with pytest.raises(RuntimeError, match="beta"):
        F.smooth_l1_loss(x, x, beta=-1.0)
    with pytest.raises(ValueError):
        F.mse_loss(x, x, reduction="avg")
    with pytest.raises(RuntimeError):
        F.mse_loss(x.long(), x.long())


def test_pointwise_large():
    """A reduction across many parts ([16384, 4096] bf16: 1024 first-stage parts)."""
    dt = torch.bfloat16
    x = randn((16384, 4096), dt, "large")
    y = randn((16384, 4096), dt, "large-y")
    out = F.mse_loss(x, y)
    ref = tF.mse_loss(x.float(), y.float())
    close(out, ref.to(dt), 1.6e-2, 1e-5, "mse [16384, 4096]")
    xr = x.clone().requires_grad_()
    (g,) = torch.autograd.grad(F.mse_loss(xr, y), xr)
    expect = (2.0 / x.numel()) * (x.float() - y.float())
    close(g, expect.to(dt), 1.6e-2, 1e-12, "mse grad [16384, 4096]")


# ---- linear_cross_entropy -----------------------------------------------------------------------------------
U = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8, torch.float32: 2.0**-24, torch.float64: 2.0**-53}
LCE_VARIANTS = ["plain", "ignore", "smoothing", "weighted"]


def lce_case(dt, n, v, h, variant, *seed):
    x = randn((n, h), dt, "lce-x", IDS[dt], n, v, h, variant, *seed)
    w = randn((v, h), dt, "lce-w", IDS[dt], n, v, h, variant, *seed, scale=3.0 / h**0.5)
    t = randint((n,), v, "lce-t", IDS[dt], n, v, h, variant, *seed)
    ignore, ls = -100, 0.0
    if variant == "ignore":
        t[::3] = -100
    if variant == "smoothing":
        ls = 0.1
    if variant == "weighted":  # class weights with ignored rows and label smoothing (torch's weighted rule)
        t[::4] = -100
        ls = 0.1
    return x, w, t, ignore, ls


def lce_class_weight(dt, v, variant, *seed):
    """cross_entropy's per-class weight for the "weighted" variant (in [0.25, 2)), else None."""
    if variant != "weighted":
        return None
    g = gen("lce-cw", IDS[dt], v, *seed)
    return (0.25 + 1.75 * torch.rand((v,), generator=g, dtype=torch.float64)).to(dt).to(DEV)


def lce_reference(x, w, t, ignore, ls, reduction, dy, cw=None):
    """torch: F.cross_entropy(F.linear(x, w).to(up), t, weight=cw) and its gradients (the logits rounded to x's
    dtype by F.linear, the softmax in the upcast dtype), plus the operands of the gradient GEMMs for error bounds."""
    up = UP[x.dtype]
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    logits = tF.linear(xr, wr)
    ref = tF.cross_entropy(logits.to(up), t, weight=None if cw is None else cw.to(up), ignore_index=ignore,
                           reduction=reduction, label_smoothing=ls)
    gx, gw = torch.autograd.grad(ref, (xr, wr), dy.to(up), retain_graph=True)
    (dl,) = torch.autograd.grad(ref, (logits,), dy.to(up))
    return ref.detach(), gx, gw, dl


def gemm_bound(a, b, dt, k=4.0):
    """k x unit roundoff x (|A| |B|): how far two correct GEMMs of one rounding dtype (different
    accumulation orders, one rounding each) may disagree, plus the rounding of the output."""
    return k * U[dt] * (a.abs().double() @ b.abs().double())


def lce_check(x, w, t, ignore, ls, reduction, dy, out, gx, gw, chunks, what, cw=None):
    """Loss and gradients vs lce_reference. Two correct implementations may differ by a rounding of
    each logit (GEMM order), which moves the loss by about |logit| x u and each dlogit by a few
    |logit| x u relative; the gradient GEMMs then add their own roundings (and grad_weight one per
    chunk), so each gradient element is bounded by (8 + 4 max|logit| + chunks) x u x (|A| |B|)."""
    dt = x.dtype
    ref, grx, grw, dl = lce_reference(x, w, t, ignore, ls, reduction, dy, cw)
    zmax = float((x.double().abs() @ w.double().abs().t()).max()) if x.numel() and w.numel() else 0.0
    rtol, atol = loss_tol("linear_cross_entropy", dt, ref, reduction)
    close(out, ref.to(dt), rtol, atol + 4 * U[dt] * zmax, what)
    if gx is None:
        return
    rtol, atol = tol("linear_cross_entropy", dt, bw=True)
    k = 8.0 + 4.0 * zmax
    lce_close(gx, grx.to(dt), gemm_bound(dl, w, dt, k), rtol, atol, what + " d input")
    lce_close(gw, grw.to(dt), gemm_bound(dl.t(), x, dt, k + chunks), rtol, atol, what + " d weight")
    return grw


def lce_close(got, ref, bound, rtol, atol, what):
    assert got.shape == ref.shape and got.dtype == ref.dtype, f"{what}: {got.shape}/{got.dtype} vs {ref.shape}/{ref.dtype}"
    err = (got.double() - ref.double()).abs()
    lim = rtol * ref.double().abs() + atol + bound
    bad = ~(err <= lim)
    assert not bool(bad.any()), (f"{what}: {int(bad.sum())} of {err.numel()} element(s) past the bound; worst err "
                                 f"{float(err.max()):.3g}")


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: IDS[d])
@pytest.mark.parametrize("n", [1, 7, 300, 2049])
@pytest.mark.parametrize("v", [7, 129, 32000])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("variant", LCE_VARIANTS)
def test_linear_cross_entropy(dt, n, v, reduction, variant):
    if n == 2049 and v == 32000 and (dt in (torch.float16, torch.float64) or variant != "plain"):
        pytest.skip("[2049, 32000]: float32/bfloat16 plain cover the large case")
    h = 64
    chunk = {300: 128, 2049: 512}.get(n)  # chunk boundaries with a short last chunk (44 and 1 tokens)
    x, w, t, ignore, ls = lce_case(dt, n, v, h, variant)
    cw = lce_class_weight(dt, v, variant, n)
    # No autograd: the forward-only plan.
    with torch.no_grad():
        out0 = F.linear_cross_entropy(x, w, t, ignore_index=ignore, reduction=reduction, label_smoothing=ls,
                                      chunk_tokens=chunk, class_weight=cw)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    out = F.linear_cross_entropy(xr, wr, t, ignore_index=ignore, reduction=reduction, label_smoothing=ls,
                                 chunk_tokens=chunk, class_weight=cw)
    assert out.dtype == dt and out.shape == ((n,) if reduction == "none" else ())
    dy = randn(out.shape, dt, "lce-dy", IDS[dt], n, v, reduction, variant)
    gx, gw = torch.autograd.grad(out, (xr, wr), dy)
    what = f"linear_cross_entropy {IDS[dt]} n={n} v={v} {reduction} {variant}"
    chunks = (n + (chunk or n) - 1) // (chunk or n)
    lce_check(x, w, t, ignore, ls, reduction, dy, out0, None, None, chunks, what + " (no grad)", cw)
    grw = lce_check(x, w, t, ignore, ls, reduction, dy, out, gx, gw, chunks, what, cw)
    if n > 1 and v > 1 and variant == "plain":
        not_degenerate(grw, "linear_cross_entropy d weight")


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_linear_cross_entropy_in_dtype(dt):
    """Against torch entirely in the input dtype: F.cross_entropy(F.linear(x, w), t)."""
    x, w, t, ignore, ls = lce_case(dt, 300, 129, 64, "ignore", "dtype")
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    out = F.linear_cross_entropy(xr, wr, t, chunk_tokens=128)
    xt, wt = x.clone().requires_grad_(), w.clone().requires_grad_()
    ref = tF.cross_entropy(tF.linear(xt, wt), t)
    close(out, ref.detach(), *tol("linear_cross_entropy", dt), "in-dtype loss")
    g = torch.autograd.grad(out, (xr, wr))
    gr = torch.autograd.grad(ref, (xt, wt))
    for a, b, name in zip(g, gr, ("d input", "d weight")):
        # Both round the logits and dlogits to the dtype, possibly at different elements.
        close(a, b, tol("linear_cross_entropy", dt, True)[0], 2e-2 * float(b.abs().max()), f"in-dtype {name}")


@pytest.mark.parametrize("v", [32000, 128256])
def test_linear_cross_entropy_long_rows(v):
    """LLM vocabularies in bfloat16: the fused gradient of a chunk on the cluster kernel (sm_90)."""
    dt = torch.bfloat16
    x, w, t, ignore, ls = lce_case(dt, 300, v, 128, "ignore", "long")
    for chunk in (None, 128):
        xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
        out = F.linear_cross_entropy(xr, wr, t, ignore_index=ignore, chunk_tokens=chunk)
        dy = torch.full((), 0.75, dtype=dt, device=DEV)
        gx, gw = torch.autograd.grad(out, (xr, wr), dy)
        lce_check(x, w, t, ignore, ls, "mean", dy, out, gx, gw, 3 if chunk else 1, f"v={v} chunk={chunk}")
    # class weights with label smoothing on the cluster kernel (weighted smoothing sums in the row pass)
    cw = lce_class_weight(dt, v, "weighted", "long")
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    out = F.linear_cross_entropy(xr, wr, t, ignore_index=ignore, label_smoothing=0.1, class_weight=cw)
    dy = torch.full((), 0.75, dtype=dt, device=DEV)
    gx, gw = torch.autograd.grad(out, (xr, wr), dy)
    lce_check(x, w, t, ignore, 0.1, "mean", dy, out, gx, gw, 1, f"v={v} weighted", cw)


def test_linear_cross_entropy_chunking_and_determinism():
    """The loss sums per-row losses in a fixed order whatever the chunking (only the GEMM's logits may
    change with the chunk's row count); repeated runs give identical losses and gradients."""
    dt = torch.float32
    x, w, t, _, _ = lce_case(dt, 2049, 129, 64, "ignore", "det")
    losses = [F.linear_cross_entropy(x, w, t, chunk_tokens=c) for c in (None, 512, 100, 1)]
    for c, l in zip((512, 100, 1), losses[1:]):
        close(l, losses[0], 1e-6, 1e-6, f"chunk_tokens={c}")
    runs = []
    for _ in range(2):
        xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
        out = F.linear_cross_entropy(xr, wr, t, chunk_tokens=512)
        runs.append((out, *torch.autograd.grad(out, (xr, wr))))
    for a, b in zip(runs[0], runs[1]):
        assert torch.equal(a, b), "linear_cross_entropy differs between runs"


def test_linear_cross_entropy_shapes_and_errors():
    dt = torch.float32
    # Leading dims: input [B, S, H], target [B, S].
    x = randn((3, 5, 64), dt, "lce-3d")
    w = randn((129, 64), dt, "lce-3d-w", scale=0.3)
    t = randint((3, 5), 129, "lce-3d-t")
    xr = x.clone().requires_grad_()
    out = F.linear_cross_entropy(xr, w, t, reduction="none")
    assert out.shape == (3, 5)
    ref = tF.cross_entropy(tF.linear(x.double(), w.double()).reshape(15, 129), t.reshape(15), reduction="none")
    close(out, ref.reshape(3, 5).float(), 1e-5, 1e-5, "[B, S, H] loss")
    (g,) = torch.autograd.grad(out.sum(), xr)
    assert g.shape == x.shape
    # Empty batch: mean NaN, sum 0, zero weight gradient.
    e = torch.empty((0, 64), device=DEV, requires_grad=True)
    wr = w.clone().requires_grad_()
    te = torch.empty((0,), dtype=torch.int64, device=DEV)
    assert torch.isnan(F.linear_cross_entropy(e, wr, te))
    s = F.linear_cross_entropy(e, wr, te, reduction="sum")
    assert s.item() == 0
    ge, gw = torch.autograd.grad(s, (e, wr))
    assert ge.shape == (0, 64) and torch.equal(gw, torch.zeros_like(gw))
    # Out-of-range targets raise; refused shapes and dtypes.
    with pytest.raises(IndexError):
        F.linear_cross_entropy(x.reshape(15, 64), w, torch.full((15,), 129, device=DEV))
    with pytest.raises(RuntimeError):
        F.linear_cross_entropy(x, w.double(), t)
    with pytest.raises(RuntimeError):
        F.linear_cross_entropy(x, w[:, :63], t)
    with pytest.raises(ValueError):
        F.linear_cross_entropy(x, w, t[:, :4])
    # A non-contiguous weight (a transposed view) is copied, not refused.
    wt = randn((64, 129), dt, "lce-wt", scale=0.3).t()
    close(F.linear_cross_entropy(x, wt, t), tF.cross_entropy(tF.linear(x, wt).reshape(15, 129), t.reshape(15)),
          1e-5, 1e-5, "transposed weight")


# ---- losses over the last dim ------------------------------------------------------------------------------
def rows_inputs(op, dt, shape, variant, *seed):
    """(positional tensors, keyword arguments, which positional tensors take a gradient) for one case."""
    s = (op, IDS[dt], shape, variant) + seed
    rows = shape[:-1]
    d = shape[-1]
    if op == "cosine_embedding_loss":
        x1, x2 = randn(shape, dt, "x1", *s), randn(shape, dt, "x2", *s)
        y = signs(rows, dt, "y", *s)
        return [x1, x2, y], {"margin": {"default": 0.0, "margin": 0.3}[variant]}, [True, True, False]
    if op == "triplet_margin_loss":
        p, swap, margin = {"p2": (2, False, 1.0), "p1": (1, False, 1.0), "p3_swap": (3, True, 0.5),
                           "p2_swap": (2, True, 2.0)}[variant]
        a = randn(shape, dt, "a", *s)
        # Positives and negatives at similar distances: the hinge is active in some rows, not all.
        pos = (a.to(UP[dt]) + 0.6 * randn(shape, UP[dt], "p", *s)).to(dt)
        neg = (a.to(UP[dt]) + 0.6 * randn(shape, UP[dt], "n", *s)).to(dt)
        return [a, pos, neg], {"margin": margin, "p": p, "swap": swap}, [True, True, True]
    if op == "multi_margin_loss":
        x = randn(shape, dt, "x", *s, scale=0.5)
        y = randint(rows, d, "y", *s)
        p, margin, weighted = {"p1": (1, 1.0, False), "p2": (2, 1.0, False), "p1_weight": (1, 0.5, True),
                               "p2_weight": (2, 1.0, True)}[variant]
        kw = {"p": p, "margin": margin}
        if weighted:
            kw["weight"] = rand((d,), dt, "w", *s, lo=0.5, hi=2.0)
        return [x, y], kw, [True, False]
    if op == "multilabel_margin_loss":
        x = randn(shape, dt, "x", *s, scale=0.5)
        g = gen("labels", *s)
        lab = torch.full(shape, -1, dtype=torch.int64)
        flat = lab.reshape(-1, d)
        for r in range(flat.shape[0]):
            k = int(torch.randint(0, min(d, 6) + 1, (1,), generator=g))
            flat[r, :k] = torch.randint(0, d, (k,), generator=g)  # repeats allowed (they count twice)
            if k < d and variant == "garbage_after_end":
                flat[r, k + 1:] = torch.randint(0, d, (d - k - 1,), generator=g)  # after the -1: ignored
        return [x, lab.to(DEV)], {}, [True, False]
    # multilabel_soft_margin_loss
    x = randn(shape, dt, "x", *s)
    y = rand(shape, dt, "y", *s) if variant != "binary" else (rand(shape, torch.float64, "y", *s) < 0.5).to(dt)
    kw = {}
    if variant == "weight":
        kw["weight"] = rand((d,), dt, "w", *s, lo=0.5, hi=2.0)
    return [x, y], kw, [True, True]


ROWS_CASES = {"cosine_embedding_loss": ["default", "margin"], "triplet_margin_loss": ["p2", "p1", "p3_swap", "p2_swap"],
              "multi_margin_loss": ["p1", "p2", "p1_weight", "p2_weight"],
              "multilabel_margin_loss": ["default", "garbage_after_end"],
              "multilabel_soft_margin_loss": ["default", "binary", "weight"]}
ROWS_PARAMS = [(op, v) for op, vs in ROWS_CASES.items() for v in vs]
ROWS_SHAPES = {"matrix": (33, 129), "vector": (129,), "short": (65, 7), "long": (5, 4097), "empty": (0, 17)}


@pytest.mark.parametrize("op,variant", ROWS_PARAMS, ids=[f"{o}-{v}" for o, v in ROWS_PARAMS])
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: IDS[d])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("layout", list(ROWS_SHAPES) + ["transposed"])
def test_rows_losses(op, variant, dt, reduction, layout):
    shape = ROWS_SHAPES.get(layout, (33, 129))
    tensors, kw, grads = rows_inputs(op, dt, shape, variant)
    if layout == "transposed":  # column-major copies: the last dim is strided
        tensors = [t.t().contiguous().t() if t.dim() == 2 else t for t in tensors]
    up = UP[dt]
    # multilabel_margin_loss: torch's CUDA backward kernel races (pytorch/pytorch#84202, open): thread 0
    # adds the last label's sum to its target's gradient with no barrier before every thread scales its
    # elements by grad_output, so a target whose position mod 128 is >= 32 (another warp) loses that sum.
    # Its reference is torch's CPU kernel (the same formulas, sequential).
    rdev = "cpu" if op == "multilabel_margin_loss" else DEV
    ours = [t.clone().requires_grad_() if g else t for t, g in zip(tensors, grads)]  # clone keeps the strides
    refs = [t.detach().to(rdev, up).requires_grad_() if g else
            (t.to(rdev, up) if t.dtype.is_floating_point else t.to(rdev)) for t, g in zip(tensors, grads)]
    kw_ref = {k: (v.to(rdev, up) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    out = getattr(F, op)(*ours, **kw, reduction=reduction)
    what = f"{op}[{variant}] {IDS[dt]} {reduction} {layout}"
    assert out.dtype == dt
    if not tensors[0].numel() and reduction != "none" and op in ("multi_margin_loss", "multilabel_margin_loss"):
        # ATen returns these two reduced losses of an empty batch uninitialised (the output is resized,
        # then the kernel skipped; CUDA multilabel_margin even leaves it [0]): no reference. The value of
        # torch's other losses instead (e.g. mse_loss): a mean over no terms is NaN, a sum 0.
        close(out, torch.tensor(float("nan") if reduction == "mean" else 0.0, dtype=dt, device=DEV), 0.0, 0.0, what)
        return
    ref = getattr(tF, op)(*refs, **kw_ref, reduction=reduction)
    rtol, atol = loss_tol(op, dt, ref.detach(), reduction)
    if op == "triplet_margin_loss":
        # The loss is a difference of two p-norms of D terms each: its rounding error is relative to
        # the norms (summed in f32), not to the (smaller) difference.
        a, pos, neg = (t.detach().to(up) for t in refs[:3])
        pn = kw_ref.get("p", 2.0)
        norms = tF.pairwise_distance(a, pos, pn) + tF.pairwise_distance(a, neg, pn)
        atol = atol + 4 * rtol * float(norms.abs().max()) if norms.numel() else atol
    close(out, ref.detach().to(DEV, dt), rtol, atol, what)
    leaves = [t for t, g in zip(ours, grads) if g]
    rleaves = [t for t, g in zip(refs, grads) if g]
    if not out.numel() or not any(t.numel() for t in leaves):
        return
    dy = randn(out.shape, dt, "dy", op, variant, IDS[dt], reduction, layout)
    gs = torch.autograd.grad(out, leaves, dy)
    grs = torch.autograd.grad(ref, rleaves, dy.to(rdev, up))
    rtol, atol = tol(op, dt, bw=True)
    if reduction == "mean":
        atol = atol / max(1, out.numel() if out.dim() else tensors[0][..., 0].numel())
    if dt == torch.float16:
        atol = max(atol, 2.0**-24)
    for i, (g, gr) in enumerate(zip(gs, grs)):
        close(g, gr.to(DEV, dt), rtol, atol, f"{what} grad {i}")


@pytest.mark.parametrize("op", ["cosine_embedding_loss", "triplet_margin_loss", "multilabel_soft_margin_loss"])
def test_rows_broadcast(op):
    """A broadcast input (one row for every row) receives the sum of its gradients."""
    dt = torch.float32
    tensors, kw, grads = rows_inputs(op, dt, (33, 129), {"cosine_embedding_loss": "margin",
                                                          "triplet_margin_loss": "p2_swap",
                                                          "multilabel_soft_margin_loss": "weight"}[op])
    tensors[1] = tensors[1][:1].clone() if op != "multilabel_soft_margin_loss" else tensors[1][0].clone()
    ours = [t.clone().requires_grad_() if g else t for t, g in zip(tensors, grads)]
    refs = [t.detach().double().requires_grad_() if g else t.double() for t, g in zip(tensors, grads)]
    kw_ref = {k: (v.double() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    out = getattr(F, op)(*ours, **kw, reduction="sum")
    ref = getattr(tF, op)(*refs, **kw_ref, reduction="sum")
    close(out, ref.float(), 1e-5, 1e-4, f"{op} broadcast")
    gs = torch.autograd.grad(out, [t for t, g in zip(ours, grads) if g])
    grs = torch.autograd.grad(ref, [t for t, g in zip(refs, grads) if g])
    for i, (g, gr) in enumerate(zip(gs, grs)):
        close(g, gr.float(), 1e-5, 1e-4, f"{op} broadcast grad {i}")


def test_rows_errors_and_targets():
    x = randn((4, 10), torch.float32, "rows-err")
    with pytest.raises(IndexError):
        F.multi_margin_loss(x, torch.tensor([1, 10, 2, 3], device=DEV))
    lab = torch.full((4, 10), -1, dtype=torch.int64, device=DEV)
    lab[1, 0] = 12
    with pytest.raises(IndexError):
        F.multilabel_margin_loss(x, lab)
    BL.check_targets = False
    try:
        out = F.multi_margin_loss(x, torch.tensor([1, 10, 2, 3], device=DEV), reduction="none")
        assert torch.isnan(out[1]) and torch.isfinite(out[[0, 2, 3]]).all()
    finally:
        BL.check_targets = True
    with pytest.raises(ValueError):
        F.multi_margin_loss(x, torch.zeros(4, dtype=torch.int64, device=DEV), p=3)
    with pytest.raises(RuntimeError):
        F.cosine_embedding_loss(x, x, torch.ones(4, 1, device=DEV))
    with pytest.raises(RuntimeError):
        F.triplet_margin_loss(x, x, x[0])
    with pytest.raises(RuntimeError):
        F.multilabel_margin_loss(x, lab[:, :5])
    # multi_margin with a [C] input and a one-element target (torch's 'none' keeps the target's shape).
    v = randn((10,), torch.float32, "rows-vec")
    for tgt in (torch.tensor(3, device=DEV), torch.tensor([3], device=DEV)):
        o = F.multi_margin_loss(v, tgt, reduction="none")
        r = tF.multi_margin_loss(v, tgt, reduction="none")
        assert o.shape == r.shape
        close(o, r, 1e-6, 1e-6, "multi_margin [C]")


@pytest.mark.sanitizer
@pytest.mark.parametrize("op", list(ROWS_CASES))
def test_rows_poisoned_outputs(op):
    """Every per-row loss and gradient element is written: outputs start as NaN."""
    dt = torch.bfloat16
    tensors, kw, grads = rows_inputs(op, dt, (33, 129), ROWS_CASES[op][0])
    names = ROWS[op]["inputs"]
    roles = dict(zip(names, tensors))
    if "weight" in kw:
        roles["weight"] = kw.pop("weight")
    params = {k: float(v) for k, v in kw.items()}
    stream = torch.cuda.current_stream().cuda_stream
    out = torch.full((33,), float("nan"), dtype=dt, device=DEV)
    # multilabel_margin's forward takes a workspace (its "is a target" mask): poisoned too, it must be cleared.
    n = _C.loss_workspace_size(op, False, {**{k: dl(v) for k, v in roles.items()}, "out": dl(out)}, params, "none")
    ws = torch.full((max(n, 1),), 255, dtype=torch.uint8, device=DEV)
    _C.loss(op, False, {**{k: dl(v) for k, v in roles.items()}, "out": dl(out)}, params, "none", stream, dl(ws))
    gnames = [g for g in ROWS[op]["grads"]]
    gts = {f"grad_{g}": torch.full_like(roles[g], float("nan")) for g in gnames}
    bw = {**{k: dl(v) for k, v in roles.items()}, "dy": dl(torch.ones((33,), dtype=dt, device=DEV)),
          **{k: dl(v) for k, v in gts.items()}}
    n = _C.loss_workspace_size(op, True, dict(bw), params, "none")
    bw = {**{k: dl(v) for k, v in roles.items()}, "dy": dl(torch.ones((33,), dtype=dt, device=DEV)),
          **{k: dl(v) for k, v in gts.items()}}
    ws = torch.full((max(n, 1),), 255, dtype=torch.uint8, device=DEV)
    _C.loss(op, True, bw, params, "none", stream, dl(ws))
    torch.cuda.synchronize()
    assert torch.isfinite(out.float()).all(), f"{op}: out has unwritten elements"
    for k, v in gts.items():
        assert torch.isfinite(v.float()).all(), f"{op}: {k} has unwritten elements"
