#!/usr/bin/env python3
"""Loss family: baracuda vs torch eager vs torch.compile, one process, same inputs.

Rows (``--cases``):
  ce_llm     cross_entropy [8192, 128256] bf16 (class indices, mean): forward, and forward + backward
  ce_vocab32 cross_entropy [4096, 32000] bf16
  ce_vocab152 cross_entropy [4096, 151936] bf16 (a 10-CTA cluster a row: a non-portable size)
  ce_cls     cross_entropy [16384, 1000] f32
  mse        mse_loss [16384, 4096] bf16 (mean): forward, and forward + backward
  lce_llm    linear_cross_entropy: hidden [8192, 4096] x weight [128256, 4096] bf16, class indices, mean:
             forward, and forward + backward (d hidden, d weight), with the peak memory of each
             (torch.cuda.max_memory_allocated above the inputs): torch materialises the [8192, 128256]
             logits, their softmax and their gradient; baracuda one 512 MiB chunk of logits

baracuda runs through ``baracuda._C.loss`` with pre-allocated outputs and workspace: ``fw`` is the
forward plan (loss + log-sum-exp + total weight); ``fw+bw`` is the forward plan followed by the
backward plan (it recomputes the softmax from the logits and the saved log-sum-exp: about 2 reads
+ 1 write of the logits, what ``baracuda.functional.cross_entropy`` + autograd launches);
``fused`` is the forward plan with ``fused_grad`` (loss and gradient from one kernel: on sm_90 a
thread-block cluster holds each long row on chip, one read + one write; shorter rows are read again
while in L2) and its backward (an in-place rescale by dy that moves nothing for dy = 1);
``autograd`` is the full Python path (``baracuda.loss.cross_entropy`` + ``torch.autograd.grad``,
target check off), which takes the fused kernel for reduced losses. torch eager runs ``F.cross_entropy`` / ``F.mse_loss``
and ``torch.autograd.grad`` of its own graph; torch.compile compiles the forward and takes the
backward of the compiled graph. Timing: CUDA events, warm-up, median of --iters; buffer sets
rotate when one call moves less than 2x L2 (bench.py). Writes bench/results/loss-<gpu>.md/.json.

  python bench/bench_loss.py                 # every case, torch.compile included
  python bench/bench_loss.py --cases ce_llm --no-compile
  python bench/bench_loss.py --quick         # ce_llm and mse only, no compile
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (shared harness; imports torch lazily)

CASES = {
    "ce_llm": ("cross_entropy", (8192, 128256), "bf16"),
    "ce_vocab32": ("cross_entropy", (4096, 32000), "bf16"),
    "ce_vocab152": ("cross_entropy", (4096, 151936), "bf16"),
    "ce_cls": ("cross_entropy", (16384, 1000), "f32"),
    "mse": ("mse_loss", (16384, 4096), "bf16"),
    "lce_llm": ("linear_cross_entropy", (8192, 4096, 128256), "bf16"),  # (tokens, hidden, vocabulary)
}
DT = {"bf16": "bfloat16", "f32": "float32", "f16": "float16"}
# Targets vs torch eager (ANCHORS.md / issue 4): the fused LLM cross-entropy forward + backward.
TARGETS = {("ce_llm", "fused"): 5.0, ("ce_llm", "autograd"): 5.0}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Benchmark baracuda's losses against torch eager and torch.compile. "
                                "Writes bench/results/loss-<gpu>.md and .json.")
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated names of {list(CASES)}")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="ce_llm, mse and lce_llm, no torch.compile")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    p.add_argument("--no-pad", action="store_true", help="no _sleep pad before the timed loop")
    p.add_argument("--out-dir", default=bench.RESULTS_DIR)
    p.add_argument("--tag", default="")
    p.add_argument("--no-write", action="store_true")
    return p.parse_args(argv)


def make_sets(torch, op, shape, dt, nsets):
    g = torch.Generator(device="cuda").manual_seed(1234)
    sets = []
    for _ in range(nsets):
        x = (2.0 * torch.randn(shape, device="cuda", generator=g, dtype=torch.float32)).to(dt)
        if op == "cross_entropy":
            t = torch.randint(0, shape[1], (shape[0],), device="cuda", generator=g)
        else:
            t = torch.randn(shape, device="cuda", generator=g, dtype=torch.float32).to(dt)
        sets.append({"x": x, "t": t})
    return sets


def bytes_moved(op, shape, es, mode):
    """Ideal traffic: the logits (or inputs) read once per pass, the gradient written once."""
    n = shape[0] * shape[1] * es
    if op == "cross_entropy":
        return {"fw": n, "fw+bw": 3 * n, "fused": 2 * n, "autograd": 2 * n}[mode]
    return {"fw": 2 * n, "fw+bw": 5 * n, "fused": 5 * n, "autograd": 5 * n}[mode]  # mse: x, y; then x, y, dx


def build_baracuda(torch, _C, op, sets, mode):
    """fn(k) running baracuda on set k, and a getter of (loss, grad) of the last call."""
    import baracuda._autograd as A
    import baracuda.loss as BL

    dev = torch.device("cuda")
    stream = A.current_stream(dev)
    calls = []
    for s in sets:
        x, t = s["x"], s["t"]
        c = {"out": torch.empty((), dtype=x.dtype, device=dev)}
        if op == "cross_entropy":
            c["lse"] = torch.empty(x.shape[0], device=dev, dtype=torch.float32)
            c["tw"] = torch.empty((), device=dev, dtype=torch.float32)
            fw = {"input": x, "target": t, "out": c["out"], "save_lse": c["lse"], "save_total_weight": c["tw"]}
        else:
            fw = {"input": x, "target": t, "out": c["out"]}
        nws = _C.loss_workspace_size(op, False, fw, {}, "mean")
        c["ws"] = torch.empty(max(nws, 1), dtype=torch.uint8, device=dev)
        c["fw"] = fw
        if mode in ("fw+bw", "fused", "autograd"):
            c["dx"] = torch.empty_like(x)
            c["dy"] = torch.ones((), dtype=x.dtype, device=dev)
            if op == "cross_entropy":
                c["bw"] = {"dy": c["dy"], "input": x, "target": t, "lse": c["lse"], "total_weight": c["tw"],
                           "grad_input": c["dx"]}
                c["fused"] = {"input": x, "target": t, "out": c["out"], "grad_input": c["dx"]}
                c["rescale"] = {"dy": c["dy"], "grad_input": c["dx"]}
                nf = _C.loss_workspace_size(op, False, c["fused"], {}, "mean", True)
                c["wsf"] = torch.empty(max(nf, 1), dtype=torch.uint8, device=dev)
            else:
                c["bw"] = {"dy": c["dy"], "input": x, "target": t, "grad_input": c["dx"]}
            nb = _C.loss_workspace_size(op, True, c["bw"], {}, "mean")
            c["wsb"] = torch.empty(max(nb, 1), dtype=torch.uint8, device=dev)
        if mode == "autograd":
            c["leaf"] = x.detach().requires_grad_()
        calls.append(c)
    res = [None, None]

    def fn(k):
        c = calls[k]
        if mode == "autograd":
            fwd = BL.cross_entropy if op == "cross_entropy" else BL.mse_loss
            loss = fwd(c["leaf"], sets[k]["t"])
            res[0], res[1] = loss, torch.autograd.grad(loss, c["leaf"])[0]
            return
        if mode == "fused":  # the fused forward, then its backward (a rescale by dy = 1: no bytes move)
            _C.loss(op, False, c["fused"], {}, "mean", stream, c["wsf"], True, True)
            _C.loss(op, True, c["rescale"], {}, "mean", stream, None, True, True)
            res[0], res[1] = c["out"], c["dx"]
            return
        _C.loss(op, False, c["fw"], {}, "mean", stream, c["ws"])
        res[0] = c["out"]
        if mode == "fw+bw":
            _C.loss(op, True, c["bw"], {}, "mean", stream, c["wsb"])
            res[1] = c["dx"]

    BL.check_targets = False  # the autograd row: no host synchronization on the target check
    if mode == "fused":
        sku = _C.loss_sku(op, False, calls[0]["fused"], {}, "mean", True, True)
    else:
        sku = _C.loss_sku(op, False, calls[0]["fw"], {}, "mean", True, False)
        if mode == "fw+bw":
            sku += " | " + _C.loss_sku(op, True, calls[0]["bw"], {}, "mean", True, False)
    return fn, (lambda: tuple(res)), sku


def build_torch(torch, op, sets, mode, compiled):
    import torch.nn.functional as F
    fwd = (lambda x, t: F.cross_entropy(x, t)) if op == "cross_entropy" else (lambda x, t: F.mse_loss(x, t))
    if compiled:
        fwd = torch.compile(fwd, dynamic=False)
    res = [None, None]
    leaves = [s["x"].detach().requires_grad_() for s in sets]

    def fn(k):
        if mode == "fw":
            with torch.no_grad():
                res[0] = fwd(sets[k]["x"], sets[k]["t"])
            return
        loss = fwd(leaves[k], sets[k]["t"])
        res[0], res[1] = loss, torch.autograd.grad(loss, leaves[k])[0]

    fn(0)
    return fn, (lambda: tuple(res))


def check(torch, got, ref, dt):
    rtol, atol = (2e-2, 2e-2) if dt != torch.float32 else (1e-4, 1e-5)
    try:
        for g, r in zip(got, ref):
            if g is None or r is None:
                continue
            torch.testing.assert_close(g.float(), r.float(), rtol=rtol, atol=atol)
        return "ok"
    except AssertionError as e:
        return "MISMATCH: " + bench.short_error(e, 120)


# ---- linear_cross_entropy ------------------------------------------------------------------------
def lce_sets(torch, shape, dt):
    n, h, v = shape
    g = torch.Generator(device="cuda").manual_seed(1234)
    x = torch.randn((n, h), device="cuda", generator=g, dtype=torch.float32).to(dt)
    w = (torch.randn((v, h), device="cuda", generator=g, dtype=torch.float32) * (3.0 / h**0.5)).to(dt)
    t = torch.randint(0, v, (n,), device="cuda", generator=g)
    return {"x": x, "w": w, "t": t}


def build_lce(torch, which, s, mode):
    """fn(k) for baracuda / torch eager / torch.compile on the one set, and a getter of (loss, dx, dw)."""
    import torch.nn.functional as F
    if which == "baracuda":
        import baracuda.loss as BL
        BL.check_targets = False
        fwd = BL.linear_cross_entropy
    else:
        fwd = lambda x, w, t: F.cross_entropy(F.linear(x, w), t)  # noqa: E731
        if which == "compile":
            fwd = torch.compile(fwd, dynamic=False)
    res = [None, None, None]
    xl, wl = s["x"].detach().requires_grad_(), s["w"].detach().requires_grad_()

    def fn(k):
        if mode == "fw":
            with torch.no_grad():
                res[0] = fwd(s["x"], s["w"], s["t"])
            return
        loss = fwd(xl, wl, s["t"])
        res[0] = loss
        res[1], res[2] = torch.autograd.grad(loss, (xl, wl))

    fn(0)
    return fn, (lambda: tuple(res))


def peak_mib(torch, fn):
    """Peak device memory one call allocates above what was allocated before it (MiB)."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn(0)
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def bench_lce(torch, case, shape, dname, args):
    dt = getattr(torch, DT[dname])
    rows = []
    s = lce_sets(torch, shape, dt)
    n, h, v = shape
    for mode in ("fw", "fw+bw"):
        print(f"[bench_loss] {case} {mode}", file=sys.stderr, flush=True)
        row = {"case": case, "op": "linear_cross_entropy", "mode": mode, "dtype": dname, "shape": list(shape),
               "flop": (2 if mode == "fw" else 6) * n * h * v}
        try:
            impls = ["baracuda", "torch"] + ([] if args.no_compile else ["compile"])
            results = {}
            for which in impls:
                try:
                    fn, res = build_lce(torch, which, s, mode)
                    row[f"{which}_us"] = bench.time_cuda(fn, 1, args.warmup, args.iters, not args.no_pad)["median_us"]
                    row[f"{which}_mib"] = peak_mib(torch, fn)
                    fn(0)
                    torch.cuda.synchronize()
                    results[which] = res()
                    del fn
                except Exception as e:  # one column's failure (e.g. out of memory) must not hide the others
                    row[f"{which}_error"] = bench.short_error(e)
                torch.cuda.empty_cache()
            if "baracuda" in results and "torch" in results:
                row["check"] = check(torch, results["baracuda"], results["torch"], dt)
            if "baracuda" in results:
                import baracuda.loss as BL
                row["sku"] = BL.loss_sku("linear_cross_entropy", {"input": s["x"], "weight": s["w"], "target": s["t"],
                                                                  "out": torch.empty((), dtype=dt, device="cuda")},
                                         {}, "mean", fused_grad=False)
        except Exception as e:
            row["error"] = bench.short_error(e)
        rows.append(row)
    del s
    torch.cuda.empty_cache()
    return rows


def main(argv=None):
    args = parse_args(argv)
    baracuda, _C = bench.import_baracuda()
    import torch

    if args.quick:
        args.cases, args.no_compile = "ce_llm,mse,lce_llm", True
    info = bench.env_info(baracuda, _C)
    copy_bps = bench.copy_bandwidth()
    rows_out = []
    for case in [c.strip() for c in args.cases.split(",") if c.strip()]:
        op, shape, dname = CASES[case]
        if op == "linear_cross_entropy":
            rows_out += bench_lce(torch, case, shape, dname, args)
            continue
        dt = getattr(torch, DT[dname])
        es = torch.tensor([], dtype=dt).element_size()
        modes = ["fw", "fw+bw", "fused", "autograd"] if op == "cross_entropy" else ["fw", "fw+bw", "autograd"]
        for mode in modes:
            label = f"{case} {mode}"
            print(f"[bench_loss] {label}", file=sys.stderr, flush=True)
            row = {"case": case, "op": op, "mode": mode, "dtype": dname, "shape": list(shape)}
            try:
                nbytes = bytes_moved(op, shape, es, mode)
                nsets = bench.rotation_sets(nbytes)
                sets = make_sets(torch, op, shape, dt, nsets)
                row["bytes"] = nbytes
                bfn, bres, sku = build_baracuda(torch, _C, op, sets, mode)
                row["sku"] = sku
                row["baracuda_us"] = bench.time_cuda(bfn, nsets, args.warmup, args.iters, not args.no_pad)["median_us"]
                tmode = "fw" if mode == "fw" else "fw+bw"
                tfn, tres = build_torch(torch, op, sets, tmode, False)
                row["torch_us"] = bench.time_cuda(tfn, nsets, args.warmup, args.iters, not args.no_pad)["median_us"]
                bfn(0)
                tfn(0)
                torch.cuda.synchronize()
                row["check"] = check(torch, bres(), tres(), dt)
                if not args.no_compile:
                    try:
                        cfn, _ = build_torch(torch, op, sets, tmode, True)
                        row["compile_us"] = bench.time_cuda(cfn, nsets, args.warmup, args.iters,
                                                            not args.no_pad)["median_us"]
                    except Exception as e:  # compile problems must not hide the other columns
                        row["compile_error"] = bench.short_error(e)
                del sets
            except Exception as e:
                row["error"] = bench.short_error(e)
            torch.cuda.empty_cache()
            rows_out.append(row)

    headers = ["case", "mode", "dtype", "shape", "MB (ideal)", "baracuda µs", "torch µs", "compile µs", "vs torch",
               "vs compile", "baracuda GB/s", "% copy BW", "target", "check", "SKU"]
    table, missing = [], []
    lce_rows = [r for r in rows_out if r["op"] == "linear_cross_entropy"]
    rows_out = [r for r in rows_out if r["op"] != "linear_cross_entropy"]
    for r in rows_out:
        if "error" in r:
            table.append([r["case"], r["mode"], r["dtype"], r["shape"], "error: " + r["error"]] + [""] * 10)
            continue
        b, t, cmp = r["baracuda_us"], r["torch_us"], r.get("compile_us")
        gbs = r["bytes"] / (b * 1e-6) / 1e9
        pct = 100 * r["bytes"] / (b * 1e-6) / copy_bps
        tgt = TARGETS.get((r["case"], r["mode"]))
        if tgt is not None and t / b < tgt:
            missing.append(f"{r['case']} {r['mode']} ({t / b:.2f}x < {tgt}x)")
        table.append([r["case"], r["mode"], r["dtype"], r["shape"], f"{r['bytes'] / 1e6:.0f}", f"{b:.1f}", f"{t:.1f}",
                      f"{cmp:.1f}" if cmp else r.get("compile_error", "-"), f"{t / b:.2f}x",
                      f"{cmp / b:.2f}x" if cmp else "-", f"{gbs:.0f}", f"{pct:.0f}%", f"{tgt}x" if tgt else "",
                      r["check"], r["sku"]])
    slug = bench.gpu_slug(info["gpu"])
    md = bench.md_header(f"baracuda losses vs torch ({info['gpu']})", info, copy_bps, 8192 * 128256)
    md += "\n\n" + bench.md_table(headers, table)
    if lce_rows:
        lce_headers = ["case", "mode", "dtype", "[N, H, V]", "baracuda µs", "torch µs", "compile µs", "vs torch",
                       "vs compile", "baracuda TFLOP/s", "baracuda peak MiB", "torch peak MiB", "compile peak MiB",
                       "check", "SKU"]
        lce_table = []

        def cell(r, key, fmt="{:.1f}"):
            return fmt.format(r[key]) if key in r else r.get(key.rsplit("_", 1)[0] + "_error", "-")

        for r in lce_rows:
            if "error" in r:
                lce_table.append([r["case"], r["mode"], r["dtype"], r["shape"], "error: " + r["error"]] + [""] * 10)
                continue
            b = r.get("baracuda_us")
            lce_table.append([r["case"], r["mode"], r["dtype"], r["shape"], cell(r, "baracuda_us"), cell(r, "torch_us"),
                              cell(r, "compile_us"),
                              f"{r['torch_us'] / b:.2f}x" if b and "torch_us" in r else "-",
                              f"{r['compile_us'] / b:.2f}x" if b and "compile_us" in r else "-",
                              f"{r['flop'] / (b * 1e-6) / 1e12:.0f}" if b else "-", cell(r, "baracuda_mib", "{:.0f}"),
                              cell(r, "torch_mib", "{:.0f}"), cell(r, "compile_mib", "{:.0f}"), r.get("check", "-"),
                              r.get("sku", "")])
        md += ("\n\nFused linear + cross-entropy (fw = loss only; fw+bw = loss + d hidden + d weight; torch: "
               "F.cross_entropy(F.linear(x, w), t) and torch.autograd.grad; peak MiB = max_memory_allocated during "
               "one call above what was allocated before it: workspace, logits, gradients):\n\n")
        md += bench.md_table(lce_headers, lce_table)
        rows_out += lce_rows
    md += ("\n\nModes: fw = forward plan; fw+bw = forward plan + backward plan (the recomputing backward); "
           "fused = the forward plan with fused_grad (loss and gradient in one kernel) + its rescale backward; "
           "autograd = baracuda.loss + torch.autograd.grad (Python included; the fused kernel for reduced losses). "
           "torch columns: forward for fw, forward + "
           "autograd.grad otherwise. Bytes: the ideal traffic (cross_entropy: logits read once per pass + gradient "
           "written once).\n\nRows missing a target (" + str(len(missing)) + "): " + ("; ".join(missing) or "none")
           + "\n")
    print(md)
    if not args.no_write:
        paths = bench.write_results(f"loss-{slug}{args.tag}", md, {"env": info, "copy_bps": copy_bps,
                                                                    "rows": rows_out}, args.out_dir)
        print(f"[bench_loss] wrote {paths[0]} and {paths[1]}", file=sys.stderr)


if __name__ == "__main__":
    main()
