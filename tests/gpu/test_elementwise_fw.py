"""Forward conformance of the elementwise family against PyTorch (see README.md).

Parametrized from baracuda.ops(): every row x every forward dtype; all layouts on the row's
primary dtype (float32, else int32), a contiguous and a strided case on the others.
"""
import math

import pytest

import elementwise_common as ew  # skips this module without torch / CUDA / baracuda

torch = ew.torch
F = ew.F


# ---- the table and the reference map ------------------------------------------------------------
def test_ops_table_contract():
    keys = {"name", "group", "nin", "bool_inputs", "params", "fw_dtypes", "out", "bw", "bw_dtypes",
            "grad_mask", "tol"}
    assert ew.TABLE, "baracuda.ops() is empty"
    for r in ew.TABLE:
        missing = keys - set(r)
        assert not missing, f"ops() row {r.get('name')}: missing {sorted(missing)}"
        assert r["out"] in ("same", "bool", "cast"), r
        assert r["bw"] in ("none", "dy", "in", "out", "inout"), r
        assert r["tol"] >= 1, r
        assert set(r["bw_dtypes"]) <= set(r["fw_dtypes"]), r
        assert (r["bw"] == "none") == (r["grad_mask"] == 0) or ew.is_cast(r), r
        assert r["grad_mask"] < (1 << max(r["nin"], 0)) or r["grad_mask"] == 0, r
        for p in r["params"]:
            assert {"name", "default", "choices"} <= set(p), (r["name"], p)
        unknown = [d for d in r["fw_dtypes"] if ew.torch_dtype(d) is None]
        assert not unknown or set(unknown) <= {"int4", "uint4"}, f"{r['name']}: dtypes torch lacks: {unknown}"


def test_reference_covers_table():
    names = set(ew.ROWS)
    missing = sorted(names - set(ew.REFERENCE))
    assert not missing, f"ops without a torch reference in REFERENCE: {missing}"
    stale = sorted(set(ew.REFERENCE) - names)
    assert not stale, f"REFERENCE names no longer in the table: {stale}"
    for table in (ew.DOMAIN, ew.INT_DOMAIN, ew.COMPLEX_DOMAIN, ew.ADAPT):
        stale = sorted(set(table) - names)
        assert not stale, f"domain/adapter entries for unknown ops: {stale}"


def test_functional_exposes_every_row():
    missing = []
    gens = {"fill": ["fill", "full"]}
    for r in ew.TABLE:
        n = r["name"]
        fns = gens.get(n, [ew.functional_name(n)])
        missing += [f for f in fns if not callable(getattr(F, f, None))]
        if r["bw"] != "none" and not callable(getattr(F, n + "_backward", None)):
            missing.append(n + "_backward")
    assert not missing, f"baracuda.functional lacks: {missing}"


# ---- forward: every row x dtype x layout ----------------------------------------------------------
def _fw_params():
    for row in ew.TABLE:
        if ew.is_generator(row) or ew.is_cast(row):
            continue
        names = ew.dtypes_of(row)
        if not names:
            continue
        prim = ew.primary_dtype(names)
        for d in names:
            for lay in (ew.layouts_for(row) if d == prim else ew.OTHER_DTYPE_LAYOUTS):
                yield pytest.param(row["name"], d, lay, id=f"{row['name']}-{d}-{lay}")


@pytest.mark.parametrize("name,dtype,layout", list(_fw_params()))
def test_forward(name, dtype, layout):
    dt = ew.torch_dtype(dtype)
    ins, extra = ew.make_inputs(name, dt, layout, ew.seeded("fw", name, dtype, layout))
    kw = {**ew.default_kw(name, dt), **extra}
    ew.run_forward_case(name, dt, ins, kw, f"{name}-{dtype}-{layout}", out_transposed=(layout == "out_t"))


# ---- forward with non-default params ---------------------------------------------------------------
@pytest.mark.parametrize("name,dtype,kw,domain", list(ew.variant_params()))
def test_forward_params(name, dtype, kw, domain):
    dt = ew.torch_dtype(dtype)
    ins, extra = ew.make_inputs(name, dt, "2d", ew.seeded("fwp", name, dtype, kw), domain=domain)
    ew.run_forward_case(name, dt, ins, {**kw, **extra}, f"{name}-{dtype}-{kw}")


# ---- special values -------------------------------------------------------------------------------
# Points where torch's result is implementation noise rather than a defined value.
SPECIAL_SKIP = {"polygamma": (math.inf, -math.inf, 0.0, -1.0)}  # poles; torch returns 1e15, nan or inf


def _special_inputs(name, dt):
    row = ew.ROWS[name]
    skip = SPECIAL_SKIP.get(name, ())
    s = torch.tensor([v for v in ew.SPECIAL_VALUES if v not in skip], dtype=torch.float64)
    k = len(s)
    if name in ew.GATED:
        a, b = s.repeat_interleave(k), s.repeat(k)
        return [torch.cat([a, b]).to(dt).to(ew.DEVICE)]
    if name == "prelu":
        return [s.to(dt).to(ew.DEVICE), torch.tensor([0.25], dtype=dt, device=ew.DEVICE)]
    n = row["nin"]
    grids = torch.meshgrid(*([s] * n), indexing="ij")
    ins = []
    for i, gr in enumerate(grids):
        if (row["bool_inputs"] >> i) & 1:
            ins.append((torch.arange(gr.numel()) % 3 == 0).to(ew.DEVICE))
        else:
            ins.append(gr.reshape(-1).to(dt).to(ew.DEVICE))
    return ins


def _special_params():
    for row in ew.TABLE:
        if ew.is_generator(row) or ew.is_cast(row):
            continue
        for d in ew.dtypes_of(row):
            if ew.is_float(ew.torch_dtype(d)):
                yield pytest.param(row["name"], d, id=f"{row['name']}-{d}-special")


@pytest.mark.parametrize("name,dtype", list(_special_params()))
def test_special_values(name, dtype):
    """nan, +-inf, +-0 and friends (all pairs for binary, all triples for ternary ops)."""
    dt = ew.torch_dtype(dtype)
    ins = _special_inputs(name, dt)
    ew.run_forward_case(name, dt, ins, ew.default_kw(name, dt), f"{name}-{dtype}-special",
                        check_degenerate=False)


# ---- integer extremes -------------------------------------------------------------------------------
EXTREME_OPS = ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "popcount", "clz",
               "bitwise_left_shift", "bitwise_right_shift", "eq", "ne", "lt", "le", "gt", "ge",
               "logical_and", "logical_or", "logical_xor", "logical_not", "maximum", "minimum", "fmax", "fmin",
               "sign", "signbit", "isnan", "isinf", "isfinite", "isposinf", "isneginf", "relu", "where"]


def _extreme_params():
    for name in EXTREME_OPS:
        row = ew.ROWS.get(name)
        if row is None:
            continue
        for d in ew.dtypes_of(row):
            if ew.is_int(ew.torch_dtype(d)):
                yield pytest.param(name, d, id=f"{name}-{d}-extremes")


@pytest.mark.parametrize("name,dtype", list(_extreme_params()))
def test_int_extremes(name, dtype):
    dt = ew.torch_dtype(dtype)
    info = torch.iinfo(dt)
    if info.min == 0:
        vals = [0, 1, 2, 127, 128, info.max - 1, info.max]
    else:
        vals = [info.min, info.min + 1, -2, -1, 0, 1, 2, info.max - 1, info.max]
    v = torch.tensor(vals, dtype=torch.int64)
    row = ew.ROWS[name]
    n = row["nin"]
    if name in ("bitwise_left_shift", "bitwise_right_shift"):
        grids = torch.meshgrid(v, torch.tensor([0, 1, info.bits - 1]), indexing="ij")
    else:
        grids = torch.meshgrid(*([v] * n), indexing="ij")
    ins = []
    for i, gr in enumerate(grids):
        if (row["bool_inputs"] >> i) & 1:
            ins.append((torch.arange(gr.numel()) % 2 == 0).to(ew.DEVICE))
        else:
            ins.append(gr.reshape(-1).to(dt).to(ew.DEVICE))
    ew.run_forward_case(name, dt, ins, {}, f"{name}-{dtype}-extremes", check_degenerate=False)


# ---- generators ------------------------------------------------------------------------------------------
def _fill_value(dt):
    if dt == torch.bool:
        return True
    if dt.is_complex:
        return complex(1.5, -2.0)
    if dt.is_floating_point:
        return 1.5 if dt in ew.FP8 else 2.5
    return 200 if torch.iinfo(dt).min == 0 else -5


def _gen_params():
    rows = ew.ROWS
    if "fill" in rows:
        for d in ew.dtypes_of(rows["fill"]):
            for shape in ([33, 65], [4097], [], [0]):
                yield pytest.param("fill", d, (shape,), id=f"fill-{d}-{'x'.join(map(str, shape)) or '0d'}")
    if "arange" in rows:
        for d in ew.dtypes_of(rows["arange"]):
            dt = ew.torch_dtype(d)
            if dt.is_floating_point:
                cases = [(0, 4097, 1), (-7, 50, 3), (5, -20, -2), (0.5, 10.0, 0.25), (-1.0, 1.0, 0.125)]
            elif torch.iinfo(dt).min == 0:
                cases = [(0, 256, 1), (5, 100, 3), (200, 10, -7)]
            else:
                top = min(4097, torch.iinfo(dt).max + 1)
                cases = [(0, top, 1), (-7, 50, 3), (5, -20, -2)]
            for c in cases:
                yield pytest.param("arange", d, c, id=f"arange-{d}-{c[0]}:{c[1]}:{c[2]}")
    if "linspace" in rows:
        for d in ew.dtypes_of(rows["linspace"]):
            for c in ((-2.0, 3.0, 1), (-2.0, 3.0, 7), (0.0, 1.0, 4097), (10.0, -10.0, 129)):
                yield pytest.param("linspace", d, c, id=f"linspace-{d}-{c[0]}:{c[1]}:{c[2]}")
    if "logspace" in rows:
        for d in ew.dtypes_of(rows["logspace"]):
            for c in ((-2.0, 2.0, 129, 10.0), (0.0, 8.0, 9, 2.0), (1.0, -1.0, 5, 10.0)):
                yield pytest.param("logspace", d, c, id=f"logspace-{d}-{c[0]}:{c[1]}:{c[2]}-base{c[3]:g}")
    if "eye" in rows:
        for d in ew.dtypes_of(rows["eye"]):
            for c in ((33, 65), (1, None), (5, 5), (70, 3)):
                yield pytest.param("eye", d, c, id=f"eye-{d}-{c[0]}x{c[1]}")


@pytest.mark.parametrize("name,dtype,args", list(_gen_params()))
def test_generator(name, dtype, args):
    dt = ew.torch_dtype(dtype)
    what = f"{name}-{dtype}-{args}"
    row = ew.ROWS[name]
    if name == "fill":
        (shape,) = args
        v = _fill_value(dt)
        if dt in ew.FP8:
            ref = torch.full(shape, v, dtype=torch.float32, device=ew.DEVICE).to(dt)
        else:
            ref = ew.REFERENCE["fill"](shape, v, dt)
        results = [F.full(shape, v, dtype=dt), F.fill(shape, v, dtype=dt)]
    elif name == "arange":
        ref = ew.REFERENCE["arange"](*args, dt)
        results = [F.arange(*args, dtype=dt)]
    elif name == "linspace":
        ref = ew.REFERENCE["linspace"](*args, dt)
        results = [F.linspace(*args, dtype=dt)]
    elif name == "logspace":
        ref = ew.REFERENCE["logspace"](*args, dt)
        results = [F.logspace(*args, dtype=dt)]
    else:
        n, m = args
        ref = ew.REFERENCE["eye"](n, n if m is None else m, dt)
        results = [F.eye(n, dtype=dt) if m is None else F.eye(n, m, dtype=dt)]
    exact = not (dt.is_floating_point or dt.is_complex) or name in ("fill", "eye")
    for got in results:
        ew.assert_matches(got, [ref], dt, row["tol"], exact, what)


# ---- cast ------------------------------------------------------------------------------------------------
def _cast_source(src, dst, shape, g):
    nonneg = dst == ew.torch_dtype("uint32")  # float -> uint32 of a negative value is undefined
    if src == torch.bool:
        x = torch.rand(shape, generator=g) < 0.5
    elif src.is_complex or src.is_floating_point:
        mk = (lambda: ew._draw_real(ew.U(0, 100) if nonneg else ew.U(-100, 100), shape, g))
        x = torch.complex(mk(), mk()) if src.is_complex else mk()
        x = x.to(src) if src.is_complex or src not in ew.FP8 else x.float().to(src)
    else:
        info = torch.iinfo(src)
        lo, hi = max(info.min, -400), min(info.max, 400)
        if src == ew.torch_dtype("uint32"):
            lo, hi = 0, 60000
        x = torch.randint(lo, hi + 1, shape, generator=g, dtype=torch.int64).to(src)
    return x.to(ew.DEVICE)


def _cast_params():
    if "cast" not in ew.ROWS:
        return
    names = ew.dtypes_of(ew.ROWS["cast"])
    for s in names:
        for d in names:
            for lay in ("n4097", "t"):
                yield pytest.param(s, d, lay, id=f"cast-{s}-{d}-{lay}")


@pytest.mark.parametrize("src,dst,layout", list(_cast_params()))
def test_cast(src, dst, layout):
    s, d = ew.torch_dtype(src), ew.torch_dtype(dst)
    g = ew.seeded("cast", src, dst, layout)
    x = _cast_source(s, d, [4097] if layout == "n4097" else [65, 33], g)
    if layout == "t":
        x = x.t()
    try:
        ref = ew.reference("cast", [x], {"dtype": d}, d)
    except (RuntimeError, NotImplementedError, TypeError) as e:
        pytest.skip(f"torch cannot cast {src} -> {dst} on this device: {e}")
    got = F.cast(x, d)
    ew.assert_matches(got, [ref], d, 1, True, f"cast-{src}-{dst}-{layout}")
    assert got.dtype == d


@pytest.mark.parametrize("dst", [pytest.param(n, id=f"cast-float32-{n}") for n in ("float8_e4m3fn", "float8_e5m2")
                                 if ew.torch_dtype(n) is not None])
@pytest.mark.parametrize("saturate", [False, True], ids=["nosat", "saturate"])
def test_cast_fp8_overflow(dst, saturate):
    d = ew.torch_dtype(dst)
    fmax = torch.finfo(d).max
    x = torch.tensor([-1e6, -1000.0, -fmax, -1.5, 0.0, 1.5, fmax, 1000.0, 1e6, math.inf, -math.inf, math.nan,
                      0.3, 17.0], dtype=torch.float32, device=ew.DEVICE)
    if saturate:
        ref = x.clamp(-fmax, fmax).to(d)
    else:
        ref = x.to(d)
    got = F.cast(x, d, saturate=saturate)
    ew.assert_matches(got, [ref], d, 1, True, f"cast-float32-{dst}-saturate={saturate}")


# ---- type promotion (torch.result_type) ------------------------------------------------------------------
def _promo_cases():
    def t(dt, shape=(129,), lo=-3, hi=3):
        g = ew.seeded("promo", dt, shape)
        return ew.draw(ew.U(lo, hi) if dt != torch.bool else ew.BOOL, shape, dt, g)

    return [
        ("add-float16+float32", "add", lambda: (t(torch.float16), t(torch.float32))),
        ("mul-float32*pyfloat", "mul", lambda: (t(torch.float32), 2.5)),
        ("add-int32+pyfloat", "add", lambda: (t(torch.int32), 1.5)),
        ("add-bfloat16+pyint", "add", lambda: (t(torch.bfloat16), 2)),
        ("mul-int8*int32_0d", "mul", lambda: (t(torch.int8), t(torch.int32, ()))),
        ("add-uint8+int8", "add", lambda: (t(torch.uint8, lo=0, hi=9), t(torch.int8))),
        ("exp-int32", "exp", lambda: (t(torch.int32),)),
        ("exp-bool", "exp", lambda: (t(torch.bool),)),
        ("sqrt-int64", "sqrt", lambda: (t(torch.int64, lo=0, hi=50),)),
        ("where-float32-pyfloat", "where", lambda: (t(torch.bool), t(torch.float32), 0.5)),
        ("maximum-float64+float32", "maximum", lambda: (t(torch.float64), t(torch.float32))),
    ]


@pytest.mark.parametrize("case", [pytest.param(c, id=c[0]) for c in _promo_cases()])
def test_type_promotion(case):
    what, name, make = case
    args = make()
    ref = getattr(torch, name)(*args)
    got = getattr(F, name)(*args)
    assert got.dtype == ref.dtype, f"{what}: dtype {ew.dname(got.dtype)}, torch gives {ew.dname(ref.dtype)}"
    ew.assert_matches(got, [ref], ref.dtype, 1, not ref.dtype.is_floating_point, what)


def test_div_floor_f32_bit_exact_wide_range():
    """f32 floor division takes a short path below quotients of 2^21 and ATen's formula above: bit
    for bit with torch on quotients on, just below and just above integers up to 2^24, random bit
    patterns (huge / tiny quotients, subnormals, zeros of both signs, inf, NaN)."""
    g = torch.Generator(device="cpu").manual_seed(21)
    n = 1 << 20
    b = torch.ldexp(1 + torch.rand(n, generator=g), torch.randint(-30, 30, (n,), generator=g)).float()
    b = torch.where(torch.rand(n, generator=g) < 0.5, -b, b)
    q = torch.floor(torch.rand(n, generator=g, dtype=torch.float64) * 2.0 ** torch.randint(0, 25, (n,), generator=g))
    a = (q * b.double()).float()
    nudge = torch.randint(-3, 4, (n,), generator=g, dtype=torch.int32)
    a = (a.view(torch.int32) + nudge).view(torch.float32)
    bits_a = torch.randint(-2**31, 2**31 - 1, (n,), generator=g, dtype=torch.int32).view(torch.float32)
    bits_b = torch.randint(-2**31, 2**31 - 1, (n,), generator=g, dtype=torch.int32).view(torch.float32)
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-45, -1e-45, 3.0, -3.0])
    sa, sb = torch.meshgrid(special, special, indexing="ij")
    a = torch.cat([a, bits_a, sa.reshape(-1)]).cuda()
    b = torch.cat([b, bits_b, sb.reshape(-1)]).cuda()
    got = F.div(a, b, rounding_mode="floor")
    want = torch.div(a, b, rounding_mode="floor")
    same = (got.view(torch.int32) == want.view(torch.int32)) | (got.isnan() & want.isnan())
    bad = (~same).nonzero().flatten()
    assert bad.numel() == 0, (f"{bad.numel()} pairs differ, e.g. a={a[bad[0]].item()!r} b={b[bad[0]].item()!r}: "
                              f"{got[bad[0]].item()!r} vs torch {want[bad[0]].item()!r}")


def test_floor_divide_and_aliases():
    g = ew.seeded("aliases")
    a = ew.draw(ew.U(-10, 10), (129,), torch.float32, g)
    b = ew.draw(ew.NZ(0.5, 3), (129,), torch.float32, g)
    ew.assert_matches(F.floor_divide(a, b), [torch.floor_divide(a, b)], torch.float32, 1, True, "floor_divide")
    ai = ew.draw(ew.U(-50, 50), (129,), torch.int32, g)
    bi = ew.draw(ew.NZ(1, 9), (129,), torch.int32, g)
    ew.assert_matches(F.floor_divide(ai, bi), [torch.floor_divide(ai, bi)], torch.int32, 1, True,
                      "floor_divide-int32")
    ew.assert_matches(F.clamp(a, min=-1.0), [torch.clamp(a, min=-1.0)], torch.float32, 1, True, "clamp-min-only")
