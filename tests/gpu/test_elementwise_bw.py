"""Backward conformance of the elementwise family against PyTorch autograd (see README.md).

torch.autograd.grad through baracuda.functional.<op> vs torch.autograd.grad through the torch
reference (float64 for f32/f64 inputs, float32 for f16/bf16, cast back), for every
differentiable row x backward dtype, including broadcast inputs whose gradient is reduced back
to their shape; plus the explicit <name>_backward functions.
"""
import pytest

import elementwise_common as ew  # skips this module without torch / CUDA / baracuda

torch = ew.torch
F = ew.F


# ---- autograd: every differentiable row x bw dtype ----------------------------------------------
def _bw_params():
    for row in ew.TABLE:
        name = row["name"]
        if row["bw"] == "none" or ew.is_cast(row) or ew.is_generator(row):
            continue
        for d in ew.dtypes_of(row, "bw_dtypes"):
            lays = ["2d"]
            if name not in ew.GATED and row["nin"] >= 2:
                lays.append("bcast")
            if d == "float32":
                lays.append("t")
                if name in ew.GATED:
                    lays.append("dim0")
                elif row["nin"] >= 2 and name != "prelu":
                    lays.append("scalar")
            for lay in lays:
                yield pytest.param(name, d, lay, id=f"{name}-{d}-{lay}")


@pytest.mark.parametrize("name,dtype,layout", list(_bw_params()))
def test_backward(name, dtype, layout):
    dt = ew.torch_dtype(dtype)
    g = ew.seeded("bw", name, dtype, layout)
    ins, extra = ew.make_inputs(name, dt, layout, g)
    kw = {**ew.default_kw(name, dt), **extra}
    ew.run_backward_case(name, dt, ins, kw, f"{name}-{dtype}-{layout}", g)


@pytest.mark.parametrize("name,dtype,kw,domain", list(ew.variant_params(differentiable_only=True)))
def test_backward_params(name, dtype, kw, domain):
    dt = ew.torch_dtype(dtype)
    g = ew.seeded("bwp", name, dtype, kw)
    ins, extra = ew.make_inputs(name, dt, "2d", g, domain=domain)
    ew.run_backward_case(name, dt, ins, {**kw, **extra}, f"{name}-{dtype}-{kw}", g)


def test_cast_backward():
    g = ew.seeded("cast-bw")
    x = ew.draw(ew.U(-3, 3), (33, 65), torch.float32, g).requires_grad_(True)
    y = F.cast(x, torch.bfloat16)
    go = ew.draw(ew.U(-1, 1), (33, 65), torch.bfloat16, g)
    (gx,) = torch.autograd.grad(y, [x], go)
    assert gx.dtype == torch.float32
    torch.testing.assert_close(gx, go.to(torch.float32), rtol=0, atol=0)


# ---- explicit <name>_backward functions ----------------------------------------------------------
def _explicit_params():
    for row in ew.TABLE:
        name = row["name"]
        if row["bw"] == "none" or ew.is_cast(row) or ew.is_generator(row):
            continue
        if "float32" in ew.dtypes_of(row, "bw_dtypes"):
            yield pytest.param(name, id=f"{name}_backward-float32")


@pytest.mark.parametrize("name", list(_explicit_params()))
def test_explicit_backward(name):
    """<name>_backward(grad_output, <tensors>, <params>) for every differentiable row (ATen order):
    the forward inputs unless bw is "out" (for "dy" rows they only give the gradients' shapes),
    then the forward output for bw out/inout; gated: (grad, self, dim); prelu: (grad, self, weight)."""
    row = ew.ROWS[name]
    dt = torch.float32
    g = ew.seeded("explicit", name)
    ins, extra = ew.make_inputs(name, dt, "2d", g)
    kw = ew.default_kw(name, dt)
    fn = getattr(F, name + "_backward", None)
    assert fn is not None, f"baracuda.functional has no {name}_backward"
    y = ew.call(name, ins, {**kw, **extra})
    go = ew.draw(ew.U(-1, 1), y.shape, dt, g)
    if name in ew.GATED:
        got = fn(go, ins[0], -1)
    elif name == "prelu":
        got = fn(go, ins[0], ins[1])
    else:
        saved = (list(ins) if row["bw"] != "out" else []) + ([y] if row["bw"] in ("out", "inout") else [])
        got = fn(go, *saved, **kw)
    got = [got] if isinstance(got, torch.Tensor) else list(got)
    ew.check_grads(name, dt, ins, {**kw, **extra}, got, go, f"{name}_backward-float32")


def _aten_cases():
    aten = torch.ops.aten
    return [
        ("gelu_backward-tanh", lambda g, x, y: F.gelu_backward(g, x, approximate="tanh"),
         lambda g, x, y: aten.gelu_backward(g, x, approximate="tanh"), "gelu"),
        ("gelu_backward-none", lambda g, x, y: F.gelu_backward(g, x),
         lambda g, x, y: aten.gelu_backward(g, x), "gelu"),
        ("sigmoid_backward", lambda g, x, y: F.sigmoid_backward(g, y),
         lambda g, x, y: aten.sigmoid_backward(g, torch.sigmoid(x)), "sigmoid"),
        ("tanh_backward", lambda g, x, y: F.tanh_backward(g, y),
         lambda g, x, y: aten.tanh_backward(g, torch.tanh(x)), "tanh"),
        ("relu_backward-as-threshold_backward", lambda g, x, y: F.relu_backward(g, y),
         lambda g, x, y: aten.threshold_backward(g, torch.relu(x), 0), "relu"),
        ("threshold_backward", lambda g, x, y: F.threshold_backward(g, x, threshold=0.5),
         lambda g, x, y: aten.threshold_backward(g, x, 0.5), "threshold"),
        ("silu_backward", lambda g, x, y: F.silu_backward(g, x),
         lambda g, x, y: aten.silu_backward(g, x), "silu"),
    ]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", [pytest.param(c, id=c[0]) for c in _aten_cases()])
def test_backward_matches_aten(case, dtype):
    """The explicit backward functions against ATen's own backward kernels."""
    what, ours, theirs, name = case
    dt = ew.torch_dtype(dtype)
    g = ew.seeded("aten", what, dtype)
    x = ew.draw(ew.U(-3, 3), (33, 65), dt, g)
    go = ew.draw(ew.U(-1, 1), (33, 65), dt, g)
    y = ew.call(name, [x], {})
    got = ours(go, x, y)
    up = ew.UPCAST[dt]
    refs = [theirs(go.to(up), x.to(up), None).to(dt), theirs(go, x, None)]
    ew.assert_matches(got, refs, dt, ew.ROWS[name]["tol"] * ew.BW_SLACK, False, what + f"-{dtype}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_add_backward_broadcast(dtype):
    """add_backward(grad, self, other, alpha) -> (grad summed to self's shape, alpha * grad summed
    to other's shape)."""
    dt = ew.torch_dtype(dtype)
    g = ew.seeded("add-bw", dtype)
    a = ew.draw(ew.U(-3, 3), (33, 1), dt, g)
    b = ew.draw(ew.U(-3, 3), (1, 65), dt, g)
    go = ew.draw(ew.U(-1, 1), (33, 65), dt, g)
    ga, gb = F.add_backward(go, a, b, alpha=2.0)
    up = go.double()
    ew.assert_close_bounded(ga, up.sum(1, keepdim=True).to(dt), up.abs().sum(1, keepdim=True), 1.3e-6, 1e-5,
                            f"add_backward-{dtype} grad[0]")
    ew.assert_close_bounded(gb, (2 * up).sum(0, keepdim=True).to(dt), (2 * up).abs().sum(0, keepdim=True),
                            1.3e-6, 1e-5, f"add_backward-{dtype} grad[1]")
