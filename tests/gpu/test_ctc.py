"""GPU conformance of ctc_loss (include/baracuda/ops/ctc_loss.hpp, CtcLossPlan) vs PyTorch.

Reference = torch.nn.functional.ctc_loss (native kernel: cuDNN off) on the same inputs upcast (f64 for
f32/f64, f32 for f16/bf16), cast back; gradients through torch.autograd.grad of that reference.
Tolerances: torch.testing's defaults per dtype times the ctc_loss row's ``tol`` (2x for gradients),
plus the error model of a log-space recursion: log_alpha / log_beta carry ~eps * |nll| * sqrt(T) of
absolute rounding error (their magnitude grows linearly in t; f32 for f32/f16/bf16, f64 for f64), so
the loss gets that much atol and each gradient term exp(lcab + nll - lp) that much relative error,
times |g_n|. Shapes: T up to 1000, S up to 200 (600 for the 2-states-a-thread path), C up to 5000;
both target layouts, int32/int64 targets and lengths (lists, CPU and CUDA tensors), variable lengths,
every reduction, zero_infinity with infeasible alignments (NaN positions as ATen's small/large path),
blank != 0, unbatched inputs, strided log_probs and targets, empty batches, invalid inputs (the
error flag), repeatability bit for bit, poisoned outputs.
"""
import math
import warnings
import zlib

import pytest

from gpu_skip import DEVICE, skip_unless_ready  # noqa: E402

skip_unless_ready("ctc_loss")

import torch  # noqa: E402
import torch.nn.functional as tF  # noqa: E402

import baracuda.ctc as BC  # noqa: E402
import baracuda.functional as _functional  # noqa: E402
from baracuda import _C  # noqa: E402
from baracuda._autograd import current_stream, dl  # noqa: E402

# The torch-named function: baracuda.functional once it lists the ctc module, else the module itself.
F = _functional if hasattr(_functional, "ctc_loss") else BC
_ROWS = {r["name"]: r for r in _C.loss_ops()} if hasattr(_C, "loss_ops") else {}
# The ctc_loss row's tolerance multiplier (loss_ops.def); 4 is the value proposed for that row, used
# until the row lands in the table.
TOL = _ROWS["ctc_loss"]["tol"] if "ctc_loss" in _ROWS else 4.0
UP = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float64,
      torch.float64: torch.float64}
BASE_TOL = {torch.float32: (1.3e-6, 1e-5), torch.float64: (1e-7, 1e-7), torch.float16: (1e-3, 1e-5),
            torch.bfloat16: (1.6e-2, 1e-5)}
MATH_EPS = {torch.float64: 2.0 ** -52, torch.float32: 2.0 ** -23, torch.float16: 2.0 ** -23,
            torch.bfloat16: 2.0 ** -23}
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
IDS = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16"}


def gen(*parts):
    return torch.Generator(device="cpu").manual_seed(zlib.crc32("/".join(map(str, parts)).encode()))


def make_log_probs(T, N, C, dt, *seed, batched=True, scale=2.0):
    g = gen("lp", T, N, C, *seed)
    x = torch.randn((T, N, C) if batched else (T, C), generator=g, dtype=torch.float64) * scale
    return x.log_softmax(-1).to(dt).to(DEVICE)


def make_targets(N, S, C, blank, *seed):
    """[N, S] labels in [0, C) without the blank."""
    g = gen("tg", N, S, C, blank, *seed)
    t = torch.randint(0, max(C - 1, 1), (N, S), generator=g)
    return t + (t >= blank).long()


def make_lengths(N, T, S, *seed, feasible=True):
    """input lengths in [T/2, T] (the first = T), target lengths in [0, S] (the first = S); feasible:
    target_length <= input_length / 2 (room for a blank between every pair of labels)."""
    g = gen("len", N, T, S, *seed)
    il = torch.randint(max(T // 2, 0), T + 1, (N,), generator=g)
    tl = torch.randint(0, S + 1, (N,), generator=g)
    if N:
        il[0], tl[0] = T, S
    if feasible:
        tl = torch.minimum(tl, il // 2)
    return il, tl


def concat(targets, tl):
    return torch.cat([targets[n, :int(tl[n])] for n in range(targets.shape[0])]) if targets.shape[0] else \
        targets.new_zeros((0,))


def reference(lp, targets, il, tl, blank, reduction, zero_infinity, dy):
    """(loss, grad, per-item nll) of torch's native kernel on the upcast inputs."""
    x = lp.detach().to(UP[lp.dtype]).requires_grad_()
    t, i, tt = targets.to(DEVICE).long(), il.to(DEVICE).long(), tl.to(DEVICE).long()
    with torch.backends.cudnn.flags(enabled=False):
        out = tF.ctc_loss(x, t, i, tt, blank=blank, reduction=reduction, zero_infinity=zero_infinity)
        nll = tF.ctc_loss(x.detach(), t, i, tt, blank=blank, reduction="none", zero_infinity=False)
    (g,) = torch.autograd.grad(out, x, dy.to(out.dtype))
    if DEVICE != "cuda":  # the CPU kernel has ATen's small-path NaN pattern only (emulation runs)
        g = _aten_cuda_pattern(g, x.detach(), targets, il, tl, blank, reduction, zero_infinity, dy, nll)
    return out.detach(), g, nll.reshape(-1)


def _aten_cuda_pattern(g, x, targets, il, tl, blank, reduction, zero_infinity, dy, nll):
    batched = x.dim() == 3
    T, C = x.shape[0], x.shape[-1]
    N = x.shape[1] if batched else 1
    if zero_infinity or not (2 * T + (24 * N) // 10 + (2 * C) // 10) > 450:
        return g
    g = g.clone()
    il, tl, nll = il.reshape(-1).cpu(), tl.reshape(-1).cpu(), nll.reshape(-1).cpu()
    for n in range(N):
        if not math.isinf(float(nll[n])):
            continue
        sn, tn = int(tl[n]), int(il[n])
        if targets.dim() == 2:
            labels = set(targets[n if batched else 0, :sn].tolist())
        else:
            off = int(tl[:n].sum())
            labels = set(targets[off:off + sn].tolist())
        if reduction == "none":
            gr = dy.reshape(-1)[n] if batched else dy
        else:
            gr = dy if reduction == "sum" else dy / N / max(sn, 1)
        for c in range(C):
            if c != blank and c not in labels:
                if batched:
                    g[:tn, n, c] = torch.exp(x[:tn, n, c]) * gr
                else:
                    g[:tn, c] = torch.exp(x[:tn, c]) * gr
    return g


def grad_scale(dy, reduction, tl, N):
    """g_n of ctc_loss.hpp, per item."""
    if reduction == "none":
        return dy.reshape(-1).double().abs().cpu() * torch.ones(N, dtype=torch.float64)
    tlc = tl.reshape(-1).double().cpu().clamp(min=1)
    g = float(dy.double().abs())
    return g / N / tlc if reduction == "mean" else torch.full((N,), g, dtype=torch.float64)


def model_err(nll, T, dt, k):
    """k * eps * (|nll| + 1) * sqrt(T + 1) per item (0 where nll is not finite)."""
    a = nll.double().abs().cpu()
    a = torch.where(torch.isfinite(a), a, torch.zeros_like(a))
    return k * MATH_EPS[dt] * (a + 1) * math.sqrt(T + 1)


def assert_close(got, ref, rtol, atol, what):
    """|got - ref| <= atol + rtol |ref| elementwise (atol may be a tensor broadcasting to ref); NaN and
    inf positions (and infs' signs) must agree."""
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    assert got.dtype == ref.dtype, f"{what}: dtype {got.dtype} vs {ref.dtype}"
    g, r = got.detach().double().cpu(), ref.detach().double().cpu()
    gn, rn = torch.isnan(g), torch.isnan(r)
    assert torch.equal(gn, rn), f"{what}: NaN at {int(gn.sum())} positions, torch at {int(rn.sum())}"
    gi, ri = torch.isinf(g), torch.isinf(r)
    assert torch.equal(gi, ri) and torch.equal(g[gi], r[ri]), f"{what}: inf positions or signs differ"
    m = ~(gn | gi)
    lim = (torch.as_tensor(atol, dtype=torch.float64).expand_as(g) + rtol * r.abs())[m]
    diff = (g - r).abs()[m]
    if diff.numel() and not bool((diff <= lim).all()):
        k = int((diff - lim).argmax())
        raise AssertionError(f"{what}: {int((diff > lim).sum())}/{diff.numel()} elements outside tolerance; worst: "
                             f"got {g[m][k].item():.9g}, torch {r[m][k].item():.9g}, |diff| {diff[k].item():.3g} > "
                             f"{lim[k].item():.3g}")


def not_degenerate(ref, what):
    if ref.numel() > 8:
        frac = (ref != 0).double().mean().item()
        assert frac > 0.5, f"{what}: reference is mostly zeros ({frac:.2f} non-zero): degenerate test data"


def check(lp, targets, il, tl, blank=0, reduction="mean", zero_infinity=False, dy=None, il_arg=None, tl_arg=None,
          what="ctc"):
    """Forward and backward of baracuda vs the reference; returns (loss, grad)."""
    dt = lp.dtype
    batched = lp.dim() == 3
    T, N = lp.shape[0], (lp.shape[1] if batched else 1)
    loss_shape = (N,) if reduction == "none" and batched else ()
    if dy is None:
        dy = (torch.rand(loss_shape, generator=gen("dy", what), dtype=torch.float64) + 0.5).to(dt).to(DEVICE)
    x = lp.detach().clone().requires_grad_()
    out = F.ctc_loss(x, targets, il if il_arg is None else il_arg, tl if tl_arg is None else tl_arg, blank=blank,
                     reduction=reduction, zero_infinity=zero_infinity)
    (grad,) = torch.autograd.grad(out, x, dy)
    ref, gref, nll = reference(lp, targets, il, tl, blank, reduction, zero_infinity, dy)
    rtol, atol = BASE_TOL[dt]
    rtol, atol = rtol * TOL, atol * TOL
    err = model_err(nll, T, dt, 4)
    if reduction == "none":
        latol = atol + (err if batched else err.reshape(()))
    else:
        scale = grad_scale(torch.ones((), dtype=torch.float64), reduction, tl, N)
        latol = atol + float((err * scale).sum())
    assert_close(out, ref.to(dt), rtol, latol, f"{what}: loss")
    gs = grad_scale(dy, reduction, tl, N) * err
    gatol = 2 * atol + (gs.reshape(1, N, 1) if batched else gs.reshape(1, 1))
    assert_close(grad, gref.to(dt), 2 * rtol, gatol, f"{what}: grad")
    return out, grad


# ---- forward + backward vs torch --------------------------------------------------------------------------
SHAPES = [(1, 1, 2, 1), (7, 3, 5, 3), (50, 7, 20, 10), (129, 16, 40, 30)]


@pytest.mark.parametrize("dt", FLOATS, ids=IDS.get)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("layout", ["padded", "concat"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_vs_torch(dt, reduction, layout, shape):
    T, N, C, S = shape
    lp = make_log_probs(T, N, C, dt, "main")
    tg = make_targets(N, S, C, 0, "main")
    il, tl = make_lengths(N, T, S, "main")
    targets = tg if layout == "padded" else concat(tg, tl)
    _, grad = check(lp, targets.to(DEVICE), il.to(DEVICE), tl.to(DEVICE), reduction=reduction,
                    what=f"{IDS[dt]} {reduction} {layout} {shape}")
    not_degenerate(grad[:int(il.min())], "grad")


@pytest.mark.parametrize("dt", [torch.float32, torch.float64], ids=IDS.get)
@pytest.mark.parametrize("case", ["T1000-S200-C40", "T100-S20-C5000", "T200-S50-C5000"])
def test_long_and_wide(dt, case):
    T, S, C = (int(p[1:]) for p in case.split("-"))
    N = 4 if C <= 40 else 3
    lp = make_log_probs(T, N, C, dt, case)
    tg = make_targets(N, S, C, 0, case)
    il, tl = make_lengths(N, T, S, case)
    check(lp, tg.to(DEVICE), il.to(DEVICE), tl.to(DEVICE), reduction="mean", what=case)


@pytest.mark.parametrize("dt", [torch.float32, torch.float64], ids=IDS.get)
def test_two_states_per_thread(dt):
    """More than 1024 states (2 * 600 + 1): each recursion thread owns two."""
    T, N, C, S = 700, 2, 12, 600
    lp = make_log_probs(T, N, C, dt, "k2")
    tg = make_targets(N, S, C, 0, "k2")
    il = torch.tensor([700, 680])
    tl = torch.tensor([330, 300])  # states are sized by S (padded targets), lengths below T / 2
    check(lp, tg.to(DEVICE), il.to(DEVICE), tl.to(DEVICE), reduction="sum", what="k2")


# ---- index dtypes and where the lengths live ---------------------------------------------------------------
@pytest.mark.parametrize("tdt", [torch.int32, torch.int64])
@pytest.mark.parametrize("ldt", [torch.int32, torch.int64])
@pytest.mark.parametrize("where", ["cuda", "cpu", "list"])
@pytest.mark.parametrize("layout", ["padded", "concat"])
def test_index_dtypes_and_lengths(tdt, ldt, where, layout):
    T, N, C, S = 30, 5, 9, 8
    lp = make_log_probs(T, N, C, torch.float32, "idx")
    tg = make_targets(N, S, C, 0, "idx")
    il, tl = make_lengths(N, T, S, "idx")
    targets = (tg if layout == "padded" else concat(tg, tl)).to(tdt).to(DEVICE)
    if where == "list":
        il_arg, tl_arg = il.tolist(), tl.tolist()
    else:
        il_arg, tl_arg = il.to(ldt).to(where if where == "cpu" else DEVICE), tl.to(ldt).to(where if where == "cpu"
                                                                                         else DEVICE)
    check(lp, targets, il, tl, reduction="mean", il_arg=il_arg, tl_arg=tl_arg, what=f"{tdt} {ldt} {where}")


def test_targets_on_cpu_and_other_int_dtypes():
    T, N, C, S = 20, 3, 6, 5
    lp = make_log_probs(T, N, C, torch.float64, "cpu-targets")
    tg = make_targets(N, S, C, 0, "cpu-targets")
    il, tl = make_lengths(N, T, S, "cpu-targets")
    check(lp, tg.to(torch.int16), il, tl, reduction="sum", what="int16 targets on the host")


# ---- infeasible alignments, zero_infinity -----------------------------------------------------------------
@pytest.mark.parametrize("zero_infinity", [False, True])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("T", [8, 240], ids=["aten-small-path", "aten-large-path"])
def test_infeasible(zero_infinity, reduction, T):
    """Targets longer than the input, repeats without room for their blank, a target longer than T (no
    state stored), next to feasible items; NaN positions of the gradient as ATen's path for the shape."""
    N, C = 5, 6
    tg = torch.tensor([[1, 2, 3, 4, 5, 1, 2, 3, 4, 5],
                       [2, 2, 0, 0, 0, 0, 0, 0, 0, 0],
                       [1, 2, 1, 0, 0, 0, 0, 0, 0, 0],
                       [3, 3, 3, 0, 0, 0, 0, 0, 0, 0],
                       [4, 5, 4, 5, 4, 5, 4, 5, 4, 5]])
    # item 0: 10 labels in 4 steps; item 1: [2, 2] in 2 steps (needs 3); item 2: feasible; item 3:
    # [3, 3, 3] in 5 steps (needs 5: feasible, one path); item 4: longer than T when T = 8.
    il = torch.tensor([4, 2, T, 5, T])
    tl = torch.tensor([10, 2, 3, 3, 10 if T > 8 else 9])
    if T == 8:
        tg = tg[:, :9]
        tl[0] = 9
    lp = make_log_probs(T, N, C, torch.float64, "inf", T)
    check(lp, tg.to(DEVICE), il.to(DEVICE), tl.to(DEVICE), reduction=reduction, zero_infinity=zero_infinity,
          what=f"infeasible T={T}")


@pytest.mark.sanitizer
def test_target_longer_than_T_f32():
    """S > T: the states are capped at T (2T + 1), the item's loss is inf (0 with zero_infinity)."""
    T, N, C, S = 6, 3, 5, 12
    lp = make_log_probs(T, N, C, torch.float32, "long-target")
    tg = make_targets(N, S, C, 0, "long-target")
    il, tl = torch.tensor([6, 6, 5]), torch.tensor([12, 2, 7])
    for zi in (False, True):
        check(lp, tg.to(DEVICE), il.to(DEVICE), tl.to(DEVICE), reduction="none", zero_infinity=zi,
              what=f"S > T zero_infinity={zi}")
    plan = _C.ctc_loss_plan(False, {"log_probs": dl(lp), "targets": dl(tg.to(DEVICE)),
                                    "input_lengths": dl(il.to(DEVICE)), "target_lengths": dl(tl.to(DEVICE))})
    assert plan["log_alpha_shape"] == [N, T, 2 * T + 1]


# ---- blank, unbatched, strides, empty ----------------------------------------------------------------------
@pytest.mark.parametrize("blank", [2, 8])
def test_blank_not_zero(blank):
    T, N, C, S = 25, 4, 9, 6
    lp = make_log_probs(T, N, C, torch.float32, "blank", blank)
    tg = make_targets(N, S, C, blank, "blank")
    il, tl = make_lengths(N, T, S, "blank", blank)
    check(lp, tg.to(DEVICE), il.to(DEVICE), tl.to(DEVICE), blank=blank, reduction="mean", what=f"blank={blank}")


def test_blank_label_is_computed_as_torch():
    """A label equal to blank: torch computes with it, so does baracuda (and warns)."""
    T, N, C, S = 12, 3, 5, 4
    lp = make_log_probs(T, N, C, torch.float64, "blank-label")
    tg = make_targets(N, S, C, 0, "blank-label")
    tg[1, 1] = 0
    il, tl = torch.tensor([12, 12, 10]), torch.tensor([4, 4, 3])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        check(lp, tg.to(DEVICE), il.to(DEVICE), tl.to(DEVICE), reduction="none", what="blank label")
    assert any("equals blank" in str(x.message) for x in w)


@pytest.mark.parametrize("dt", [torch.float32, torch.float64], ids=IDS.get)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("layout", ["1d", "2d"])
def test_unbatched(dt, reduction, layout):
    T, C, S = 17, 7, 5
    lp = make_log_probs(T, 1, C, dt, "unbatched", batched=False)
    tg = make_targets(1, S, C, 0, "unbatched")
    targets = tg[0] if layout == "1d" else tg
    il, tl = torch.tensor(15), torch.tensor(S)
    out, _ = check(lp, targets.to(DEVICE), il.to(DEVICE), tl.to(DEVICE), reduction=reduction, what="unbatched")
    assert out.shape == ()


@pytest.mark.sanitizer
def test_strided_inputs():
    """Batch-first log_probs viewed as [T, N, C], non-contiguous targets and lengths."""
    T, N, C, S = 40, 6, 11, 9
    store = make_log_probs(N, T, C, torch.float32, "strided")  # [N, T, C]
    lp = store.transpose(0, 1)
    assert not lp.is_contiguous()
    tg = make_targets(N, 2 * S, C, 0, "strided").to(DEVICE)[:, ::2]
    il, tl = make_lengths(N, T, S, "strided")
    il2 = torch.stack([il, il], 1).reshape(-1).to(DEVICE)[::2]
    tl2 = torch.stack([tl, tl], 1).reshape(-1).to(DEVICE)[::2]
    check(lp, tg, il, tl, reduction="sum", il_arg=il2, tl_arg=tl2, what="strided")


def test_empty():
    C = 5
    lp = torch.empty((10, 0, C), dtype=torch.float32, device=DEVICE).requires_grad_()
    tg = torch.empty((0, 3), dtype=torch.int64, device=DEVICE)
    e = torch.empty(0, dtype=torch.int64, device=DEVICE)
    assert F.ctc_loss(lp, tg, e, e, reduction="none").shape == (0,)
    assert float(F.ctc_loss(lp, tg, e, e, reduction="sum")) == 0.0
    out = F.ctc_loss(lp, tg, e, e, reduction="mean")
    assert math.isnan(float(out))  # the mean of nothing, as torch's mean
    (g,) = torch.autograd.grad(F.ctc_loss(lp, tg, e, e, reduction="sum"), lp)
    assert g.shape == lp.shape
    # T = 0: every input length is 0; an empty target costs nothing, any other is impossible
    lp0 = torch.empty((0, 2, C), dtype=torch.float64, device=DEVICE)
    z = torch.zeros(2, dtype=torch.int64, device=DEVICE)
    out0 = F.ctc_loss(lp0, torch.ones((2, 1), dtype=torch.int64, device=DEVICE), z,
                      torch.tensor([0, 1], device=DEVICE), reduction="none")
    assert out0.tolist() == [0.0, math.inf]


# ---- invalid inputs -----------------------------------------------------------------------------------------
@pytest.mark.sanitizer
def test_invalid_labels_and_device_lengths():
    T, N, C, S = 10, 3, 5, 3
    lp = make_log_probs(T, N, C, torch.float32, "invalid")
    tg = make_targets(N, S, C, 0, "invalid").to(DEVICE)
    il, tl = torch.tensor([10, 9, 8], device=DEVICE), torch.tensor([3, 2, 3], device=DEVICE)
    bad = tg.clone()
    bad[1, 0] = C + 2
    with pytest.raises(RuntimeError, match="invalid input"):
        F.ctc_loss(lp, bad, il, tl)
    # Lengths on the device reach the kernels' flag (on the host, torch's own checks raise first).
    for il_bad, tl_bad in ((torch.tensor([11, 9, 8]), tl), (il, torch.tensor([4, 2, 3])),
                           (torch.tensor([10, -1, 8]), tl)):
        with pytest.raises(RuntimeError, match="invalid input" if DEVICE == "cuda" else "invalid input|Expected"):
            F.ctc_loss(lp, tg, il_bad.to(DEVICE), tl_bad.to(DEVICE))
    # With the check off the flagged item is NaN and the others are torch's.
    BC.check_inputs = False
    try:
        out = F.ctc_loss(lp, bad, il, tl, reduction="none")
    finally:
        BC.check_inputs = True
    assert math.isnan(float(out[1]))
    keep = torch.tensor([0, 2], device=DEVICE)
    ref = tF.ctc_loss(lp.double()[:, keep], tg[keep], il[keep], tl[keep], reduction="none")
    assert_close(out[keep], ref.float(), 1e-5, 1e-5, "the other items")


def test_host_lengths_raise_torch_errors():
    T, N, C, S = 10, 2, 5, 3
    lp = make_log_probs(T, N, C, torch.float32, "host-errors")
    tg = make_targets(N, S, C, 0, "host-errors").to(DEVICE)
    with pytest.raises(RuntimeError, match="input_lengths to have value at most 10"):
        F.ctc_loss(lp, tg, [11, 3], [3, 3])
    with pytest.raises(RuntimeError, match="at least 3 at dimension 1"):
        F.ctc_loss(lp, tg[:, :2], [10, 10], [3, 1])
    with pytest.raises(RuntimeError, match="size 5 at dimension 0"):
        F.ctc_loss(lp, tg.reshape(-1)[:4], [10, 10], [3, 2])
    with pytest.raises(RuntimeError, match="must be of size batch_size"):
        F.ctc_loss(lp, tg, [10], [3, 3])
    with pytest.raises(RuntimeError, match="blank"):
        F.ctc_loss(lp, tg, [10, 10], [3, 3], blank=C)


# ---- determinism, poisoned outputs, the unfused backward, plan facts ----------------------------------------
def test_bit_identical_repeats():
    T, N, C, S = 120, 8, 5000, 20
    lp = make_log_probs(T, N, C, torch.float32, "repeat")
    tg = make_targets(N, S, C, 0, "repeat").to(DEVICE)
    il, tl = make_lengths(N, T, S, "repeat")
    il, tl = il.to(DEVICE), tl.to(DEVICE)
    res = []
    for _ in range(2):
        x = lp.detach().clone().requires_grad_()
        out = F.ctc_loss(x, tg, il, tl)
        res.append((out.detach(), torch.autograd.grad(out, x)[0]))
    assert torch.equal(res[0][0], res[1][0]) and torch.equal(res[0][1], res[1][1])


@pytest.mark.sanitizer
@pytest.mark.parametrize("fused", [True, False])
def test_poisoned_outputs_raw_plan(fused):
    """The plan through _C with every output pre-filled: each element of loss and gradient is written."""
    T, N, C, S = 33, 5, 13, 7
    lp = make_log_probs(T, N, C, torch.float32, "poison")
    tg = make_targets(N, S, C, 0, "poison").to(DEVICE)
    il, tl = make_lengths(N, T, S, "poison")
    il, tl = il.to(DEVICE), tl.to(DEVICE)
    ins = {"log_probs": lp, "targets": tg, "input_lengths": il, "target_lengths": tl}
    export = lambda d: {k: dl(v) for k, v in d.items() if v is not None}  # noqa: E731
    stream = current_stream(lp.device)
    plan = _C.ctc_loss_plan(False, export(ins), 0, "none", False, fused)
    out = torch.full(plan["loss_shape"], 1234.5, device=DEVICE)
    la = torch.full(plan["log_alpha_shape"], 7.0, device=DEVICE)
    lb = torch.full(plan["log_alpha_shape"], 7.0, device=DEVICE) if fused else None
    nll = torch.full((N,), 7.0, device=DEVICE)
    ws = torch.empty(max(plan["workspace_size"], 1), dtype=torch.uint8, device=DEVICE)
    _C.ctc_loss(False, export({**ins, "out": out, "save_log_alpha": la, "save_log_beta": lb,
                               "save_neg_log_likelihood": nll}), 0, "none", False, fused, -1, stream, dl(ws))
    dy = torch.rand(N, generator=gen("poison-dy")).to(DEVICE) + 0.5
    grad = torch.full(lp.shape, 1234.5, device=DEVICE)
    bplan = _C.ctc_loss_plan(True, export(ins), 0, "none", False, fused)
    bws = torch.full((max(bplan["workspace_size"], 1),), 255, dtype=torch.uint8, device=DEVICE)  # poisoned too
    _C.ctc_loss(True, export({**ins, "dy": dy, "log_alpha": la, "log_beta": lb, "neg_log_likelihood": nll,
                              "grad": grad}), 0, "none", False, fused, -1, stream, dl(bws))
    ref, gref, nref = reference(lp, tg, il, tl, 0, "none", False, dy)
    rtol, atol = BASE_TOL[torch.float32]
    assert_close(out, ref.float(), rtol * TOL, atol * TOL + model_err(nref, T, torch.float32, 4), "loss")
    assert_close(nll, nref.float(), rtol * TOL, atol * TOL + model_err(nref, T, torch.float32, 4), "nll")
    gatol = 2 * atol * TOL + (grad_scale(dy, "none", tl, N) * model_err(nref, T, torch.float32, 4)).reshape(1, N, 1)
    assert_close(grad, gref.float(), 2 * rtol * TOL, gatol, "grad")


def test_unfused_backward_matches():
    """baracuda.ctc.fused_beta = False: the backward recomputes log_beta; same result bit for bit."""
    T, N, C, S = 60, 6, 20, 12
    lp = make_log_probs(T, N, C, torch.float32, "unfused")
    tg = make_targets(N, S, C, 0, "unfused").to(DEVICE)
    il, tl = make_lengths(N, T, S, "unfused")
    il, tl = il.to(DEVICE), tl.to(DEVICE)
    res = []
    for fused in (True, False):
        BC.fused_beta = fused
        try:
            x = lp.detach().clone().requires_grad_()
            out = F.ctc_loss(x, tg, il, tl, reduction="sum")
            res.append((out.detach(), torch.autograd.grad(out, x)[0]))
        finally:
            BC.fused_beta = True
    assert torch.equal(res[0][0], res[1][0]) and torch.equal(res[0][1], res[1][1])


def test_host_and_device_lengths_agree():
    """Host lengths size the states by the real maximum, device lengths by the shapes: same result."""
    T, N, C, S = 45, 4, 8, 20
    lp = make_log_probs(T, N, C, torch.float32, "bounds")
    tg = make_targets(N, S, C, 0, "bounds").to(DEVICE)
    il = torch.tensor([45, 40, 44, 30])
    tl = torch.tensor([5, 7, 3, 6])
    a = F.ctc_loss(lp, tg, il.tolist(), tl.tolist(), reduction="none")
    b = F.ctc_loss(lp, tg, il.to(DEVICE), tl.to(DEVICE), reduction="none")
    assert torch.equal(a, b)
    ins = {"log_probs": dl(lp), "targets": dl(tg), "input_lengths": dl(il.to(DEVICE)),
           "target_lengths": dl(tl.to(DEVICE))}
    assert _C.ctc_loss_plan(False, ins, 0, "none", False, False, 7)["log_alpha_shape"] == [N, T, 15]
    ins = {"log_probs": dl(lp), "targets": dl(tg), "input_lengths": dl(il.to(DEVICE)),
           "target_lengths": dl(tl.to(DEVICE))}
    p = _C.ctc_loss_plan(False, ins)
    assert p["log_alpha_shape"] == [N, T, 2 * S + 1]
    assert "ctc_loss" in p["sku"] and "alpha" in p["sku"]
