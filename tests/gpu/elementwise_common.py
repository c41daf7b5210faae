"""Shared machinery of the elementwise GPU conformance tests (test_elementwise_*.py).

Importing this module skips the importing test module when torch, a CUDA device or baracuda is
missing. Everything is driven by ``baracuda.ops()`` (the rows of
include/baracuda/ops/elementwise_ops.def); correctness is judged against PyTorch only:

* ``REFERENCE[name]``: a torch callable taking the row's tensor inputs (upcast) and the same
  keyword params as the test passes to baracuda (table param names);
* ``ADAPT[name]``: how a row is reached through ``baracuda.functional`` when its torch name or
  argument order differs from the row's (div_trunc -> div(rounding_mode='trunc'), ...);
* ``DOMAIN`` / ``INT_DOMAIN`` / ``COMPLEX_DOMAIN``: where each input is drawn from.

BARACUDA_TEST_DEVICE=cpu (with a stand-in baracuda on PYTHONPATH) runs the harness without a GPU;
it exists only to test the suite itself.
"""
import math
import warnings
import zlib

import pytest

from gpu_skip import DEVICE, skip_unless_ready  # noqa: E402

skip_unless_ready()

import torch  # noqa: E402
import torch.nn.functional as tF  # noqa: E402

import baracuda  # noqa: E402
import baracuda.functional as F  # noqa: E402

# ---- the table ------------------------------------------------------------------------------------
TABLE = [dict(r) for r in baracuda.ops()]
ROWS = {r["name"]: r for r in TABLE}
GATED = ("glu", "reglu", "geglu", "swiglu")
NO_OUT = {"prelu", "rrelu_eval"}  # torch's prelu / rrelu take no out=


def is_generator(row):
    return row["nin"] == 0


def is_cast(row):
    return row["out"] == "cast"


def torch_dtype(name):
    d = getattr(torch, name, None)
    return d if isinstance(d, torch.dtype) else None


def dtypes_of(row, key="fw_dtypes"):
    """The row's dtype names that this torch knows, in table order."""
    return [n for n in row[key] if torch_dtype(n) is not None]


def primary_dtype(names):
    for p in ("float32", "int32"):
        if p in names:
            return p
    return names[0]


def grad_positions(row):
    return [i for i in range(row["nin"]) if (row["grad_mask"] >> i) & 1]


def dname(dt):
    return str(dt).replace("torch.", "")


def is_float(dt):
    return dt.is_floating_point and dt not in FP8


def is_int(dt):
    return not dt.is_floating_point and not dt.is_complex and dt != torch.bool


FP8 = tuple(d for d in (torch_dtype("float8_e4m3fn"), torch_dtype("float8_e5m2")) if d is not None)
UPCAST = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float64,
          torch.float64: torch.float64, torch.complex64: torch.complex128, torch.complex128: torch.complex128}
# torch.testing's defaults per dtype (rtol, atol); multiplied by the row's `tol`.
BASE_TOL = {torch.float32: (1.3e-6, 1e-5), torch.float64: (1e-7, 1e-7), torch.float16: (1e-3, 1e-5),
            torch.bfloat16: (1.6e-2, 1e-5), torch.complex64: (1.3e-6, 1e-5), torch.complex128: (1e-7, 1e-7)}
BW_SLACK = 2.0  # backward = a few more roundings than the forward (products, broadcast sums)


def tolerances(dt, tol, slack=1.0):
    rtol, atol = BASE_TOL[dt]
    return rtol * tol * slack, atol * tol * slack


def seeded(*parts):
    return torch.Generator().manual_seed(zlib.crc32("/".join(map(str, parts)).encode()))


# ---- input domains ----------------------------------------------------------------------------------
def U(lo, hi):
    return ("u", lo, hi)


def NZ(lo, hi):  # magnitude in [lo, hi], random sign
    return ("nz", lo, hi)


def D(*vals):  # discrete values (ties, zeros)
    return ("d", vals)


FULL = ("full",)      # the whole integer range
SHIFT = ("shift",)    # [0, bits)
SPECIAL = ("special",)  # uniform with nan/inf/-inf/0/-0 sprinkled in
BOOL = ("bool",)
DEFAULT_FLOAT = U(-3, 3)
DEFAULT_INT = U(-10, 10)
CMP = D(-2, -1, 0, 1, 2)

# float (and complex, unless COMPLEX_DOMAIN says otherwise) inputs; one entry per input or one for all
DOMAIN = {
    "reciprocal": NZ(0.1, 5), "cbrt": NZ(0.1, 5), "sqrt": U(0.05, 10), "rsqrt": U(0.05, 10),
    "exp": U(-5, 5), "exp2": U(-5, 5), "expm1": U(-3, 3),
    "log": U(0.05, 10), "log2": U(0.05, 10), "log10": U(0.05, 10), "log1p": U(-0.9, 10),
    "sin": U(-6, 6), "cos": U(-6, 6), "tan": U(-1.4, 1.4),
    "asin": U(-0.95, 0.95), "acos": U(-0.95, 0.95), "atanh": U(-0.95, 0.95), "erfinv": U(-0.95, 0.95),
    "acosh": U(1.05, 10), "asinh": U(-5, 5), "atan": U(-5, 5), "sinh": U(-4, 4), "cosh": U(-4, 4),
    "floor": U(-5, 5), "ceil": U(-5, 5), "trunc": U(-5, 5), "frac": U(-5, 5), "round": U(-5, 5),
    "lgamma": U(0.1, 5), "digamma": U(0.1, 5), "polygamma": U(0.1, 5), "i0": U(-5, 5),
    "logit": U(0.05, 0.95),
    "nan_to_num": SPECIAL, "isnan": SPECIAL, "isinf": SPECIAL, "isposinf": SPECIAL, "isneginf": SPECIAL,
    "isfinite": SPECIAL, "signbit": SPECIAL, "logical_not": D(-2, 0, 1, 0.5),
    "relu6": U(-8, 8), "hardsigmoid": U(-5, 5), "hardswish": U(-5, 5), "softplus": U(-5, 5),
    "prelu": [U(-3, 3), U(-1, 1)],
    "div": [U(-3, 3), NZ(0.5, 3)],
    "div_trunc": [U(-10, 10), NZ(0.5, 3)], "div_floor": [U(-10, 10), NZ(0.5, 3)],
    "fmod": [U(-10, 10), NZ(0.5, 3)], "remainder": [U(-10, 10), NZ(0.5, 3)],
    "pow": [U(0.1, 3), U(-2, 2)], "xlogy": [U(-3, 3), U(0.05, 5)], "ldexp": [U(-3, 3), U(-4, 4)],
    "eq": CMP, "ne": CMP, "lt": CMP, "le": CMP, "gt": CMP, "ge": CMP,
    "logical_and": CMP, "logical_or": CMP, "logical_xor": CMP,
    "isclose": [D(0.0, 1.0, 2.0, 1.5), D(0.0, 1.000001, 2.1, 1.5, 3.0)],
    "lerp": [U(-3, 3), U(-3, 3), U(-0.5, 1.5)],
    "clamp": [U(-3, 3), U(-2, -0.5), U(0.5, 2)],
    "addcdiv": [U(-3, 3), U(-3, 3), NZ(0.5, 3)],
    "masked_fill": [DEFAULT_FLOAT, BOOL], "where": [BOOL, DEFAULT_FLOAT, DEFAULT_FLOAT],
}
INT_DOMAIN = {
    "pow": [U(-3, 3), U(0, 3)],
    "div_trunc": [U(-50, 50), NZ(1, 10)], "div_floor": [U(-50, 50), NZ(1, 10)],
    "fmod": [U(-50, 50), NZ(1, 10)], "remainder": [U(-50, 50), NZ(1, 10)],
    "square": U(-11, 11), "mul": U(-11, 11), "addcmul": [U(-10, 10), U(-3, 3), U(-3, 3)],
    "clamp": [U(-10, 10), U(-5, -1), U(1, 5)], "hardtanh": U(-3, 3),
    "isclose": [D(0, 1, 2, 3), D(0, 1, 2, 5)], "logical_not": D(-2, 0, 1, 3),
    "popcount": FULL, "clz": FULL, "bitwise_not": FULL,
    "bitwise_and": FULL, "bitwise_or": FULL, "bitwise_xor": FULL,
    "bitwise_left_shift": [FULL, SHIFT], "bitwise_right_shift": [FULL, SHIFT],
    "masked_fill": [DEFAULT_INT, BOOL], "where": [BOOL, DEFAULT_INT, DEFAULT_INT],
}
COMPLEX_DOMAIN = {  # real and imaginary parts
    "tanh": U(-1, 1), "sin": U(-2, 2), "cos": U(-2, 2), "exp": U(-2, 2),
    "pow": [U(0.5, 2), U(-1, 1)], "log": NZ(0.1, 5), "sqrt": NZ(0.1, 5), "square": U(-3, 3),
}


def domains(name, dt, n, override=None):
    """One domain per input for `name` on dtype `dt` (the dtype of the non-bool inputs)."""
    if override is not None:
        d = override
    elif dt.is_complex and name in COMPLEX_DOMAIN:
        d = COMPLEX_DOMAIN[name]
    elif is_int(dt) or dt == torch.bool:
        d = INT_DOMAIN.get(name, DEFAULT_INT)
    else:
        d = DOMAIN.get(name, DEFAULT_FLOAT)
    if isinstance(d, tuple):
        d = [d] * n
    assert len(d) == n, f"{name}: {len(d)} domains for {n} inputs"
    return d


SPECIAL_VALUES = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0]


def _draw_real(dom, shape, g):
    kind = dom[0]
    r = torch.rand(shape, generator=g, dtype=torch.float64)
    if kind == "u":
        return dom[1] + (dom[2] - dom[1]) * r
    if kind == "nz":
        sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0).double()
        return sign * (dom[1] + (dom[2] - dom[1]) * r)
    if kind == "d":
        vals = torch.tensor([float(v) for v in dom[1]], dtype=torch.float64)
        return vals[torch.randint(0, len(vals), shape, generator=g)]
    x = -3 + 6 * r
    if kind == "special":
        sv = torch.tensor(SPECIAL_VALUES, dtype=torch.float64)
        pick = sv[torch.randint(0, len(sv), shape, generator=g)]
        x = torch.where(torch.rand(shape, generator=g) < 0.25, pick, x)
    return x


def _draw_int(dom, shape, dt, g):
    info = torch.iinfo(dt)
    unsigned = info.min == 0
    kind = dom[0]
    if kind == "full":
        if dt == torch.int64:
            return torch.randint(-2 ** 63, 2 ** 63 - 1, shape, generator=g, dtype=torch.int64)
        return torch.randint(info.min, info.max + 1, shape, generator=g, dtype=torch.int64).to(dt)
    if kind == "shift":
        return torch.randint(0, info.bits, shape, generator=g, dtype=torch.int64).to(dt)
    if kind == "bool":
        return torch.randint(0, 2, shape, generator=g, dtype=torch.int64).to(dt)
    if kind == "d":
        vals = [int(v) for v in dom[1] if float(v) == int(v) and info.min <= v <= info.max]
        vals = vals or [0, 1]
        t = torch.tensor(vals, dtype=torch.int64)
        return t[torch.randint(0, len(vals), shape, generator=g)].to(dt)
    lo, hi = (dom[1], dom[2]) if kind in ("u", "nz") else (-10, 10)
    lo, hi = max(int(lo), info.min), min(int(hi), info.max)
    if unsigned:
        lo, hi = max(lo, 0), max(hi, 0)
    if kind == "nz":
        lo = max(lo, 1)
        hi = max(hi, lo)
    x = torch.randint(lo, hi + 1, shape, generator=g, dtype=torch.int64)
    if kind == "nz" and not unsigned:
        x = torch.where(torch.rand(shape, generator=g) < 0.5, -x, x)
    return x.to(dt)


def draw(dom, shape, dt, g, device=None):
    """A contiguous tensor of `shape` and dtype `dt` on the test device, drawn from `dom`."""
    shape = tuple(shape)
    if dt == torch.bool:
        if dom[0] == "d":
            x = _draw_real(dom, shape, g) != 0
        else:
            x = torch.rand(shape, generator=g) < 0.5
    elif dt.is_complex:
        x = torch.complex(_draw_real(dom, shape, g), _draw_real(dom, shape, g)).to(dt)
    elif dt.is_floating_point:
        x = _draw_real(dom, shape, g).to(dt)
    else:
        x = _draw_int(dom, shape, dt, g)
    return x.to(device or DEVICE)


# ---- layouts ------------------------------------------------------------------------------------------
SIZES = {"n1": [1], "n7": [7], "n129": [129], "n4097": [4097], "2d": [33, 65], "0d": [], "empty": [0],
         "empty2": [3, 0], "out_t": [33, 65]}


def layouts_for(row):
    """Every forward layout that applies to the row (run on its primary dtype)."""
    name, nin = row["name"], row["nin"]
    ls = ["n1", "n7", "n129", "n4097", "2d"]
    if name not in GATED and name != "prelu":
        ls.append("0d")
    ls += ["t", "slice", "empty", "empty2"]
    if name not in NO_OUT:
        ls.append("out_t")
    if name in GATED:
        ls.append("dim0")
    elif nin >= 2:
        ls.append("bcast")
        if name != "prelu":
            ls.append("scalar")
    return ls


OTHER_DTYPE_LAYOUTS = ["n4097", "t"]


def _plans(name, nin, layout):
    """Per tensor argument of the functional call: (base shape, view) with view None/'t'/'slice';
    plus extra keywords (the gated ops' dim)."""
    if name in GATED:  # one tensor, split in halves along the last dim (dim0: along dim 0)
        if layout in SIZES:
            s = list(SIZES[layout])
            if s and s[-1]:
                s[-1] *= 2
            return [(s, None)], {}
        return {"t": ([([130, 33], "t")], {}), "slice": ([([33, 260], "slice")], {}),
                "dim0": ([([66, 33], None)], {"dim": 0})}[layout]
    if layout in SIZES:
        plans = [(list(SIZES[layout]), None)] * nin
    elif layout == "t":
        plans = [([65, 33], "t")] * nin
    elif layout == "slice":
        plans = [([33, 130], "slice")] * nin
    elif layout == "bcast":
        plans = [([[33, 1], [1, 65], [33, 65]][i % 3], None) for i in range(nin)]
    elif layout == "scalar":  # one 0-dim operand (input 1; masked_fill: x, since a 0-dim mask is all or nothing)
        k = 0 if name == "masked_fill" else 1
        plans = [([] if i == k else [33, 65], None) for i in range(nin)]
    else:
        raise ValueError(layout)
    if name == "prelu":  # weight: 1-D with 1 or x.size(1) elements (torch's prelu)
        x = ([33, 65], None) if layout == "bcast" else plans[0]
        xs = x[0] if x[1] is None else [33, 65]
        c = xs[1] if len(xs) >= 2 and xs[1] > 0 else 1
        plans = [x, ([1] if layout == "bcast" else [c], None)]
    return plans, {}


def _view(base, view):
    if view == "t":
        return base.t()
    if view == "slice":
        return base[:, ::2]
    return base


SCALAR_OPERAND = {"logical_and": 1}  # 0-dim operands from a discrete domain (else its median)


def make_inputs(name, dt, layout, g, domain=None):
    """The functional call's tensor arguments for a layout, and extra call keywords."""
    row = ROWS[name]
    n = 1 if name in GATED else row["nin"]
    plans, extra = _plans(name, n, layout)
    doms = domains(name, dt, n if name in GATED else row["nin"], domain)
    ins = []
    for i, ((shape, view), dom) in enumerate(zip(plans, doms)):
        idt = torch.bool if (name not in GATED and (row["bool_inputs"] >> i) & 1) else dt
        if not shape and dom[0] == "d":  # a 0-dim operand: the middle value, so the result still varies
            dom = D(SCALAR_OPERAND.get(name, sorted(dom[1])[len(dom[1]) // 2]))
        ins.append(_view(draw(dom, shape, idt, g), view))
    return ins, extra


def expected_out_dtype(row, dt):
    return torch.bool if row["out"] == "bool" else dt


# ---- references ----------------------------------------------------------------------------------------
def _bits(dt):
    return torch.iinfo(dt).bits


def _popcount(x):
    y = x.to(torch.int64)
    c = torch.zeros_like(y)
    for k in range(_bits(x.dtype)):
        c += (y >> k) & 1
    return c.to(x.dtype)


def _clz(x):
    b = _bits(x.dtype)
    y = x.to(torch.int64)
    hi = torch.full_like(y, -1)
    for k in range(b):
        hi = torch.where(((y >> k) & 1).bool(), k, hi)
    return (b - 1 - hi).to(x.dtype)


_INT_VIEW = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
             torch.float64: torch.int64}


def _nextafter(a, b):
    try:
        return torch.nextafter(a, b)
    except (RuntimeError, NotImplementedError):  # e.g. float16 on CUDA: step the bits ourselves
        a, b = torch.broadcast_tensors(a, b)
        it = _INT_VIEW[a.dtype]
        step = torch.where((b > a) == (a > 0), 1, -1).to(it)
        moved = (a.contiguous().view(it) + step).view(a.dtype)
        tiny = torch.tensor(1, dtype=it, device=a.device).view(a.dtype)
        moved = torch.where(a == 0, torch.copysign(tiny.expand_as(b), b), moved)
        moved = torch.where(a == b, b, moved)
        return torch.where(torch.isnan(a) | torch.isnan(b), torch.full_like(a, math.nan), moved)


def _halves(x, dim):
    return x.chunk(2, dim)


def _float_or(f_float, f_int):
    return lambda x, *a, **k: (f_float if (x.is_floating_point() or x.is_complex()) else f_int)(x, *a, **k)


def _clamp_scalar(x, min=-math.inf, max=math.inf):
    lo = None if math.isinf(min) else min
    hi = None if math.isinf(max) else max
    if lo is None and hi is None:
        return x.clone()
    return torch.clamp(x, lo, hi)


def _round(x, decimals=0):
    return torch.round(x) if decimals == 0 else torch.round(x, decimals=int(decimals))


def philox_words(n, seed, offset):
    """Word i % 4 of Philox4x32-10 call i // 4 keyed by `seed` at counter (call, offset), i < n:
    the elementwise stream layout of src/kernels/common/philox.hpp, written from the Random123
    definition in numpy (uint64 lanes hold the 32 x 32-bit products exactly)."""
    import numpy as np
    m = np.uint64(0xFFFFFFFF)
    q = np.arange((n + 3) // 4, dtype=np.uint64)
    c0, c1 = q & m, q >> np.uint64(32)
    c2 = np.full_like(q, offset & 0xFFFFFFFF)
    c3 = np.full_like(q, (offset >> 32) & 0xFFFFFFFF)
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64((seed >> 32) & 0xFFFFFFFF)
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * c0, np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & m, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & m
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & m, (k1 + np.uint64(0xBB67AE85)) & m
    return np.stack([c0, c1, c2, c3], axis=1).reshape(-1)[:n]


def rrelu_train_slopes(shape, lower, upper, seed, offset, device, storage=torch.float64):
    """The slope of each element (logical row-major order) of rrelu_train for `storage` (the
    output dtype), in float64: 32/64-bit storage takes word i of the stream on the 23-bit
    midpoint grid, 16-bit storage half-word i % 2 (low first) of word i // 2 on the 16-bit grid."""
    import numpy as np
    n = math.prod(shape)
    if storage.itemsize == 2:
        w = philox_words((n + 1) // 2, int(seed), int(offset))
        h = np.stack([w & np.uint64(0xFFFF), w >> np.uint64(16)], axis=1).reshape(-1)[:n]
        u = (h.astype(np.float64) + 0.5) * 2.0 ** -16
    else:
        u = ((philox_words(n, int(seed), int(offset)) >> np.uint64(9)).astype(np.float64) + 0.5) * 2.0 ** -23
    return (lower + torch.from_numpy(u) * (upper - lower)).reshape(shape).to(device)


def _rrelu_train(x, lower=0.125, upper=1.0 / 3, seed=0, offset=0, storage=torch.float64):
    slope = rrelu_train_slopes(tuple(x.shape), lower, upper, seed, offset, x.device, storage)
    return torch.where(x > 0, x, x * slope.to(x.dtype))


def _gated(act):
    def f(x, dim=-1, approximate="none"):
        a, b = _halves(x, dim)
        return act(a, approximate) * b
    return f


REFERENCE = {
    # unary math
    "neg": torch.neg, "abs": torch.abs, "sign": torch.sign, "sgn": torch.sgn,
    "reciprocal": torch.reciprocal, "square": torch.square, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "cbrt": lambda x: torch.sign(x) * x.abs().pow(1.0 / 3.0),
    "exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1, "log": torch.log, "log2": torch.log2,
    "log10": torch.log10, "log1p": torch.log1p, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan,
    "asin": torch.asin, "acos": torch.acos, "atan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh,
    "tanh": torch.tanh, "asinh": torch.asinh, "acosh": torch.acosh, "atanh": torch.atanh,
    "floor": torch.floor, "ceil": torch.ceil, "round": _round, "trunc": torch.trunc, "frac": torch.frac,
    "erf": torch.erf, "erfc": torch.erfc, "erfinv": torch.erfinv, "lgamma": torch.lgamma,
    "digamma": torch.digamma, "polygamma": lambda x, n=1: torch.polygamma(int(n), x),
    "i0": torch.special.i0, "sinc": torch.sinc, "logit": lambda x, eps=None: torch.logit(x, eps),
    "nan_to_num": lambda x, nan=0.0, posinf=None, neginf=None: torch.nan_to_num(x, nan, posinf, neginf),
    "isnan": torch.isnan, "isinf": torch.isinf, "isposinf": torch.isposinf, "isneginf": torch.isneginf,
    "isfinite": torch.isfinite, "signbit": torch.signbit, "bitwise_not": torch.bitwise_not,
    "popcount": _popcount, "clz": _clz, "logical_not": torch.logical_not,
    # activations
    "relu": torch.relu,
    "relu6": _float_or(tF.relu6, lambda x: torch.clamp(x, 0, 6)),
    "leaky_relu": lambda x, negative_slope=0.01: tF.leaky_relu(x, negative_slope),
    "rrelu_eval": lambda x, lower=0.125, upper=1.0 / 3: tF.leaky_relu(x, (lower + upper) / 2),
    "rrelu_train": _rrelu_train,  # torch's rrelu_with_noise formula with our Philox slopes
    "elu": lambda x, alpha=1.0, scale=1.0, input_scale=1.0: torch.ops.aten.elu(x, alpha, scale, input_scale),
    "selu": tF.selu, "celu": lambda x, alpha=1.0: tF.celu(x, alpha),
    "gelu": lambda x, approximate="none": tF.gelu(x, approximate=approximate),
    "silu": tF.silu, "mish": tF.mish, "sigmoid": torch.sigmoid, "hardsigmoid": tF.hardsigmoid,
    "hardswish": tF.hardswish,
    "hardtanh": _float_or(lambda x, min_val=-1.0, max_val=1.0: tF.hardtanh(x, min_val, max_val),
                          lambda x, min_val=-1, max_val=1: torch.clamp(x, int(min_val), int(max_val))),
    "hardshrink": lambda x, lambd=0.5: tF.hardshrink(x, lambd),
    "softshrink": lambda x, lambd=0.5: tF.softshrink(x, lambd),
    "tanhshrink": tF.tanhshrink,
    "softplus": lambda x, beta=1.0, threshold=20.0: tF.softplus(x, beta, threshold),
    "softsign": tF.softsign, "logsigmoid": tF.logsigmoid,
    "threshold": _float_or(lambda x, threshold=0.0, value=0.0: tF.threshold(x, threshold, value),
                           lambda x, threshold=0, value=0: torch.where(
                               x <= int(threshold), torch.full_like(x, int(value)), x)),
    "prelu": tF.prelu,
    "glu": lambda x, dim=-1: tF.glu(x, dim),
    "reglu": _gated(lambda a, _: torch.relu(a)),
    "geglu": _gated(lambda a, approximate: tF.gelu(a, approximate=approximate)),
    "swiglu": _gated(lambda a, _: tF.silu(a)),
    # binary
    "add": lambda a, b, alpha=1: torch.add(a, b, alpha=alpha),
    "sub": lambda a, b, alpha=1: torch.sub(a, b, alpha=alpha),
    "mul": torch.mul, "div": torch.div,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "fmod": torch.fmod, "remainder": torch.remainder, "pow": torch.pow, "atan2": torch.atan2,
    "hypot": torch.hypot, "copysign": torch.copysign, "nextafter": _nextafter, "ldexp": torch.ldexp,
    "maximum": torch.maximum, "minimum": torch.minimum, "fmax": torch.fmax, "fmin": torch.fmin,
    "xlogy": torch.xlogy, "logaddexp": torch.logaddexp, "logaddexp2": torch.logaddexp2,
    "lerp_scalar": lambda a, b, weight=0.5: torch.lerp(a, b, weight),
    "masked_fill": lambda x, mask, value=0: torch.masked_fill(x, mask, value),
    # comparisons, logical, bitwise
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "isclose": lambda a, b, rtol=1e-5, atol=1e-8, equal_nan=False: torch.isclose(a, b, rtol, atol, bool(equal_nan)),
    "logical_and": torch.logical_and, "logical_or": torch.logical_or, "logical_xor": torch.logical_xor,
    "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor,
    "bitwise_left_shift": torch.bitwise_left_shift, "bitwise_right_shift": torch.bitwise_right_shift,
    # ternary
    "lerp": torch.lerp, "clamp": lambda x, lo, hi: torch.clamp(x, lo, hi), "clamp_scalar": _clamp_scalar,
    "addcmul": lambda a, b, c, value=1: torch.addcmul(a, b, c, value=value),
    "addcdiv": lambda a, b, c, value=1: torch.addcdiv(a, b, c, value=value),
    "where": torch.where,
    "fma": lambda a, b, c: a.double() * b.double() + c.double(),
    # cast and generators (own signatures; see test_elementwise_fw.py)
    "cast": lambda x, dtype: x.to(dtype),
    "fill": lambda shape, value, dtype: torch.full(shape, value, dtype=dtype, device=DEVICE),
    "arange": lambda start, end, step, dtype: torch.arange(start, end, step, dtype=dtype, device=DEVICE),
    "linspace": lambda start, end, steps, dtype: torch.linspace(start, end, steps, dtype=dtype, device=DEVICE),
    "logspace": lambda start, end, steps, base, dtype: torch.logspace(start, end, steps, base, dtype=dtype,
                                                                      device=DEVICE),
    "eye": lambda n, m, dtype: torch.eye(n, m, dtype=dtype, device=DEVICE),
}

# Rows whose result must be computed in the input's own dtype (the ulp is the dtype's).
NO_UPCAST = {"nextafter", "nan_to_num"}  # nan_to_num: posinf/neginf default to the dtype's max
# Float rows that move or select values without rounding: compared exactly.
EXACT = {"neg", "abs", "sign", "sgn", "floor", "ceil", "trunc", "relu", "relu6", "hardtanh", "threshold",
         "copysign", "nextafter", "maximum", "minimum", "fmax", "fmin", "masked_fill", "where", "clamp",
         "clamp_scalar", "hardshrink"}
# Rows whose gradient is zero everywhere (torch agrees); grads exempt from the non-zero check.
ZERO_GRAD = {"floor", "ceil", "round", "trunc", "sign", "sgn", "div_trunc", "div_floor"}
ZERO_GRAD_INPUT = {("copysign", 1)}
# Bool rows allowed a constant result (nothing to find in integer data).
CONST_BOOL_INT = {"isnan", "isinf", "isposinf", "isneginf", "isfinite", "signbit"}


# ---- calling baracuda -------------------------------------------------------------------------------------
def _fn(name):
    f = getattr(F, name, None)
    assert f is not None, f"baracuda.functional has no '{name}'"
    return f


ADAPT = {  # row -> (functional callable, args, kwargs)
    "div_trunc": lambda ins, kw: (_fn("div"), ins, {**kw, "rounding_mode": "trunc"}),
    "div_floor": lambda ins, kw: (_fn("div"), ins, {**kw, "rounding_mode": "floor"}),
    "lerp_scalar": lambda ins, kw: (_fn("lerp"), [*ins, kw.get("weight", 0.5)], {}),
    "clamp_scalar": lambda ins, kw: (_fn("clamp"), ins, kw),
    "rrelu_eval": lambda ins, kw: (_fn("rrelu"), ins, {**kw, "training": False}),
    "polygamma": lambda ins, kw: (_fn("polygamma"), [int(kw.get("n", 1)), *ins], {}),
    "clamp": lambda ins, kw: (_fn("clamp"), [ins[0]], {"min": ins[1], "max": ins[2]}),
}


def functional_name(name):
    return {"div_trunc": "div", "div_floor": "div", "lerp_scalar": "lerp", "clamp_scalar": "clamp",
            "rrelu_eval": "rrelu"}.get(name, name)


def call(name, ins, kw, out=None):
    """baracuda.functional's entry for row `name` on tensor args `ins` with table keywords `kw`."""
    if name in ADAPT:
        f, args, kwargs = ADAPT[name](list(ins), dict(kw))
    else:
        f, args, kwargs = _fn(name), list(ins), dict(kw)
    if out is not None:
        kwargs["out"] = out
    return f(*args, **kwargs)


def default_kw(name, dt):
    if name == "clamp_scalar":
        if dt.is_floating_point:
            return {"min": -1.5, "max": 0.75}
        return {"min": 2, "max": 9} if torch.iinfo(dt).min == 0 else {"min": -3, "max": 4}
    return {}


def _upcast(t):
    return t.to(UPCAST[t.dtype]) if t.dtype in UPCAST else t


# Rows whose reference needs the storage dtype of the inputs (upcasting loses it): rrelu_train's
# noise stream layout depends on the element size.
STORAGE_KW = {"rrelu_train"}


def _with_storage(name, ins, kw):
    return {**kw, "storage": ins[0].dtype} if name in STORAGE_KW else kw


def reference(name, ins, kw, out_dtype, native=False):
    """torch's result on upcast inputs (native=False) or on the inputs' own dtype, cast to
    out_dtype; None where torch does not implement the native dtype."""
    kw = _with_storage(name, ins, kw)
    args = list(ins) if (native or name in NO_UPCAST) else [_upcast(t) for t in ins]
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = REFERENCE[name](*args, **kw)
    except (RuntimeError, NotImplementedError, TypeError):
        if native:
            return None
        raise
    return r.to(out_dtype)


def references(name, ins, kw, out_dtype):
    """[upcast reference, native reference (float/complex inputs only, or None)]."""
    ref = reference(name, ins, kw, out_dtype)
    dt = next((t.dtype for t in ins if t.dtype != torch.bool), None)
    nat = None
    if dt is not None and (dt.is_floating_point or dt.is_complex) and name not in NO_UPCAST:
        nat = reference(name, ins, kw, out_dtype, native=True)
    return [ref, nat]


# ---- non-default params (forward and backward) -----------------------------------------------
# (row, tag, float keywords, int keywords or None, domain override or None)
VARIANTS = [
    ("gelu", "tanh", {"approximate": "tanh"}, None, None),
    ("geglu", "tanh", {"approximate": "tanh"}, None, None),
    ("leaky_relu", "slope0.2", {"negative_slope": 0.2}, None, None),
    ("rrelu_eval", "lower0.1-upper0.5", {"lower": 0.1, "upper": 0.5}, None, None),
    ("rrelu_train", "seed-offset", {"lower": 0.1, "upper": 0.5, "seed": 123456789012.0, "offset": 5.0}, None, None),
    ("elu", "alpha1.5-scale2-iscale0.5", {"alpha": 1.5, "scale": 2.0, "input_scale": 0.5}, None, None),
    ("celu", "alpha2", {"alpha": 2.0}, None, None),
    ("hardtanh", "range", {"min_val": -2.0, "max_val": 0.5}, {"min_val": -2, "max_val": 5}, None),
    ("hardshrink", "lambd1", {"lambd": 1.0}, None, None),
    ("softshrink", "lambd1", {"lambd": 1.0}, None, None),
    ("softplus", "beta2-thr3", {"beta": 2.0, "threshold": 3.0}, None, None),
    ("threshold", "thr-value", {"threshold": 0.3, "value": -1.5}, {"threshold": 2, "value": -7}, None),
    ("add", "alpha", {"alpha": 2.5}, {"alpha": 3}, None),
    ("sub", "alpha", {"alpha": -0.5}, {"alpha": 2}, None),
    ("round", "decimals2", {"decimals": 2}, None, None),
    ("round", "decimals-1", {"decimals": -1}, None, U(-200, 200)),
    ("logit", "eps0.1", {"eps": 0.1}, None, None),
    ("nan_to_num", "values", {"nan": 1.0, "posinf": 2.0, "neginf": -3.0}, None, None),
    ("polygamma", "n0", {"n": 0}, None, None),
    ("polygamma", "n2", {"n": 2}, None, None),
    ("polygamma", "n3", {"n": 3}, None, None),
    ("isclose", "loose-equal_nan", {"rtol": 1e-2, "atol": 1e-3, "equal_nan": True}, None,
     [D(0.0, 1.0, math.nan, 2.0), D(0.0, 1.001, math.nan, 2.5)]),
    ("addcmul", "value0.5", {"value": 0.5}, {"value": 2}, None),
    ("addcdiv", "value-2", {"value": -2.0}, None, None),
    ("lerp_scalar", "weight0.75", {"weight": 0.75}, None, None),
    ("lerp_scalar", "weight0.25", {"weight": 0.25}, None, None),
    ("clamp_scalar", "min-only", {"min": -1.0}, {"min": -3}, None),
    ("clamp_scalar", "max-only", {"max": 0.5}, {"max": 4}, None),
    ("masked_fill", "value", {"value": 3.5}, {"value": -4}, None),
]


def variant_params(differentiable_only=False, dtypes=("float32", "bfloat16")):
    for name, tag, kwf, kwi, dom in VARIANTS:
        row = ROWS.get(name)
        if row is None:
            continue
        key = "bw_dtypes" if differentiable_only else "fw_dtypes"
        if differentiable_only and row["bw"] == "none":
            continue
        avail = dtypes_of(row, key)
        for d in dtypes:
            if d in avail:
                yield pytest.param(name, d, kwf, dom, id=f"{name}-{d}-{tag}")
        if kwi is not None and not differentiable_only and "int32" in avail:
            yield pytest.param(name, "int32", kwi, None, id=f"{name}-int32-{tag}")



# ---- checks -------------------------------------------------------------------------------------------------
def _comparable(t):
    if t.dtype in FP8:
        return t.float()
    if t.dtype == getattr(torch, "uint32", None):
        return t.to(torch.int64)
    return t


def assert_matches(got, refs, dt, tol, exact, what):
    """`got` equals one of `refs` (None entries skipped) within dtype tolerances x tol (exact for
    integer/bool/exact rows); NaN positions must match, infinities must be equal."""
    refs = [r for r in refs if r is not None]
    assert isinstance(got, torch.Tensor), f"{what}: expected a torch.Tensor, got {type(got).__name__}"
    assert got.dtype == refs[0].dtype, f"{what}: dtype {dname(got.dtype)}, expected {dname(refs[0].dtype)}"
    assert tuple(got.shape) == tuple(refs[0].shape), \
        f"{what}: shape {tuple(got.shape)}, expected {tuple(refs[0].shape)}"
    assert got.device.type == refs[0].device.type, f"{what}: on {got.device}, expected {refs[0].device}"
    if got.dtype == torch.bool:
        raw = got.view(torch.uint8)
        assert bool((raw <= 1).all()), f"{what}: bool output holds bytes other than 0/1 (unwritten elements?)"
    floating = got.dtype.is_floating_point or got.dtype.is_complex
    if floating and not exact and got.dtype in BASE_TOL:
        rtol, atol = tolerances(got.dtype, tol)
    else:
        rtol, atol = 0.0, 0.0
    errors = []
    for r in refs:
        try:
            torch.testing.assert_close(_comparable(got), _comparable(r), rtol=rtol, atol=atol, equal_nan=True)
            return
        except AssertionError as e:
            errors.append(str(e))
    names = ["upcast reference", "native-dtype torch"]
    raise AssertionError(f"{what}: differs from torch (rtol={rtol:.3g}, atol={atol:.3g})\n" +
                         "\n".join(f"[{n}] {e}" for n, e in zip(names, errors)))


def assert_not_degenerate(name, ref, in_dtype, what):
    """The expected output must exercise the op: not (almost) all zeros; bools not constant."""
    if ref is None or ref.numel() < 32:
        return
    if ref.dtype == torch.bool:
        if in_dtype is not None and not in_dtype.is_floating_point and name in CONST_BOOL_INT:
            return
        n = int(ref.sum())
        assert 0 < n < ref.numel(), f"{what}: degenerate test data: the expected bool output is constant"
        return
    r = ref
    if r.dtype.is_floating_point and r.dtype not in BASE_TOL:
        r = r.float()
    nz = int(torch.count_nonzero(r))
    assert nz >= max(1, ref.numel() // 20), \
        f"{what}: degenerate test data: only {nz}/{ref.numel()} expected values are non-zero"


def poisoned(shape, dt, transposed=False):
    """An output pre-filled with NaN (floats) or a sentinel (ints; bools hold the byte 0x5A)."""
    s = list(reversed(shape)) if transposed else list(shape)
    if dt == torch.bool:
        t = torch.full(s, 0x5A, dtype=torch.uint8, device=DEVICE).view(torch.bool)
    elif dt.is_floating_point or dt.is_complex:
        t = torch.full(s, math.nan, dtype=dt, device=DEVICE)
    else:
        t = torch.full(s, torch.iinfo(dt).max - 3, dtype=dt, device=DEVICE)
    return t.t() if transposed else t


def snapshot(ins):
    return [t.clone() for t in ins]


def _same(a, b):
    if a.dtype.is_floating_point or a.dtype.is_complex:
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return torch.equal(a, b)


def assert_unchanged(ins, before, what):
    for i, (a, b) in enumerate(zip(ins, before)):
        assert _same(a, b), f"{what}: input {i} was modified"


def run_forward_case(name, dt, ins, kw, what, out_transposed=False, check_degenerate=True, poison=True):
    """Calls baracuda without and with a poisoned out= and checks both against torch."""
    row = ROWS[name]
    out_dtype = expected_out_dtype(row, dt)
    refs = references(name, ins, kw, out_dtype)
    if check_degenerate:
        assert_not_degenerate(name, refs[0], dt, what)
    exact = name in EXACT or not (out_dtype.is_floating_point or out_dtype.is_complex)
    before = snapshot(ins)
    got = call(name, ins, kw)
    assert_unchanged(ins, before, what)
    assert_matches(got, refs, dt, row["tol"], exact, what)
    if not poison or name in NO_OUT:
        return
    out = poisoned(list(refs[0].shape), out_dtype, transposed=out_transposed)
    res = call(name, ins, kw, out=out)
    assert_matches(out, refs, dt, row["tol"], exact, what + " [out=, poisoned]")
    if res is not None and isinstance(res, torch.Tensor) and out.numel():
        assert res.data_ptr() == out.data_ptr(), f"{what}: with out=, the returned tensor is not `out`"


# ---- backward -------------------------------------------------------------------------------------------------
def assert_close_bounded(got, ref, bound, rtol, atol, what):
    """|got - ref| <= atol + rtol * bound elementwise (bound = sum of |terms| where a broadcast
    input's gradient was reduced, |ref| elsewhere); NaN and infinity positions must match."""
    assert got.dtype == ref.dtype, f"{what}: dtype {dname(got.dtype)}, expected {dname(ref.dtype)}"
    assert tuple(got.shape) == tuple(ref.shape), f"{what}: shape {tuple(got.shape)}, expected {tuple(ref.shape)}"
    g, r, b = got.double(), ref.double(), bound.double()
    gn, rn = torch.isnan(g), torch.isnan(r)
    if not torch.equal(gn, rn):
        i = int(torch.nonzero((gn != rn).reshape(-1))[0])
        raise AssertionError(f"{what}: NaN mismatch at flat index {i}: got {g.reshape(-1)[i].item()}, "
                             f"expected {r.reshape(-1)[i].item()}")
    fin = ~rn & torch.isfinite(r)
    inf = ~rn & ~fin
    if bool(inf.any()) and not torch.equal(g[inf], r[inf]):
        raise AssertionError(f"{what}: infinity mismatch")
    err = (g - r).abs()
    allowed = atol + rtol * torch.maximum(b, r.abs())
    bad = fin & ~(err <= allowed)
    if bool(bad.any()):
        i = int(torch.nonzero(bad.reshape(-1))[0])
        raise AssertionError(
            f"{what}: {int(bad.sum())}/{bad.numel()} gradient elements out of tolerance "
            f"(rtol={rtol:.3g}, atol={atol:.3g}); first at flat index {i}: got {g.reshape(-1)[i].item()!r}, "
            f"expected {r.reshape(-1)[i].item()!r}, allowed error {allowed.reshape(-1)[i].item():.3g}")


def _bw_targets(name, ins):
    if name in GATED:
        return [0]
    return grad_positions(ROWS[name])


def reference_grads(name, ins, kw, grad_out, upcast=True):
    """torch.autograd.grad of REFERENCE[name] at `ins` (upcast or native dtype): (grads, bounds)
    with grads reduced to the inputs' shapes and bounds = sum of |per-element terms|."""
    targets = _bw_targets(name, ins)
    kw = _with_storage(name, ins, kw)
    bshape = list(torch.broadcast_shapes(*[t.shape for t in ins])) if name not in GATED else None
    args, expanded = [], {}
    for i, t in enumerate(ins):
        x = t.detach()
        if upcast and x.dtype in UPCAST and name not in NO_UPCAST:
            x = _upcast(x)
        if i in targets:
            exp = (upcast and bshape is not None and name != "prelu" and list(x.shape) != bshape)
            x = (x.expand(bshape).clone() if exp else x.clone()).requires_grad_(True)
            expanded[i] = exp
        args.append(x)
    with torch.enable_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = REFERENCE[name](*args, **kw)
        go = grad_out.to(y.dtype)
        terms = torch.autograd.grad(y, [args[i] for i in targets], go)
    grads, bounds = [], []
    for i, T in zip(targets, terms):
        shape = ins[i].shape
        if expanded[i]:
            grads.append(T.sum_to_size(shape) if len(shape) else T.sum())
            bounds.append(T.abs().sum_to_size(shape) if len(shape) else T.abs().sum())
        else:
            grads.append(T)
            bounds.append(T.abs())
    if name == "prelu" and upcast:  # the weight's grad is a sum over everything but dim 1
        x, w = args[0].detach(), ins[1]
        tw = torch.where(x > 0, torch.zeros_like(x), x * go.to(x.dtype)).abs()
        if w.numel() == 1 or x.dim() < 2:
            bw = tw.sum().reshape(w.shape)
        else:
            bw = tw.sum(dim=[d for d in range(x.dim()) if d != 1]).reshape(w.shape)
        bounds[1] = bw
    return grads, bounds


def check_grads(name, dt, ins, kw, grads, grad_out, what):
    """grads (one per grad input) against the torch reference (upcast, else native dtype)."""
    row = ROWS[name]
    targets = _bw_targets(name, ins)
    assert len(grads) == len(targets), f"{what}: {len(grads)} gradients, expected {len(targets)}"
    ref_up, bounds = reference_grads(name, ins, kw, grad_out, upcast=True)
    try:
        ref_nat, _ = reference_grads(name, ins, kw, grad_out, upcast=False)
    except (RuntimeError, NotImplementedError):
        ref_nat = None
    rtol, atol = tolerances(dt, row["tol"], BW_SLACK)
    for k, i in enumerate(targets):
        w = f"{what} grad[{i}]"
        g = grads[k]
        assert isinstance(g, torch.Tensor), f"{w}: expected a tensor, got {type(g).__name__}"
        assert g.dtype == dt, f"{w}: dtype {dname(g.dtype)}, expected {dname(dt)}"
        if name not in ZERO_GRAD and (name, i) not in ZERO_GRAD_INPUT:
            assert_not_degenerate(name, ref_up[k], dt, w)
        errors = []
        for ref in (ref_up[k], None if ref_nat is None else ref_nat[k]):
            if ref is None:
                continue
            try:
                assert_close_bounded(g, ref.to(dt), bounds[k], rtol, atol, w)
                break
            except AssertionError as e:
                errors.append(str(e))
        else:
            raise AssertionError("\n".join(f"[{n}] {e}" for n, e in zip(("upcast reference", "native-dtype torch"),
                                                                          errors)))


def run_backward_case(name, dt, ins, kw, what, g):
    targets = _bw_targets(name, ins)
    leaves = [t.detach().requires_grad_(True) if i in targets else t for i, t in enumerate(ins)]
    y = call(name, leaves, kw)
    assert isinstance(y, torch.Tensor) and y.requires_grad and y.grad_fn is not None, \
        f"{what}: baracuda.functional result is not connected to autograd"
    grad_out = draw(U(-1, 1), y.shape, dt, g)
    grads = torch.autograd.grad(y, [leaves[i] for i in targets], grad_out)
    check_grads(name, dt, ins, kw, list(grads), grad_out, what)
