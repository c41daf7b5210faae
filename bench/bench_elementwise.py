#!/usr/bin/env python3
"""Elementwise family: baracuda vs PyTorch, side by side in one process, same inputs, same stream.

baracuda runs through its lowest-overhead path, baracuda._C.elementwise(op, backward, inputs,
outputs, params, stream) with pre-allocated outputs; torch runs its own function with out= where
it has one (otherwise a plain call). Timing: CUDA events, warm-up, median of --iters; buffers
rotate when one call moves less than 2x L2. See bench/README.md.

  python bench/bench_elementwise.py                 # full run, 2^27 elements
  python bench/bench_elementwise.py --quick         # smoke run, 2^20 elements, a few ops
  python bench/bench_elementwise.py --ops 'gelu*,add' --dtypes bf16
"""
from __future__ import annotations

import argparse
import fnmatch
import math
import os
import re
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the shared harness; imports torch lazily)

TARGET_RATIO = 0.97  # vs torch, every row
TARGET_PCT_BW = 90.0  # of measured copy bandwidth, every row
GELU_BF16_TARGET = 1.25  # headline: gelu bf16 vs torch
QUICK_OPS = ["exp", "gelu", "add", "mul", "where", "cast", "fill", "sigmoid", "eq", "bitwise_and"]
DTYPE_SHORT = {"bfloat16": "bf16", "float32": "f32", "int32": "i32", "bool": "bool"}


def parse_numel(s: str) -> int:
    """'134217728', '2**27', '1<<27', '128M' (M = 2**20), '4k'."""
    t = s.strip().lower().replace("_", "")
    m = re.fullmatch(r"(\d+)\s*(\*\*|<<)\s*(\d+)", t)
    if m:
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        return a ** b if op == "**" else a << b
    m = re.fullmatch(r"(\d+)([kmg]?)", t)
    if not m:
        raise argparse.ArgumentTypeError(f"bad element count {s!r}")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2)]


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Benchmark baracuda's elementwise ops against PyTorch (same process, same "
        "inputs, same stream). Writes bench/results/elementwise-<gpu>.md and .json.")
    p.add_argument("--numel", type=parse_numel, default=None,
                   help="elements per tensor (default 2**27; --quick: 2**20). Also 2**27, 1<<27, 128M.")
    p.add_argument("--ops", default=None,
                   help="comma-separated op names or row labels, fnmatch patterns allowed "
                   "(e.g. 'gelu*,add,div*'). Default: all.")
    p.add_argument("--dtypes", default="bf16,f32,i32",
                   help="comma-separated: bf16,f32,i32 (int rows are i32 only; cast rows need both "
                   "sides listed). Default: %(default)s")
    p.add_argument("--dir", choices=["fw", "bw", "all"], default="all", help="forward, backward or both rows")
    p.add_argument("--warmup", type=int, default=5, help="warm-up calls per side (default %(default)s)")
    p.add_argument("--iters", type=int, default=20, help="timed calls per side; median reported (default %(default)s)")
    p.add_argument("--quick", action="store_true",
                   help=f"smoke run: numel 2**20 and ops {','.join(QUICK_OPS)} unless --numel/--ops given")
    p.add_argument("--no-check", action="store_true",
                   help="skip the correctness cross-check of baracuda's output against torch's")
    p.add_argument("--no-pad", action="store_true",
                   help="do not queue a _sleep kernel before the timed loop (then short kernels "
                   "include host dispatch time)")
    p.add_argument("--out-dir", default=bench.RESULTS_DIR, help="where the .md/.json go (default bench/results)")
    p.add_argument("--tag", default="", help="suffix for the result file stem (elementwise-<gpu><tag>)")
    p.add_argument("--no-write", action="store_true", help="print only, write no result files")
    p.add_argument("--list", action="store_true", help="list the rows that would run and exit (needs torch, no GPU)")
    return p.parse_args(argv)


# ---- row specifications ----------------------------------------------------------------------
class Row:
    """One benchmark row.

    ins:    list of (domain, dtype, shape_fn) for the stored input tensors (one per slot)
    outs:   list of (dtype, shape_fn)
    bar_map / torch_map: stored inputs -> argument list for each library (default: identity)
    t_out:  callable(torch_inputs, outputs) using torch's out= variant, or None
    t_plain: callable(torch_inputs) -> tensor or tuple, or None
    """

    def __init__(self, label, op, dtype, ins, outs, t_out=None, t_plain=None, *, bw=False, params=(),
                 bar_map=None, torch_map=None, note="", check=True):
        self.label, self.op, self.dtype, self.ins, self.outs = label, op, dtype, ins, outs
        self.t_out, self.t_plain, self.bw, self.params = t_out, t_plain, bw, [float(v) for v in params]
        self.bar_map, self.torch_map, self.note = bar_map, torch_map, note
        self.check = check  # False: outputs differ from torch's by design (random slopes)

    @property
    def dir(self):
        return "bw" if self.bw else "fw"

    def dtypes_used(self):
        return {d for _, d, _ in self.ins} | {d for d, _ in self.outs}


def build_rows(torch, numel):
    import torch.nn.functional as F

    A = torch.ops.aten
    flat = lambda n: (n,)  # noqa: E731
    C = 256 if numel % 256 == 0 else 1  # prelu channels (dim 1 of an [N, C] input)
    H = 4096 if numel % 4096 == 0 else numel  # gated activations: [rows, 2H] split in halves

    def T(fn, *pre, post=(), **kw):
        """torch function taking the inputs positionally: (out= variant, plain)."""
        return (lambda i, o: fn(*pre, *i, *post, **kw, out=o[0]),
                lambda i: fn(*pre, *i, *post, **kw))

    def AT(name, *post, plain=None, **kw):
        """ATen op through its .out overload; plain: the public function (default: .default)."""
        op = getattr(A, name)
        return (lambda i, o: op.out(*i, *post, **kw, out=o[0]),
                plain or (lambda i: op.default(*i, *post, **kw)))

    def P(fn):
        return (None, fn)

    def BW(name, *post, **kw):
        op = getattr(A, name)
        return (lambda i, o: op.grad_input(*i, *post, **kw, grad_input=o[0]),
                lambda i: op.default(*i, *post, **kw))

    rows = []
    FP = ["bf16", "f32"]

    def unary(label, op, domain, tfns, params=(), out="same", dts=FP, note="", check=True):
        for dt in dts:
            od = dt if out == "same" else out
            rows.append(Row(label, op, dt, [(domain, dt, flat)], [(od, flat)], *tfns, params=params, note=note,
                            check=check))

    def nary(label, op, specs, tfns, params=(), out="same", dts=FP, note="", nout=1, bw=False, bool_slots=()):
        for dt in dts:
            od = dt if out == "same" else out
            ins = [(dom, "bool" if k in bool_slots else dt, flat) for k, dom in enumerate(specs)]
            rows.append(Row(label, op, dt, ins, [(od, flat)] * nout, *tfns, params=params, note=note, bw=bw))

    # -- unary math
    math_ops = [("neg", "normal"), ("abs", "normal"), ("sign", "normal"), ("sgn", "normal"),
                ("reciprocal", "nonzero"), ("square", "normal"), ("sqrt", "pos"), ("rsqrt", "pos"),
                ("exp", "normal"), ("exp2", "normal"), ("expm1", "normal"), ("log", "pos"), ("log2", "pos"),
                ("log10", "pos"), ("log1p", "pos"), ("sin", "normal"), ("cos", "normal"), ("tan", "wide"),
                ("asin", "unit"), ("acos", "unit"), ("atan", "normal"), ("sinh", "normal"), ("cosh", "normal"),
                ("tanh", "normal"), ("asinh", "normal"), ("acosh", "gt1"), ("atanh", "unit"),
                ("floor", "normal"), ("ceil", "normal"), ("round", "normal"), ("trunc", "normal"),
                ("frac", "normal"), ("erf", "normal"), ("erfc", "normal"), ("erfinv", "unit"),
                ("lgamma", "pos"), ("digamma", "pos"), ("i0", "normal"), ("sinc", "normal"),
                ("logit", "prob"), ("nan_to_num", "nonfinite")]
    for op, dom in math_ops:
        unary(op, op, dom, T(getattr(torch, op)))
        if op == "digamma":
            unary("polygamma(n=1)", "polygamma", "pos", T(torch.polygamma, 1), params=[1])
    for op in ["isnan", "isinf", "isposinf", "isneginf", "isfinite", "signbit"]:
        unary(op, op, "nonfinite", T(getattr(torch, op)), out="bool")
    unary("logical_not", "logical_not", "coarse", T(torch.logical_not), out="bool")
    unary("bitwise_not", "bitwise_not", "int", T(torch.bitwise_not), dts=["i32"])

    # -- activations
    unary("relu", "relu", "normal", P(lambda i: torch.relu(i[0])))
    unary("relu6", "relu6", "normal", AT("hardtanh", 0.0, 6.0, plain=lambda i: F.relu6(i[0])))
    unary("leaky_relu", "leaky_relu", "normal", AT("leaky_relu", 0.01), params=[0.01])
    unary("rrelu(eval)", "rrelu_eval", "normal", P(lambda i: F.rrelu(i[0], 0.125, 1.0 / 3.0, training=False)),
          params=[0.125, 1.0 / 3.0])
    unary("rrelu(train)", "rrelu_train", "normal", P(lambda i: F.rrelu(i[0], 0.125, 1.0 / 3.0, training=True)),
          params=[0.125, 1.0 / 3.0, 1, 0], check=False,
          note="random slopes, not compared (a different stream than torch's); torch also writes its noise tensor")
    unary("elu", "elu", "normal", AT("elu", 1.0, 1.0, 1.0), params=[1, 1, 1])
    unary("selu", "selu", "normal", P(lambda i: torch.selu(i[0])))
    unary("celu", "celu", "normal", P(lambda i: torch.celu(i[0], 1.0)), params=[1])
    unary("gelu(none)", "gelu", "normal", AT("gelu", approximate="none"), params=[0])
    unary("gelu(tanh)", "gelu", "normal", AT("gelu", approximate="tanh"), params=[1])
    unary("silu", "silu", "normal", AT("silu"))
    unary("mish", "mish", "normal", AT("mish"))
    unary("sigmoid", "sigmoid", "normal", T(torch.sigmoid))
    unary("hardsigmoid", "hardsigmoid", "normal", AT("hardsigmoid"))
    unary("hardswish", "hardswish", "normal", AT("hardswish"))
    unary("hardtanh", "hardtanh", "normal", AT("hardtanh", -1.0, 1.0), params=[-1, 1])
    unary("hardshrink", "hardshrink", "normal", AT("hardshrink", 0.5), params=[0.5])
    unary("softshrink", "softshrink", "normal", AT("softshrink", 0.5), params=[0.5])
    unary("tanhshrink", "tanhshrink", "normal", P(lambda i: F.tanhshrink(i[0])), note="torch composite")
    unary("softplus", "softplus", "normal", AT("softplus", 1.0, 20.0), params=[1, 20])
    unary("softsign", "softsign", "normal", P(lambda i: F.softsign(i[0])), note="torch composite")
    unary("logsigmoid", "logsigmoid", "normal", AT("log_sigmoid", plain=lambda i: F.logsigmoid(i[0])))
    unary("threshold", "threshold", "normal", AT("threshold", 0.1, -1.0), params=[0.1, -1.0])
    for dt in FP:  # prelu: weight [C] broadcast over dim 1 of x [N, C]
        rows.append(Row("prelu", "prelu", dt, [("normal", dt, lambda n: (n // C, C)), ("slope", dt, lambda n: (C,))],
                        [(dt, lambda n: (n // C, C))], *P(lambda i: torch.prelu(i[0], i[1]))))
    # gated: one [rows, 2H] tensor; baracuda gets its two halves (views, as functional.glu passes them)
    halves = lambda ts: [ts[0][..., : ts[0].shape[-1] // 2], ts[0][..., ts[0].shape[-1] // 2:]]  # noqa: E731
    gated = [("glu", "glu", (), AT("glu", -1), None, ""),
             ("reglu", "reglu", (), (lambda i, o: torch.mul(torch.relu(i[0]), i[1], out=o[0]),
                                     lambda i: torch.relu(i[0]) * i[1]), halves, "torch composite"),
             ("geglu(none)", "geglu", (0,), (lambda i, o: torch.mul(F.gelu(i[0]), i[1], out=o[0]),
                                             lambda i: F.gelu(i[0]) * i[1]), halves, "torch composite"),
             ("swiglu", "swiglu", (), (lambda i, o: torch.mul(F.silu(i[0]), i[1], out=o[0]),
                                       lambda i: F.silu(i[0]) * i[1]), halves, "torch composite")]
    for label, op, params, tfns, tmap, note in gated:
        for dt in FP:
            rows.append(Row(label, op, dt, [("normal", dt, lambda n: (n // H, 2 * H))], [(dt, lambda n: (n // H, H))],
                            *tfns, params=params, bar_map=halves, torch_map=tmap, note=note))

    # -- binary arithmetic
    bin_ops = [("add", "normal", "normal", T(torch.add), [1]), ("sub", "normal", "normal", T(torch.sub), [1]),
               ("mul", "normal", "normal", T(torch.mul), []), ("div", "normal", "nonzero", T(torch.div), []),
               ("div(trunc)", "normal", "nonzero", T(torch.div, rounding_mode="trunc"), []),
               ("div(floor)", "normal", "nonzero", T(torch.div, rounding_mode="floor"), []),
               ("fmod", "normal", "nonzero", T(torch.fmod), []),
               ("remainder", "normal", "nonzero", T(torch.remainder), []),
               ("pow", "pos", "expo", T(torch.pow), []), ("atan2", "normal", "normal", T(torch.atan2), []),
               ("hypot", "normal", "normal", T(torch.hypot), []),
               ("copysign", "normal", "normal", T(torch.copysign), []),
               ("nextafter", "normal", "normal", T(torch.nextafter), []),
               ("ldexp", "normal", "int_exp", T(torch.ldexp), []),
               ("maximum", "normal", "normal", T(torch.maximum), []),
               ("minimum", "normal", "normal", T(torch.minimum), []),
               ("fmax", "normal", "normal", T(torch.fmax), []), ("fmin", "normal", "normal", T(torch.fmin), []),
               ("xlogy", "normal", "pos", T(torch.xlogy), []),
               ("logaddexp", "normal", "normal", T(torch.logaddexp), []),
               ("logaddexp2", "normal", "normal", T(torch.logaddexp2), []),
               ("lerp(scalar)", "normal", "normal", T(torch.lerp, post=(0.5,)), [0.5])]
    op_of = {"div(trunc)": "div_trunc", "div(floor)": "div_floor", "lerp(scalar)": "lerp_scalar"}
    for label, da, db, tfns, params in bin_ops:
        nary(label, op_of.get(label, label), [da, db], tfns, params=params,
             note="torch composite" if label == "ldexp" else "")
    nary("masked_fill", "masked_fill", ["normal", "bool"], P(lambda i: torch.masked_fill(i[0], i[1], 0.0)),
         params=[0], bool_slots=(1,))

    # -- comparisons, logical, bitwise
    for op, dom in [("eq", "coarse"), ("ne", "coarse"), ("lt", "normal"), ("le", "normal"), ("gt", "normal"),
                    ("ge", "normal"), ("logical_and", "coarse"), ("logical_or", "coarse"),
                    ("logical_xor", "coarse")]:
        nary(op, op, [dom, dom], T(getattr(torch, op)), out="bool")
    nary("isclose", "isclose", ["coarse", "coarse"],
         P(lambda i: torch.isclose(i[0], i[1], rtol=1e-5, atol=1e-8)), params=[1e-5, 1e-8, 0], out="bool",
         note="torch composite")
    for op in ["bitwise_and", "bitwise_or", "bitwise_xor"]:
        nary(op, op, ["int", "int"], T(getattr(torch, op)), dts=["i32"])
    for op in ["bitwise_left_shift", "bitwise_right_shift"]:
        nary(op, op, ["int", "shift"], T(getattr(torch, op)), dts=["i32"])

    # -- ternary and parameterised
    nary("where", "where", ["bool", "normal", "normal"], T(torch.where), bool_slots=(0,))
    nary("lerp", "lerp", ["normal", "normal", "w01"], T(torch.lerp))
    nary("clamp", "clamp", ["normal", "lo", "hi"], T(torch.clamp))
    nary("clamp(scalar)", "clamp_scalar", ["normal"], T(torch.clamp, post=(-0.5, 0.5)), params=[-0.5, 0.5])
    nary("addcmul", "addcmul", ["normal", "normal", "normal"], T(torch.addcmul, value=0.5), params=[0.5])
    nary("addcdiv", "addcdiv", ["normal", "normal", "nonzero"], T(torch.addcdiv, value=0.5), params=[0.5])
    nary("fma", "fma", ["normal", "normal", "normal"],
         (lambda i, o: torch.addcmul(i[2], i[0], i[1], out=o[0]), lambda i: torch.addcmul(i[2], i[0], i[1])),
         note="torch: addcmul(c, a, b)")

    # -- cast
    for src, dst in [("f32", "bf16"), ("bf16", "f32")]:
        tdst = {"f32": torch.float32, "bf16": torch.bfloat16}[dst]
        rows.append(Row("cast", "cast", f"{src}->{dst}", [("normal", src, flat)], [(dst, flat)],
                        lambda i, o: o[0].copy_(i[0]), (lambda t: lambda i: i[0].to(t))(tdst), params=[0]))

    # -- generators (torch: fill_ into / arange(out=) the same buffer)
    for dt in FP:
        rows.append(Row("fill", "fill", dt, [], [(dt, flat)], lambda i, o: o[0].fill_(1.5), None, params=[1.5]))
        rows.append(Row("arange", "arange", dt, [], [(dt, flat)],
                        lambda i, o: torch.arange(0, o[0].numel(), 1, out=o[0]), None, params=[0, 1]))

    # -- backward (inputs: grad_output, then forward inputs (IN) or the forward output (OUT); DY: none)
    bws = [("gelu(none)", "gelu", ["normal", "normal"], BW("gelu_backward", approximate="none"), [0], 1, ""),
           ("gelu(tanh)", "gelu", ["normal", "normal"], BW("gelu_backward", approximate="tanh"), [1], 1, ""),
           ("silu", "silu", ["normal", "normal"], BW("silu_backward"), [], 1, ""),
           ("sigmoid", "sigmoid", ["normal", "sig_out"], BW("sigmoid_backward"), [], 1, ""),
           ("tanh", "tanh", ["normal", "tanh_out"], BW("tanh_backward"), [], 1, ""),
           ("relu", "relu", ["normal", "relu_out"], BW("threshold_backward", 0.0), [], 1,
            "torch: threshold_backward"),
           ("logit", "logit", ["normal", "prob"], BW("logit_backward"), [-1.0], 1, ""),
           ("atan2", "atan2", ["normal", "normal", "normal"],
            (lambda i, o: _atan2_grads(i, o), lambda i: _atan2_grads(i, None)), [], 2,
            "torch: autograd's formula, grad*other/(self^2+other^2) and -grad*self/(...)"),
           ("mul", "mul", ["normal", "normal", "normal"],
            (lambda i, o: (torch.mul(i[0], i[2], out=o[0]), torch.mul(i[0], i[1], out=o[1])),
             lambda i: (i[0] * i[2], i[0] * i[1])), [], 2, "torch: 2 mul"),
           ("add", "add", ["normal"],  # bw "dy": the backward reads grad_output only
            (lambda i, o: (o[0].copy_(i[0]), o[1].copy_(i[0])), lambda i: (i[0].clone(), i[0].clone())), [1], 2,
            "torch: 2 copy_ (autograd passes grad through)")]
    for label, op, specs, tfns, params, nout, note in bws:
        nary(label, op, specs, tfns, params=params, nout=nout, bw=True, note=note)
    return rows


def _atan2_grads(i, o):
    """torch autograd's atan2 backward (FunctionsManual.cpp): recip = 1 / (self^2 + other^2);
    (grad * other * recip, grad * -self * recip), into `o` when given."""
    g, a, b = i
    recip = (a * a + b * b).reciprocal_()
    if o is None:
        return g * b * recip, g * -a * recip
    torch.mul(g * b, recip, out=o[0])
    torch.mul(g * -a, recip, out=o[1])
    return o


def select_rows(rows, args):
    pats = [s.strip() for s in args.ops.split(",")] if args.ops else None
    dts = {s.strip() for s in args.dtypes.split(",") if s.strip()} | {"bool"}
    out = []
    for r in rows:
        if pats and not any(fnmatch.fnmatchcase(r.op, p) or fnmatch.fnmatchcase(r.label, p) for p in pats):
            continue
        if not r.dtypes_used() <= dts:
            continue
        if args.dir != "all" and r.dir != args.dir:
            continue
        out.append(r)
    return out


# ---- input data --------------------------------------------------------------------------------
class Data:
    """Input tensors by (domain, dtype, slot, shape, nsets), generated once and shared between rows
    (the same x feeds every unary op). Each set is an aligned view into one flat allocation."""

    def __init__(self, torch, limit_bytes):
        self.torch, self.cache, self.bytes, self.limit = torch, {}, 0, limit_bytes

    def tdt(self, d):
        t = self.torch
        return {"bf16": t.bfloat16, "f32": t.float32, "i32": t.int32, "bool": t.bool}[d]

    def _gen(self, domain, n, seed):
        t = self.torch
        g = t.Generator(device="cuda")
        g.manual_seed(seed)
        kw = dict(device="cuda", generator=g)
        u = lambda lo, hi: t.rand(n, **kw).mul_(hi - lo).add_(lo)  # noqa: E731
        if domain == "normal":
            return t.randn(n, **kw)
        if domain == "pos":
            return u(0.1, 10.0)
        if domain == "unit":
            return u(-0.95, 0.95)
        if domain == "wide":
            return u(-1.5, 1.5)
        if domain == "gt1":
            return u(1.05, 10.0)
        if domain == "prob":
            return u(0.05, 0.95)
        if domain == "w01":
            return u(0.0, 1.0)
        if domain == "slope":
            return u(0.0, 0.3)
        if domain == "lo":
            return u(-1.0, 0.0)
        if domain == "hi":
            return u(0.0, 1.0)
        if domain == "expo":
            return u(-2.0, 2.0)
        if domain == "sig_out":
            return u(0.01, 0.99)
        if domain == "tanh_out":
            return u(-0.99, 0.99)
        if domain == "relu_out":
            return t.randn(n, **kw).clamp_min_(0)
        if domain == "nonzero":
            x = u(0.5, 2.0)
            return x.mul_(t.rand(n, **kw).lt_(0.5).mul_(2).sub_(1))
        if domain == "coarse":
            return t.randint(-8, 9, (n,), **kw).float().div_(4)
        if domain == "int_exp":
            return t.randint(-4, 5, (n,), **kw).float()
        if domain == "nonfinite":
            x = t.randn(n, **kw)
            x[::101] = float("nan")
            x[::103] = float("inf")
            x[::107] = float("-inf")
            return x
        if domain == "bool":
            return t.rand(n, **kw).lt_(0.5)
        if domain == "int":
            return t.randint(-(1 << 20), 1 << 20, (n,), dtype=t.int32, **kw)
        if domain == "shift":
            return t.randint(0, 31, (n,), dtype=t.int32, **kw)
        raise ValueError(f"unknown input domain {domain!r}")

    def get(self, domain, dtype, slot, shape, nsets):
        n = math.prod(shape)
        stride = -(-n // 64) * 64 if nsets > 1 else n
        key = (domain, dtype, slot, n, nsets)
        flat = self.cache.get(key)
        if flat is None:
            want = stride * nsets * self.tdt(dtype).itemsize
            if self.bytes + want > self.limit:
                self.clear()
            flat = self._gen(domain, stride * nsets, zlib.crc32(f"{domain}/{slot}".encode())).to(self.tdt(dtype))
            self.cache[key] = flat
            self.bytes += want
        return [flat[k * stride: k * stride + n].view(shape) for k in range(nsets)]

    def clear(self):
        self.cache.clear()
        self.bytes = 0
        self.torch.cuda.empty_cache()


def alloc_outputs(torch, dtype, shape, nsets):
    n = math.prod(shape)
    stride = -(-n // 64) * 64 if nsets > 1 else n
    flat = torch.empty(stride * nsets, dtype=dtype, device="cuda")
    return [flat[k * stride: k * stride + n].view(shape) for k in range(nsets)]


def compare(torch, got, want, tol):
    """'ok' or a short mismatch description. Loose tolerances: this is a sanity check (a fast
    kernel that computes the wrong thing must not look good), the GPU tests are the real ones."""
    if tuple(got.shape) != tuple(want.shape):
        return f"MISMATCH shape {tuple(got.shape)} vs {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return f"MISMATCH dtype {got.dtype} vs {want.dtype}"
    if not got.is_floating_point():
        bad = int((got != want).sum())
        return "ok" if bad == 0 else f"MISMATCH {bad}/{got.numel()} differ"
    rtol, atol = (2e-2, 1e-3) if got.dtype in (torch.bfloat16, torch.float16) else (1e-4, 1e-5)
    g, w = got.float(), want.float()
    close = torch.isclose(g, w, rtol=rtol * tol, atol=atol * tol, equal_nan=True)
    bad = int((~close).sum())
    if bad == 0:
        return "ok"
    d = (g - w).abs().masked_fill_(close, 0).nan_to_num_(nan=float("inf"))
    return f"MISMATCH {bad}/{got.numel()} (max |diff| {float(d.max()):.3g})"


# ---- one row -------------------------------------------------------------------------------------
def layout_of(sku: str) -> str:
    m = re.search(r"layout=(\S+)\s*$", sku or "")
    return m.group(1) if m else (sku or "")


def run_row(r, ctx):
    torch, _C, data, args = ctx["torch"], ctx["_C"], ctx["data"], ctx["args"]
    numel = ctx["numel"]
    res = {"op": r.label, "table_op": r.op, "dtype": r.dtype, "dir": r.dir, "bytes": None, "bar_us": None,
           "torch_us": None, "speedup": None, "bar_gbps": None, "torch_gbps": None, "pct_bw": None, "sku": "",
           "torch_impl": None, "check": None, "bar_error": None, "torch_error": None}
    if r.note:
        res["note"] = r.note
    in_shapes = [shp(numel) for _, _, shp in r.ins]
    out_shapes = [shp(numel) for _, shp in r.outs]
    nbytes = sum(math.prod(s) * data.tdt(d).itemsize for (_, d, _), s in zip(r.ins, in_shapes))
    nbytes += sum(math.prod(s) * data.tdt(d).itemsize for (d, _), s in zip(r.outs, out_shapes))
    res["bytes"] = nbytes
    nsets = bench.rotation_sets(nbytes, ctx["l2"])
    res["nsets"] = nsets

    stored = [data.get(dom, d, k, s, nsets) for k, ((dom, d, _), s) in enumerate(zip(r.ins, in_shapes))]
    sets = [[st[k] for st in stored] for k in range(nsets)]
    bar_ins = [(r.bar_map or list)(s) for s in sets]
    t_ins = [(r.torch_map or list)(s) for s in sets]  # glu: torch's own op takes the stored [rows, 2H]
    outs_by = [alloc_outputs(torch, data.tdt(d), s, nsets) for (d, _), s in zip(r.outs, out_shapes)]
    outs = [[o[k] for o in outs_by] for k in range(nsets)]
    stream = torch.cuda.current_stream().cuda_stream
    tol = ctx["tol"].get(r.op, 1.0)

    # baracuda
    bar_fn = None
    try:
        ws = None
        if r.bw:
            wsz = int(_C.workspace_size(r.op, True, bar_ins[0], outs[0], r.params))
            if wsz > 0:
                ws = torch.empty(wsz, dtype=torch.uint8, device="cuda")
        if ws is None:
            bar_fn = lambda k: _C.elementwise(r.op, r.bw, bar_ins[k], outs[k], r.params, stream)  # noqa: E731
        else:
            bar_fn = lambda k: _C.elementwise(r.op, r.bw, bar_ins[k], outs[k], r.params, stream, workspace=ws)  # noqa: E731
        try:
            res["sku"] = layout_of(str(_C.sku(r.op, r.bw, bar_ins[0], outs[0], r.params)))
        except Exception as e:  # sku is informative only
            res["sku"] = "?"
            res["sku_error"] = bench.short_error(e, 120)
        for o in outs[0]:
            if o.is_floating_point():
                o.fill_(float("nan"))
        bar_fn(0)
        torch.cuda.synchronize()
    except Exception as e:
        res["bar_error"] = bench.short_error(e)
        bar_fn = None

    # torch: out= variant if it takes our buffers, else the plain call
    t_fn, t_result = None, None
    try:
        if r.t_out is not None:
            chk = [torch.empty_like(o) for o in outs[0]]
            try:
                r.t_out(t_ins[0], chk)
                torch.cuda.synchronize()
                t_result, res["torch_impl"] = chk, "out="
                t_fn = lambda k: r.t_out(t_ins[k], outs[k])  # noqa: E731
            except Exception as e:
                if r.t_plain is None:
                    raise
                res["torch_out_error"] = bench.short_error(e, 120)
        if t_fn is None:
            if r.t_plain is None:
                raise RuntimeError("no torch equivalent")
            t_result = r.t_plain(t_ins[0])
            torch.cuda.synchronize()
            t_result = list(t_result) if isinstance(t_result, (tuple, list)) else [t_result]
            res["torch_impl"] = "plain"
            t_fn = lambda k: r.t_plain(t_ins[k])  # noqa: E731
    except Exception as e:
        res["torch_error"] = bench.short_error(e)
        t_fn = None

    if bar_fn is not None and t_fn is not None and not args.no_check and r.check:
        try:
            checks = [compare(torch, g, w, tol) for g, w in zip(outs[0], t_result)]
            res["check"] = next((c for c in checks if c != "ok"), "ok")
        except Exception as e:
            res["check"] = "check failed: " + bench.short_error(e, 120)
    t_result = None

    for side, fn in (("bar", bar_fn), ("torch", t_fn)):
        if fn is None:
            continue
        try:
            t = bench.time_cuda(fn, nsets, args.warmup, args.iters, pad=not args.no_pad)
            res[f"{side}_us"] = t["median_us"]
            res[f"{side}_gbps"] = nbytes / t["median_us"] / 1e3
        except Exception as e:
            res[f"{side}_error"] = bench.short_error(e)
    if res["bar_us"] and res["torch_us"]:
        res["speedup"] = res["torch_us"] / res["bar_us"]
    if res["bar_gbps"]:
        res["pct_bw"] = 100.0 * res["bar_gbps"] * 1e9 / ctx["copy_bps"]
    return res


# ---- report ---------------------------------------------------------------------------------------
def meets(r):
    return (r["speedup"] is not None and r["pct_bw"] is not None and r["speedup"] >= TARGET_RATIO
            and r["pct_bw"] >= TARGET_PCT_BW)


def fmt_bytes(b):
    return f"{b / 1e9:.2f} GB" if b >= 1e9 else f"{b / 1e6:.1f} MB" if b >= 1e6 else f"{b / 1e3:.1f} kB"


def cut(s, n=70):
    return s if len(s) <= n else s[: n - 3] + "..."


def row_cells(r):
    bar = f"{r['bar_us']:.1f}" if r["bar_us"] is not None else f"error: {cut(r['bar_error'] or '?')}"
    tor = (f"{r['torch_us']:.1f}" + ("" if r["torch_impl"] == "out=" else " (plain)")
           if r["torch_us"] is not None else f"error: {cut(r['torch_error'] or '?')}")
    sp = f"{r['speedup']:.3f}x" if r["speedup"] is not None else "-"
    if r["speedup"] is not None and r["check"] not in (None, "ok"):
        sp += " (mismatch)"
    gb = f"{r['bar_gbps']:.0f}" if r["bar_gbps"] is not None else "-"
    pct = f"{r['pct_bw']:.1f}%" if r["pct_bw"] is not None else "-"
    return [r["op"], r["dtype"], r["dir"], fmt_bytes(r["bytes"]), bar, tor, sp, gb, pct, r["sku"] or "-"]


def row_name(r):
    return f"{r['op']} {r['dtype']} {r['dir']}"


def summary(results):
    lines = []
    heads = [r for r in results if r["table_op"] == "gelu" and r["dtype"] == "bf16" and r["dir"] == "fw"]
    for r in heads:
        if r["speedup"] is None:
            lines.append(f"- HEADLINE {row_name(r)}: no ratio ({r['bar_error'] or r['torch_error']})")
        else:
            ok = "MET" if r["speedup"] >= GELU_BF16_TARGET else "MISSED"
            if ok == "MISSED" and r["pct_bw"]:
                # The time the target allows, as a fraction of the copy figure: past 100% no kernel
                # that reads and writes these bytes gets there (bench/results/targets-vs-floor.md).
                need = r["pct_bw"] * GELU_BF16_TARGET / r["speedup"]
                ok += f" (needs {need:.0f}% of copy BW{': above the floor' if need > 100 else ''})"
            lines.append(f"- HEADLINE {row_name(r)}: {r['speedup']:.3f}x torch (target >= {GELU_BF16_TARGET}x): {ok}; "
                         f"{r['bar_us']:.1f} vs {r['torch_us']:.1f} µs, {r['pct_bw']:.1f}% of copy BW")
    rated = [r for r in results if r["speedup"] is not None]
    good = [r for r in rated if meets(r)]
    lines.append(f"- Targets (>= {TARGET_RATIO}x torch AND >= {TARGET_PCT_BW:.0f}% of copy BW): "
                 f"{len(good)}/{len(rated)} rows with both timings meet them")
    miss = [r for r in rated if not meets(r)]
    if miss:
        lines.append("- Missing targets: " + "; ".join(
            f"{row_name(r)} ({r['speedup']:.2f}x, {r['pct_bw']:.0f}%)" for r in miss))
    berr = [r for r in results if r["bar_us"] is None]
    if berr:
        lines.append("- baracuda errors: " + "; ".join(f"{row_name(r)}: {cut(r['bar_error'] or '?', 90)}" for r in berr))
    terr = [r for r in results if r["bar_us"] is not None and r["torch_us"] is None]
    if terr:
        lines.append("- No torch timing (not rated): " + "; ".join(
            f"{row_name(r)}: {cut(r['torch_error'] or '?', 60)}" for r in terr))
    mism = [r for r in results if r["check"] not in (None, "ok")]
    if mism:
        lines.append("- Output differs from torch (sanity check, see JSON): " + "; ".join(
            f"{row_name(r)}: {cut(r['check'], 60)}" for r in mism))
    comp = sorted({r["op"] for r in results if r.get("note")})
    if comp:
        lines.append("- torch side is not a single fused kernel/same op for: " + ", ".join(comp) + " (see JSON notes)")
    return "\n".join(lines)


def compact(r):
    """JSON row: no empty fields, sensible rounding, table_op only where it differs from op."""
    digits = {"bar_us": 2, "torch_us": 2, "speedup": 4, "bar_gbps": 1, "torch_gbps": 1, "pct_bw": 2}
    out = {}
    for k, v in r.items():
        if v is None or (k == "table_op" and v == r["op"]) or (k == "nsets" and v == 1):
            continue
        out[k] = round(v, digits.get(k, 4)) if isinstance(v, float) else v
    return out


# ---- main -------------------------------------------------------------------------------------------
def main(argv=None):
    args = parse_args(argv)
    if args.quick:
        args.numel = args.numel or 2**20
        args.ops = args.ops or ",".join(QUICK_OPS)
    numel = args.numel or 2**27

    import torch

    if args.list:
        for r in select_rows(build_rows(torch, numel), args):
            print(f"{r.label:16s} {r.dtype:10s} {r.dir}  op={r.op} params={r.params} {r.note}")
        return 0
    if not torch.cuda.is_available():
        print("error: no CUDA device visible to torch", file=sys.stderr)
        return 2
    try:
        baracuda, _C = bench.import_baracuda()
    except ImportError as e:
        print(f"error: cannot import baracuda._C ({e}); pip install . or build the extension in place",
              file=sys.stderr)
        return 2
    torch.cuda.init()
    t_start = time.time()

    info = bench.env_info(baracuda, _C)
    l2 = bench.l2_size()
    copy_bps = bench.copy_bandwidth()
    print(f"# {info['gpu']}: copy {copy_bps / 1e12:.3f} TB/s, L2 {l2 / 2**20:.0f} MiB, numel {numel}",
          file=sys.stderr)

    tol, table_ops = {}, []
    try:
        for o in _C.ops():
            table_ops.append(o["name"])
            tol[o["name"]] = float(o.get("tol", 1.0) or 1.0)
    except Exception as e:
        print(f"warning: _C.ops() failed: {bench.short_error(e)}", file=sys.stderr)

    all_rows = build_rows(torch, numel)
    rows = select_rows(all_rows, args)
    total_mem = torch.cuda.get_device_properties(0).total_memory
    ctx = {"torch": torch, "_C": _C, "args": args, "numel": numel, "l2": l2, "copy_bps": copy_bps, "tol": tol,
           "data": Data(torch, limit_bytes=int(0.3 * total_mem))}
    results = []
    for n, r in enumerate(rows, 1):
        t0 = time.time()
        try:
            res = run_row(r, ctx)
        except Exception as e:  # setup failure (e.g. out of memory): record and go on
            res = {"op": r.label, "table_op": r.op, "dtype": r.dtype, "dir": r.dir, "bytes": 0, "bar_us": None,
                   "torch_us": None, "speedup": None, "bar_gbps": None, "torch_gbps": None, "pct_bw": None,
                   "sku": "", "torch_impl": None, "check": None, "bar_error": bench.short_error(e),
                   "torch_error": "row setup failed"}
            try:
                torch.cuda.synchronize()
            except Exception:
                pass
        results.append(res)
        c = row_cells(res)
        print(f"[{n}/{len(rows)}] {c[0]} {c[1]} {c[2]}: baracuda {c[4]} µs, torch {c[5]} µs, {c[6]}, {c[8]}"
              f" ({time.time() - t0:.1f}s)", file=sys.stderr, flush=True)
    ctx["data"].clear()

    headers = ["op", "dtype", "dir", "bytes moved", "baracuda µs", "torch µs", "speedup (torch/baracuda)",
               "baracuda GB/s", "% of copy BW", "SKU"]
    table = bench.md_table(headers, [row_cells(r) for r in results])
    summ = summary(results)
    benched = {r.op for r in all_rows}
    not_benched = [o for o in table_ops if o not in benched]
    notes = [
        "Timing: CUDA events around each call, median of "
        f"{args.iters} after {args.warmup} warm-up calls; buffers rotate when a call moves < 2x L2. "
        "torch µs marked (plain) ran without out= (allocates its output). Bytes: each input read once, "
        "each output written once. SKU: baracuda's layout variant for the call.",
    ]
    if not_benched:
        notes.append("Table ops without a row here (no torch counterpart or int-only): " + ", ".join(not_benched))
    md = "\n\n".join([bench.md_header("Elementwise: baracuda vs torch", info, copy_bps, numel),
                      "## Summary\n\n" + summ, "## Rows\n\n" + table, "\n".join("- " + s for s in notes)])
    print(md)
    elapsed = time.time() - t_start
    print(f"# {len(results)} rows in {elapsed:.0f} s", file=sys.stderr)

    if not args.no_write:
        stem = f"elementwise-{bench.gpu_slug(info['gpu'])}{args.tag}"
        data = {"env": info, "copy_tbps": copy_bps / 1e12, "numel": numel, "warmup": args.warmup,
                "iters": args.iters, "targets": {"ratio": TARGET_RATIO, "pct_copy_bw": TARGET_PCT_BW,
                                                 "gelu_bf16_ratio": GELU_BF16_TARGET},
                "met": sum(1 for r in results if meets(r)),
                "rated": sum(1 for r in results if r["speedup"] is not None),
                "elapsed_s": round(elapsed, 1), "not_benchmarked": not_benched,
                "rows": [compact(r) for r in results]}
        md_path, js_path = bench.write_results(stem, md, data, args.out_dir)
        print(f"# wrote {md_path} and {js_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
