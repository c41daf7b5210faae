#!/usr/bin/env python3
"""ctc_loss: baracuda vs torch (native kernels and cuDNN), one process, same inputs.

Rows (``--cases``):
  speech  T=500, N=32, C=40, S=100 f32 (targets 50..100 labels, every input length T)
  vocab   T=200, N=64, C=5000, S=80 f32 (a BPE vocabulary: the gradient pass is 256 MB in, 256 MB out)

Modes: ``fw`` = the forward plan (loss only, mean); ``fw+bw`` = the forward plan with fused_beta
(log_alpha and log_beta by two CTAs per item, concurrently; saved) + the backward plan (one pass over
the gradient), through ``baracuda._C.ctc_loss`` with pre-allocated tensors; ``autograd`` =
``baracuda.ctc.ctc_loss`` + ``torch.autograd.grad`` (Python included, input check off: no host
synchronization). torch columns: ``native`` = F.ctc_loss with cuDNN disabled (ATen's CUDA kernels; it
copies the lengths to the host on every call), ``cudnn`` = F.ctc_loss on cuDNN-eligible inputs (int32
concatenated targets on the host, lengths as lists, blank 0, float32, every input length T; cuDNN
computes the gradient inside the forward); the row notes when torch did not take cuDNN. fw rows time
torch's forward under no_grad, the others forward + autograd.grad. baracuda gets padded int32 targets
and int32 lengths on the device (no host synchronization; states sized by S). Timing: CUDA events,
warm-up, median of --iters (bench.py). Writes bench/results/ctc-<gpu>.md/.json.

  python bench/bench_ctc.py
  python bench/bench_ctc.py --cases speech --iters 50
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (shared harness; imports torch lazily)

CASES = {
    "speech": (500, 32, 40, 100),
    "vocab": (200, 64, 5000, 80),
}
MODES = ["fw", "fw+bw", "autograd"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Benchmark baracuda's ctc_loss against torch (native and cuDNN). "
                                "Writes bench/results/ctc-<gpu>.md and .json.")
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated names of {list(CASES)}")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--no-pad", action="store_true", help="no _sleep pad before the timed loop")
    p.add_argument("--out-dir", default=bench.RESULTS_DIR)
    p.add_argument("--tag", default="")
    p.add_argument("--no-write", action="store_true")
    return p.parse_args(argv)


def make_sets(torch, T, N, C, S, nsets):
    g = torch.Generator(device="cuda").manual_seed(1234)
    gc = torch.Generator().manual_seed(1234)
    sets = []
    for _ in range(nsets):
        lp = (2.0 * torch.randn((T, N, C), device="cuda", generator=g)).log_softmax(-1)
        tl = torch.randint(S // 2, S + 1, (N,), generator=gc)
        padded = torch.randint(1, C, (N, S), generator=gc)
        cat = torch.cat([padded[n, :int(tl[n])] for n in range(N)])
        il = torch.full((N,), T, dtype=torch.int64)
        sets.append({
            "lp": lp,
            # baracuda: device tensors, padded targets
            "tg": padded.to(torch.int32).cuda(), "il": il.to(torch.int32).cuda(), "tl": tl.to(torch.int32).cuda(),
            # torch native: the same on the device (int64 as ATen converts to)
            "tg64": padded.cuda(), "il64": il.cuda(), "tl64": tl.cuda(),
            # torch cuDNN: int32 concatenated targets on the host, lengths as lists
            "cat32": cat.to(torch.int32), "il_list": il.tolist(), "tl_list": tl.tolist(),
        })
    return sets


def build_baracuda(torch, _C, sets, mode):
    import baracuda._autograd as A
    import baracuda.ctc as BC

    dev = torch.device("cuda")
    stream = A.current_stream(dev)
    dl = A.dl
    calls = []
    for s in sets:
        ins = {"log_probs": s["lp"], "targets": s["tg"], "input_lengths": s["il"], "target_lengths": s["tl"]}
        exp = lambda d: {k: dl(v) for k, v in d.items() if v is not None}  # noqa: E731
        fused = mode != "fw"
        plan = _C.ctc_loss_plan(False, exp(ins), 0, "mean", False, fused)
        c = {"ins": ins, "fused": fused, "out": torch.empty((), device=dev)}
        c["ws"] = torch.empty(max(plan["workspace_size"], 1), dtype=torch.uint8, device=dev)
        if fused:
            c["la"] = torch.empty(plan["log_alpha_shape"], device=dev)
            c["lb"] = torch.empty(plan["log_alpha_shape"], device=dev)
            c["nll"] = torch.empty(plan["log_alpha_shape"][:1], device=dev)
            c["dy"] = torch.ones((), device=dev)
            c["grad"] = torch.empty_like(s["lp"])
            bplan = _C.ctc_loss_plan(True, exp(ins), 0, "mean", False, True)
            c["wsb"] = torch.empty(max(bplan["workspace_size"], 1), dtype=torch.uint8, device=dev)
        if mode == "autograd":
            c["leaf"] = s["lp"].detach().requires_grad_()
        calls.append(c)
    res = [None, None]
    BC.check_inputs = False  # no host synchronization on the error flag

    def fn(k):
        c, s = calls[k], sets[k]
        if mode == "autograd":
            loss = BC.ctc_loss(c["leaf"], s["tg"], s["il"], s["tl"])
            res[0], res[1] = loss, torch.autograd.grad(loss, c["leaf"])[0]
            return
        fw = dict(c["ins"], out=c["out"])
        if c["fused"]:
            fw.update(save_log_alpha=c["la"], save_log_beta=c["lb"], save_neg_log_likelihood=c["nll"])
        _C.ctc_loss(False, {k2: dl(v) for k2, v in fw.items()}, 0, "mean", False, c["fused"], -1, stream,
                    dl(c["ws"]))
        res[0] = c["out"]
        if c["fused"]:
            bw = dict(c["ins"], dy=c["dy"], log_alpha=c["la"], log_beta=c["lb"], neg_log_likelihood=c["nll"],
                      grad=c["grad"])
            _C.ctc_loss(True, {k2: dl(v) for k2, v in bw.items()}, 0, "mean", False, True, -1, stream,
                        dl(c["wsb"]))
            res[1] = c["grad"]

    c0, s0 = calls[0], sets[0]
    ins0 = {k: dl(v) for k, v in c0["ins"].items()}
    sku = _C.ctc_loss_plan(False, ins0, 0, "mean", False, mode != "fw")["sku"]
    if mode != "fw":
        ins0 = {k: dl(v) for k, v in c0["ins"].items()}
        sku += " | " + _C.ctc_loss_plan(True, ins0, 0, "mean", False, True)["sku"]
    return fn, (lambda: tuple(res)), sku


def build_torch(torch, sets, mode, cudnn):
    import torch.nn.functional as F

    res = [None, None]
    leaves = [s["lp"].detach().requires_grad_() for s in sets]

    def call(k, x):
        s = sets[k]
        if cudnn:
            return F.ctc_loss(x, s["cat32"], s["il_list"], s["tl_list"])
        return F.ctc_loss(x, s["tg64"], s["il64"], s["tl64"])

    def fn(k):
        with torch.backends.cudnn.flags(enabled=cudnn):
            if mode == "fw":
                with torch.no_grad():
                    res[0] = call(k, sets[k]["lp"])
                return
            loss = call(k, leaves[k])
            res[0], res[1] = loss, torch.autograd.grad(loss, leaves[k])[0]

    return fn, (lambda: tuple(res))


def torch_used_cudnn(torch, fn):
    """Whether one call of fn launched ATen's native CTC kernels (False) or not (cuDNN)."""
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn(0)
            torch.cuda.synchronize()
        names = " ".join(e.key for e in prof.key_averages())
        return "ctc_loss_log_alpha" not in names
    except Exception:
        return None


def check(torch, got, ref):
    try:
        for g, r in zip(got, ref):
            if g is None or r is None:
                continue
            torch.testing.assert_close(g.float(), r.float(), rtol=1e-3, atol=1e-4)
        return "ok"
    except AssertionError as e:
        return "MISMATCH: " + bench.short_error(e, 120)


def main(argv=None):
    args = parse_args(argv)
    baracuda, _C = bench.import_baracuda()
    import torch

    info = bench.env_info(baracuda, _C)
    copy_bps = bench.copy_bandwidth()
    rows_out = []
    for case in [c.strip() for c in args.cases.split(",") if c.strip()]:
        T, N, C, S = CASES[case]
        for mode in MODES:
            label = f"{case} {mode}"
            print(f"[bench_ctc] {label}", file=sys.stderr, flush=True)
            row = {"case": case, "mode": mode, "dtype": "f32", "shape": [T, N, C, S]}
            try:
                lp_bytes = T * N * C * 4
                # Ideal traffic: the forward gathers S + 1 values a (t, n); the backward reads log_probs
                # and writes the gradient once (plus log_alpha / log_beta).
                states = T * N * (2 * S + 1) * 4
                nbytes = {"fw": T * N * (S + 1) * 4, "fw+bw": 2 * lp_bytes + 4 * states}.get(mode, 2 * lp_bytes)
                nsets = bench.rotation_sets(2 * lp_bytes)
                sets = make_sets(torch, T, N, C, S, nsets)
                row["bytes"] = nbytes
                bfn, bres, sku = build_baracuda(torch, _C, sets, mode)
                row["sku"] = sku
                row["baracuda_us"] = bench.time_cuda(bfn, nsets, args.warmup, args.iters, not args.no_pad)["median_us"]
                tmode = "fw" if mode == "fw" else "fw+bw"
                for col, cudnn in (("native", False), ("cudnn", True)):
                    tfn, tres = build_torch(torch, sets, tmode, cudnn)
                    tfn(0)
                    row[f"torch_{col}_us"] = bench.time_cuda(tfn, nsets, args.warmup, args.iters,
                                                             not args.no_pad)["median_us"]
                    if cudnn:
                        row["torch_took_cudnn"] = torch_used_cudnn(torch, tfn)
                    if not cudnn:
                        bfn(0)
                        tfn(0)
                        torch.cuda.synchronize()
                        row["check"] = check(torch, bres(), tres())
                del sets
            except Exception as e:
                row["error"] = bench.short_error(e)
            torch.cuda.empty_cache()
            rows_out.append(row)

    headers = ["case", "mode", "T,N,C,S", "baracuda µs", "torch native µs", "torch cuDNN µs", "vs native",
               "vs cuDNN", "baracuda GB/s", "% copy BW", "check", "SKU"]
    table = []
    for r in rows_out:
        if "error" in r:
            table.append([r["case"], r["mode"], r["shape"], "error: " + r["error"]] + [""] * 8)
            continue
        b, tn, tc = r["baracuda_us"], r["torch_native_us"], r["torch_cudnn_us"]
        gbs = r["bytes"] / (b * 1e-6) / 1e9
        pct = 100 * r["bytes"] / (b * 1e-6) / copy_bps
        note = "" if r.get("torch_took_cudnn") in (True, None) else " (took native)"
        table.append([r["case"], r["mode"], ",".join(map(str, r["shape"])), f"{b:.1f}", f"{tn:.1f}", f"{tc:.1f}{note}",
                      f"{tn / b:.2f}x", f"{tc / b:.2f}x", f"{gbs:.0f}", f"{pct:.0f}%", r.get("check", ""), r["sku"]])
    slug = bench.gpu_slug(info["gpu"])
    md = bench.md_header(f"baracuda ctc_loss vs torch ({info['gpu']})", info, copy_bps, 0)
    md += "\n\n" + bench.md_table(headers, table)
    md += ("\n\nModes: fw = forward plan (loss only); fw+bw = forward plan with fused_beta + backward plan; "
           "autograd = baracuda.ctc.ctc_loss + torch.autograd.grad. torch columns: F.ctc_loss with cuDNN off "
           "(native; syncs to copy the lengths to the host) and on cuDNN-eligible inputs (the gradient is "
           "computed inside its forward); forward under no_grad for fw, forward + autograd.grad otherwise. "
           "GB/s: the ideal traffic (fw: the gathered log_probs; fw+bw / autograd: log_probs read and the "
           "gradient written once, plus log_alpha / log_beta written and read).\n")
    print(md)
    if not args.no_write:
        paths = bench.write_results(f"ctc-{slug}{args.tag}", md, {"env": info, "copy_bps": copy_bps,
                                                                   "rows": rows_out}, args.out_dir)
        print(f"[bench_ctc] wrote {paths[0]} and {paths[1]}", file=sys.stderr)


if __name__ == "__main__":
    main()
