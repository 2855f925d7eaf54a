"""Where the time of one decode call goes, kernel by kernel (GPU): torch.profiler over repeated calls of
SnapMLA's flash_mla_with_kvcache (Fused-Q-Quant, decode, combine) and of each importable peer of bench/peers.py
(FlashMLA BF16, FA3's MLA path, ...) on the same shape; prints each kernel's mean device time per call and the gaps.

Question it answers: at small batch (b = 1..16, 8k tokens, 35-75 us calls) is the time in the decode kernel, in
the extra kernels of the call, or between kernels?

    python3 tools/profile/profile_call.py --cases b1_sq1_h64_sk8192,b16_sq1_h128_sk8192 [--iters 20]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.bench_decode import ALL_CASES, case_inputs, random_snapmla_cache  # noqa: E402
from bench.peers import PeerInputs, available_peers  # noqa: E402
from snapmla_ext import layout as L  # noqa: E402


def kernel_times(fn, iters: int) -> tuple[dict[str, float], float]:
    """Mean device us per call of each kernel fn launches, and the mean span of a call on the device (its first
    kernel's start to its last kernel's end)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    per_kernel: dict[str, float] = defaultdict(float)
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    for e in events:
        per_kernel[e.name[:70]] += e.device_time / iters
    # The calls launch the same kernels in the same order: chunk the time-ordered events into calls and take
    # each call's first start to last end (the gaps between calls, host time, are not counted).
    events.sort(key=lambda e: e.time_range.start)
    k = len(events) // iters
    spans = [events[i + k - 1].time_range.end - events[i].time_range.start for i in range(0, k * iters, k)]
    return dict(per_kernel), sum(spans) / len(spans) if spans else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", required=True, help="comma-separated case names of bench_decode.py")
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    from snapmla_ext.decode_ops import flash_mla_with_kvcache, get_mla_metadata

    peers, missing = available_peers()
    for peer_name, why in missing.items():
        print(f"peer {peer_name} skipped: {why}")
    for name in args.cases.split(","):
        case = next(c for c in ALL_CASES if c.name == name)
        seqlens_cpu, block_table, num_blocks, q = case_inputs(case)
        seqlens = seqlens_cpu.cuda()
        cache = random_snapmla_cache(num_blocks, seed=case.s_k)
        meta, splits = get_mla_metadata(seqlens, case.s_q * case.h_q, 1)
        calls = {"snapmla": lambda: flash_mla_with_kvcache(q, cache, block_table, seqlens, L.D_CONTENT, meta, splits)}
        x = PeerInputs(q=q, block_table=block_table, seqlens=seqlens, seqlens_cpu=seqlens_cpu, num_blocks=num_blocks)
        for peer in peers:  # each keeps its cache while this case runs
            calls[peer.name] = peer.prepare(x)
        print(f"== {name}: num_sm_parts {meta.shape[0]}, splits {int(splits[-1])}")
        for who, fn in calls.items():
            per_kernel, span = kernel_times(fn, args.iters)
            busy = sum(per_kernel.values())
            print(f"  {who}: device span per call {span:.1f} us, kernels {busy:.1f} us, gaps {span - busy:.1f} us")
            for k, us in sorted(per_kernel.items(), key=lambda kv: -kv[1]):
                print(f"    {us:8.1f} us  {k}")


if __name__ == "__main__":
    main()
