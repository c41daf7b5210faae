#!/usr/bin/env python3
"""GGUF decode matvec: baracuda vs torch bf16 matmul of the dequantized weight, one process, same x.

y[m, N] = x[m, K] @ W^T with W [N, K] in a GGUF format (random blocks with moderate f16 scales; the
speed does not depend on the values). Per row: µs, GB/s of the packed weight bytes (the stream the
kernel must read), the same bytes through a torch copy_ in this process (GB/s counting read + write,
the device's copy bandwidth at that size) and our fraction of it, and torch.matmul with the dequantized
bf16 weight [N, K] (2 bytes a weight). Weights (ours and torch's) rotate past 2x L2 so neither side
reads them from L2. Timing: CUDA events, warm-up, median of --iters (bench.py). Writes
bench/results/gguf-<gpu>.md / .json.

  python bench/bench_gguf.py                          # q4_0 q4_K q8_0 q6_K x (4096x4096, 14336x4096), m = 1
  python bench/bench_gguf.py --formats 'q4_K' --m 1,8 --shapes 4096x14336
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (shared harness; imports torch lazily)

FORMATS = ["q4_0", "q4_K", "q8_0", "q6_K"]
ALL_FORMATS = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K"]
SHAPES = "4096x4096,14336x4096"
TARGET_PCT_COPY = 75.0  # OPS.md: decode GEMV streams weights at >= 75% of bandwidth
# Byte offsets of the f16 fields of a block (d, and dmin / m).
HALVES = {"q4_0": [0], "q4_1": [0, 2], "q5_0": [0], "q5_1": [0, 2], "q8_0": [0], "q2_K": [80, 82],
          "q3_K": [108], "q4_K": [0, 2], "q5_K": [0, 2], "q6_K": [208]}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Benchmark baracuda's GGUF decode matvec against torch. Writes "
                                "bench/results/gguf-<gpu>.md and .json.")
    p.add_argument("--formats", default=",".join(FORMATS), help=f"fnmatch patterns over {ALL_FORMATS}")
    p.add_argument("--shapes", default=SHAPES, help="N x K of the weight, comma-separated")
    p.add_argument("--m", default="1", help="rows of x, comma-separated (1..8)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--no-pad", action="store_true")
    p.add_argument("--out-dir", default=bench.RESULTS_DIR)
    p.add_argument("--tag", default="")
    p.add_argument("--no-write", action="store_true")
    return p.parse_args(argv)


def random_weight(torch, fmt, n, k, row, g):
    """Random GGUF blocks [n, k / bs * bytes] with moderate f16 scales (values do not change the speed)."""
    nb = n * (k // row["block_size"])
    b = torch.randint(0, 256, (nb, row["block_bytes"]), device="cuda", dtype=torch.uint8, generator=g)
    for off in HALVES[fmt]:
        v = (torch.rand(nb, device="cuda", generator=g) + 1) * 2.0 ** -8
        b[:, off:off + 2] = v.to(torch.float16).view(torch.uint8).view(nb, 2)
    return b.reshape(n, -1)


def run_row(torch, _C, G, fmt, n, k, m, dtype, args):
    row_info = G.FORMATS[fmt]
    row = {"format": fmt, "m": m, "n": n, "k": k, "dtype": str(dtype).replace("torch.", "")}
    g = torch.Generator(device="cuda").manual_seed(17)
    import baracuda._autograd as A
    st = A.current_stream(torch.device("cuda"))
    wbytes = n * (k // row_info["block_size"]) * row_info["block_bytes"]
    row["weight_bytes"] = wbytes
    nsets = bench.rotation_sets(wbytes)
    ws_list = [random_weight(torch, fmt, n, k, row_info, g) for _ in range(nsets)]
    x = torch.randn(m, k, device="cuda", generator=g).to(dtype)
    y = torch.empty(m, n, device="cuda", dtype=dtype)
    sets = [{"x": x, "weight": w.reshape(-1), "y": y} for w in ws_list]
    try:
        nws = _C.gguf_matvec_workspace_size(sets[0], fmt)
        row["sku"] = _C.gguf_matvec_sku(sets[0], fmt)
    except RuntimeError as e:
        row["error"] = "not available: " + bench.short_error(e, 160)
        return row
    wsb = torch.empty(max(nws, 1), dtype=torch.uint8, device="cuda")
    row["baracuda_us"] = bench.time_cuda(lambda j: _C.gguf_matvec(sets[j], fmt, st, wsb), nsets, args.warmup,
                                         args.iters, not args.no_pad)["median_us"]
    # The same bytes through torch's copy_ (read + write), rotated the same way.
    src = [w.reshape(-1) for w in ws_list]
    dst = [torch.empty_like(s) for s in src]
    row["copy_us"] = bench.time_cuda(lambda j: dst[j].copy_(src[j]), nsets, args.warmup, args.iters,
                                     not args.no_pad)["median_us"]
    del dst
    # Check set 0 against our float32 dequantization (bit-exact vs ggml, tests/gpu/test_gguf.py) @ x.
    _C.gguf_matvec(sets[0], fmt, st, wsb)
    wf = G.gguf_dequantize(ws_list[0], fmt, (n, k), torch.float32)
    ref = x.float() @ wf.t()
    torch.cuda.synchronize()
    err = ((y.float() - ref).norm() / ref.norm()).item()
    row["check"] = "ok" if err < 1e-2 else f"MISMATCH: relative error {err:.3e}"
    # torch: the dequantized weight in bf16 (2 bytes a weight), rotated past 2x L2.
    del ws_list, sets, src
    wt0 = wf.to(torch.bfloat16)
    del wf
    tsets = bench.rotation_sets(n * k * 2)
    wt = [wt0] + [torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16) for _ in range(tsets - 1)]
    xt = x.to(torch.bfloat16)
    row["torch_us"] = bench.time_cuda(lambda j: torch.matmul(xt, wt[j].t()), tsets, args.warmup, args.iters,
                                      not args.no_pad)["median_us"]
    del wt, wt0
    torch.cuda.empty_cache()
    return row


def main(argv=None):
    args = parse_args(argv)
    baracuda, _C = bench.import_baracuda()
    import torch
    from baracuda import gguf as G

    pats = [p.strip() for p in args.formats.split(",") if p.strip()]
    fmts = [f for f in ALL_FORMATS if any(fnmatch.fnmatch(f, p) for p in pats)]
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",") if s.strip()]
    ms = [int(v) for v in args.m.split(",") if v.strip()]
    dtype = getattr(torch, args.dtype)
    info = bench.env_info(baracuda, _C)
    copy_bps = bench.copy_bandwidth()
    rows_out = []
    for fmt in fmts:
        for n, k in shapes:
            for m in ms:
                print(f"[bench_gguf] {fmt} m={m} N={n} K={k}", file=sys.stderr, flush=True)
                try:
                    rows_out.append(run_row(torch, _C, G, fmt, n, k, m, dtype, args))
                except Exception as e:  # one failing row must not hide the others
                    rows_out.append({"format": fmt, "m": m, "n": n, "k": k, "error": bench.short_error(e)})
                torch.cuda.empty_cache()

    headers = ["format", "m x N x K", "weight MB", "baracuda µs", "GB/s", "copy of same bytes GB/s (r+w)",
               "% of copy", "torch bf16 matmul µs", "vs torch", "target", "check", "SKU"]
    table, missing = [], []
    for r in rows_out:
        shape = f"{r['m']} x {r['n']} x {r['k']}"
        if "error" in r:
            table.append([r["format"], shape, "error: " + r["error"]] + [""] * 9)
            missing.append(f"{r['format']} {shape}")
            continue
        b, c, t = r["baracuda_us"], r["copy_us"], r["torch_us"]
        gbs = r["weight_bytes"] / (b * 1e-6) / 1e9
        copy_gbs = 2 * r["weight_bytes"] / (c * 1e-6) / 1e9
        pct = 100 * gbs / copy_gbs
        r.update({"gbps": gbs, "copy_gbps": copy_gbs, "pct_copy": pct})
        if pct < TARGET_PCT_COPY:
            missing.append(f"{r['format']} {shape}")
        table.append([r["format"], shape, f"{r['weight_bytes'] / 1e6:.1f}", f"{b:.1f}", f"{gbs:.0f}", f"{copy_gbs:.0f}",
                      f"{pct:.0f}%", f"{t:.1f}", f"{t / b:.2f}x", f">= {TARGET_PCT_COPY:.0f}%", r["check"], r["sku"]])
    slug = bench.gpu_slug(info["gpu"])
    md = bench.md_header(f"baracuda GGUF decode matvec vs torch ({info['gpu']})", info, copy_bps, 0)
    md += "\n\n" + bench.md_table(headers, table)
    md += ("\n\nGB/s: packed weight bytes / time (x and y are a few KB). Copy: torch copy_ of a buffer of the same "
           "bytes, counting read + write, in this process; % of copy = our read rate / that rate. torch: "
           f"torch.matmul(x, W.t()) with the dequantized weight in bf16 (2 bytes a weight). x dtype {args.dtype}."
           f"\n\nRows below {TARGET_PCT_COPY:.0f}% of copy ({len(missing)}): " + ("; ".join(missing) or "none") + "\n")
    print(md)
    if not args.no_write:
        paths = bench.write_results(f"gguf-{slug}{args.tag}", md, {"env": info, "copy_bps": copy_bps,
                                                                    "rows": rows_out}, args.out_dir)
        print(f"[bench_gguf] wrote {paths[0]} and {paths[1]}", file=sys.stderr)


if __name__ == "__main__":
    main()
