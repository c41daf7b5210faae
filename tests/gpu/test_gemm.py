"""GEMM family vs torch on a CUDA GPU (include/baracuda/ops/gemm.hpp, python/baracuda/gemm.py).

Dtypes, transposes, leading dimensions, strided and broadcast batches, 1-D operands, alpha/beta,
every epilogue (bias, relu, gelu erf/tanh, silu), K = 0 and empty problems, the small-M decode
kernel, fp8/int8 (int8 -> bf16/f16/f32 with per-row x per-column scales and bias: the CUTLASS
kernel on sm_90, against an exact integer reference), TF32 by preference, CUDA-graph capture, and backward vs torch.autograd.
References are torch in float64 (complex128 for complex); tolerances grow with sqrt(K).
Skips without torch, a CUDA device or an importable baracuda.
"""
import math

import pytest


from gpu_skip import skip_unless_ready  # noqa: E402

skip_unless_ready('gemm')

import torch  # noqa: E402
import torch.nn.functional as tF  # noqa: E402

import baracuda.functional as F  # noqa: E402
from baracuda import gemm as G  # noqa: E402

DEV = "cuda"
FLOAT = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
ALL = FLOAT + [torch.complex64, torch.complex128]
# (rtol, atol per sqrt(K)) against a float64 reference; f16/bf16 are bounded by the output rounding.
TOL = {torch.float64: (1e-10, 1e-12), torch.float32: (2e-5, 1e-5), torch.float16: (2e-3, 1e-3),
       torch.bfloat16: (1.6e-2, 8e-3), torch.complex64: (2e-5, 1e-5), torch.complex128: (1e-10, 1e-12)}
REF = {torch.complex64: torch.complex128, torch.complex128: torch.complex128}


@pytest.fixture(autouse=True)
def _ieee_f32():
    """torch's default: no TF32 for matmul (baracuda follows the same flag)."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    shape = tuple(shape)  # () gives a 0-dim tensor
    if dtype.is_complex:
        re = torch.rand(shape, generator=g, device=DEV, dtype=torch.float64) * 2 - 1
        im = torch.rand(shape, generator=g, device=DEV, dtype=torch.float64) * 2 - 1
        return torch.complex(re, im).to(dtype)
    return (torch.rand(shape, generator=g, device=DEV, dtype=torch.float64) * 2 - 1).to(dtype)


def up(t):
    return t.to(REF.get(t.dtype, torch.float64))


def check(out, ref, dtype, k, what="", dense=True):
    """out vs an upcast reference, tolerance scaled by sqrt(k); dense=False for references that are
    mostly zeros by construction (the gradient of a diagonal)."""
    rtol, atol = TOL[dtype]
    atol = atol * math.sqrt(max(k, 1))
    assert out.dtype == dtype, what
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} vs {tuple(ref.shape)}"
    if dense and ref.numel() >= 16 and k > 0:
        assert (ref.abs() > 1e-6).float().mean() > 0.3, f"{what}: degenerate reference (mostly zeros)"
    torch.testing.assert_close(up(out), ref.to(up(out).dtype), rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def operand(rows, cols, dtype, trans, seed, pad=0):
    """A [rows, cols] view: row-major, or (trans) the transpose of a [cols, rows] tensor; pad > 0
    adds that many unused elements to the leading dimension."""
    if trans:
        base = rand(cols, rows + pad, dtype=dtype, seed=seed)
        return base[:, :rows].t()
    base = rand(rows, cols + pad, dtype=dtype, seed=seed)
    return base[:, :cols]


SHAPES = [(1, 1, 1), (7, 5, 13), (33, 65, 129), (128, 96, 64), (129, 257, 4097)]


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("mnk", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)], ids=["NN", "TN", "NT", "TT"])
def test_mm(dtype, mnk, ta, tb):
    m, n, k = mnk
    a = operand(m, k, dtype, ta, 1)
    b = operand(k, n, dtype, tb, 2)
    check(F.mm(a, b), up(a) @ up(b), dtype, k, f"mm {mnk} {ta}{tb}")


@pytest.mark.parametrize("dtype", FLOAT, ids=str)
@pytest.mark.parametrize("pad", [1, 8])
def test_leading_dimensions(dtype, pad):
    a = operand(37, 40, dtype, False, 3, pad=pad)
    b = operand(40, 29, dtype, True, 4, pad=pad)
    check(F.mm(a, b), up(a) @ up(b), dtype, 40, "padded ld")


@pytest.mark.parametrize("dtype", FLOAT + [torch.complex64], ids=str)
def test_bmm_and_strided_batches(dtype):
    a = rand(5, 17, 24, dtype=dtype, seed=5)
    b = rand(5, 24, 9, dtype=dtype, seed=6)
    check(F.bmm(a, b), up(a) @ up(b), dtype, 24, "bmm")
    bt = rand(5, 9, 24, dtype=dtype, seed=7).transpose(1, 2)  # transposed batch members
    check(F.bmm(a, bt), up(a) @ up(bt), dtype, 24, "bmm transposed")
    big = rand(5, 17, 40, dtype=dtype, seed=8)[:, :, 3:27]  # strided batch with padded ld
    check(F.bmm(big, b), up(big) @ up(b), dtype, 24, "bmm strided")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("sa,sb", [((2, 1, 7, 8), (3, 8, 5)), ((4, 7, 8), (8, 5)), ((8,), (2, 8, 3)), ((2, 3, 7, 8), (8,)),
                                   ((8,), (8,)), ((7, 8), (8,)), ((8,), (8, 5)), ((1, 7, 8), (6, 8, 5))])
def test_matmul_broadcast_and_1d(dtype, sa, sb):
    a, b = rand(*sa, dtype=dtype, seed=9), rand(*sb, dtype=dtype, seed=10)
    check(F.matmul(a, b), torch.matmul(up(a), up(b)), dtype, sa[-1], f"matmul {sa} {sb}")


@pytest.mark.parametrize("dtype", FLOAT, ids=str)
def test_addmm_baddbmm_alpha_beta(dtype):
    a, b = rand(19, 23, dtype=dtype, seed=11), rand(23, 31, dtype=dtype, seed=12)
    c = rand(19, 31, dtype=dtype, seed=13)
    ref = 0.5 * up(c) + 2.0 * (up(a) @ up(b))
    check(F.addmm(c, a, b, beta=0.5, alpha=2.0), ref, dtype, 23, "addmm")
    bias = rand(31, dtype=dtype, seed=14)
    check(F.addmm(bias, a, b), up(bias) + up(a) @ up(b), dtype, 23, "addmm bias")
    check(F.addmm(bias, a, b, beta=0.0), up(a) @ up(b), dtype, 23, "addmm beta=0")
    ct = rand(31, 19, dtype=dtype, seed=15).t()  # column-major C is materialised
    check(F.addmm(ct, a, b, beta=-1.0), -up(ct) + up(a) @ up(b), dtype, 23, "addmm C^T")
    x, y = rand(3, 19, 23, dtype=dtype, seed=16), rand(3, 23, 31, dtype=dtype, seed=17)
    check(F.baddbmm(c, x, y, beta=0.25, alpha=3.0), 0.25 * up(c) + 3.0 * (up(x) @ up(y)), dtype, 23, "baddbmm")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64], ids=str)
def test_vector_products(dtype):
    x, y = rand(37, dtype=dtype, seed=18), rand(37, dtype=dtype, seed=19)
    mat = rand(11, 37, dtype=dtype, seed=20)
    check(F.dot(x, y), torch.dot(up(x), up(y)), dtype, 37, "dot")
    check(F.vdot(x, y), torch.vdot(up(x), up(y)), dtype, 37, "vdot")
    check(F.outer(x, y), torch.outer(up(x), up(y)), dtype, 1, "outer")
    check(F.mv(mat, x), up(mat) @ up(x), dtype, 37, "mv")
    v = rand(11, dtype=dtype, seed=21)
    check(F.addmv(v, mat, x, beta=2.0, alpha=0.5), 2.0 * up(v) + 0.5 * (up(mat) @ up(x)), dtype, 37, "addmv")


REF_ACT = {"none": lambda z: z, "relu": torch.relu, "gelu": tF.gelu, "gelu_tanh": lambda z: tF.gelu(z, approximate="tanh"),
           "silu": tF.silu}


@pytest.mark.parametrize("dtype", FLOAT, ids=str)
@pytest.mark.parametrize("act", list(REF_ACT))
@pytest.mark.parametrize("with_bias", [False, True])
def test_epilogues(dtype, act, with_bias):
    m, n, k = 67, 72, 48  # n % 8 == 0: the aux-capable fused path where cuBLASLt offers it
    a, w = rand(m, k, dtype=dtype, seed=22), rand(n, k, dtype=dtype, seed=23)
    bias = rand(n, dtype=dtype, seed=24) if with_bias else None
    out = F.linear(a, w, bias, activation=act)
    z = up(a) @ up(w).t() + (up(bias) if with_bias else 0)
    check(out, REF_ACT[act](z), dtype, k, f"linear {act} bias={with_bias}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("act", list(REF_ACT))
def test_linear_backward(dtype, act):
    x = rand(4, 9, 40, dtype=dtype, seed=25).requires_grad_()
    w = rand(24, 40, dtype=dtype, seed=26).requires_grad_()
    b = rand(24, dtype=dtype, seed=27).requires_grad_()
    go = rand(4, 9, 24, dtype=dtype, seed=28)
    F.linear(x, w, b, activation=act).backward(go)
    xr, wr, br = (t.detach().to(torch.float64).requires_grad_() for t in (x, w, b))
    REF_ACT[act](tF.linear(xr, wr, br)).backward(go.to(torch.float64))
    check(x.grad, xr.grad, dtype, 24, "dX")
    check(w.grad, wr.grad, dtype, 36, "dW")
    check(b.grad, br.grad, dtype, 36, "db")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("sa,sb", [((5, 7), (7, 3)), ((2, 5, 7), (7, 3)), ((2, 1, 5, 7), (3, 7, 4)), ((7,), (7, 3))])
def test_matmul_backward(dtype, sa, sb):
    a = rand(*sa, dtype=dtype, seed=29).requires_grad_()
    b = rand(*sb, dtype=dtype, seed=30).requires_grad_()
    out = F.matmul(a, b)
    go = rand(*out.shape, dtype=dtype, seed=31)
    out.backward(go)
    ar, br = (t.detach().to(torch.float64).requires_grad_() for t in (a, b))
    torch.matmul(ar, br).backward(go.to(torch.float64))
    check(a.grad, ar.grad, dtype, 16, "dA")
    check(b.grad, br.grad, dtype, 16, "dB")


def test_addmm_backward():
    c = rand(6, 5, seed=32).requires_grad_()
    a, b = rand(6, 4, seed=33).requires_grad_(), rand(4, 5, seed=34).requires_grad_()
    F.addmm(c, a, b, beta=0.5, alpha=2.0).sum().backward()  # sum(): an expanded (stride 0) gradient
    cr, ar, br = (t.detach().double().requires_grad_() for t in (c, a, b))
    torch.addmm(cr, ar, br, beta=0.5, alpha=2.0).sum().backward()
    for got, want in ((c.grad, cr.grad), (a.grad, ar.grad), (b.grad, br.grad)):
        check(got, want, torch.float32, 6, "addmm grads")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.complex64], ids=str)
def test_k0_and_empty(dtype):
    a, b = torch.empty(5, 0, dtype=dtype, device=DEV), torch.empty(0, 3, dtype=dtype, device=DEV)
    assert torch.equal(F.mm(a, b), torch.zeros(5, 3, dtype=dtype, device=DEV))
    c = rand(5, 3, dtype=dtype, seed=35)
    torch.testing.assert_close(F.addmm(c, a, b, beta=0.5), 0.5 * c)
    assert F.mm(torch.empty(0, 4, dtype=dtype, device=DEV), rand(4, 3, dtype=dtype)).shape == (0, 3)
    assert F.mm(rand(2, 4, dtype=dtype), torch.empty(4, 0, dtype=dtype, device=DEV)).shape == (2, 0)
    assert F.bmm(torch.empty(0, 2, 4, dtype=dtype, device=DEV), torch.empty(0, 4, 3, dtype=dtype, device=DEV)).shape == (0, 2, 3)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("m", [1, 2, 3, 5, 8, 11, 16])
@pytest.mark.parametrize("n,k", [(4096, 4096), (1000, 520), (3, 8)])
def test_decode_small_m(dtype, m, n, k):
    x, w = rand(m, k, dtype=dtype, seed=36), rand(n, k, dtype=dtype, seed=37)
    bias = rand(n, dtype=dtype, seed=38)
    d = torch.empty(m, n, dtype=dtype, device=DEV)
    assert "[native" in G.sku(x, w.t(), d), G.sku(x, w.t(), d)
    check(F.linear(x, w), up(x) @ up(w).t(), dtype, k, "decode")
    check(F.linear(x, w, bias, activation="silu"), tF.silu(up(x) @ up(w).t() + up(bias)), dtype, k, "decode+silu")
    y1, y2 = F.linear(x, w), F.linear(x, w)
    assert torch.equal(y1, y2), "small-M kernel must be deterministic"


def test_decode_batched_and_beta():
    x, w = rand(3, 4, 64, dtype=torch.bfloat16, seed=39), rand(3, 64, 40, dtype=torch.bfloat16, seed=40)
    wt = rand(3, 40, 64, dtype=torch.bfloat16, seed=41).transpose(1, 2)  # K-contiguous: small-M
    check(F.bmm(x, wt), up(x) @ up(wt), torch.bfloat16, 64, "decode bmm")
    c = rand(3, 4, 40, dtype=torch.bfloat16, seed=42)
    check(F.baddbmm(c, x, wt, beta=0.5), 0.5 * up(c) + up(x) @ up(wt), torch.bfloat16, 64, "decode baddbmm")
    check(F.bmm(x, w), up(x) @ up(w), torch.bfloat16, 64, "bmm N-contiguous (cuBLASLt)")


def test_tf32_by_preference():
    a, b = rand(256, 512, seed=43), rand(512, 128, seed=44)
    d = torch.empty(256, 128, device=DEV)
    assert "tf32" not in G.sku(a, b, d)
    ieee = F.mm(a, b)
    check(ieee, up(a) @ up(b), torch.float32, 512, "ieee")
    torch.backends.cuda.matmul.allow_tf32 = True
    assert "tf32" in G.sku(a, b, d)
    torch.testing.assert_close(F.mm(a, b).double(), up(a) @ up(b), rtol=5e-3, atol=5e-3 * math.sqrt(512))


def test_cuda_graph_capture():
    x, w, b = rand(16, 64, seed=45), rand(32, 64, seed=46), rand(32, seed=47)
    xs = rand(3, 16, 64, dtype=torch.bfloat16, seed=48)
    wd = rand(48, 64, dtype=torch.bfloat16, seed=49)
    F.linear(x, w, b, activation="gelu")  # warm: plans and workspace exist before capture
    F.linear(xs[0], wd)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        F.linear(x, w, b, activation="gelu")
        F.linear(xs[0], wd)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = F.linear(x, w, b, activation="gelu")
        yd = F.linear(xs[0], wd)
    x.copy_(rand(16, 64, seed=50))
    g.replay()
    torch.cuda.synchronize()
    check(y, tF.gelu(up(x) @ up(w).t() + up(b)), torch.float32, 64, "graph replay")
    check(yd, up(xs[0]) @ up(wd).t(), torch.bfloat16, 64, "graph replay decode")


def test_errors_name_op_operand_expected_got():
    a, b = rand(3, 4), rand(5, 6)
    with pytest.raises(RuntimeError, match="^mm: inner dimensions expected equal"):
        F.mm(a, b)
    with pytest.raises(RuntimeError, match="dtype"):
        F.mm(a, rand(4, 2, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="CUDA"):
        F.mm(a.cpu(), rand(4, 2).cpu())
    d = torch.empty(3, 2, device=DEV)
    with pytest.raises(RuntimeError, match=r"gemm: B shape expected \[4, 2\], got \[4, 6\]"):
        G._run(a, rand(4, 6), d)
    with pytest.raises(RuntimeError, match="int32"):
        G._run(torch.ones(3, 4, dtype=torch.int32, device=DEV), torch.ones(4, 2, dtype=torch.int32, device=DEV),
               torch.empty(3, 2, dtype=torch.int32, device=DEV))


def _sm():
    return torch.cuda.get_device_capability()[0] * 10 + torch.cuda.get_device_capability()[1]


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="torch without float8")
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_scaled_mm_fp8(out_dtype):
    if _sm() < 89:
        pytest.skip("fp8 needs sm_89+")
    a = (rand(64, 128, seed=51) * 4).to(torch.float8_e4m3fn)
    w = (rand(96, 128, seed=52) * 4).to(torch.float8_e4m3fn)
    sa, sb = torch.tensor([0.5], device=DEV), torch.tensor([2.0], device=DEV)
    out = F.scaled_mm(a, w.t(), sa, sb, out_dtype=out_dtype)
    ref = torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=out_dtype)
    torch.testing.assert_close(out.float(), ref.float(), rtol=2e-2, atol=1e-2)
    with pytest.raises(RuntimeError, match="K-contiguous"):
        F.scaled_mm(a, w.t().contiguous(), sa, sb, out_dtype=out_dtype)


def test_int_mm():
    a = torch.randint(-128, 128, (32, 64), dtype=torch.int8, device=DEV)
    b = torch.randint(-128, 128, (64, 48), dtype=torch.int8, device=DEV)
    assert torch.equal(F.int_mm(a, b), torch._int_mm(a, b))


@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk->ik", [(5, 7), (7, 3)]), ("bij,bjk->bik", [(2, 5, 7), (2, 7, 3)]), ("ij,kj->ik", [(5, 7), (3, 7)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 8), (2, 3, 6, 8)]), ("i,i->", [(9,), (9,)]), ("i,j->ij", [(4,), (5,)]),
    ("ijk,k->ij", [(3, 4, 5), (5,)]), ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]), ("ij,jk", [(3, 4), (4, 5)]),
    ("abc,cd->dba", [(2, 3, 4), (4, 5)]), ("ij,ik->jk", [(6, 3), (6, 4)]), ("ij->ji", [(3, 4)]),
    ("ii->i", [(4, 4)]), ("iij,jk->ik", [(3, 3, 4), (4, 2)]), ("...ij,...jk->...ik", [(2, 3, 4, 5), (3, 5, 6)]),
    ("...i,...i->...", [(2, 1, 4), (3, 4)]), ("abcd,dcbe->ae", [(2, 3, 4, 5), (5, 4, 3, 6)]),
])
def test_einsum(eq, shapes):
    xs = [rand(*s, seed=60 + i).requires_grad_() for i, s in enumerate(shapes)]
    out = F.einsum(eq, *xs)
    refs = [x.detach().double().requires_grad_() for x in xs]
    ref = torch.einsum(eq, *refs)
    check(out, ref, torch.float32, 8, eq)
    go = rand(*out.shape, seed=70)
    out.backward(go)
    ref.backward(go.double())
    repeated = any(len(set(t)) < len(t) for t in eq.split("->")[0].replace("...", "").split(","))
    for x, r in zip(xs, refs):
        check(x.grad, r.grad, torch.float32, 8, eq + " grad", dense=not repeated)


def test_tensordot_and_dot_general():
    a, b = rand(3, 4, 5, seed=80), rand(4, 5, 6, seed=81)
    check(F.tensordot(a, b, dims=2), torch.tensordot(up(a), up(b), dims=2), torch.float32, 20, "tensordot 2")
    check(F.tensordot(a, b, dims=([1, 2], [0, 1])), torch.tensordot(up(a), up(b), dims=([1, 2], [0, 1])),
          torch.float32, 20, "tensordot lists")
    x, y = rand(2, 3, 7, seed=82), rand(2, 7, 5, seed=83)
    got = F.dot_general(x, y, (([2], [1]), ([0], [0])))  # lax order: batch, lhs free, rhs free
    check(got, up(x) @ up(y), torch.float32, 7, "dot_general")


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="torch without float8")
def test_scaled_mm_rowwise_and_amax():
    if _sm() < 90:
        pytest.skip("row-wise fp8 scaling needs sm_90")
    a = (rand(64, 128, seed=53) * 4).to(torch.float8_e4m3fn)
    w = (rand(96, 128, seed=54) * 4).to(torch.float8_e4m3fn)
    sa = torch.rand(64, 1, device=DEV) + 0.5
    sb = torch.rand(1, 96, device=DEV) + 0.5
    ref = (a.float() @ w.float().t()) * sa * sb
    out = F.scaled_mm(a, w.t(), sa, sb, out_dtype=torch.bfloat16)
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)
    amax = torch.zeros(1, device=DEV)
    one = torch.ones(1, device=DEV)
    out = F.scaled_mm(a, w.t(), one, one, out_dtype=torch.float32, amax=amax)
    torch.testing.assert_close(amax, out.abs().max().reshape(1), rtol=1e-6, atol=0)


# ---- grouped GEMM (mixture of experts): the CUTLASS Hopper kernel and the native one -------------------
def _grouped_backends():
    """The grouped implementations this build and device offer: native always, cutlass on sm_90 when
    built with CUTLASS (asked through the SKU, which names the refusal otherwise)."""
    out = ["native"]
    a = torch.zeros(8, 8, dtype=torch.bfloat16, device=DEV)
    w = torch.zeros(1, 8, 8, dtype=torch.bfloat16, device=DEV)
    try:
        G.grouped_mm_sku(a, w, torch.tensor([8], dtype=torch.int32, device=DEV), backend="cutlass")
        out.append("cutlass")
    except RuntimeError as e:
        if "cutlass-grouped:" not in str(e):  # a refusal names the implementation; anything else is a bug
            raise
    return out


GROUPED_BACKENDS = _grouped_backends()


def _backend_param(b):
    return pytest.param(b, marks=pytest.mark.skipif(b not in GROUPED_BACKENDS,
                                                    reason=f"grouped {b} kernel not available (needs sm_90 + CUTLASS)"))


BACKENDS = [_backend_param(b) for b in ("native", "cutlass")]


def grouped_ref(a, w, ends):
    """float64 reference with the documented clamping: every end clamped to [0, rows] and raised to the
    previous group's end; rows past the last end (and every row when k == 0) are 0."""
    rows, n = a.shape[0], w.shape[1]
    ref = torch.zeros(rows, n, dtype=torch.float64, device=DEV)
    start = 0
    for g, e in enumerate(ends):
        end = max(min(max(int(e), 0), rows), start)
        if end > start:
            ref[start:end] = up(a[start:end]) @ up(w[g]).t()
        start = end
    return ref


def run_grouped(a, w, ends, odt, backend, out=None):
    """grouped_mm with weights [G, N, K] (passed as the transposed [G, K, N] view, as torch does) into a
    NaN-poisoned output, so unwritten elements fail the comparison."""
    if out is None:
        out = torch.empty(a.shape[0], w.shape[1], dtype=a.dtype, device=DEV)
    out.fill_(float("nan"))
    offs = torch.tensor(ends, dtype=odt, device=DEV)
    res = F.grouped_mm(a, w.transpose(1, 2), offs, out=out, backend=backend)
    assert res is out
    return out, G.grouped_mm_sku(a, w.transpose(1, 2), offs, out=out, backend=backend)


def _ends(sizes):
    ends, acc = [], 0
    for s_ in sizes:
        acc += s_
        ends.append(acc)
    return ends


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("odt", [torch.int32, torch.int64], ids=str)
def test_grouped_mm(dtype, odt, backend):
    # Empty experts (first, middle, last), single rows, odd counts, a tile boundary; k not a multiple of
    # the k tile and n not of the n tile; 3 trailing rows no group covers (zeros).
    sizes = [0, 5, 64, 130, 1, 0, 7, 129, 1, 0]
    t, k, n = sum(sizes) + 3, 264, 40
    a = rand(t, k, dtype=dtype, seed=90)
    w = rand(len(sizes), n, k, dtype=dtype, seed=91)  # expert weights [G, N, K]
    ends = _ends(sizes)
    out, sku = run_grouped(a, w, ends, odt, backend)
    assert backend in sku, sku
    check(out, grouped_ref(a, w, ends), dtype, k, f"grouped_mm {backend}")
    again, _ = run_grouped(a, w, ends, odt, backend)
    assert torch.equal(out, again), "grouped_mm: not bit-stable across runs"


@pytest.mark.parametrize("backend", BACKENDS)
def test_grouped_mm_strided(backend):
    """Leading dimensions: A and D views into wider buffers (lda = k + 16, ldd = n + 8), W with padded
    rows and a padded group stride; the data beyond each row must stay untouched."""
    dtype, sizes, k, n = torch.bfloat16, [3, 0, 77, 20], 128, 56
    t = sum(sizes)
    a = rand(t, k + 16, dtype=dtype, seed=92)[:, :k]
    wbase = rand(len(sizes) * (n + 1), k + 8, dtype=dtype, seed=93)
    w = torch.as_strided(wbase, (len(sizes), n, k), ((n + 1) * (k + 8), k + 8, 1))
    dbase = torch.full((t, n + 8), 7.0, dtype=dtype, device=DEV)
    ends = _ends(sizes)
    out, _ = run_grouped(a, w, ends, torch.int32, backend, out=dbase[:, :n])
    check(out, grouped_ref(a, w, ends), dtype, k, f"grouped_mm strided {backend}")
    assert (dbase[:, n:] == 7.0).all(), "grouped_mm wrote past n"


def test_grouped_mm_unaligned_ldd_falls_back():
    """ldd % 8 != 0 (or an unaligned D) rules out the TMA stores: "any" takes the native kernel."""
    dtype, sizes, k, n = torch.float16, [10, 30], 64, 40
    a = rand(sum(sizes), k, dtype=dtype, seed=94)
    w = rand(2, n, k, dtype=dtype, seed=95)
    dbase = torch.zeros(sum(sizes), n + 3, dtype=dtype, device=DEV)
    out, sku = run_grouped(a, w, _ends(sizes), torch.int64, "any", out=dbase[:, :n])
    assert "native" in sku, sku
    check(out, grouped_ref(a, w, _ends(sizes)), dtype, k, "grouped_mm ldd % 8 != 0")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ends", [[10, 5, 30], [10, 1000], [-5, 10, 12], [40, 40, 3], [0, 0, 0]],
                         ids=["decreasing", "past-rows", "negative", "decreasing-last", "all-empty"])
def test_grouped_mm_malformed_offsets(ends, backend):
    """Malformed offsets are clamped on the device (never an out-of-bounds access): the reference applies
    the documented clamping; uncovered rows are zeros."""
    dtype, t, k, n = torch.bfloat16, 40, 64, 48
    a = rand(t, k, dtype=dtype, seed=96)
    w = rand(len(ends), n, k, dtype=dtype, seed=97)
    out, _ = run_grouped(a, w, ends, torch.int32, backend)
    ref = grouped_ref(a, w, ends)
    torch.testing.assert_close(up(out), ref, rtol=TOL[dtype][0], atol=TOL[dtype][1] * math.sqrt(k))


@pytest.mark.parametrize("backend", BACKENDS)
def test_grouped_mm_degenerate(backend):
    """k = 0 (D = 0 everywhere), no rows, and one group holding every row."""
    dtype = torch.bfloat16
    a0, w0 = torch.empty(9, 0, dtype=dtype, device=DEV), torch.empty(2, 16, 0, dtype=dtype, device=DEV)
    out, _ = run_grouped(a0, w0, [4, 9], torch.int32, backend)
    assert (out == 0).all()
    ae, we = torch.empty(0, 32, dtype=dtype, device=DEV), rand(3, 16, 32, dtype=dtype, seed=98)
    out, _ = run_grouped(ae, we, [0, 0, 0], torch.int64, backend)
    assert out.shape == (0, 16)
    a, w = rand(33, 32, dtype=dtype, seed=99), rand(1, 24, 32, dtype=dtype, seed=100)
    out, _ = run_grouped(a, w, [33], torch.int32, backend)
    check(out, grouped_ref(a, w, [33]), dtype, 32, "grouped_mm one group")


@pytest.mark.parametrize("sizes, n, k, tile", [
    ([1024] * 8, 1024, 128, "128x256x64"),  # tall groups, a full wave of large tiles
    ([0, 1, 2000, 777, 3000, 129, 2285], 1024, 136, "128x256x64"),  # odd row-tile counts under the 2x1 cluster
    ([0, 3, 200, 1, 17, 64, 65, 0, 300, 5, 90, 7] * 4, 264, 256, "128x128x64"),  # many small experts, odd n tiles
], ids=["large-even", "large-skewed", "small-skewed"])
def test_grouped_mm_cutlass_tiles(sizes, n, k, tile):
    """Both tile configurations of the Hopper kernel against per-expert torch matmuls, and (bf16, int32
    offsets) against torch._grouped_mm where this torch has it."""
    if "cutlass" not in GROUPED_BACKENDS:
        pytest.skip("grouped cutlass kernel not available (needs sm_90 + CUTLASS)")
    dtype = torch.bfloat16
    a = rand(sum(sizes), k, dtype=dtype, seed=101)
    w = rand(len(sizes), n, k, dtype=dtype, seed=102)
    ends = _ends(sizes)
    out, sku = run_grouped(a, w, ends, torch.int32, "any")
    assert "cutlass" in sku and tile in sku, sku
    check(out, grouped_ref(a, w, ends), dtype, k, f"grouped_mm {tile}")
    if hasattr(torch, "_grouped_mm"):
        offs = torch.tensor(ends, dtype=torch.int32, device=DEV)
        try:
            want = torch._grouped_mm(a, w.transpose(1, 2), offs=offs)
        except RuntimeError as e:  # this torch's kernel has its own limits; the per-expert check above holds
            pytest.skip(f"torch._grouped_mm refused: {e}")
        torch.testing.assert_close(out, want, rtol=1.6e-2, atol=1e-2 * math.sqrt(k))


@pytest.mark.parametrize("backend", BACKENDS)
def test_grouped_mm_cuda_graph(backend):
    """Offsets stay on the device: the grouped GEMM captures into a CUDA graph and replays with new
    inputs and a new routing."""
    dtype, k, n = torch.bfloat16, 64, 32
    a = rand(50, k, dtype=dtype, seed=103)
    w = rand(3, n, k, dtype=dtype, seed=104)
    offs = torch.tensor([10, 10, 45], dtype=torch.int32, device=DEV)
    out = torch.empty(50, n, dtype=dtype, device=DEV)
    F.grouped_mm(a, w.transpose(1, 2), offs, out=out, backend=backend)  # warm: workspace exists before capture
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        F.grouped_mm(a, w.transpose(1, 2), offs, out=out, backend=backend)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        F.grouped_mm(a, w.transpose(1, 2), offs, out=out, backend=backend)
    a.copy_(rand(50, k, dtype=dtype, seed=105))
    offs.copy_(torch.tensor([5, 30, 50], dtype=torch.int32, device=DEV))
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    check(out, grouped_ref(a, w, [5, 30, 50]), dtype, k, f"grouped graph replay {backend}")


@pytest.mark.sanitizer
def test_sanitizer_native_kernels():
    """Small cases of every native kernel (small-M, epilogue, bias-gradient reduction, grouped) for
    compute-sanitizer memcheck: odd N, partial k chunks, rows no group covers."""
    x, w, b = rand(5, 24, dtype=torch.bfloat16, seed=100), rand(13, 24, dtype=torch.bfloat16, seed=101), \
        rand(13, dtype=torch.bfloat16, seed=102)
    check(F.linear(x, w, b, activation="gelu"), tF.gelu(up(x) @ up(w).t() + up(b)), torch.bfloat16, 24, "small-m")
    xs = rand(20, 24, seed=103).requires_grad_()
    ws, bs = rand(13, 24, seed=104).requires_grad_(), rand(13, seed=105).requires_grad_()
    F.linear(xs, ws, bs, activation="silu").sum().backward()
    xr, wr, br = (t.detach().double().requires_grad_() for t in (xs, ws, bs))
    tF.silu(tF.linear(xr, wr, br)).sum().backward()
    check(bs.grad, br.grad, torch.float32, 20, "db")
    a = rand(70, 16, dtype=torch.float16, seed=106)
    we = rand(2, 24, 16, dtype=torch.float16, seed=107)
    out = F.grouped_mm(a, we.transpose(1, 2), torch.tensor([3, 67], dtype=torch.int32, device=DEV), backend="native")
    ref = torch.cat([up(a[:3]) @ up(we[0]).t(), up(a[3:67]) @ up(we[1]).t(), torch.zeros(3, 24, dtype=torch.float64,
                                                                                          device=DEV)])
    check(out, ref, torch.float16, 16, "grouped")


@pytest.mark.sanitizer
def test_sanitizer_grouped_cutlass():
    """The Hopper grouped kernel and its preparation kernel under memcheck: an empty group, a partial row
    tile, malformed offsets past rows, uncovered rows."""
    if "cutlass" not in GROUPED_BACKENDS:
        pytest.skip("grouped cutlass kernel not available (needs sm_90 + CUTLASS)")
    a = rand(70, 64, dtype=torch.bfloat16, seed=108)
    we = rand(3, 24, 64, dtype=torch.bfloat16, seed=109)
    for ends in ([3, 3, 67], [50, 20, 1000]):
        out, _ = run_grouped(a, we, ends, torch.int64, "cutlass")
        check(out, grouped_ref(a, we, ends), torch.bfloat16, 64, f"grouped cutlass {ends}")


# ---- int8 x int8 -> bf16 / f16 / f32 with per-row x per-column scales (CUTLASS, sm_90) ------------------
OUT_DTYPES = [torch.bfloat16, torch.float16, torch.float32]
EPS = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10, torch.float32: 2.0 ** -23}  # 1 ulp, relative
# (M, N, K): odd M, N multiples of 8, K multiples of 16; the last two take the 128x256 tile (enough
# tiles to fill the device) with partial tiles in M and N, the others the 64x128 tile.
INT8_SHAPES = [(1, 8, 16), (7, 40, 48), (33, 72, 64), (129, 264, 4096), (300, 1032, 272), (1100, 4104, 160),
               (2048, 2048, 1024)]


def _need_sm90():
    if _sm() != 90:
        pytest.skip("the CUTLASS int8 kernel is built for sm_90a (Hopper) only")


def _int8(*shape, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return torch.randint(-128, 128, shape, generator=g, device=DEV, dtype=torch.int8)


def _scales(m, n, per_row_col, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    sa = torch.rand(m if per_row_col else 1, generator=g, device=DEV) * 0.02 + 1e-3
    sb = torch.rand(n if per_row_col else 1, generator=g, device=DEV) * 0.02 + 1e-3
    return sa, sb


def _int8_ref(a, b, sa, sb, bias, out_dtype):
    """Exact integer accumulation (float64 holds every int8 dot product here exactly; torch._int_mm agrees
    where it applies), then torch's float32 steps in the order (acc * a_scale) * b_scale + bias, one
    rounding to out_dtype."""
    acc = a.double() @ b.double().t()
    m, k, n = a.shape[0], a.shape[1], b.shape[0]
    if m > 16 and k > 0 and k % 8 == 0 and n % 8 == 0:
        assert torch.equal(torch._int_mm(a, b.t()).double(), acc), "float64 reference is not exact"
    z = acc.float() * sa.float().reshape(-1, 1) * sb.float().reshape(1, -1)
    if bias is not None:
        z = z + bias.float()
    return z.to(out_dtype)


def _check_int8(out, ref, out_dtype, what):
    assert out.dtype == out_dtype and out.shape == ref.shape, what
    if ref.numel() >= 16:
        assert (ref != 0).float().mean() > 0.5, f"{what}: degenerate reference (mostly zeros)"
    assert not out.isnan().any(), f"{what}: NaN (unwritten elements?)"
    torch.testing.assert_close(out.float(), ref.float(), rtol=EPS[out_dtype], atol=1e-6,
                               msg=lambda msg: f"{what}: {msg}")


@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=str)
@pytest.mark.parametrize("mnk", INT8_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("per_row_col", [True, False], ids=["rowcol", "tensor"])
@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
def test_scaled_int8_mm(out_dtype, mnk, per_row_col, with_bias):
    _need_sm90()
    m, n, k = mnk
    a, b = _int8(m, k, seed=200), _int8(n, k, seed=201)
    sa, sb = _scales(m, n, per_row_col, seed=202)
    bias = rand(n, dtype=out_dtype, seed=203) * 4 if with_bias else None
    out = F.scaled_int8_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype)
    _check_int8(out, _int8_ref(a, b, sa, sb, bias, out_dtype), out_dtype, f"scaled_int8_mm {mnk}")


@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=str)
@pytest.mark.parametrize("mnk,tile", [((64, 512, 256), "64x128x128"), ((1100, 4104, 160), "128x256x128")],
                         ids=["small-tile", "large-tile"])
def test_scaled_int8_every_element_written_and_sku(out_dtype, mnk, tile):
    """D poisoned with NaN before the run (through _run, which writes into a given D); the SKU names
    the CUTLASS tile; two runs agree bit for bit."""
    _need_sm90()
    m, n, k = mnk
    a, b = _int8(m, k, seed=210), _int8(n, k, seed=211)
    sa, sb = _scales(m, n, True, seed=212)
    bias = rand(n, dtype=out_dtype, seed=213)
    d = torch.full((m, n), float("nan"), dtype=out_dtype, device=DEV)
    sku = G.sku(a, b.t(), d, bias=bias, a_scale=sa, b_scale=sb)
    assert "[cutlass sm_90a" in sku and tile in sku and "acc=int32 deterministic bit-stable" in sku, sku
    G._run(a, b.t(), d, bias=bias, a_scale=sa, b_scale=sb)
    _check_int8(d, _int8_ref(a, b, sa, sb, bias, out_dtype), out_dtype, f"poisoned {mnk}")
    d2 = torch.full_like(d, float("nan"))
    G._run(a, b.t(), d2, bias=bias, a_scale=sa, b_scale=sb)
    assert torch.equal(d, d2), "CUTLASS int8 GEMM must be deterministic"


def test_scaled_int8_scale_layouts_and_strided_operands():
    """[M, 1] / [1, N] scales, a per-tensor scale mixed with a per-channel one, padded leading dimensions
    (16-byte rows: used as they are; others: copied), an unaligned bias view."""
    _need_sm90()
    m, n, k = 45, 96, 64
    a_big, b_big = _int8(m, k + 16, seed=220), _int8(n, k + 32, seed=221)
    a, b = a_big[:, :k], b_big[:, 16:16 + k]  # lda 80, ldb 96, B offset 16 bytes
    sa, sb = _scales(m, n, True, seed=222)
    ref = _int8_ref(a, b, sa, sb, None, torch.bfloat16)
    _check_int8(F.scaled_int8_mm(a, b, sa.reshape(m, 1), sb.reshape(1, n)), ref, torch.bfloat16, "2-D scales")
    one = torch.tensor([0.5], device=DEV)
    _check_int8(F.scaled_int8_mm(a, b, one, sb), _int8_ref(a, b, one.expand(m), sb, None, torch.bfloat16),
                torch.bfloat16, "per-tensor a_scale, per-channel b_scale")
    a_odd = _int8(m, k + 8, seed=223)[:, :k]  # lda 72: not 16-byte rows, copied by the wrapper
    _check_int8(F.scaled_int8_mm(a_odd, b, sa, sb), _int8_ref(a_odd, b, sa, sb, None, torch.bfloat16),
                torch.bfloat16, "lda 72")
    bias = rand(n + 1, dtype=torch.bfloat16, seed=224)[1:]  # 2-byte aligned view
    _check_int8(F.scaled_int8_mm(a, b, sa, sb, bias=bias), _int8_ref(a, b, sa, sb, bias, torch.bfloat16),
                torch.bfloat16, "unaligned bias")


@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=str)
def test_scaled_int8_empty_and_k0(out_dtype):
    _need_sm90()
    sa, sb = _scales(5, 16, True, seed=230)
    assert F.scaled_int8_mm(_int8(0, 32, seed=231), _int8(16, 32, seed=232), sa[:0], sb).shape == (0, 16)
    bias = rand(16, dtype=out_dtype, seed=233)
    a0, b0 = torch.empty(5, 0, dtype=torch.int8, device=DEV), torch.empty(16, 0, dtype=torch.int8, device=DEV)
    out = F.scaled_int8_mm(a0, b0, sa, sb, bias=bias, out_dtype=out_dtype)
    assert torch.equal(out, bias.expand(5, 16)), "k = 0: D = bias"
    assert torch.equal(F.scaled_int8_mm(a0, b0, sa, sb, out_dtype=out_dtype),
                       torch.zeros(5, 16, dtype=out_dtype, device=DEV))


def test_scaled_int8_refusals():
    _need_sm90()
    a, b = _int8(32, 64, seed=240), _int8(48, 64, seed=241)
    sa, sb = _scales(32, 48, True, seed=242)
    with pytest.raises(RuntimeError, match="k expected a multiple of 16"):
        F.scaled_int8_mm(_int8(32, 40, seed=243), _int8(48, 40, seed=244), sa, sb)
    with pytest.raises(RuntimeError, match="n expected a multiple of 8 for a bfloat16 D"):
        F.scaled_int8_mm(a, _int8(12, 64, seed=245), sa, sb[:12])
    F.scaled_int8_mm(a, _int8(12, 64, seed=245), sa, sb[:12], out_dtype=torch.float32)  # f32: n % 4 suffices
    with pytest.raises(RuntimeError, match="a_scale expected 1 or 32 values"):
        F.scaled_int8_mm(a, b, sa[:5], sb)
    with pytest.raises(RuntimeError, match="expected int8"):
        F.scaled_int8_mm(a.float(), b, sa, sb)
    with pytest.raises(RuntimeError, match="same K"):
        F.scaled_int8_mm(a, _int8(48, 32, seed=246), sa, sb)
    with pytest.raises(RuntimeError, match="out_dtype expected"):
        F.scaled_int8_mm(a, b, sa, sb, out_dtype=torch.int32)
    d3 = torch.empty(2, 32, 48, dtype=torch.bfloat16, device=DEV)  # batched: not this kernel
    with pytest.raises(RuntimeError, match="batch expected 1"):
        G._run(torch.stack([a, a]), torch.stack([b, b]).transpose(1, 2), d3, a_scale=sa, b_scale=sb)
    with pytest.raises(RuntimeError, match="alpha = 1"):
        G._run(a, b.t(), torch.empty(32, 48, dtype=torch.bfloat16, device=DEV), alpha=2.0, a_scale=sa, b_scale=sb)
    # int8 -> int32 is unchanged (cuBLASLt, no scales).
    assert torch.equal(F.int_mm(a, b.t()), torch._int_mm(a, b.t()))


def test_scaled_int8_cuda_graph():
    _need_sm90()
    a, b = _int8(96, 128, seed=250), _int8(64, 128, seed=251)
    sa, sb = _scales(96, 64, True, seed=252)
    bias = rand(64, dtype=torch.bfloat16, seed=253)
    F.scaled_int8_mm(a, b, sa, sb, bias=bias)  # warm: plan and workspace exist before capture
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        F.scaled_int8_mm(a, b, sa, sb, bias=bias)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = F.scaled_int8_mm(a, b, sa, sb, bias=bias)
    a.copy_(_int8(96, 128, seed=254))
    g.replay()
    torch.cuda.synchronize()
    _check_int8(y, _int8_ref(a, b, sa, sb, bias, torch.bfloat16), torch.bfloat16, "graph replay")


@pytest.mark.sanitizer
def test_sanitizer_cutlass_int8():
    """Both CUTLASS tiles (64x128, then 128x256) with partial tiles, for compute-sanitizer memcheck."""
    _need_sm90()
    for m, n, k in ((7, 40, 48), (1100, 4104, 160)):
        a, b = _int8(m, k, seed=260), _int8(n, k, seed=261)
        sa, sb = _scales(m, n, True, seed=262)
        bias = rand(n, dtype=torch.bfloat16, seed=263)
        out = F.scaled_int8_mm(a, b, sa, sb, bias=bias)
        _check_int8(out, _int8_ref(a, b, sa, sb, bias, torch.bfloat16), torch.bfloat16, f"sanitizer {m}x{n}x{k}")
