"""Matrix products under their torch names (the GEMM family, include/baracuda/ops/gemm.hpp).

Every function runs ``_C.gemm`` (a cached GemmPlan: the small-M streaming kernel for decode
shapes, CUTLASS for int8 -> floating results with scales (``scaled_int8_mm``), cuBLASLt otherwise) on torch's current stream, and is differentiable where torch's is:
the backward is built from the same GEMM (dA = dD @ B^T, dB = A^T @ dD) with the bias gradient
fused into the dB product. Operands are passed as views (transposes and leading dimensions
travel as strides, a broadcast batch as stride 0); a view with no unit stride is made
contiguous first. float32 uses TF32 only when torch allows it
(``torch.backends.cuda.matmul.allow_tf32`` / ``fp32_precision``), as torch does.
"""
import warnings

from . import _C
from ._autograd import current_stream, dl, require_torch, torch

__all__ = ["gemm", "linear", "mm", "bmm", "matmul", "addmm", "baddbmm", "addmv", "mv", "dot", "vdot", "outer",
           "tensordot", "einsum", "dot_general", "grouped_mm", "scaled_mm", "int_mm", "scaled_int8_mm"]

_ACTS = ("none", "relu", "gelu", "gelu_tanh", "silu")


# ---- launching -----------------------------------------------------------------------------------
def _tf32():
    m = torch.backends.cuda.matmul
    p = getattr(m, "fp32_precision", None)
    if p == "tf32":
        return True
    if p == "ieee":
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bool(getattr(m, "allow_tf32", False))


_WORKSPACE = {}  # (device index, stream) -> uint8 buffer reused by every GEMM on that stream


def _run(a, b, d, *, c=None, bias=None, aux=None, aux_in=None, bgrad=None, alpha=1.0, beta=0.0, act="none",
         backward=False, bgrad_of="none", a_scale=None, b_scale=None, amax_d=None):
    """D = epilogue(alpha*A@B + beta*C): rank-3 (or all rank-2) views, D preallocated."""
    dev = d.device
    stream = current_stream(dev)
    key = (dev.index, stream)
    # Only the optional tensors and scalars that differ from _C.gemm's defaults travel as keywords:
    # each keyword is parsed per call, and a decode GEMM's launch is a few microseconds.
    opt = {k: v for k, v in (("c", c), ("bias", bias), ("aux", aux), ("aux_in", aux_in), ("bgrad", bgrad),
                             ("a_scale", a_scale), ("b_scale", b_scale), ("amax_d", amax_d)) if v is not None}
    scal = {}
    if alpha != 1.0 or beta != 0.0:
        scal.update(alpha=float(alpha), beta=float(beta))
    if act != "none":
        scal["act"] = act
    if backward:
        scal["backward"] = True
    if bgrad_of != "none":
        scal["bgrad_of"] = bgrad_of
    # torch's TF32 flag concerns float32 products only (a tf32 request for int8 / fp8 is refused);
    # reading it costs microseconds (a warnings context on recent torch), so only then.
    if a.dtype == torch.float32 and _tf32():
        scal["tf32"] = True

    def call(ws):  # DLPack capsules are single-use: export afresh for every call
        kw = {k: dl(v) for k, v in opt.items()}
        return _C.gemm(dl(a), dl(b), dl(d), **kw, **scal, stream=stream, workspace=None if ws is None else dl(ws))

    ws = _WORKSPACE.get(key)
    need = call(ws)
    if need:  # first use on this stream, or a plan that wants more: grow and launch
        ws = torch.empty(max(need, 1 << 20), dtype=torch.uint8, device=dev)
        _WORKSPACE[key] = ws
        need = call(ws)
        if need:
            raise RuntimeError(f"gemm: workspace of {ws.numel()} bytes refused, plan asks {need}")
    return d


def sku(a, b, d, **kw):
    """The SKU the plan for these tensors would run (string; no launch)."""
    kw.setdefault("tf32", _tf32() and a.dtype == torch.float32)
    conv = {k: (dl(v) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    return _C.gemm_sku(dl(a), dl(b), dl(d), **conv)


def _valid_matrix(t):
    """True when the last two dims have one unit stride and the other at least the extent it skips."""
    r, c = t.shape[-2], t.shape[-1]
    rs, cs = t.stride(-2), t.stride(-1)
    row = (cs == 1 or c <= 1) and (r <= 1 or rs >= max(c, 1))
    col = (rs == 1 or r <= 1) and (c <= 1 or cs >= max(r, 1))
    return (row or col) and all(s >= 0 for s in t.stride())


def _linear_fw(x, w, bias, act, keep_aux):
    """(y, aux): y = act(x @ w^T + bias) for matrices x [T, K], w [N, K]; aux = the pre-activation
    (for the backward) when keep_aux."""
    d = x.new_empty((x.shape[0], w.shape[0]))
    aux = torch.empty_like(d) if keep_aux else None
    _run(x, w.t(), d, bias=_aligned16(bias), aux=aux, act=act)
    return d, aux


def _mat(t):
    return t if _valid_matrix(t) else t.contiguous()


def _aligned16(t):
    return t if t is None or t.data_ptr() % 16 == 0 else t.clone()


def _check_cuda(name, *ts):
    require_torch(f"baracuda.functional.{name}")
    for t in ts:
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected tensors, got {type(t).__name__}")
        if t is not None and not t.is_cuda:
            raise RuntimeError(f"{name}: expected CUDA tensors, got a tensor on {t.device}")


def _act_backward(act, grad, aux):
    """dZ = grad * act'(Z) with the elementwise family's backward kernels (aux = Z)."""
    from . import functional as F

    if act == "relu":
        return F.relu_backward(grad, aux)  # relu' depends on sign(Z) = sign(relu(Z))
    if act in ("gelu", "gelu_tanh"):
        return F.gelu_backward(grad, aux, approximate="tanh" if act == "gelu_tanh" else "none")
    if act == "silu":
        return F.silu_backward(grad, aux)
    return grad


def _t(x):
    return x.transpose(-1, -2)


if torch is not None:
    from torch.autograd.function import once_differentiable

    class _GemmFn(torch.autograd.Function):
        """D[B,M,N] = act(alpha * A[B,M,K] @ B[B,K,N] + beta * C + bias[N]). Batch strides may be 0
        (torch's expand; its backward sums the broadcast gradient)."""

        @staticmethod
        def forward(ctx, a, b, c, bias, alpha, beta, act):
            a, b = _mat(a), _mat(b)
            batch, m, n = a.shape[0], a.shape[1], b.shape[2]
            d = torch.empty((batch, m, n), dtype=a.dtype, device=a.device)
            need_aux = act != "none" and any(ctx.needs_input_grad[:4])
            aux = torch.empty_like(d) if need_aux else None
            _run(a, b, d, c=None if c is None or beta == 0 else _mat(c), bias=_aligned16(bias), aux=aux,
                 alpha=alpha, beta=beta if c is not None else 0.0, act=act)
            ctx.save_for_backward(a, b, aux)
            ctx.alpha, ctx.beta, ctx.act, ctx.has_c = alpha, beta, act, c is not None
            return d

        @staticmethod
        @once_differentiable
        def backward(ctx, gd):
            a, b, aux = ctx.saved_tensors
            need_a, need_b, need_c, need_bias = ctx.needs_input_grad[:4]
            dz = _mat(_act_backward(ctx.act, gd, aux) if ctx.act != "none" else gd)
            ga = gb = gc = gbias = None
            if need_a:
                ga = torch.empty(a.shape, dtype=a.dtype, device=a.device)
                _run(dz, _t(b), ga, alpha=ctx.alpha, backward=True)
            if need_b or need_bias:
                gb = torch.empty((dz.shape[0],) + tuple(b.shape[1:]), dtype=b.dtype, device=b.device)
                if need_bias:
                    gbias = torch.empty(dz.shape[-1], dtype=dz.dtype, device=dz.device)
                _run(_t(a), dz, gb, alpha=ctx.alpha, backward=True, bgrad=gbias,
                     bgrad_of="b" if need_bias else "none")
                if not need_b:
                    gb = None
            if need_c and ctx.has_c:
                gc = dz * ctx.beta
            return ga, gb, gc, gbias, None, None, None

    class _LinearFn(torch.autograd.Function):
        """y = act(x @ W^T + b) for x [T, K], W [N, K]. Backward: dZ = dy * act'(Z), dX = dZ @ W,
        dW = dZ^T @ x with db = the sum of dZ fused into the same GEMM (bgrad of A = dZ^T over k = T),
        so dW lands in W's own [N, K] layout."""

        @staticmethod
        def forward(ctx, x, w, bias, act):
            x, w = _mat(x), _mat(w)
            d, aux = _linear_fw(x, w, bias, act, act != "none" and any(ctx.needs_input_grad[:3]))
            ctx.save_for_backward(x, w, aux)
            ctx.act = act
            return d

        @staticmethod
        @once_differentiable
        def backward(ctx, gy):
            x, w, aux = ctx.saved_tensors
            need_x, need_w, need_b = ctx.needs_input_grad[:3]
            dz = _mat(_act_backward(ctx.act, gy, aux) if ctx.act != "none" else gy)
            gx = gw = gb = None
            if need_x:
                gx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
                _run(dz, w, gx, backward=True)
            if need_w or need_b:
                gw = torch.empty(w.shape, dtype=w.dtype, device=w.device)
                gb = torch.empty(w.shape[0], dtype=w.dtype, device=w.device) if need_b else None
                _run(dz.t(), x, gw, backward=True, bgrad=gb, bgrad_of="a" if need_b else "none")
                if not need_w:
                    gw = None
            return gx, gw, gb, None
else:  # pragma: no cover
    _GemmFn = _LinearFn = None


def _gemm3(a, b, c=None, bias=None, alpha=1.0, beta=0.0, act="none"):
    """Autograd-aware rank-3 product."""
    if act not in _ACTS:
        raise ValueError(f"gemm: activation expected one of {_ACTS}, got {act!r}")
    return _GemmFn.apply(a, b, c, bias, alpha, beta, act)


def _shape_check(name, a, b, ka, kb):
    if ka != kb:
        raise RuntimeError(f"{name}: inner dimensions expected equal, got A {tuple(a.shape)} and B {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise RuntimeError(f"{name}: expected both operands of one dtype, got {a.dtype} and {b.dtype}")


# ---- torch-named functions -----------------------------------------------------------------------------
def gemm(a, b, *, c=None, bias=None, alpha=1.0, beta=0.0, activation="none", out=None):
    """act(alpha * a @ b + beta * c + bias) for 2-D or 3-D (batched) a, b; the baracuda-specific entry
    with every epilogue (activation: none, relu, gelu, gelu_tanh, silu)."""
    _check_cuda("gemm", a, b, c, bias)
    if a.dim() != b.dim() or a.dim() not in (2, 3):
        raise RuntimeError(f"gemm: expected two 2-D or two 3-D tensors, got {a.dim()}-D and {b.dim()}-D")
    _shape_check("gemm", a, b, a.shape[-1], b.shape[-2])
    two = a.dim() == 2
    a3, b3 = (a.unsqueeze(0), b.unsqueeze(0)) if two else (a, b)
    c3 = None
    if c is not None and beta != 0:
        # C shares D's (row-major) storage order and has a batch of its own; anything else
        # (broadcast rows, a transposed C) is materialised, as the plan would refuse it.
        c3 = c.expand(a3.shape[1], b3.shape[2]).unsqueeze(0) if two else c.expand(a3.shape[0], a3.shape[1],
                                                                                   b3.shape[2])
        row_major = c3.stride(-1) == 1 or c3.shape[-1] <= 1
        if not (row_major and _valid_matrix(c3)) or (c3.shape[0] > 1 and c3.stride(0) == 0):
            c3 = c3.contiguous()
    d = _gemm3(a3, b3, c3, bias, alpha, beta, activation)
    d = d.squeeze(0) if two else d
    if out is not None:
        out.copy_(d)
        return out
    return d


def linear(input, weight, bias=None, *, activation="none"):
    """torch.nn.functional.linear: input [..., K] @ weight[N, K]^T + bias; optional fused activation."""
    _check_cuda("linear", input, weight, bias)
    if weight.dim() != 2:
        raise RuntimeError(f"linear: weight expected 2-D [out_features, in_features], got {tuple(weight.shape)}")
    _shape_check("linear", input, weight, input.shape[-1], weight.shape[-1])
    if activation not in _ACTS:
        raise ValueError(f"linear: activation expected one of {_ACTS}, got {activation!r}")
    lead = input.shape[:-1]
    x = input.reshape(-1, input.shape[-1])
    if torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad or
                                    (bias is not None and bias.requires_grad)):
        y = _LinearFn.apply(x, weight, bias, activation)
    else:  # nothing to record: the autograd.Function's own cost (several us a call) is saved
        y = _linear_fw(_mat(x), _mat(weight), bias, activation, False)[0]
    return y.reshape(*lead, weight.shape[0])


def mm(input, mat2, *, out=None):
    _check_cuda("mm", input, mat2)
    if input.dim() != 2 or mat2.dim() != 2:
        raise RuntimeError(f"mm: expected 2-D tensors, got {input.dim()}-D and {mat2.dim()}-D")
    _shape_check("mm", input, mat2, input.shape[1], mat2.shape[0])
    return gemm(input, mat2, out=out)


def bmm(input, mat2, *, out=None):
    _check_cuda("bmm", input, mat2)
    if input.dim() != 3 or mat2.dim() != 3 or input.shape[0] != mat2.shape[0]:
        raise RuntimeError(f"bmm: expected 3-D tensors with equal batch, got {tuple(input.shape)} and "
                           f"{tuple(mat2.shape)}")
    _shape_check("bmm", input, mat2, input.shape[2], mat2.shape[1])
    return gemm(input, mat2, out=out)


def matmul(input, other, *, out=None):
    """torch.matmul: 1-D operands, batch broadcasting; a batched input against a matrix is one GEMM."""
    _check_cuda("matmul", input, other)
    a, b = input, other
    if a.dim() == 0 or b.dim() == 0:
        raise RuntimeError("matmul: both arguments to matmul need to be at least 1D, got "
                           f"{a.dim()}D and {b.dim()}D tensors")
    if a.dim() == 1 and b.dim() == 1:
        r = dot(a, b)
    else:
        a2 = a.unsqueeze(0) if a.dim() == 1 else a
        b2 = b.unsqueeze(-1) if b.dim() == 1 else b
        _shape_check("matmul", a, b, a2.shape[-1], b2.shape[-2])
        m, k, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
        if b2.dim() == 2 and a2.dim() > 2:  # fold the batch into M: one GEMM, weight read once
            r = gemm(a2.reshape(-1, k), b2).reshape(*a2.shape[:-1], n)
        else:
            batch = torch.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
            a3 = a2.expand(*batch, m, k).reshape(-1, m, k)
            b3 = b2.expand(*batch, k, n).reshape(-1, k, n)
            r = _gemm3(a3, b3).reshape(*batch, m, n)
        if a.dim() == 1:
            r = r.squeeze(-2)
        if b.dim() == 1:
            r = r.squeeze(-1)
    if out is not None:
        out.copy_(r)
        return out
    return r


def addmm(input, mat1, mat2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * mat1 @ mat2; a bias-shaped input ([N] or [1, N]) with beta = 1 is the
    fused bias epilogue."""
    _check_cuda("addmm", input, mat1, mat2)
    if mat1.dim() != 2 or mat2.dim() != 2:
        raise RuntimeError(f"addmm: expected 2-D matrices, got {mat1.dim()}-D and {mat2.dim()}-D")
    _shape_check("addmm", mat1, mat2, mat1.shape[1], mat2.shape[0])
    n = mat2.shape[1]
    if beta == 1 and input.numel() == n and input.dim() <= 2 and input.shape[-1:] == (n,) and input.dtype == mat1.dtype:
        r = gemm(mat1, mat2, bias=input.reshape(n), alpha=alpha)
    else:
        c = input.expand(mat1.shape[0], n)
        r = gemm(mat1, mat2, c=c if beta != 0 else None, alpha=alpha, beta=beta)
    if out is not None:
        out.copy_(r)
        return out
    return r


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    _check_cuda("baddbmm", input, batch1, batch2)
    if batch1.dim() != 3 or batch2.dim() != 3:
        raise RuntimeError(f"baddbmm: expected 3-D tensors, got {batch1.dim()}-D and {batch2.dim()}-D")
    _shape_check("baddbmm", batch1, batch2, batch1.shape[2], batch2.shape[1])
    c = input.expand(batch1.shape[0], batch1.shape[1], batch2.shape[2]) if beta != 0 else None
    r = gemm(batch1, batch2, c=c, alpha=alpha, beta=beta)
    if out is not None:
        out.copy_(r)
        return out
    return r


def mv(input, vec, *, out=None):
    _check_cuda("mv", input, vec)
    if input.dim() != 2 or vec.dim() != 1:
        raise RuntimeError(f"mv: expected a matrix and a vector, got {input.dim()}-D and {vec.dim()}-D")
    return matmul(input, vec, out=out)


def addmv(input, mat, vec, *, beta=1, alpha=1, out=None):
    _check_cuda("addmv", input, mat, vec)
    if mat.dim() != 2 or vec.dim() != 1:
        raise RuntimeError(f"addmv: expected a matrix and a vector, got {mat.dim()}-D and {vec.dim()}-D")
    r = addmm(input.expand(mat.shape[0]).unsqueeze(-1), mat, vec.unsqueeze(-1), beta=beta, alpha=alpha).squeeze(-1)
    if out is not None:
        out.copy_(r)
        return out
    return r


def dot(input, other, *, out=None):
    _check_cuda("dot", input, other)
    if input.dim() != 1 or other.dim() != 1 or input.shape != other.shape:
        raise RuntimeError(f"dot: expected two 1-D tensors of equal size, got {tuple(input.shape)} and "
                           f"{tuple(other.shape)}")
    r = gemm(input.unsqueeze(0), other.unsqueeze(-1)).reshape(())
    if out is not None:
        out.copy_(r)
        return out
    return r


def vdot(input, other, *, out=None):
    """conj(input) . other (complex); dot for real tensors."""
    return dot(input.conj() if input.is_complex() else input, other, out=out)


def outer(input, vec2, *, out=None):
    _check_cuda("outer", input, vec2)
    if input.dim() != 1 or vec2.dim() != 1:
        raise RuntimeError(f"outer: expected two 1-D tensors, got {input.dim()}-D and {vec2.dim()}-D")
    return gemm(input.unsqueeze(-1), vec2.unsqueeze(0), out=out)


# ---- contractions lowered to one batched GEMM ------------------------------------------------------------
def _contract(name, a, b, batch_a, batch_b, con_a, con_b):
    """Contracts dims con_a of a with con_b of b, batching batch_a with batch_b. Returns a tensor
    shaped [batch..., a free..., b free...] (lax.dot_general's order), through one bmm on permuted
    (and, where the permutation is not a view torch can reshape, copied) operands."""
    if len(con_a) != len(con_b) or len(batch_a) != len(batch_b):
        raise RuntimeError(f"{name}: contracting/batch dimension lists differ in length")
    for x, y in zip(con_a + batch_a, con_b + batch_b):
        if a.shape[x] != b.shape[y]:
            raise RuntimeError(f"{name}: dimension {x} of A (size {a.shape[x]}) expected equal to dimension {y} of "
                               f"B (size {b.shape[y]})")
    free_a = [i for i in range(a.dim()) if i not in con_a and i not in batch_a]
    free_b = [i for i in range(b.dim()) if i not in con_b and i not in batch_b]
    bs = [int(a.shape[i]) for i in batch_a]
    fa, fb = [int(a.shape[i]) for i in free_a], [int(b.shape[i]) for i in free_b]
    ks = [a.shape[i] for i in con_a]
    nb, m, n, k = _prod(bs), _prod(fa), _prod(fb), _prod(ks)
    a3 = a.permute(*batch_a, *free_a, *con_a).reshape(nb, m, k)
    b3 = b.permute(*batch_b, *con_b, *free_b).reshape(nb, k, n)
    return _gemm3(a3, b3).reshape(tuple(bs + fa + fb))


def _prod(xs):
    p = 1
    for x in xs:
        p *= int(x)
    return p


def tensordot(a, b, dims=2, out=None):
    """torch.tensordot: dims = an int (last dims of a with first dims of b) or two lists."""
    _check_cuda("tensordot", a, b)
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot: dims expected >= 0, got {dims}")
        da, db = list(range(a.dim() - dims, a.dim())), list(range(dims))
    else:
        da, db = ([dims[0]] if isinstance(dims[0], int) else list(dims[0])), \
                 ([dims[1]] if isinstance(dims[1], int) else list(dims[1]))
    da = [d % a.dim() for d in da]
    db = [d % b.dim() for d in db]
    r = _contract("tensordot", a, b, [], [], da, db)
    if out is not None:
        out.copy_(r)
        return out
    return r


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    """jax.lax.dot_general: dimension_numbers = ((lhs_contract, rhs_contract), (lhs_batch, rhs_batch));
    the result is [batch..., lhs free..., rhs free...]."""
    _check_cuda("dot_general", lhs, rhs)
    if precision is not None or (preferred_element_type is not None and preferred_element_type != lhs.dtype):
        raise NotImplementedError("dot_general: precision and a different preferred_element_type are not supported")
    (lc, rc), (lb, rb) = dimension_numbers
    return _contract("dot_general", lhs, rhs, list(lb), list(rb), list(lc), list(rc))


def _einsum_ellipsis(terms, rhs, arrow, operands):
    """Replaces '...' by letters no term uses, right-aligned across operands (numpy broadcasting);
    size-1 dims are expanded to the other operands' sizes so that they pair up as batch dims."""
    used = set("".join(terms) + rhs)
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in used]
    counts = [x.dim() - (len(t) - 3) if "..." in t else 0 for t, x in zip(terms, operands)]
    n = max(counts, default=0)
    if n > len(free):
        raise RuntimeError("einsum: too many dimensions under '...'")
    labels = "".join(free[:n])
    sizes = [1] * n
    for t, x, c in zip(terms, operands, counts):
        if c:
            start = t.index("...")
            for j in range(c):
                s_ = x.shape[start + j]
                if s_ != 1:
                    if sizes[n - c + j] not in (1, s_):
                        raise RuntimeError("einsum: '...' dimensions do not broadcast")
                    sizes[n - c + j] = s_
    new_terms, new_ops = [], []
    for t, x, c in zip(terms, operands, counts):
        if "..." in t:
            start = t.index("...")
            t = t.replace("...", labels[n - c:])
            shape = list(x.shape)
            shape[start:start + c] = sizes[n - c:]
            x = x.expand(shape)
        new_terms.append(t)
        new_ops.append(x)
    if arrow:
        rhs = rhs.replace("...", labels)
    else:
        rest = "".join(sorted(c for c in set("".join(new_terms)) if c not in labels and "".join(new_terms).count(c) == 1))
        rhs = labels + rest
    return new_terms, rhs, new_ops


def einsum(equation, *operands):
    """torch.einsum: explicit or implicit equations, '...' broadcasting, repeated labels (diagonals).
    Pairs are contracted left to right through one batched GEMM each; a label that only one operand
    carries and nothing later needs is summed first."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    _check_cuda("einsum", *operands)
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise RuntimeError(f"einsum: equation has {len(terms)} operand(s), got {len(operands)} tensor(s)")
    for t, x in zip(terms, operands):
        want = len(t) - 3 if "..." in t else len(t)
        if ("..." in t and x.dim() < want) or ("..." not in t and x.dim() != want):
            raise RuntimeError(f"einsum: term '{t}' does not fit a {x.dim()}-D operand")
    if "..." in eq:
        terms, rhs, operands = _einsum_ellipsis(terms, rhs, arrow, operands)
    elif not arrow:  # implicit output: labels seen once, alphabetical
        rhs = "".join(sorted(c for c in set(lhs) if c.isalpha() and lhs.count(c) == 1))
    operands = list(operands)
    for i, t in enumerate(terms):  # repeated labels: take the diagonal, keep one label
        while len(set(t)) != len(t):
            c = next(c for c in t if t.count(c) > 1)
            p, q = t.index(c), t.index(c, t.index(c) + 1)
            operands[i] = operands[i].diagonal(dim1=p, dim2=q)  # the diagonal goes last
            t = t[:p] + t[p + 1:q] + t[q + 1:] + c
        terms[i] = t

    def reduce_unique(term, x, keep):
        drop = [i for i, c in enumerate(term) if c not in keep]
        if drop:
            x = x.sum(dim=drop)
            term = "".join(c for c in term if c in keep)
        return term, x

    term, acc = terms[0], operands[0]
    for j in range(1, len(terms)):
        later = set(rhs) | set("".join(terms[j + 1:]))
        t2, x2 = terms[j], operands[j]
        term, acc = reduce_unique(term, acc, later | set(t2))
        t2, x2 = reduce_unique(t2, x2, later | set(term))
        batch = [c for c in term if c in t2 and c in later]
        con = [c for c in term if c in t2 and c not in later]
        acc = _contract("einsum", acc, x2, [term.index(c) for c in batch], [t2.index(c) for c in batch],
                        [term.index(c) for c in con], [t2.index(c) for c in con])
        term = "".join(batch) + "".join(c for c in term if c not in t2) + "".join(c for c in t2 if c not in term)
    term, acc = reduce_unique(term, acc, set(rhs))
    return acc.permute(*[term.index(c) for c in rhs]) if rhs else acc


# ---- grouped (mixture of experts) ------------------------------------------------------------------------
def _k_rows(t, rows, cols):
    """True when t [rows, cols] has K-contiguous, 16-byte aligned rows (what the grouped kernels read)."""
    return (t.stride(-1) == 1 or cols <= 1) and (rows <= 1 or (t.stride(-2) % 8 == 0 and t.stride(-2) >= cols)) \
        and t.data_ptr() % 16 == 0


def _grouped_operands(mat_a, mat_b, offs, out):
    """(A [T, K], W [G, N, K], offs, D [T, N]) as the grouped kernels take them: K-contiguous 16-byte rows
    (copied otherwise), D allocated unless given."""
    _check_cuda("grouped_mm", mat_a, mat_b, offs, out)
    if mat_a.dim() != 2 or mat_b.dim() != 3 or offs.dim() != 1 or offs.numel() != mat_b.shape[0]:
        raise RuntimeError(f"grouped_mm: expected mat_a [T, K], mat_b [G, K, N] and offs [G], got "
                           f"{tuple(mat_a.shape)}, {tuple(mat_b.shape)}, {tuple(offs.shape)}")
    _shape_check("grouped_mm", mat_a, mat_b, mat_a.shape[1], mat_b.shape[1])
    if offs.dtype not in (torch.int32, torch.int64):
        raise RuntimeError(f"grouped_mm: offs dtype expected int32 or int64, got {offs.dtype}")
    w = mat_b.transpose(-2, -1)  # [G, N, K]
    groups, n, k = w.shape
    if not _k_rows(w, n, k) or (groups > 1 and (w.stride(0) % 8 or w.stride(0) < n * w.stride(1))):
        w = w.contiguous()
    a = mat_a if _k_rows(mat_a, mat_a.shape[0], k) else mat_a.contiguous()
    d = out if out is not None else torch.empty(a.shape[0], n, dtype=a.dtype, device=a.device)
    return a, w, offs.contiguous(), d


def grouped_mm(mat_a, mat_b, offs, *, out=None, backend="any"):
    """torch._grouped_mm's 2-D x 3-D case: rows offs[g-1] <= t < offs[g] of mat_a [T, K] (offs: int32 or
    int64 cumulative row ends, one per group; group 0 starts at row 0) times mat_b[g] [K, N]; one launch
    for all groups, no host synchronization. mat_b[g] should be K-contiguous (a transposed [N, K] expert
    weight), else it is copied. Rows no group covers (from offs[-1] on) are 0; malformed offsets are
    clamped on the device (see GroupedGemmArgs). f16 / bf16; no autograd yet. backend: "any" (the Hopper
    CUTLASS kernel where it applies, else the native one), "cutlass" or "native"."""
    a, w, offs, d = _grouped_operands(mat_a, mat_b, offs, out)
    dev = d.device
    stream = current_stream(dev)
    key = (dev.index, stream)

    def call(ws):  # DLPack capsules are single-use: export afresh for every call
        return _C.grouped_gemm(dl(a), dl(w), dl(offs), dl(d), stream, workspace=None if ws is None else dl(ws),
                               ends_only=True, backend=backend)

    ws = _WORKSPACE.get(key)  # shared with the other GEMMs of this stream (stream-ordered reuse)
    need = call(ws)
    if need:  # first use on this stream, or a plan that wants more: grow and launch
        ws = torch.empty(max(need, 1 << 20), dtype=torch.uint8, device=dev)
        _WORKSPACE[key] = ws
        need = call(ws)
        if need:
            raise RuntimeError(f"grouped_mm: workspace of {ws.numel()} bytes refused, plan asks {need}")
    return d


def grouped_mm_sku(mat_a, mat_b, offs, *, out=None, backend="any"):
    """The SKU grouped_mm would run for these tensors (string; no launch)."""
    a, w, offs, d = _grouped_operands(mat_a, mat_b, offs, out)
    return _C.grouped_gemm_sku(dl(a), dl(w), dl(offs), dl(d), ends_only=True, backend=backend)


# ---- low precision (no autograd, like torch) -----------------------------------------------------------
def scaled_mm(input, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False,
              *, amax=None):
    """torch._scaled_mm: input [M, K] fp8 row-major, mat2 [K, N] fp8 column-major (a transposed [N, K]
    weight), float32 scales either per tensor (one value each) or row-wise (scale_a [M] / [M, 1],
    scale_b [N] / [1, N]); result bf16 / f16 / f32. ``amax`` (optional one-value float32 tensor)
    receives max|result|."""
    _check_cuda("scaled_mm", input, mat2, scale_a, scale_b)
    if bias is not None or scale_result is not None or use_fast_accum:
        raise NotImplementedError("scaled_mm: bias, scale_result and use_fast_accum are not supported yet")
    m, n = input.shape[0], mat2.shape[1]
    f32 = torch.float32
    sa, sb = scale_a.to(f32).reshape(-1), scale_b.to(f32).reshape(-1)
    if sa.numel() not in (1, m) or sb.numel() not in (1, n):
        raise RuntimeError(f"scaled_mm: scale_a expected 1 or {m} values and scale_b 1 or {n}, got "
                           f"{scale_a.numel()} and {scale_b.numel()}")
    if sa.numel() > 1 or sb.numel() > 1:  # row-wise: both become vectors (a per-tensor one repeated)
        sa, sb = sa.expand(m).contiguous(), sb.expand(n).contiguous()
    sa, sb = _aligned16(sa.contiguous()), _aligned16(sb.contiguous())
    out_dtype = out_dtype or input.dtype
    d = torch.empty((m, n), dtype=out_dtype, device=input.device)
    if sa.numel() == 1:
        return _run(input, mat2, d, a_scale=sa, b_scale=sb, amax_d=amax)
    try:
        return _run(input, mat2, d, a_scale=sa, b_scale=sb, amax_d=amax)
    except RuntimeError as e:  # cuBLASLt without outer-vector scaling for this problem
        if "Unsupported" not in str(e) and "unsupported" not in str(e):
            raise
    # Same numerics as the fused path: f32 accumulation, then the f32 scales, one rounding to out_dtype.
    one = _aligned16(torch.ones(1, dtype=f32, device=input.device))
    acc = _run(input, mat2, torch.empty((m, n), dtype=f32, device=input.device), a_scale=one, b_scale=one)
    from . import functional as _F
    scaled = _F.mul(_F.mul(acc, sa.reshape(m, 1)), sb.reshape(1, n))
    _F.cast(scaled, out_dtype, out=d)
    if amax is not None:  # rare combination (row-wise scales + amax): torch's reduction
        amax.copy_(d.abs().amax().reshape(1).to(f32))
    return d


def scaled_int8_mm(a, b, a_scale, b_scale, bias=None, out_dtype=None):
    """W8A8's linear: ``(a @ b.T) * a_scale[:, None] * b_scale[None, :] + bias`` for int8 ``a`` [M, K]
    and int8 ``b`` [N, K] (an nn.Linear weight's layout), result ``out_dtype`` (bfloat16 by default,
    float16, float32). The int32 accumulation is exact; the scaling and the bias are float32 steps,
    then one rounding to out_dtype (the CUTLASS sm_90 kernel: Hopper only). ``a_scale``: float32 per
    row ([M] or [M, 1]) or one value; ``b_scale``: per output channel ([N], [1, N] or [N, 1]) or one
    value; ``bias``: [N], converted to out_dtype. Needs K % 16 == 0 and N % 8 == 0 (N % 4 for
    float32). No autograd (like torch._int_mm)."""
    _check_cuda("scaled_int8_mm", a, b, a_scale, b_scale, bias)
    out_dtype = out_dtype or torch.bfloat16
    if a.dim() != 2 or b.dim() != 2 or a.dtype != torch.int8 or b.dtype != torch.int8:
        raise RuntimeError(f"scaled_int8_mm: expected int8 a [M, K] and int8 b [N, K], got {a.dtype} "
                           f"{tuple(a.shape)} and {b.dtype} {tuple(b.shape)}")
    if a.shape[1] != b.shape[1]:
        raise RuntimeError(f"scaled_int8_mm: a [M, K] and b [N, K] expected the same K, got {tuple(a.shape)} and "
                           f"{tuple(b.shape)}")
    if out_dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise RuntimeError(f"scaled_int8_mm: out_dtype expected bfloat16, float16 or float32, got {out_dtype}")
    m, n = a.shape[0], b.shape[0]
    f32 = torch.float32
    sa, sb = a_scale.to(f32).reshape(-1), b_scale.to(f32).reshape(-1)
    if sa.numel() not in (1, m) or sb.numel() not in (1, n):
        raise RuntimeError(f"scaled_int8_mm: a_scale expected 1 or {m} values and b_scale 1 or {n}, got "
                           f"{a_scale.numel()} and {b_scale.numel()}")
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != n):
        raise RuntimeError(f"scaled_int8_mm: bias expected [{n}], got {tuple(bias.shape)}")
    d = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if m == 0 or n == 0:
        return d
    if sa.numel() > 1 or sb.numel() > 1:  # per row / column: both vectors (a single value repeated)
        sa, sb = sa.expand(m), sb.expand(n)
    sa, sb = _aligned16(sa.contiguous()), _aligned16(sb.contiguous())
    # TMA wants K-contiguous rows starting on 16 bytes; views that break it are copied (a K that is
    # not a multiple of 16 is refused by the plan, naming it).
    if a.stride(1) != 1 or (m > 1 and a.stride(0) % 16):
        a = a.contiguous()
    if b.stride(1) != 1 or (n > 1 and b.stride(0) % 16):
        b = b.contiguous()
    a, b = _aligned16(a), _aligned16(b)
    if bias is not None:
        bias = bias.to(out_dtype).contiguous()
    return _run(a, b.t(), d, bias=bias, a_scale=sa, b_scale=sb)


def int_mm(input, mat2):
    """torch._int_mm: int8 [M, K] @ int8 [K, N] -> int32 (mat2 is made K-contiguous if it is not)."""
    _check_cuda("int_mm", input, mat2)
    if mat2.stride(0) != 1:
        mat2 = mat2.t().contiguous().t()
    if input.stride(-1) != 1:
        input = input.contiguous()
    d = torch.empty((input.shape[0], mat2.shape[1]), dtype=torch.int32, device=input.device)
    return _run(input, mat2, d)
