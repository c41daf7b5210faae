#!/usr/bin/env python3
"""Softmax / normalization family: baracuda vs torch eager vs torch.compile, one process, same inputs.

baracuda runs through baracuda._C.norm(op, backward, tensors, ...) with pre-allocated outputs and
workspace; torch eager runs F.softmax / F.layer_norm / F.rms_norm (forward) and autograd's backward
of its own forward graph (backward); torch.compile runs the compiled forward and the backward of
the compiled graph (AOTAutograd). sparsemax has no torch op: torch runs the sort-based formula
(f32 math, as the test's reference) composed in eager; gumbel_softmax compares with
F.gumbel_softmax (soft; its noise is drawn by torch's exponential_, baracuda's by in-kernel
Philox, so the check column tests only that rows sum to 1). Timing: CUDA events, warm-up, median of --iters; buffer sets
rotate when one call moves less than 2x L2 (bench.py). Writes bench/results/norm-<gpu>.md/.json.

  python bench/bench_norm.py                       # llm, vocab, decode, long shapes; bf16 (compile: llm)
  python bench/bench_norm.py --dtypes bf16,f32 --compile-shapes all
  python bench/bench_norm.py --quick               # headline shape only, bf16
  python bench/bench_norm.py --ops 'rms*' --dir bw --no-compile
  python bench/bench_norm.py --ops 'batch_norm,group_norm' --no-compile   # channel ops, NCHW + channels-last
  python bench/bench_norm.py --ops 'sparsemax,gumbel*' --shapes llm     # [16384, 4096] bf16, eager + compile

Channel ops (batch_norm training and eval, instance_norm, group_norm with 32 groups,
local_response_norm) run on --channel-shapes ([32, 256, 56, 56] by default) in each of --layouts.
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (shared harness; imports torch lazily)

# Targets vs torch eager on [16384, 4096] bf16 (ANCHORS.md / issue 4).
TARGETS = {("softmax", "fw"): 2.5, ("softmax", "bw"): 2.0, ("log_softmax", "fw"): 2.5, ("log_softmax", "bw"): 2.0,
           ("layer_norm", "fw"): 1.5, ("layer_norm", "bw"): 2.0, ("rms_norm", "fw"): 1.3, ("rms_norm", "bw"): 2.0}
TARGET_PCT_BW = 80.0
# Channel ops: beat torch eager; >= 80% of copy bandwidth for batch_norm / group_norm on the vision shape.
CHANNEL_TARGETS = {("batch_norm", "fw"): 1.0, ("batch_norm", "bw"): 1.0, ("group_norm", "fw"): 1.0,
                   ("group_norm", "bw"): 1.0}
CHANNEL_HEADLINE = (32, 256, 56, 56)
CHANNEL_SHAPES = {"vision": CHANNEL_HEADLINE, "vision_small": (128, 64, 28, 28), "bn1d": (4096, 1024)}
CHANNEL_OPS = ["batch_norm", "batch_norm_eval", "instance_norm", "group_norm", "local_response_norm"]
GROUPS = 32  # group_norm's num_groups
HEADLINE = (16384, 4096)
SHAPES = {"llm": HEADLINE, "vocab": (1024, 128256), "decode": (16, 4096), "long": (4, 1 << 20), "odd": (4099, 4097)}
OPS = ["softmax", "log_softmax", "layer_norm", "rms_norm", "normalize", "sparsemax", "gumbel_softmax"]
RANDOM_OPS = ("gumbel_softmax",)  # outputs differ from torch's by the noise: check row sums only
DT = {"bf16": "bfloat16", "f32": "float32", "f16": "float16"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Benchmark baracuda's softmax/normalization plans against torch eager "
                                "and torch.compile. Writes bench/results/norm-<gpu>.md and .json.")
    p.add_argument("--ops", default="*", help="fnmatch patterns, comma-separated (default: all)")
    p.add_argument("--shapes", default="llm,vocab,decode,long",
                   help=f"comma-separated names of {SHAPES} (default: %(default)s)")
    p.add_argument("--dtypes", default="bf16", help="comma-separated: bf16,f32,f16 (default: %(default)s)")
    p.add_argument("--channel-shapes", default="vision",
                   help=f"channel ops: comma-separated names of {CHANNEL_SHAPES} (default: %(default)s)")
    p.add_argument("--layouts", default="nchw,channels_last", help="channel ops: nchw,channels_last")
    p.add_argument("--compile-shapes", default="llm",
                   help="shapes that also get the torch.compile column (compiling costs seconds a row; "
                   "default: %(default)s; 'all' for every shape)")
    p.add_argument("--dir", choices=["fw", "bw", "all"], default="all")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="headline shape, bf16 only")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    p.add_argument("--no-pad", action="store_true", help="no _sleep pad before the timed loop")
    p.add_argument("--out-dir", default=bench.RESULTS_DIR)
    p.add_argument("--tag", default="")
    p.add_argument("--no-write", action="store_true")
    return p.parse_args(argv)


class Case:
    """One (op, shape, dtype, direction) with nsets buffer sets for each library."""

    def __init__(self, torch, op, shape, dt, direction, nsets):
        self.op, self.shape, self.dt, self.dir = op, shape, dt, direction
        rows, n = shape
        g = torch.Generator(device="cuda").manual_seed(1234)
        dev = "cuda"
        self.sets = []
        for _ in range(nsets):
            s = {"x": torch.randn(shape, device=dev, generator=g, dtype=torch.float32).to(dt)}
            if op in ("layer_norm", "rms_norm"):
                s["weight"] = (1 + 0.1 * torch.randn(n, device=dev, generator=g)).to(dt)
                if op == "layer_norm":
                    s["bias"] = (0.1 * torch.randn(n, device=dev, generator=g)).to(dt)
            s["dy"] = torch.randn(shape, device=dev, generator=g, dtype=torch.float32).to(dt)
            self.sets.append(s)

    def bytes_moved(self):
        """fw: x, params read, y, stats written. bw: dy, x (or y), weight, stats read; dx and the
        parameter gradients written."""
        rows, n = self.shape
        es = self.sets[0]["x"].element_size()
        main = rows * n * es
        nparams = {"layer_norm": 2, "rms_norm": 1}.get(self.op, 0)
        nstats = nparams  # layer_norm: mean, rstd; rms_norm: rstd
        if self.dir == "fw":
            return 2 * main + nparams * n * es + nstats * rows * 4
        weight_read = n * es if nparams else 0
        return 3 * main + weight_read + nstats * rows * 4 + nparams * n * es


def build_baracuda(torch, _C, c: Case):
    """Pre-allocates outputs/saved tensors and returns fn(k) running baracuda on set k."""
    import baracuda._autograd as A
    stream = A.current_stream(torch.device("cuda"))
    # Tensors, not DLPack capsules: a capsule is consumed by its first call, and each timed call
    # reuses its arguments (nanobind takes the tensors' __dlpack__ afresh every call).
    calls = []
    rows, n = c.shape
    for s in c.sets:
        x = s["x"]
        if c.op in ("sparsemax", "gumbel_softmax"):
            params = {"seed": 1234} if c.op == "gumbel_softmax" else None
            y = torch.empty_like(x)
            _C.norm(c.op, False, {"x": x, "out": y}, -1, 1, 0.0, stream, None, True, params)
            if c.dir == "fw":
                t, outs = {"x": x, "out": y}, (y,)
            else:
                dx = torch.empty_like(x)
                # sparsemax: y rides along so that the check applies the backward formula to the
                # y this kernel consumed (torch's own forward may put a boundary element of a
                # 16-bit row on the other side of the support).
                t, outs = {"dy": s["dy"], "y": y, "out": dx}, (dx, y) if c.op == "sparsemax" else (dx,)
            calls.append((c.op, c.dir == "bw", t, None, outs, params))
        elif c.op == "normalize":
            y = torch.empty_like(x)
            if c.dir == "fw":
                t, outs = {"x": x, "out": y}, (y,)
            else:
                dx = torch.empty_like(x)
                t, outs = {"dy": s["dy"], "x": x, "out": dx}, (dx,)
            calls.append((c.op, c.dir == "bw", t, None, outs, None))
        elif c.op in ("softmax", "log_softmax"):
            y = torch.empty_like(x)
            _C.norm(c.op, False, {"x": x, "out": y}, -1, 1, 0.0, stream)
            if c.dir == "fw":
                t, outs = {"x": x, "out": y}, (y,)
            else:
                dx = torch.empty_like(x)
                t, outs = {"dy": s["dy"], "y": y, "out": dx}, (dx,)
            calls.append((c.op, c.dir == "bw", t, None, outs, None))
        else:
            y = torch.empty_like(x)
            mean = torch.empty(rows, device="cuda") if c.op == "layer_norm" else None
            rstd = torch.empty(rows, device="cuda")
            fw = {"x": x, "weight": s["weight"], "bias": s.get("bias"), "out": y, "save_mean": mean, "save_rstd": rstd}
            fwd = {k: v for k, v in fw.items() if v is not None}
            _C.norm(c.op, False, fwd, -1, 1, 1e-5, stream)
            if c.dir == "fw":
                calls.append((c.op, False, fwd, None, (y,), None))
            else:
                dx = torch.empty_like(x)
                dw = torch.empty_like(s["weight"])
                db = torch.empty_like(s["bias"]) if "bias" in s else None
                bw = {"dy": s["dy"], "x": x, "mean": mean, "rstd": rstd, "weight": s["weight"], "out": dx,
                      "dweight": dw, "dbias": db}
                bwd = {k: v for k, v in bw.items() if v is not None}
                nws = _C.norm_workspace_size(c.op, True, bwd, -1, 1, 1e-5)
                ws = torch.empty(max(nws, 1), dtype=torch.uint8, device="cuda")
                calls.append((c.op, True, bwd, ws, (dx, dw, db), None))
    torch.cuda.synchronize()

    def fn(k):
        op, bw, t, ws, _, params = calls[k]
        _C.norm(op, bw, t, -1, 1, 1e-12 if op == "normalize" else 1e-5, stream, ws, True, params)

    sku = _C.norm_sku(calls[0][0], calls[0][1], calls[0][2], -1, 1, 1e-5, True, calls[0][5])
    return fn, sku, calls[0][4]


def torch_sparsemax(torch, x, dim=-1):
    """The sort-based sparsemax formula in f32 (no torch op exists), cast back."""
    z = x.float()
    zs, _ = torch.sort(z, dim=dim, descending=True)
    cs = zs.cumsum(dim)
    k = torch.arange(1, z.shape[dim] + 1, device=z.device, dtype=z.dtype)
    ks = (1 + k * zs > cs).sum(dim, keepdim=True)
    tau = (cs.gather(dim, ks - 1) - 1) / ks.to(z.dtype)
    return torch.clamp(z - tau, min=0).to(x.dtype)


def torch_forward(torch, op, n):
    import torch.nn.functional as F
    if op == "softmax":
        return lambda s: F.softmax(s["x"], -1)
    if op == "log_softmax":
        return lambda s: F.log_softmax(s["x"], -1)
    if op == "normalize":
        return lambda s: F.normalize(s["x"], dim=-1)
    if op == "sparsemax":
        return lambda s: torch_sparsemax(torch, s["x"])
    if op == "gumbel_softmax":
        return lambda s: F.gumbel_softmax(s["x"], tau=1.0, hard=False, dim=-1)
    if op == "layer_norm":
        return lambda s: F.layer_norm(s["x"], (n,), s["weight"], s["bias"], 1e-5)
    return lambda s: F.rms_norm(s["x"], (n,), s["weight"], 1e-5)


def build_torch(torch, c: Case, compiled: bool):
    """fn(k) for torch eager or compiled; backward = autograd of its own forward graph."""
    rows, n = c.shape
    fwd = torch_forward(torch, c.op, n)
    if compiled:
        fwd = torch.compile(fwd, dynamic=False)
    if c.dir == "fw":
        outs = [None]

        def fn(k):
            outs[0] = fwd(c.sets[k])
        fn(0)
        return fn, (lambda: outs[0])
    graphs = []
    for s in c.sets:
        leaves = {k: v.detach().requires_grad_() for k, v in s.items() if k != "dy"}
        y = fwd(leaves)
        inputs = [leaves["x"]] + [leaves[k] for k in ("weight", "bias") if k in leaves]
        graphs.append((y, inputs, s["dy"]))
    res = [None]

    def fn(k):
        y, inputs, dy = graphs[k]
        res[0] = torch.autograd.grad(y, inputs, dy, retain_graph=True)
    fn(0)
    return fn, (lambda: res[0][0])


class ChannelCase:
    """One (channel op, shape, dtype, layout, direction) with nsets buffer sets; parameters and
    running stats in the input dtype."""

    def __init__(self, torch, op, shape, dt, layout, direction, nsets):
        self.op, self.shape, self.dt, self.layout, self.dir = op, shape, dt, layout, direction
        C = shape[1]
        g = torch.Generator(device="cuda").manual_seed(1234)
        fmt = (lambda t: t.movedim(1, -1).contiguous().movedim(-1, 1)) if layout == "channels_last" else (lambda t: t)
        self.sets = []
        for _ in range(nsets):
            s = {"x": fmt(torch.randn(shape, device="cuda", generator=g).to(dt)),
                 "dy": fmt(torch.randn(shape, device="cuda", generator=g).to(dt))}
            if op != "local_response_norm":
                s["weight"] = (1 + 0.1 * torch.randn(C, device="cuda", generator=g)).to(dt)
                s["bias"] = (0.1 * torch.randn(C, device="cuda", generator=g)).to(dt)
            if op.startswith("batch_norm"):
                s["running_mean"] = (0.1 * torch.randn(C, device="cuda", generator=g)).to(dt)
                s["running_var"] = (1 + torch.rand(C, device="cuda", generator=g)).to(dt)
            self.sets.append(s)

    def bytes_moved(self):
        """fw: x read, y written; bw: dy and x read, dx written (parameters and statistics are
        per channel: negligible, left out)."""
        main = self.sets[0]["x"].numel() * self.sets[0]["x"].element_size()
        return (2 if self.dir == "fw" else 3) * main


def channel_torch_forward(torch, op):
    import torch.nn.functional as F
    if op == "batch_norm":
        return lambda s: F.batch_norm(s["x"], s["running_mean"], s["running_var"], s["weight"], s["bias"], True)
    if op == "batch_norm_eval":
        return lambda s: F.batch_norm(s["x"], s["running_mean"], s["running_var"], s["weight"], s["bias"], False)
    if op == "instance_norm":
        return lambda s: F.instance_norm(s["x"], None, None, s["weight"], s["bias"])
    if op == "group_norm":
        return lambda s: F.group_norm(s["x"], GROUPS, s["weight"], s["bias"])
    return lambda s: F.local_response_norm(s["x"], 5)


def build_channel_baracuda(torch, _C, c: ChannelCase):
    """Pre-allocated outputs, statistics and workspace; returns fn(k) running baracuda on set k."""
    import baracuda._autograd as A
    stream = A.current_stream(torch.device("cuda"))
    op = "batch_norm" if c.op == "batch_norm_eval" else c.op
    training = c.op != "batch_norm_eval"
    params = ({"size": 5, "alpha": 1e-4, "beta": 0.75, "k": 1.0} if op == "local_response_norm" else
              {"training": training, "momentum": 0.1, "num_groups": GROUPS if op == "group_norm" else 1})
    N, C = c.shape[0], c.shape[1]
    nstat = {"batch_norm": C, "instance_norm": N * C, "group_norm": N * GROUPS}.get(op, 0)
    calls = []
    for s in c.sets:
        x = s["x"]
        y = torch.empty_like(x)
        fw = {"x": x, "out": y}
        if op != "local_response_norm":
            fw.update(weight=s["weight"], bias=s["bias"])
        if "running_mean" in s:
            fw.update(running_mean=s["running_mean"], running_var=s["running_var"])
        mean = rstd = None
        if training and op != "local_response_norm":
            mean = torch.empty(nstat, device="cuda")
            rstd = torch.empty(nstat, device="cuda")
            fw.update(save_mean=mean, save_rstd=rstd)
        nws = _C.norm_workspace_size(op, False, fw, -1, 1, 1e-5, params)
        wsf = torch.empty(max(nws, 1), dtype=torch.uint8, device="cuda")
        _C.norm(op, False, fw, -1, 1, 1e-5, stream, wsf, True, params)
        if c.dir == "fw":
            calls.append((False, fw, wsf, y))
            continue
        dx = torch.empty_like(x)
        bw = {"dy": s["dy"], "x": x, "out": dx}
        if op != "local_response_norm":
            bw.update(weight=s["weight"], dweight=torch.empty_like(s["weight"]), dbias=torch.empty_like(s["bias"]))
            if training:
                bw.update(mean=mean, rstd=rstd)
            else:
                bw.update(running_mean=s["running_mean"], running_var=s["running_var"])
        nws = _C.norm_workspace_size(op, True, bw, -1, 1, 1e-5, params)
        wsb = torch.empty(max(nws, 1), dtype=torch.uint8, device="cuda")
        calls.append((True, bw, wsb, dx))
    torch.cuda.synchronize()

    def fn(k):
        bwd, t, ws, _ = calls[k]
        _C.norm(op, bwd, t, -1, 1, 1e-5, stream, ws, True, params)

    sku = _C.norm_sku(op, calls[0][0], calls[0][1], -1, 1, 1e-5, True, params)
    return fn, sku, calls[0][3]


def build_channel_torch(torch, c: ChannelCase):
    """fn(k) for torch eager; backward = autograd of its own forward graph."""
    fwd = channel_torch_forward(torch, c.op)
    if c.dir == "fw":
        outs = [None]

        def fn(k):
            outs[0] = fwd(c.sets[k])
        fn(0)
        return fn, (lambda: outs[0])
    graphs = []
    for s in c.sets:
        leaves = {k: (v.detach().requires_grad_() if k in ("x", "weight", "bias") else v) for k, v in s.items()
                  if k != "dy"}
        y = fwd(leaves)
        inputs = [leaves[k] for k in ("x", "weight", "bias") if k in leaves]
        graphs.append((y, inputs, s["dy"]))
    res = [None]

    def fn(k):
        y, inputs, dy = graphs[k]
        res[0] = torch.autograd.grad(y, inputs, dy, retain_graph=True)
    fn(0)
    return fn, (lambda: res[0][0])


def run_channel_cases(torch, _C, args, dirs):
    """Rows for the channel ops selected by --ops."""
    pats = [p.strip() for p in args.ops.split(",") if p.strip()]
    ops = [o for o in CHANNEL_OPS if any(fnmatch.fnmatch(o, p) for p in pats)]
    rows = []
    for shape_name in [s.strip() for s in args.channel_shapes.split(",") if s.strip()] if ops else []:
        shape = CHANNEL_SHAPES[shape_name]
        for dname in [d.strip() for d in args.dtypes.split(",") if d.strip()]:
            dt = getattr(torch, DT[dname])
            for layout in [lay.strip() for lay in args.layouts.split(",") if lay.strip()]:
                for op in ops:
                    for d in dirs:
                        label = f"{op} {d} {dname} {list(shape)} {layout}"
                        print(f"[bench_norm] {label}", file=sys.stderr, flush=True)
                        row = {"op": op, "dir": d, "dtype": dname, "shape": list(shape), "layout": layout}
                        try:
                            probe = ChannelCase(torch, op, shape, dt, layout, d, 1)
                            nsets = bench.rotation_sets(probe.bytes_moved())
                            del probe
                            c = ChannelCase(torch, op, shape, dt, layout, d, nsets)
                            row["bytes"] = c.bytes_moved()
                            bfn, sku, bout = build_channel_baracuda(torch, _C, c)
                            row["sku"] = sku
                            row["baracuda_us"] = bench.time_cuda(bfn, nsets, args.warmup, args.iters,
                                                                 not args.no_pad)["median_us"]
                            tfn, tout = build_channel_torch(torch, c)
                            row["torch_us"] = bench.time_cuda(tfn, nsets, args.warmup, args.iters,
                                                              not args.no_pad)["median_us"]
                            bfn(0)
                            tfn(0)
                            torch.cuda.synchronize()
                            row["check"] = check(torch, bout, tout(), dt)
                            del c
                        except Exception as e:
                            row["error"] = bench.short_error(e)
                        torch.cuda.empty_cache()
                        rows.append(row)
    return rows


def sparsemax_bw_ref(torch, y, dy):
    """sparsemax's backward from a given forward output, in f32: dy - mean over {y > 0} of dy there, 0
    elsewhere."""
    on = y.float() > 0
    g = torch.where(on, dy.float(), torch.zeros_like(dy, dtype=torch.float32))
    mean = g.sum(-1, keepdim=True) / on.sum(-1, keepdim=True).clamp_min(1)
    return torch.where(on, dy.float() - mean, torch.zeros_like(g))


def check(torch, got, ref, dt, op=None):
    if op in RANDOM_OPS:  # different noise: both must be distributions along the row
        for t in (got, ref):
            if not torch.allclose(t.float().sum(-1), torch.ones_like(t[..., 0].float()), atol=2e-2):
                return "MISMATCH: rows do not sum to 1"
        return "ok (random: row sums)"
    rtol, atol = (2e-2, 2e-2) if dt != torch.float32 else (1e-4, 1e-4)
    try:
        torch.testing.assert_close(got.float(), ref.float(), rtol=rtol, atol=atol)
        return "ok"
    except AssertionError as e:
        return "MISMATCH: " + bench.short_error(e, 120)


def main(argv=None):
    args = parse_args(argv)
    baracuda, _C = bench.import_baracuda()
    import torch

    if args.quick:
        args.shapes, args.dtypes = "llm", "bf16"
    pats = [p.strip() for p in args.ops.split(",") if p.strip()]
    ops = [o for o in OPS if any(fnmatch.fnmatch(o, p) for p in pats)]
    dirs = ["fw", "bw"] if args.dir == "all" else [args.dir]
    if not ops:  # only channel ops selected: skip the row shapes
        args.shapes = ""
    info = bench.env_info(baracuda, _C)
    copy_bps = bench.copy_bandwidth()
    rows_out = []
    for shape_name in [s.strip() for s in args.shapes.split(",") if s.strip()]:
        shape = SHAPES[shape_name]
        for dname in [d.strip() for d in args.dtypes.split(",") if d.strip()]:
            dt = getattr(torch, DT[dname])
            for op in ops:
                for d in dirs:
                    label = f"{op} {d} {dname} {list(shape)}"
                    print(f"[bench_norm] {label}", file=sys.stderr, flush=True)
                    row = {"op": op, "dir": d, "dtype": dname, "shape": list(shape)}
                    try:
                        probe = Case(torch, op, shape, dt, d, 1)
                        nsets = bench.rotation_sets(probe.bytes_moved())
                        del probe
                        c = Case(torch, op, shape, dt, d, nsets)
                        row["bytes"] = c.bytes_moved()
                        bfn, sku, bouts = build_baracuda(torch, _C, c)
                        row["sku"] = sku
                        row["baracuda_us"] = bench.time_cuda(bfn, nsets, args.warmup, args.iters,
                                                             not args.no_pad)["median_us"]
                        tfn, tout = build_torch(torch, c, False)
                        row["torch_us"] = bench.time_cuda(tfn, nsets, args.warmup, args.iters,
                                                          not args.no_pad)["median_us"]
                        bfn(0)
                        tfn(0)  # both on rotation set 0 (the timing loops ended on different sets)
                        torch.cuda.synchronize()
                        if op == "sparsemax" and d == "bw":
                            ref = sparsemax_bw_ref(torch, bouts[1], c.sets[0]["dy"])
                        else:
                            ref = tout()
                        row["check"] = (check(torch, bouts[0], ref, dt, op) if not (op in RANDOM_OPS and d == "bw")
                                        else "n/a (random)")
                        if not args.no_compile and (args.compile_shapes == "all" or shape_name in
                                                    args.compile_shapes.split(",")):
                            try:
                                cfn, _ = build_torch(torch, c, True)
                                row["compile_us"] = bench.time_cuda(cfn, nsets, args.warmup, args.iters,
                                                                    not args.no_pad)["median_us"]
                            except Exception as e:  # compile problems must not hide the other columns
                                row["compile_error"] = bench.short_error(e)
                        del c
                    except Exception as e:
                        row["error"] = bench.short_error(e)
                    torch.cuda.empty_cache()
                    rows_out.append(row)

    rows_out += run_channel_cases(torch, _C, args, dirs)

    headers = ["op", "dir", "dtype", "shape", "MB moved", "baracuda µs", "torch µs", "compile µs", "vs torch",
               "vs compile", "baracuda GB/s", "% copy BW", "target", "check", "SKU"]
    table, missing = [], []
    for r in rows_out:
        if "layout" in r:  # channel ops: the layout joins the shape column
            headline = tuple(r["shape"]) == CHANNEL_HEADLINE and r["dtype"] == "bf16"
            r = dict(r, shape=f"{r['shape']} {r['layout']}", headline=headline)
        if "error" in r:
            table.append([r["op"], r["dir"], r["dtype"], r["shape"]] + ["error: " + r["error"]] + [""] * 10)
            continue
        b, t, cmp = r["baracuda_us"], r["torch_us"], r.get("compile_us")
        gbs = r["bytes"] / (b * 1e-6) / 1e9
        pct = 100 * r["bytes"] / (b * 1e-6) / copy_bps
        if "layout" in r:  # channel ops: targets on the vision shape, every layout
            tgt = CHANNEL_TARGETS.get((r["op"], r["dir"])) if r["headline"] else None
            ok = tgt is None or (t / b >= tgt and pct >= TARGET_PCT_BW)
        else:
            tgt = TARGETS.get((r["op"], r["dir"])) if tuple(r["shape"]) == HEADLINE and r["dtype"] == "bf16" else None
            ok = (tgt is None or t / b >= tgt) and pct >= TARGET_PCT_BW
        if not ok:
            missing.append(f"{r['op']} {r['dir']} {r['dtype']} {r['shape']}")
        table.append([r["op"], r["dir"], r["dtype"], r["shape"], f"{r['bytes'] / 1e6:.1f}", f"{b:.1f}", f"{t:.1f}",
                      f"{cmp:.1f}" if cmp else r.get("compile_error", "-"), f"{t / b:.2f}x",
                      f"{cmp / b:.2f}x" if cmp else "-", f"{gbs:.0f}", f"{pct:.0f}%",
                      f"{tgt}x" if tgt else "", r["check"], r["sku"]])
    slug = bench.gpu_slug(info["gpu"])
    md = bench.md_header(f"baracuda softmax / normalization vs torch ({info['gpu']})", info, copy_bps,
                         HEADLINE[0] * HEADLINE[1])
    md += "\n\n" + bench.md_table(headers, table)
    md += (f"\n\nTargets: the issue's ratios vs torch eager on {list(HEADLINE)} bf16, and >= {TARGET_PCT_BW:.0f}% of "
           "copy bandwidth for every row; channel ops: faster than torch eager and >= "
           f"{TARGET_PCT_BW:.0f}% of copy bandwidth for batch_norm / group_norm ({GROUPS} groups) on "
           f"{list(CHANNEL_HEADLINE)} bf16. Bytes: inputs read once + outputs written once (statistics and "
           "parameters included; per-channel ones left out). torch backward = autograd of its own forward graph "
           f"(compile: of the compiled graph).\n\nRows missing a target ({len(missing)}): " +
           ("; ".join(missing) or "none") + "\n")
    print(md)
    if not args.no_write:
        paths = bench.write_results(f"norm-{slug}{args.tag}", md, {"env": info, "copy_bps": copy_bps,
                                                                    "rows": rows_out}, args.out_dir)
        print(f"[bench_norm] wrote {paths[0]} and {paths[1]}", file=sys.stderr)


if __name__ == "__main__":
    main()
