#!/usr/bin/env python3
"""GEMM family: baracuda vs torch, side by side in one process on the same inputs and stream.

Rows follow /work/shared/ANCHORS.md: large square GEMMs (bf16, f32 IEEE and TF32, f64), decode
shapes (M = 1 and 16 against a [4096, 4096] weight, where the weight is streamed and its
bandwidth is reported), an MLP shape (M = 128, 14336 x 4096), a fused bias+gelu linear, int8
(torch._int_mm), int8 with per-row x per-column scales -> bf16 (the CUTLASS kernel, W8A8's GEMM;
torch: _int_mm followed by its scaling ops, and, for the W8A8 budget, a bf16 matmul of the same
shape) and fp8 (torch._scaled_mm). int8 rates are TOPS. baracuda runs through ``_C.gemm`` with preallocated
outputs and workspace; torch through ``torch.matmul(out=)`` / ``F.linear`` / its private ops.
Inputs rotate over enough copies that weights are not L2-resident (bench.rotation_sets).
Writes bench/results/gemm-<gpu>.md (+ .json).

  python bench/bench_gemm.py            # every row (~1 min on H100/H200)
  python bench/bench_gemm.py --rows 'decode*' --no-write
  python bench/bench_gemm.py --list
"""
import argparse
import fnmatch
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

# name, kind, dtype, (M, N, K), target ratio (torch / baracuda)
ROWS = [
    ("bf16 8192^3", "mm", "bfloat16", (8192, 8192, 8192), 0.98),
    ("bf16 4096^3", "mm", "bfloat16", (4096, 4096, 4096), 1.0),
    ("decode bf16 M=1", "linear", "bfloat16", (1, 4096, 4096), 3.0),
    ("decode bf16 M=16", "linear", "bfloat16", (16, 4096, 4096), 3.0),
    ("decode f16 M=8", "linear", "float16", (8, 4096, 4096), 3.0),
    ("mlp bf16 M=128", "linear", "bfloat16", (128, 14336, 4096), 1.2),
    ("linear+bias+gelu_tanh bf16", "linear_gelu", "bfloat16", (8192, 4096, 4096), 1.0),
    ("f32 IEEE 8192^3", "mm", "float32", (8192, 8192, 8192), 1.0),
    ("tf32 8192^3", "mm_tf32", "float32", (8192, 8192, 8192), 1.0),
    ("f64 4096^3", "mm", "float64", (4096, 4096, 4096), 1.0),
    ("int8 8192^3", "int_mm", "int8", (8192, 8192, 8192), 1.5),
    ("int8 scaled->bf16 8192^3", "scaled_int8", "int8", (8192, 8192, 8192), 1.5),
    # The GEMM alone against torch's bf16 product: W8A8 (quantizing A, ~70 us at 8192^2, + this GEMM)
    # must beat bf16 by 1.5x, so the GEMM needs some margin above that.
    ("int8 scaled->bf16 8192^3 vs bf16 mm", "scaled_int8_vs_bf16", "int8", (8192, 8192, 8192), 1.6),
    ("int8 scaled+bias->bf16 M=64", "scaled_int8_bias", "int8", (64, 14336, 4096), 1.2),
    ("fp8 e4m3 8192^3", "scaled_mm", "float8_e4m3fn", (8192, 8192, 8192), 1.0),
    ("grouped bf16 8 experts", "grouped", "bfloat16", (8192, 4096, 4096), 1.0),  # M = tokens over all experts
    ("grouped bf16 64 experts uneven", "grouped_uneven", "bfloat16", (8192, 2048, 2048), 1.0),
]
GROUPS = 8  # "grouped": the tokens split evenly
UNEVEN_GROUPS = 64  # "grouped_uneven": see grouped_sizes


def grouped_sizes(kind, m):
    """Tokens per expert. grouped: m / 8 each. grouped_uneven: 64 experts with Zipf(0.5) counts (the
    busiest expert gets ~4.4x the mean of m / 64, the quietest ~1/2 of it: a router under typical
    imbalance), two idle experts, the order shuffled with a fixed seed so the large experts are not
    adjacent; the counts sum to m."""
    if kind == "grouped":
        return [m // GROUPS] * GROUPS
    import random
    weights = [1.0 / (i + 1) ** 0.5 for i in range(UNEVEN_GROUPS)]
    weights[-1] = weights[-2] = 0.0  # idle experts
    total = sum(weights)
    sizes = [int(m * w / total) for w in weights]
    for i in range(m - sum(sizes)):  # the rounding remainder to the busiest experts
        sizes[i] += 1
    random.Random(7).shuffle(sizes)
    return sizes


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default=None, help="comma-separated fnmatch patterns on the row name")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--no-pad", action="store_true", help="no _sleep pad before the timed loop")
    p.add_argument("--out-dir", default=bench.RESULTS_DIR)
    p.add_argument("--tag", default="")
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--list", action="store_true")
    return p.parse_args(argv)


def selected(args):
    pats = [s.strip() for s in args.rows.split(",")] if args.rows else None
    return [r for r in ROWS if not pats or any(fnmatch.fnmatch(r[0], p) for p in pats)]


def tensor_arg(torch, t):
    """What _C.gemm takes: the tensor, or (uint8 view, name) for float8."""
    if t.dtype in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)):
        return (t.view(torch.uint8), str(t.dtype).replace("torch.", ""))
    return t


def run_row(row, ctx):
    torch, _C, G = ctx["torch"], ctx["_C"], ctx["G"]
    name, kind, dtn, (m, n, k), target = row
    res = {"row": name, "m": m, "n": n, "k": k, "dtype": dtn, "target": target, "bar_us": None, "torch_us": None,
           "speedup": None, "sku": "", "check": None, "error": None}
    dev = "cuda"
    tf32_old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = kind == "mm_tf32"
    try:
        f8 = kind == "scaled_mm"
        i8 = kind.startswith("int_mm") or kind.startswith("scaled_int8")
        scaled_i8 = kind.startswith("scaled_int8")
        gen_dt = torch.float32 if f8 or i8 else getattr(torch, dtn)
        a_bytes = m * k * torch.tensor([], dtype=getattr(torch, dtn)).element_size()
        b_bytes = k * n * torch.tensor([], dtype=getattr(torch, dtn)).element_size()
        nsets = bench.rotation_sets(a_bytes + b_bytes, ctx["l2"], cap=64)

        def make(shape, seed):
            g = torch.Generator(device=dev).manual_seed(seed)
            if i8:
                return torch.randint(-64, 64, shape, generator=g, device=dev, dtype=torch.int8)
            x = torch.rand(shape, generator=g, device=dev, dtype=gen_dt) * 2 - 1
            return x.to(getattr(torch, dtn))

        if kind.startswith("grouped"):
            return run_grouped(row, ctx, res, make)
        A = [make((m, k), 2 * i) for i in range(nsets)]
        W = [make((n, k), 2 * i + 1) for i in range(nsets)]  # [N, K]: torch linear's weight, K-contiguous
        Bt = [w.t() for w in W]  # logical [K, N] views
        out_dt = torch.int32 if kind == "int_mm" else (torch.bfloat16 if f8 or scaled_i8 else getattr(torch, dtn))
        D_bar = torch.empty(m, n, dtype=out_dt, device=dev)
        D_t = torch.empty(m, n, dtype=out_dt, device=dev)
        bias = make((n,), 999) if kind == "linear_gelu" else None
        if kind == "scaled_int8_bias":
            g = torch.Generator(device=dev).manual_seed(998)
            bias = (torch.rand(n, generator=g, device=dev) * 2 - 1).to(torch.bfloat16)
        if scaled_i8:  # per-row (activation) and per-output-channel (weight) dequantization scales
            g = torch.Generator(device=dev).manual_seed(997)
            s_row = torch.rand(m, generator=g, device=dev) * 0.01 + 1e-3
            s_col = torch.rand(n, generator=g, device=dev) * 0.01 + 1e-3
            s_row_c, s_col_r = s_row.reshape(m, 1), s_col.reshape(1, n)
            if kind == "scaled_int8_vs_bf16":  # the same shape in bf16, B K-contiguous like the weight
                A16 = [a.to(torch.bfloat16) for a in A]
                Bt16 = [w.to(torch.bfloat16).t() for w in W]
        sa = torch.tensor([1.0], device=dev)
        stream = torch.cuda.current_stream().cuda_stream
        kw = dict(tf32=kind == "mm_tf32")
        if kind == "linear_gelu":
            kw.update(bias=bias, act="gelu_tanh")
        if f8:
            kw.update(a_scale=sa, b_scale=sa)
        if scaled_i8:
            kw.update(a_scale=s_row, b_scale=s_col)
            if bias is not None:
                kw.update(bias=bias)
        ws = None
        need = _C.gemm(tensor_arg(torch, A[0]), tensor_arg(torch, Bt[0]), D_bar, stream=stream, **kw)
        if need:
            ws = torch.empty(need, dtype=torch.uint8, device=dev)

        def bar(i):
            _C.gemm(tensor_arg(torch, A[i]), tensor_arg(torch, Bt[i]), D_bar, stream=stream, workspace=ws, **kw)

        if kind in ("mm", "mm_tf32"):
            def tor(i):
                torch.matmul(A[i], Bt[i], out=D_t)
        elif kind == "linear":
            def tor(i):
                torch.nn.functional.linear(A[i], W[i])
        elif kind == "linear_gelu":
            def tor(i):
                torch.nn.functional.gelu(torch.nn.functional.linear(A[i], W[i], bias), approximate="tanh")
        elif kind == "int_mm":
            def tor(i):
                torch._int_mm(A[i], Bt[i])  # plain call (allocates; torch's own caching allocator)
        elif kind == "scaled_int8_vs_bf16":
            def tor(i):
                torch.matmul(A16[i], Bt16[i], out=D_t)
        elif scaled_i8:
            def tor(i):  # torch's eager equivalent: exact int32 product, then the f32 scaling, one cast
                y = torch._int_mm(A[i], Bt[i]).float()
                y.mul_(s_row_c).mul_(s_col_r)
                if bias is not None:
                    y.add_(bias)
                D_t.copy_(y)
        else:
            def tor(i):
                torch._scaled_mm(A[i], Bt[i], scale_a=sa, scale_b=sa, out_dtype=torch.bfloat16)

        try:
            res["sku"] = G.sku(A[0], Bt[0], D_bar, **kw).split(" math=")[0] if not f8 and kind != "int_mm" else ""
        except Exception as e:
            res["sku"] = "?: " + bench.short_error(e, 80)
        bar(0)
        # Sanity check against torch on set 0.
        if kind == "linear_gelu":
            want = torch.nn.functional.gelu(torch.nn.functional.linear(A[0], W[0], bias), approximate="tanh")
        elif kind == "int_mm":
            want = torch._int_mm(A[0], Bt[0])
        elif scaled_i8:
            want = torch._int_mm(A[0], Bt[0]).float() * s_row_c * s_col_r
            want = (want + bias.float() if bias is not None else want).to(torch.bfloat16)
        elif f8:
            want = torch._scaled_mm(A[0], Bt[0], scale_a=sa, scale_b=sa, out_dtype=torch.bfloat16)
        else:
            want = torch.matmul(A[0], Bt[0])
        torch.cuda.synchronize()
        if kind == "int_mm":
            res["check"] = "ok" if torch.equal(D_bar, want) else "MISMATCH"
        else:
            err = (D_bar.double() - want.double()).abs().max().item()
            scale = want.double().abs().max().item() or 1.0
            res["check"] = "ok" if err <= 3e-2 * scale else f"MISMATCH max|diff| {err:.3g} (max|ref| {scale:.3g})"
        pad = not ctx["args"].no_pad
        tb = bench.time_cuda(bar, nsets, ctx["args"].warmup, ctx["args"].iters, pad)
        tt = bench.time_cuda(tor, nsets, ctx["args"].warmup, ctx["args"].iters, pad)
        res["bar_us"], res["torch_us"] = tb["median_us"], tt["median_us"]
        res["speedup"] = tt["median_us"] / tb["median_us"]
        flops = 2.0 * m * n * k
        res["bar_tflops"] = flops / (tb["median_us"] * 1e-6) / 1e12
        res["torch_tflops"] = flops / (tt["median_us"] * 1e-6) / 1e12
        res["bar_weight_tbps"] = b_bytes / (tb["median_us"] * 1e-6) / 1e12
        res["torch_weight_tbps"] = b_bytes / (tt["median_us"] * 1e-6) / 1e12
    except Exception as e:
        res["error"] = bench.short_error(e)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_old
    return res


def run_grouped(row, ctx, res, make):
    """Tokens sorted by expert (grouped_sizes); torch._grouped_mm when this torch has it, else a loop of
    matmuls (the row notes which). Expert weights [G, N, K] passed as their [G, K, N] transpose, as a
    MoE layer does; int32 offsets (cumulative ends, torch's convention)."""
    torch, G = ctx["torch"], ctx["G"]
    _, kind, dtn, (m, n, k), _ = row
    sizes = grouped_sizes(kind, m)
    groups = len(sizes)
    a = make((m, k), 1)
    w = make((groups, n, k), 2)  # expert weights [G, N, K]
    wt = w.transpose(1, 2)
    ends = [sum(sizes[:i + 1]) for i in range(groups)]
    starts = [e - s_ for e, s_ in zip(ends, sizes)]
    offs = torch.tensor(ends, device="cuda", dtype=torch.int32)
    out = torch.empty(m, n, dtype=a.dtype, device="cuda")
    bar = lambda i: G.grouped_mm(a, wt, offs, out=out)  # noqa: E731
    if hasattr(torch, "_grouped_mm"):
        tor = lambda i: torch._grouped_mm(a, wt, offs=offs)  # noqa: E731
        res["torch_impl"] = "torch._grouped_mm"
    else:
        tor = lambda i: [torch.matmul(a[s_:e], wt[g]) for g, (s_, e) in enumerate(zip(starts, ends))]  # noqa: E731
        res["torch_impl"] = "loop of matmul"
    bar(0)
    want = torch.cat([a[s_:e] @ wt[g] for g, (s_, e) in enumerate(zip(starts, ends))])
    torch.cuda.synchronize()
    err = (out.double() - want.double()).abs().max().item()
    scale = want.double().abs().max().item() or 1.0
    res["check"] = "ok" if err <= 3e-2 * scale else f"MISMATCH max|diff| {err:.3g}"
    res["sku"] = G.grouped_mm_sku(a, wt, offs, out=out)
    res["group_sizes"] = sizes
    pad = not ctx["args"].no_pad
    tb = bench.time_cuda(bar, 1, ctx["args"].warmup, ctx["args"].iters, pad)
    tt = bench.time_cuda(tor, 1, ctx["args"].warmup, ctx["args"].iters, pad)
    res["bar_us"], res["torch_us"] = tb["median_us"], tt["median_us"]
    res["speedup"] = tt["median_us"] / tb["median_us"]
    flops = 2.0 * m * n * k
    res["bar_tflops"] = flops / (tb["median_us"] * 1e-6) / 1e12
    res["torch_tflops"] = flops / (tt["median_us"] * 1e-6) / 1e12
    res["bar_weight_tbps"] = res["torch_weight_tbps"] = None
    return res


def fmt(r):
    if r["error"]:
        return [r["row"], "-", "-", "-", "-", "-", "error: " + r["error"]]
    sp = f"{r['speedup']:.3f}x" + ("" if r["speedup"] >= r["target"] else " (below target)")
    if r["check"] != "ok":
        sp += " (mismatch)"
    unit = "TOPS" if r["dtype"] == "int8" else "TFLOP/s"
    rate = (f"{r['bar_weight_tbps']:.2f} / {r['torch_weight_tbps']:.2f} TB/s weights" if r["m"] <= 16
            else f"{r['bar_tflops']:.0f} / {r['torch_tflops']:.0f} {unit}")
    return [r["row"], f"{r['bar_us']:.1f}", f"{r['torch_us']:.1f}", sp, f">= {r['target']}x", rate, r["sku"] or "-"]


def main(argv=None):
    args = parse_args(argv)
    rows = selected(args)
    if args.list:
        for r in rows:
            print(f"{r[0]:28s} {r[1]:12s} {r[2]:14s} M,N,K={r[3]} target>={r[4]}x")
        return 0
    import torch

    if not torch.cuda.is_available():
        print("error: no CUDA device visible to torch", file=sys.stderr)
        return 2
    baracuda, _C = bench.import_baracuda()
    from baracuda import gemm as G

    info = bench.env_info(baracuda, _C)
    copy_bps = bench.copy_bandwidth()
    ctx = {"torch": torch, "_C": _C, "G": G, "args": args, "l2": bench.l2_size()}
    results = []
    t0 = time.time()
    for r in rows:
        res = run_row(r, ctx)
        results.append(res)
        print(f"[{time.time() - t0:6.1f}s] {r[0]}: "
              + (res["error"] or f"{res['bar_us']:.1f} vs {res['torch_us']:.1f} us ({res['speedup']:.3f}x)"),
              file=sys.stderr)
        torch.cuda.empty_cache()
    table = bench.md_table(["row", "baracuda µs", "torch µs", "speedup (torch/baracuda)", "target", "baracuda / torch rate",
                            "SKU"], [fmt(r) for r in results])
    met = [r for r in results if r["speedup"] is not None and r["speedup"] >= r["target"]]
    rated = [r for r in results if r["speedup"] is not None]
    summary = [f"- Targets met: {len(met)}/{len(rated)} rated rows"]
    summary += [f"- MISSED {r['row']}: {r['speedup']:.3f}x (target {r['target']}x)" for r in rated if r not in met]
    summary += [f"- ERROR {r['row']}: {r['error']}" for r in results if r["error"]]
    summary += [f"- CHECK {r['row']}: {r['check']}" for r in results if r["check"] not in (None, "ok")]
    md = "\n\n".join([bench.md_header("GEMM: baracuda vs torch", info, copy_bps, 0), table, "## Summary",
                      "\n".join(summary)])
    print(md)
    if not args.no_write:
        stem = "gemm-" + bench.gpu_slug(info["gpu"]) + args.tag
        paths = bench.write_results(stem, md, {"env": info, "copy_bps": copy_bps, "rows": results}, args.out_dir)
        print("wrote " + ", ".join(paths), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
