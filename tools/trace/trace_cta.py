"""Where a decode kernel's time goes outside its blocks (GPU, needs a build with -DSNAPMLA_TRACE_CTA, trace/cta.cuh):
runs one flash_mla_with_kvcache call per case (after five warm-up calls), reads the kernel's per-CTA printf lines
(global time stamps) and prints, relative to the earliest CTA start:

  start     math entry of each CTA (after setmaxnreg and the PDL wait): min / median / max
  q issued  the producer's issue of the first query tile (ws kernel only)
  q ready   first query tile in shared memory
  first QK  first block's QK retired (the first page's TMA latency is in here)
  pieces    per CTA: end of each piece's block loop and of its store
  end       the CTA's last store: median / max (the kernel's tail is max - median)
  (CTAs without work, which stamp only their entry, count for start only)

and each CTA's time from its first QK to its end divided by its blocks (us per block, epilogues included).
A second traced call of the same inputs then tells whether that rate belongs to the SM: the correlation of the
per-SM rates of the two calls (by %smid; near 1: some SMs are slower than others for the same work, which a
static plan could weigh; near 0: the slow CTAs are a matter of timing, which only a dynamic split helps).

    NVCC_APPEND_FLAGS=-DSNAPMLA_TRACE_CTA python3 setup.py build_ext --inplace
    python3 tools/trace/trace_cta.py --cases b16_sq1_h64_sk8192,b64_sq1_h16_sk16384
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def raise_printf_fifo(nbytes: int = 64 << 20) -> bool:
    """cudaDeviceSetLimit(cudaLimitPrintfFifoSize): the default 1 MB FIFO wraps under a -DSNAPMLA_TRACE_BLOCKS
    build's ~24 lines per CTA at 264 CTAs. Through the CUDA runtime torch loaded (found in /proc/self/maps);
    before any kernel that prints. False when it cannot (the lines may then wrap; trace_blocks.py drops such CTAs)."""
    import ctypes

    import torch

    torch.cuda.init()
    try:
        with open("/proc/self/maps") as f:
            path = next(ln.split()[-1] for ln in f if "libcudart" in ln)
    except (OSError, StopIteration):
        return False
    return ctypes.CDLL(path).cudaDeviceSetLimit(ctypes.c_int(1), ctypes.c_size_t(nbytes)) == 0


def run_case(name: str) -> None:
    """Child process: warm-up calls, a marker line, one traced call (CUDA printf goes to this stdout)."""
    import torch

    if not raise_printf_fifo():
        print("note: printf FIFO left at its default size", file=sys.stderr)

    from bench.bench_decode import ALL_CASES, case_inputs, random_snapmla_cache
    from snapmla_ext import layout as L
    from snapmla_ext.decode_ops import flash_mla_with_kvcache, get_mla_metadata

    case = next(c for c in ALL_CASES if c.name == name)
    seqlens_cpu, block_table, num_blocks, q = case_inputs(case)
    seqlens = seqlens_cpu.cuda()
    cache = random_snapmla_cache(num_blocks, seed=case.s_k)
    meta, splits = get_mla_metadata(seqlens, case.s_q * case.h_q, 1)
    for _ in range(5):  # warm-up calls (clocks, caches); their lines are dropped
        flash_mla_with_kvcache(q, cache, block_table, seqlens, L.D_CONTENT, meta, splits)
    torch.cuda.synchronize()
    for k in (1, 2):
        print(f"=== traced call {k}", flush=True)
        flash_mla_with_kvcache(q, cache, block_table, seqlens, L.D_CONTENT, meta, splits)
        torch.cuda.synchronize()
    print(f"=== blocks {int(((seqlens_cpu + 63) // 64).sum())} parts {meta.shape[0]} splits {int(splits[-1])}",
          flush=True)
    for p, row in enumerate(meta.tolist()):  # the plan, for --raw logs: begin_req begin_block end_req end_block ...
        print("metarow", p, *row, flush=True)


def quantile(v: list[float], f: float) -> float:
    return sorted(v)[min(len(v) - 1, int(f * len(v)))]


@dataclasses.dataclass
class Cta:
    kernel: str
    x: int
    y: int
    sm: int  # %smid
    pieces: int
    blocks: int
    stamps: list[int]  # ns: entry, q ready, first QK, then (loop end, store end) per piece; entry only if no work
    q_issue: int = 0  # ns: the producer's issue of the first query tile (ws kernel; 0: not stamped)


def parse(lines: list[str]) -> list[Cta]:
    ctas = []
    for ln in lines:
        f = ln.split()
        if len(f) >= 8 and f[0] == "ctatrace":
            # 12 timeline stamps (0 = not stamped), then (newer builds) the producer's query tile issue
            ctas.append(Cta(f[1], int(f[2]), int(f[3]), int(f[4]), int(f[5]), int(f[6]),
                            [int(x) for x in f[7:19] if int(x) != 0], int(f[19]) if len(f) > 19 else 0))
    return ctas


def block_rate(c: Cta) -> float:
    """us per block from the CTA's first QK to its end (epilogues included)."""
    return (c.stamps[-1] - c.stamps[2]) / 1e3 / c.blocks


def sm_rates(ctas: list[Cta]) -> dict[int, float]:
    """Per SM: the mean block rate of its CTAs with work (several with more CTAs than SMs)."""
    per_sm: dict[int, list[float]] = {}
    for c in ctas:
        if c.pieces > 0 and c.blocks > 0 and len(c.stamps) > 2:
            per_sm.setdefault(c.sm, []).append(block_rate(c))
    return {sm: statistics.fmean(v) for sm, v in per_sm.items()}


def correlation(a: dict[int, float], b: dict[int, float]) -> tuple[float, int]:
    """Pearson r of two per-SM maps over the SMs in both (nan below 2 SMs or without spread), and that count."""
    sms = sorted(set(a) & set(b))
    try:
        return statistics.correlation([a[s] for s in sms], [b[s] for s in sms]), len(sms)
    except statistics.StatisticsError:  # fewer than 2 points, or one side constant
        return float("nan"), len(sms)


def summarize(name: str, out: str) -> None:
    calls = out.split("=== traced call")[1:]  # [0] is the warm-up calls' output
    lines = calls[0].splitlines() if calls else []
    ctas = parse(lines)
    info = next((ln for ln in lines if ln.startswith("=== blocks")), "")
    if not ctas:
        print(f"{name}: no ctatrace lines (build with -DSNAPMLA_TRACE_CTA)")
        return
    t0 = min(c.stamps[0] for c in ctas)
    us = lambda x: (x - t0) / 1e3  # noqa: E731
    busy = [c for c in ctas if c.pieces > 0]
    print(f"== {name} ({ctas[0].kernel} kernel, {len(ctas)} CTAs, {len(ctas) - len(busy)} without work; {info[4:]})")
    rows = (("start", [us(c.stamps[0]) for c in ctas]),
            ("q issued", [us(c.q_issue) for c in busy if c.q_issue]),
            ("q ready", [us(c.stamps[1]) for c in busy if len(c.stamps) > 1]),
            ("first QK", [us(c.stamps[2]) for c in busy if len(c.stamps) > 2]),
            ("end", [us(c.stamps[-1]) for c in busy]))
    for label, v in rows:
        if v:
            print(f"  {label:<9} min {min(v):7.1f}  median {statistics.median(v):7.1f}  p90 {quantile(v, 0.9):7.1f}  "
                  f"max {max(v):7.1f} us")
    # Per piece: block loop end -> store end (the epilogue).
    epi = [(ev[k + 1] - ev[k]) / 1e3 for c in busy for ev in [c.stamps[3:]] for k in range(0, len(ev) - 1, 2)]
    if epi:
        print(f"  epilogue  per piece: median {statistics.median(epi):5.2f}  max {max(epi):5.2f} us")
    # Each CTA's time from its first QK to its end per block: the block rate, and how it spreads.
    rate = [block_rate(c) for c in busy if len(c.stamps) > 2 and c.blocks > 0]
    if rate:
        print(f"  us per block (first QK -> end, epilogues included): median {statistics.median(rate):5.2f}  "
              f"p90 {quantile(rate, 0.9):5.2f}  max {max(rate):5.2f}")
    for c in sorted(busy, key=lambda c: -c.stamps[-1])[:3]:
        print(f"  slowest: cta ({c.x}, {c.y}) on SM {c.sm} pieces {c.pieces} blocks {c.blocks}: "
              + " ".join(f"{us(x):.1f}" for x in c.stamps)
              + (f"; q issued {us(c.q_issue):.1f}" if c.q_issue else ""))
    if len(calls) > 1:
        first, second = sm_rates(ctas), sm_rates(parse(calls[1].splitlines()))
        r, n = correlation(first, second)
        slow = lambda m: [s for s, _ in sorted(m.items(), key=lambda kv: -kv[1])[:5]]  # noqa: E731
        print(f"  per-SM block rate, call 1 against call 2: r = {r:.2f} over {n} SMs; slowest SMs {slow(first)} / "
              f"{slow(second)}")


def trace_cases(cases: str, raw: str | None, raw_prefix: str, summarize_case) -> None:
    """Runs this script's child (run_case) per case of the comma-separated list, in a process of its own, and hands
    its output to summarize_case(name, text); with raw, also writes it to raw/<raw_prefix>_<case>.txt. Shared with
    tools/trace/trace_blocks.py, whose -DSNAPMLA_TRACE_BLOCKS lines the same child prints."""
    for name in cases.split(","):
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--cases", name, "--child", name],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            print(f"{name}: child failed\n{r.stderr[-2000:]}")
            continue
        if raw:
            os.makedirs(raw, exist_ok=True)
            with open(os.path.join(raw, f"{raw_prefix}_{name}.txt"), "w") as f:
                f.write(r.stdout)
        summarize_case(name, r.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", required=True, help="comma-separated case names of bench/bench_decode.py")
    ap.add_argument("--raw", default=None, help="also write each case's whole output (every CTA's stamps and the "
                    "plan's rows) to RAW/trace_<case>.txt")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        run_case(args.child)
        return
    trace_cases(args.cases, args.raw, "trace", summarize)


if __name__ == "__main__":
    main()
