#!/usr/bin/env python3
"""Indexing family: baracuda vs torch eager, one process, same inputs.

baracuda runs through baracuda._C.index(op, backward, tensors, params, ...) with pre-allocated
outputs and workspace (no error flag, so no host read-back); torch runs the equivalent eager op
(x.t().contiguous(), torch.cat, F.pad, torch.gather, F.embedding, embedding_dense_backward,
index_add_, scatter_reduce_ amax, torch.scatter_reduce amax, torch.nonzero, F.embedding_bag and
aten._embedding_bag_dense_backward). nonzero runs
baracuda.index.nonzero whole (count pass, one host read of the count, write pass), as
torch.nonzero synchronizes too. Timing: CUDA events, warm-up, median of --iters; buffer sets
rotate when one call moves less than 2x L2 (bench.py). Bytes count each input read once and
each output written once (a gathered source counts whole when the index touches most of its
sectors, as torch.gather's here does). The segment cases also time jax.ops.segment_max / _sum
(jitted, JAX's GPU backend, wall time of back-to-back calls; issue 6 asks to beat JAX's
segment_max). Writes bench/results/index-<gpu>.md/.json.

  python bench/bench_index.py                 # every case
  python bench/bench_index.py --cases 'emb*'  # fnmatch patterns
  python bench/bench_index.py --quick         # the issue's target cases only
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (shared harness; imports torch lazily)

# Targets from issue 6: ratio vs torch (">= x torch") or % of copy bandwidth.
TARGETS = {"transpose": ("bw", 85.0), "embedding_fw": ("x", 1.2), "embedding_bw": ("x", 1.0), "cat": ("bw", 80.0),
           "pad": ("bw", 80.0), "gather": ("bw", 80.0), "segment_max": ("x", 1.5), "scatter_reduce": ("x", 1.0),
           "nonzero": ("x", 1.0), "embedding_bag_fw": ("x", 1.0), "embedding_bag_bw": ("x", 1.0)}
QUICK = ["transpose_bf16", "embedding_fw", "embedding_bw", "segment_max_f32"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Benchmark baracuda's indexing plans against torch eager. Writes "
                                "bench/results/index-<gpu>.md and .json.")
    p.add_argument("--cases", default="*", help="fnmatch patterns, comma-separated (default: all)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--quick", action="store_true", help=f"only {QUICK}")
    p.add_argument("--no-pad", action="store_true", help="no _sleep pad before the timed loop")
    p.add_argument("--out-dir", default=bench.RESULTS_DIR)
    p.add_argument("--tag", default="")
    p.add_argument("--no-write", action="store_true")
    return p.parse_args(argv)


def build_cases(torch, F):
    """name -> (family target key, bytes moved, make(k) -> (baracuda_fn, torch_fn, sku_args))."""
    dev = "cuda"
    bf16, f32 = torch.bfloat16, torch.float32
    cases = {}

    def transpose(dt):
        def make():
            x = torch.randn(16384, 4096, device=dev).to(dt)
            xt = x.t()
            out = torch.empty(4096, 16384, dtype=dt, device=dev)
            return ("copy", {"x": xt, "out": out}, {}), lambda: xt.contiguous()
        return make
    cases["transpose_bf16"] = ("transpose", 2 * 16384 * 4096 * 2, transpose(bf16))
    cases["transpose_f32"] = ("transpose", 2 * 16384 * 4096 * 4, transpose(f32))

    def cat(dim):
        def make():
            a = torch.randn(8192, 4096, device=dev).to(bf16)
            b = torch.randn(8192, 4096, device=dev).to(bf16)
            shape = (16384, 4096) if dim == 0 else (8192, 8192)
            out = torch.empty(shape, dtype=bf16, device=dev)
            return ("cat", {"inputs": [a, b], "out": out}, {"dim": dim}), lambda: torch.cat([a, b], dim)
        return make
    cases["cat_dim0_bf16"] = ("cat", 2 * 2 * 8192 * 4096 * 2, cat(0))
    cases["cat_dim1_bf16"] = ("cat", 2 * 2 * 8192 * 4096 * 2, cat(1))

    def pad(mode):
        def make():
            x = torch.randn(16, 64, 128, 128, device=dev).to(bf16)
            out = torch.empty(16, 64, 130, 130, dtype=bf16, device=dev)
            pairs = [0, 0, 0, 0, 1, 1, 1, 1]
            return ("pad", {"x": x, "out": out}, {"pads": pairs, "mode": mode, "value": 0.0}), \
                lambda: F.pad(x, (1, 1, 1, 1), mode)
        return make
    n_in, n_out = 16 * 64 * 128 * 128, 16 * 64 * 130 * 130
    cases["pad_constant_bf16"] = ("pad", (n_in + n_out) * 2, pad("constant"))
    cases["pad_reflect_bf16"] = ("pad", (n_in + n_out) * 2, pad("reflect"))

    def pad_rows(mode):  # long rows: the word variant (mapped-rows-words)
        def make():
            x = torch.randn(8192, 4095, device=dev).to(bf16)
            out = torch.empty(8192, 4098, dtype=bf16, device=dev)
            return ("pad", {"x": x, "out": out}, {"pads": [0, 0, 1, 2], "mode": mode, "value": 0.0}), \
                lambda: F.pad(x, (1, 2), mode)
        return make
    cases["pad_rows_constant_bf16"] = ("pad", 8192 * (4095 + 4098) * 2, pad_rows("constant"))
    cases["pad_rows_reflect_bf16"] = ("pad", 8192 * (4095 + 4098) * 2, pad_rows("reflect"))

    def gather():
        x = torch.randn(16384, 4096, device=dev).to(bf16)
        idx = torch.randint(0, 4096, (16384, 1024), device=dev)
        out = torch.empty(16384, 1024, dtype=bf16, device=dev)
        return ("gather", {"x": x, "index": idx, "out": out}, {"dim": 1}), lambda: torch.gather(x, 1, idx)
    # x counts whole, read once: 1024 random picks from each 8 KB row touch ~98% of its 32-byte
    # sectors (1 - (1 - 16/4096)^1024), so every byte of x crosses the memory bus whatever the
    # kernel; plus the int64 index read and the output written.
    cases["gather_bf16"] = ("gather", 16384 * 4096 * 2 + 16384 * 1024 * (8 + 2), gather)

    def emb_fw():
        w = torch.randn(128256, 4096, device=dev).to(bf16)
        ids = torch.randint(0, 128256, (16384,), device=dev)
        out = torch.empty(16384, 4096, dtype=bf16, device=dev)
        return ("embedding", {"x": w, "index": ids, "out": out}, {}), lambda: F.embedding(ids, w)
    cases["embedding_fw"] = ("embedding_fw", 2 * 16384 * 4096 * 2, emb_fw)

    def emb_bw():
        g = torch.randn(16384, 4096, device=dev).to(bf16)
        ids = torch.randint(0, 128256, (16384,), device=dev)
        out = torch.empty(128256, 4096, dtype=bf16, device=dev)
        return ("embedding", {"x": g, "index": ids, "out": out}, {"padding_idx": -1}, True), \
            lambda: torch.ops.aten.embedding_dense_backward(g, ids, 128256, -1, False)
    cases["embedding_bw"] = ("embedding_bw", (16384 * 4096 + 128256 * 4096) * 2, emb_bw)

    def seg(op):
        def make():
            data = torch.randn(1 << 20, 64, device=dev)
            ids = torch.randint(0, 4096, (1 << 20,), device=dev)
            out = torch.empty(4096, 64, device=dev)
            exp = ids.view(-1, 1).expand(-1, 64)
            if op == "segment_max":
                ref = lambda: torch.full((4096, 64), float("-inf"), device=dev).scatter_reduce_(  # noqa: E731
                    0, exp, data, "amax", include_self=True)
            else:
                ref = lambda: torch.zeros(4096, 64, device=dev).index_add_(0, ids, data)  # noqa: E731
            return (op, {"x": data, "index": ids, "out": out}, {"num_segments": 4096}), ref, \
                lambda: jax_segment(op, data, ids, 4096)
        return make
    cases["segment_max_f32"] = ("segment_max", (1 << 20) * (64 * 4 + 8), seg("segment_max"))
    cases["segment_sum_f32"] = ("segment_sum", (1 << 20) * (64 * 4 + 8), seg("segment_sum"))

    def scatter_reduce_amax():
        # torch.scatter_reduce(self, 0, index, src, "amax"): 16 sources per destination on average.
        x = torch.randn(4096, 1024, device=dev)
        idx = torch.randint(0, 4096, (65536, 1024), device=dev)
        src = torch.randn(65536, 1024, device=dev)
        out = torch.empty_like(x)
        return ("scatter_reduce", {"x": x, "index": idx, "src": src, "out": out}, {"dim": 0, "reduce": "amax"}), \
            lambda: torch.scatter_reduce(x, 0, idx, src, "amax")
    # src and its int64 index read once, self read once and the output written once.
    cases["scatter_reduce_amax_f32"] = ("scatter_reduce", 65536 * 1024 * (4 + 8) + 2 * 4096 * 1024 * 4,
                                        scatter_reduce_amax)

    def nonzero():
        # torch.nonzero of a 10%-dense bool mask: both sides synchronize once for the count.
        x = torch.rand(16384, 4096, device=dev) < 0.1
        import baracuda.index as BI
        probe = {"x": x, "out": torch.empty(0, 2, dtype=torch.int64, device=dev)}
        return ("call", lambda: BI.nonzero(x), ("nonzero", probe, {})), lambda: torch.nonzero(x)
    # The mask read once and ~6.7M coordinate pairs written (the count pass's second read of the
    # mask is not counted: the percentage is against the minimum traffic).
    cases["nonzero_bool"] = ("nonzero", 16384 * 4096 + int(0.1 * 16384 * 4096) * 16, nonzero)

    # embedding_bag: 1M ids in 16384 bags of 64 over a [1M, 256] table (torch's 1-D ids + offsets).
    n_rows, dim, bags, per_bag = 1 << 20, 256, 16384, 64
    n_ids = bags * per_bag

    def bag_inputs(dt):
        w = torch.randn(n_rows, dim, device=dev).to(dt)
        ids = torch.randint(0, n_rows, (n_ids,), device=dev)
        offsets = torch.arange(0, n_ids, per_bag, device=dev)
        return w, ids, offsets

    def bag_fw(dt, mode):
        def make():
            w, ids, offsets = bag_inputs(dt)
            out = torch.empty(bags, dim, dtype=dt, device=dev)
            return ("embedding_bag", {"x": w, "index": ids, "offsets": offsets, "out": out}, {"mode": mode}), \
                lambda: F.embedding_bag(ids, w, offsets, mode=mode)
        return make

    def bag_bw(dt, mode, deterministic):
        def make():
            w, ids, offsets = bag_inputs(dt)
            mode_id = {"sum": 0, "mean": 1}[mode]
            _, offset2bag, bag_size, max_idx = torch.embedding_bag(w, ids, offsets, False, mode_id)
            g = torch.randn(bags, dim, device=dev).to(dt)
            gw = torch.empty(n_rows, dim, dtype=dt, device=dev)
            return ("embedding_bag", {"x": g, "index": ids, "offsets": offsets, "out": gw}, {"mode": mode}, True,
                    deterministic), \
                lambda: torch.ops.aten._embedding_bag_dense_backward(g, ids, offset2bag, bag_size, max_idx, n_rows,
                                                                     False, mode_id, None, -1)
        return make

    for dt, tag in ((f32, "f32"), (bf16, "bf16")):
        eb = 4 if dt == f32 else 2
        # Forward: every id's row read once, the ids and the bags written once.
        fw_bytes = n_ids * (dim * eb + 8) + bags * dim * eb
        # Backward: the dense gradient written (zeros), each id's dy row read and its gradient row
        # read and written once (the atomic or sorted sum), the ids read.
        bw_bytes = n_rows * dim * eb + n_ids * (3 * dim * eb + 8)
        for mode in ("sum", "mean"):
            cases[f"embedding_bag_{mode}_fw_{tag}"] = ("embedding_bag_fw", fw_bytes, bag_fw(dt, mode))
            cases[f"embedding_bag_{mode}_bw_{tag}"] = ("embedding_bag_bw", bw_bytes, bag_bw(dt, mode, False))
            if dt == f32:  # bf16's backward is the sorted path either way (no bf16 atomics)
                cases[f"embedding_bag_{mode}_bw_det_{tag}"] = ("embedding_bag_bw", bw_bytes, bag_bw(dt, mode, True))
    return cases


def jax_segment(op, data, ids, num_segments):
    """jax.ops.segment_max / segment_sum of the same (zero-copy DLPack) arrays, jitted, on JAX's GPU
    backend; None when JAX or its GPU backend is missing (the row then says so)."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave the GPU's memory to torch
    try:
        import jax
        import jax.dlpack
        if not jax.devices("gpu"):
            return None
    except Exception:
        return None
    import torch
    fn = getattr(jax.ops, op)
    # int32 ids: JAX without x64 has no int64 (an advantage to JAX: half the id bytes).
    jd, ji = jax.dlpack.from_dlpack(data), jax.dlpack.from_dlpack(ids.to(torch.int32))
    f = jax.jit(lambda d, i: fn(d, i, num_segments=num_segments))
    return lambda: f(jd, ji)


def time_jax(fn, warmup: int, iters: int) -> float:
    """Median over 5 batches of wall time per call of `iters` back-to-back calls, the last one
    waited for: JAX runs on its own stream, which torch's CUDA events do not see; dispatch (tens of
    microseconds) overlaps the queued kernels once the queue is ahead."""
    import statistics
    import time
    for _ in range(max(warmup, 1)):
        fn().block_until_ready()
    per = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(iters):
            r = fn()
        r.block_until_ready()
        per.append((time.perf_counter() - t0) / iters)
    return statistics.median(per) * 1e6


def main(argv=None):
    args = parse_args(argv)
    import torch
    import torch.nn.functional as F

    baracuda, _C = bench.import_baracuda()
    from baracuda._autograd import current_stream, dl

    info = bench.env_info(baracuda, _C)
    copy_bps = bench.copy_bandwidth()
    pats = QUICK if args.quick else args.cases.split(",")
    rows, data_rows = [], []
    for name, (key, nbytes, make) in build_cases(torch, F).items():
        if not any(fnmatch.fnmatch(name, p) for p in pats):
            continue
        try:
            made = make()
            spec, ref = made[0], made[1]
            jax_fn = made[2]() if len(made) > 2 else None  # cases the issue compares with JAX too
            call = spec[0] == "call"  # a Python-level function (nonzero: count, sync, write)
            if call:
                fn, (op, tensors, params) = spec[1], spec[2]
            else:
                op, tensors, params = spec[0], spec[1], spec[2]
            backward = not call and len(spec) > 3 and spec[3]
            det = not call and len(spec) > 4 and spec[4]  # PlanPreference::require_deterministic
            dev = tensors["out"].device

            def export():
                return {k: [dl(t) for t in v] if isinstance(v, list) else dl(v) for k, v in tensors.items()}

            if call:
                ours = bench.time_cuda(lambda k: fn(), 1, args.warmup, args.iters, not args.no_pad)
            else:
                nws = _C.index_workspace_size(op, backward, export(), params, det)
                ws = torch.empty(max(nws, 1), dtype=torch.uint8, device=dev)
                stream = current_stream(dev)
                ours = bench.time_cuda(lambda k: _C.index(op, backward, export(), params, stream, dl(ws), det), 1,
                                       args.warmup, args.iters, not args.no_pad)
            theirs = bench.time_cuda(lambda k: ref(), 1, args.warmup, args.iters, not args.no_pad)
            sku = _C.index_sku(op, backward, export(), params, det)
            us, tus = ours["median_us"], theirs["median_us"]
            pct = 100.0 * nbytes / (us * 1e-6) / copy_bps
            kind, goal = TARGETS.get(key, (None, None))  # cases the issue sets no target for: measured only
            met = None if kind is None else (pct >= goal) if kind == "bw" else (tus / us >= goal)
            target = "-" if kind is None else \
                (f">= {goal:.0f}% bw" if kind == "bw" else f">= {goal}x torch")
            jus = None
            if len(made) > 2:  # and faster than JAX's op (issue 6)
                if jax_fn is None:
                    met, target = False, target + ", JAX GPU unavailable"
                else:
                    jus = time_jax(jax_fn, args.warmup, args.iters)
                    target += f", JAX {jus:.1f} us ({jus / us:.2f}x)"
                    met = (met is None or met) and jus > us
            if kind is not None or jus is not None:
                target += " met" if met else " MISSED"
            rows.append([name, f"{us:.1f}", f"{tus:.1f}", f"{tus / us:.2f}x", f"{nbytes / us / 1e6:.2f}", f"{pct:.0f}%",
                         target, sku])
            data_rows.append({"case": name, "us": us, "torch_us": tus, "jax_us": jus, "bytes": nbytes,
                              "pct_copy_bw": pct, "target": [kind, goal], "met": met, "sku": sku})
        except Exception as e:  # a failing case reports and the others still run
            rows.append([name, "error", "", "", "", "", "", bench.short_error(e)])
            data_rows.append({"case": name, "error": bench.short_error(e)})
        print(" | ".join(str(c) for c in rows[-1]), flush=True)
    md = bench.md_header("baracuda indexing family vs torch eager", info, copy_bps, 16384 * 4096)
    md += "\n\n" + bench.md_table(["case", "baracuda µs", "torch µs", "speed-up", "TB/s", "% of copy bw", "target",
                                    "sku"], rows) + "\n"
    print(md)
    if not args.no_write:
        stem = "index-" + bench.gpu_slug(info["gpu"]) + (("-" + args.tag) if args.tag else "")
        paths = bench.write_results(stem, md, {"env": info, "copy_bps": copy_bps, "rows": data_rows}, args.out_dir)
        print("wrote", *paths)


if __name__ == "__main__":
    main()
