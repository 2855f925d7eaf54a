"""Shared benchmark harness: GPU timing, a measured copy ceiling, one printed line per case, JSON results.

Timing (CUDA events, median over repetitions):
- l2="cold": before every repetition a 256 MB buffer (5x the H200's 50 MB L2) is zeroed, as triton's do_bench
  does, then the call is timed alone. The flush also keeps the GPU busy while the CPU enqueues the call, so launch
  overhead is not measured. Zeroing leaves the L2 full of dirty lines, which a timed call that streams from HBM
  writes back as its reads evict them (up to 50 MB, ~15 us of an H100's HBM time by the bytes; not measured yet);
  `set_flush_mode("read")` (bench_decode.py --flush read) reads the buffer instead, which leaves clean lines, as the
  weights and activations that an engine's projections read before the decode would.
- `graphed(fn)`: the call captured once in a CUDA graph and replayed (bench_decode.py's default, as engines run
  decode steps), timed cold as above.
- l2="hot": `inner` calls are captured in one CUDA graph and replayed (inputs stay in L2 from the previous
  call, as right after the producer kernel); time per call = replay time / inner. The graph removes the CPU's
  per-call dispatch cost (several us for a torch op), which would otherwise be timed instead of the kernel.
Copy ceiling: a device-to-device copy of `COPY_BYTES` (>> L2), counted as read + written bytes, the practical
roofline of a streaming kernel on this GPU, measured in the same run as the kernels it is compared with.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_DIR = os.path.join(REPO, "bench", "results")
FLUSH_BYTES = 256 << 20
COPY_BYTES = 1 << 30


@dataclass
class Result:
    name: str
    us: float                  # median time per call
    bytes_moved: int           # bytes read + written per call (the op's minimum traffic)
    gbps: float                # bytes_moved / us
    pct_copy: Optional[float]  # gbps / copy ceiling, percent
    l2: str                    # "cold" or "hot"
    params: dict = field(default_factory=dict)


FLUSH_MODES = ("write", "read")  # zero the flush buffer (dirty lines left in L2) / read it (clean lines)
_flush_mode = "write"
_flush_buf: Optional[torch.Tensor] = None


def set_flush_mode(mode: str) -> None:
    """How flush_l2 evicts the L2 before each cold repetition: "write" (the default) or "read"."""
    global _flush_mode
    if mode not in FLUSH_MODES:
        raise ValueError(f"flush mode: expected one of {FLUSH_MODES}, got {mode!r}")
    _flush_mode = mode


def flush_mode() -> str:
    return _flush_mode


def flush_l2() -> None:
    global _flush_buf
    if _flush_buf is None:
        _flush_buf = torch.zeros(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    if _flush_mode == "write":
        _flush_buf.zero_()
    else:
        _flush_buf.sum(dtype=torch.int64)  # every line of the buffer passes through L2; the sum is dropped


def time_cold(fn: Callable[[], object], *, reps: int = 20, warmup: int = 3) -> float:
    """Median us of fn() with a flushed L2 before every call."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        flush_l2()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def graphed(fn: Callable[[], object], *, warmup: int = 2) -> tuple[Callable[[], object], str]:
    """(a callable replaying fn captured in one CUDA graph, "graph"), as engines run their decode steps; where the
    capture fails (a call that is not capturable), (fn itself, "eager: <why>"). Warm-up runs on a side stream
    first, as torch.cuda.graph needs (lazy initialisation, workspace allocations)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            fn()
    except Exception as exc:  # whatever the call raises while capturing
        torch.cuda.synchronize()
        return fn, f"eager: capture failed: {type(exc).__name__}: {exc}"
    return graph.replay, "graph"


def sm_clock_mhz(cycles: int = 1_000_000) -> float:
    """The SM clock right now, in MHz: a one-thread kernel spins `cycles` clock64 cycles (torch.cuda._sleep)
    and the events time it (~0.5 ms at 1.98 GHz). A benchmark round that runs slower than its neighbours with
    a lower clock here was throttled, not slowed by the code."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / (start.elapsed_time(end) * 1e3)


def time_hot(fn: Callable[[], object], *, inner: int = 50, reps: int = 10) -> float:
    """Median us per call of `inner` back-to-back calls replayed from one CUDA graph (inputs hot in L2)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()  # warm-up outside the graph (lazy init, allocator)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(inner):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / inner)
    return statistics.median(times)


def copy_ceiling_gbps(nbytes: int = COPY_BYTES, reps: int = 10) -> float:
    """GB/s (read + written) of a device-to-device copy of nbytes, data >> L2."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    us = time_cold(lambda: dst.copy_(src), reps=reps)
    del src, dst
    return 2 * nbytes / us / 1e3


def measure(name: str, fn: Callable[[], object], bytes_moved: int, *, l2: str = "cold",
            ceiling_gbps: Optional[float] = None, params: Optional[dict] = None, **kw) -> Result:
    us = time_cold(fn, **kw) if l2 == "cold" else time_hot(fn, **kw)
    gbps = bytes_moved / us / 1e3
    pct = 100.0 * gbps / ceiling_gbps if ceiling_gbps else None
    return Result(name=name, us=us, bytes_moved=bytes_moved, gbps=gbps, pct_copy=pct, l2=l2, params=params or {})


def print_header() -> None:
    print(f"{'case':<44} {'L2':<4} {'us':>10} {'MB moved':>10} {'GB/s':>9} {'% copy':>7}")


def print_result(r: Result) -> None:
    pct = f"{r.pct_copy:6.1f}%" if r.pct_copy is not None else "    -  "
    print(f"{r.name:<44} {r.l2:<4} {r.us:10.2f} {r.bytes_moved / 1e6:10.2f} {r.gbps:9.1f} {pct:>7}", flush=True)


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=REPO).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def environment() -> dict:
    props = torch.cuda.get_device_properties(0)
    return {
        # SNAPMLA_GIT_REV wins: the device machine gets this working tree copied onto an older clone, so its
        # own HEAD names the wrong commit (tools/device/gpu_check.sh callers set it to the local HEAD).
        "git_revision": os.environ.get("SNAPMLA_GIT_REV") or _run(["git", "rev-parse", "--verify", "-q", "HEAD"])
        or "unknown",
        "git_dirty": None if os.environ.get("SNAPMLA_GIT_REV")
        else bool(_run(["git", "status", "--porcelain", "--untracked-files=no"])),
        "gpu": props.name,
        "sm_count": props.multi_processor_count,
        "driver": (_run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).splitlines() or ["unknown"])[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "host": platform.node(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def write_json(bench_name: str, results: list[Result], extra: dict, out_dirs: list[str]) -> list[str]:
    """Write {environment, extra, results} as <bench_name>_<UTC time>.json into each directory."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    payload = {"bench": bench_name, "environment": environment(), **extra, "results": [asdict(r) for r in results]}
    paths = []
    for d in dict.fromkeys(out_dirs):  # unique, in order
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"{bench_name}_{stamp}.json")
        with open(path, "w") as f:
            json.dump(payload, f, indent=2)
        paths.append(path)
    return paths
