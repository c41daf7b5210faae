"""Shared benchmark harness: CUDA-event timing, L2-defeating buffer rotation, copy bandwidth,
environment header and result files. Imported by the per-family runners (bench_<family>.py).

torch is imported lazily (inside the functions), so a runner's --help works on a machine
without torch or a GPU.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS_DIR = os.path.join(HERE, "results")

_L2_FALLBACK = 64 << 20
_cycles_per_us = None


# ---- imports -------------------------------------------------------------------------------
def import_baracuda():
    """Returns (baracuda, baracuda._C). Falls back to the in-tree python/ folder when the
    package is not installed (an extension built in place)."""
    try:
        import baracuda  # noqa: F401
        from baracuda import _C
    except ImportError:
        sys.path.insert(0, os.path.join(REPO, "python"))
        for k in [k for k in sys.modules if k == "baracuda" or k.startswith("baracuda.")]:
            del sys.modules[k]
        import baracuda  # noqa: F401
        from baracuda import _C
    return baracuda, _C


# ---- device facts ----------------------------------------------------------------------------
def l2_size() -> int:
    import torch

    try:
        n = int(torch.cuda.get_device_properties(0).L2_cache_size)
        return n if n > 0 else _L2_FALLBACK
    except Exception:
        return _L2_FALLBACK


def rotation_sets(bytes_per_call: int, l2: int | None = None, cap: int = 4096) -> int:
    """Number of distinct buffer sets so that one pass over them touches more than 2x L2.
    1 when a single call already moves at least 2x L2 (e.g. 128M-element rows)."""
    l2 = l2 or l2_size()
    if bytes_per_call <= 0:
        return 1
    if bytes_per_call >= 2 * l2:
        return 1
    return min(cap, math.ceil(2 * l2 / bytes_per_call) + 1)


def gpu_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100', 'NVIDIA H200' -> 'h200'."""
    m = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Za-z]?)\b", name)
    if m:
        return m.group(1).lower()
    s = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return s or "gpu"


def _nvidia_smi_driver() -> str | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        line = out.stdout.strip().splitlines()
        return line[0].strip() if out.returncode == 0 and line else None
    except Exception:
        return None


def _fmt_cuda_version(v) -> str:
    """12080 -> '12.8'; strings pass through."""
    try:
        v = int(v)
        return f"{v // 1000}.{(v % 1000) // 10}"
    except Exception:
        return str(v)


def env_info(baracuda=None, _C=None) -> dict:
    import torch

    info = {
        "gpu": torch.cuda.get_device_name(0),
        "driver": None,
        "cuda_runtime_torch": torch.version.cuda,
        "cuda_runtime_baracuda": None,
        "torch": torch.__version__,
        "baracuda": None,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "l2_bytes": l2_size(),
        "num_sms": torch.cuda.get_device_properties(0).multi_processor_count,
    }
    dev = {}
    if _C is not None:
        try:
            dev = dict(_C.device_info())
        except Exception:
            dev = {}
    if dev.get("runtime_version") is not None:
        info["cuda_runtime_baracuda"] = _fmt_cuda_version(dev["runtime_version"])
    info["driver"] = (_nvidia_smi_driver()
                      or (_fmt_cuda_version(dev["driver_version"]) if dev.get("driver_version") else None)
                      or f"n/a (torch CUDA {torch.version.cuda})")
    ver = getattr(baracuda, "__version__", None) if baracuda is not None else None
    if ver is None:
        try:
            from importlib.metadata import version

            ver = version("baracuda")
        except Exception:
            ver = "unknown"
    # BARACUDA_GIT_SHA wins: a copy of the tree on a remote machine may carry a stale .git.
    sha = os.environ.get("BARACUDA_GIT_SHA", "")
    if not sha:
        try:
            sha = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True, timeout=10).stdout.strip()
        except Exception:
            sha = ""
    if sha:
        ver = f"{ver} (git {sha})"
    info["baracuda"] = ver
    return info


# ---- timing --------------------------------------------------------------------------------
def _calibrate_sleep() -> float:
    """GPU clock cycles per microsecond, as seen by torch.cuda._sleep."""
    global _cycles_per_us
    if _cycles_per_us is None:
        import torch

        try:
            cyc = 2_000_000
            torch.cuda._sleep(cyc)  # warm
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            torch.cuda._sleep(cyc)
            e.record()
            e.synchronize()
            us = s.elapsed_time(e) * 1e3
            _cycles_per_us = cyc / us if us > 0 else 1500.0
        except Exception:
            _cycles_per_us = 0.0  # no _sleep: time without the pad
    return _cycles_per_us


def time_cuda(fn, nsets: int = 1, warmup: int = 5, iters: int = 20, pad: bool = True) -> dict:
    """Times fn(k) (k = buffer set, rotating over nsets) with one CUDA event pair per call on
    the current stream. Returns {'median_us', 'min_us', 'times_us'}.

    Before the timed loop a _sleep kernel is queued that lasts longer than the host needs to
    enqueue all iterations, so the events measure device time back to back, not Python
    dispatch (fair to both libraries; matters only for short kernels)."""
    import torch

    t0 = time.perf_counter()
    for i in range(warmup):
        fn(i % nsets)
    host_per_call = (time.perf_counter() - t0) / max(warmup, 1)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    if pad:
        cpu = _calibrate_sleep()
        if cpu > 0:
            pad_us = min(50_000.0, 1.5 * host_per_call * 1e6 * iters + 200.0)
            torch.cuda._sleep(int(pad_us * cpu))
    for i in range(iters):
        k = (warmup + i) % nsets
        starts[i].record()
        fn(k)
        ends[i].record()
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
    return {"median_us": statistics.median(times), "min_us": min(times), "times_us": times}


def copy_bandwidth(nbytes: int = 1 << 30, warmup: int = 5, iters: int = 20) -> float:
    """Device-to-device copy bandwidth in bytes/s through torch's copy_ of an nbytes buffer,
    counting read + write bytes (2 * nbytes per copy)."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    r = time_cuda(lambda k: dst.copy_(src), 1, warmup, iters)
    del src, dst
    return 2 * nbytes / (r["median_us"] * 1e-6)


# ---- output --------------------------------------------------------------------------------
def md_table(headers: list[str], rows: list[list]) -> str:
    def cell(v):
        return str(v).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    out += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(out)


def md_header(title: str, info: dict, copy_bps: float, numel: int) -> str:
    lines = [
        f"# {title}",
        "",
        f"- GPU: {info['gpu']} ({info.get('num_sms', '?')} SMs, L2 {info['l2_bytes'] / 2**20:.0f} MiB)",
        f"- Driver: {info['driver']}",
        f"- CUDA runtime: torch {info['cuda_runtime_torch']}"
        + (f", baracuda {info['cuda_runtime_baracuda']}" if info.get("cuda_runtime_baracuda") else ""),
        f"- torch: {info['torch']}",
        f"- baracuda: {info['baracuda']}",
        f"- Date: {info['date_utc']}",
        f"- Measured copy bandwidth (torch copy_ of 1 GiB, read+write): {copy_bps / 1e12:.3f} TB/s",
        f"- numel: {numel} (2^{math.log2(numel):.4g})" if numel > 0 else f"- numel: {numel}",
    ]
    return "\n".join(lines)


def write_results(stem: str, md: str, data: dict, out_dir: str = RESULTS_DIR) -> tuple[str, str]:
    os.makedirs(out_dir, exist_ok=True)
    md_path = os.path.join(out_dir, stem + ".md")
    js_path = os.path.join(out_dir, stem + ".json")
    with open(md_path, "w") as f:
        f.write(md.rstrip() + "\n")
    with open(js_path, "w") as f:  # compact: one line per row
        rows = data.get("rows")
        head = {k: v for k, v in data.items() if k != "rows"}
        text = json.dumps(head, indent=1, default=str)
        if rows is not None:
            body = ",\n".join("  " + json.dumps(r, default=str, separators=(",", ":")) for r in rows)
            text = text[:-2] + ',\n "rows": [\n' + body + "\n ]\n}"
        f.write(text + "\n")
    return md_path, js_path


def short_error(e: BaseException, n: int = 200) -> str:
    msg = f"{type(e).__name__}: {e}" if not isinstance(e, RuntimeError) else str(e)
    msg = " ".join(msg.split())
    return msg if len(msg) <= n else msg[: n - 3] + "..."
