"""Host cost per call: baracuda.functional against torch on small tensors, where a call's time is
the host's (argument handling, allocation, the launch) rather than the GPU's. Writes
bench/results/python-overhead-<gpu>.md and .json.

Method: each call runs `--calls` times back to back after a warm-up; the figure is wall time per
call (time.perf_counter, synchronized before and after). The GPU work of every call here takes a
few us, so the loop is host-bound unless a row says otherwise (a GPU-bound row times the kernel,
and both columns then read alike).
"""
from __future__ import annotations

import argparse
import time

import bench


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=5000)
    p.add_argument("--rows", type=int, default=16, help="rows of the [rows, 4096] bf16 activations")
    p.add_argument("--out-dir", default=bench.RESULTS_DIR)
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--profile", default="", help="comma-separated call names (prefixes): print cProfile's "
                   "top functions of the baracuda side of each")
    return p.parse_args(argv)


def profile(name, fn, calls):
    import cProfile
    import io
    import pstats

    pr = cProfile.Profile()
    pr.enable()
    for _ in range(calls):
        fn()
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(20)
    print(f"[overhead] cProfile of baracuda {name} ({calls} calls; nanobind functions count in their caller's "
          f"tottime)\n" + "\n".join(out.getvalue().splitlines()[:45]))


def per_call_us(fn, calls):
    import torch

    for _ in range(max(50, calls // 20)):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    dt = time.perf_counter() - t
    torch.cuda.synchronize()
    return dt / calls * 1e6


def cases(F, rows):
    import torch
    import torch.nn.functional as TF

    dev, bf16 = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(rows, 4096, device=dev, generator=g).to(bf16)
    y = torch.randn(rows, 4096, device=dev, generator=g).to(bf16)
    w = torch.randn(4096, device=dev, generator=g).to(bf16)
    W = (torch.randn(4096, 4096, device=dev, generator=g) * 0.01).to(bf16)
    x1 = x[:1].clone()
    table = torch.randn(32000, 4096, device=dev, generator=g).to(bf16)
    ids = torch.randint(0, 32000, (rows,), device=dev, generator=g)
    return [
        ("add", lambda: torch.add(x, y), lambda: F.add(x, y)),
        ("mul", lambda: torch.mul(x, y), lambda: F.mul(x, y)),
        ("gelu", lambda: TF.gelu(x), lambda: F.gelu(x)),
        ("silu", lambda: TF.silu(x), lambda: F.silu(x)),
        ("softmax", lambda: torch.softmax(x, -1), lambda: F.softmax(x, -1)),
        ("log_softmax", lambda: torch.log_softmax(x, -1), lambda: F.log_softmax(x, -1)),
        ("layer_norm", lambda: TF.layer_norm(x, (4096,), w, w), lambda: F.layer_norm(x, (4096,), w, w)),
        ("rms_norm", lambda: TF.rms_norm(x, (4096,), w), lambda: F.rms_norm(x, (4096,), w)),
        ("linear M=1 (4096x4096)", lambda: TF.linear(x1, W), lambda: F.linear(x1, W)),
        (f"linear M={rows} (4096x4096)", lambda: TF.linear(x, W), lambda: F.linear(x, W)),
        ("embedding (32000x4096)", lambda: TF.embedding(ids, table), lambda: F.embedding(ids, table)),
        ("embedding, deferred check", lambda: TF.embedding(ids, table), lambda: deferred(F.embedding, ids, table)),
    ]


def deferred(fn, *args):
    """fn(*args) with baracuda.index.check_indices = "deferred" (no per-call synchronization)."""
    import baracuda.index as BI
    BI.check_indices = "deferred"
    try:
        return fn(*args)
    finally:
        BI.check_indices = True


def main(argv=None):
    args = parse_args(argv)
    baracuda, _C = bench.import_baracuda()
    import baracuda.functional as F
    import torch

    torch.manual_seed(0)
    info = bench.env_info(baracuda, _C)
    rows = []
    for name, ref, ours in cases(F, args.rows):
        t_ref = per_call_us(ref, args.calls)
        try:
            t_ours = per_call_us(ours, args.calls)
            err = None
        except Exception as e:  # noqa: BLE001 - reported in the row
            t_ours, err = None, bench.short_error(e)
        rows.append({"call": name, "torch_us": t_ref, "baracuda_us": t_ours, "error": err})
        if err is None and any(name.startswith(p) for p in args.profile.split(",") if p):
            profile(name, ours, min(args.calls, 2000))
        print(f"[overhead] {name:28s} torch {t_ref:7.2f} us  baracuda "
              f"{t_ours if t_ours is None else round(t_ours, 2)} us", flush=True)
    head = bench.md_header("Host cost per call: baracuda.functional vs torch (small tensors)", info, 0.0, 0)
    head = "\n".join(line for line in head.splitlines() if "copy bandwidth" not in line and "numel" not in line)
    table = bench.md_table(
        ["call ([rows, 4096] bf16 activations)", "torch µs/call", "baracuda µs/call", "baracuda / torch"],
        [[r["call"], f"{r['torch_us']:.2f}", "-" if r["baracuda_us"] is None else f"{r['baracuda_us']:.2f}",
          r["error"] or (f"{r['baracuda_us'] / r['torch_us']:.2f}x")] for r in rows])
    md = (f"{head}\n- rows: {args.rows}; {args.calls} calls a row, wall time per call (host-bound loops)\n\n{table}\n\n"
          "Both columns include the kernel launch (cudaLaunchKernel, a few us on this host). "
          "`python bench/bench_overhead.py` reproduces it.\n")
    print(md)
    if not args.no_write:
        stem = f"python-overhead-{bench.gpu_slug(info['gpu'])}"
        paths = bench.write_results(stem, md, {"env": info, "rows": rows}, args.out_dir)
        print(f"[overhead] wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()
