"""Are some SMs of this GPU slower than others for the same work, with nothing of ours involved? (GPU, triton)

The traced decode kernels (tools/trace/trace_cta.py, 2026-12-01) had the same slowest CTA, blockIdx.y 8 on SM 12, in
both kernels and in both traced calls, with stalls of 37-98 us inside a piece's epilogue. This probe launches
one triton program per SM, `--reps` times; each program streams its own slice of a large buffer (a memory
phase, like the decode kernels' page loads) and then runs a dependent FMA chain (a compute phase), and stamps
%globaltimer around both with its %smid. Per SM: the median time of each phase over the repetitions. Printed:
the median SM, the slowest SMs and their ratio to the median, and the correlation of the per-SM times between
the first and the second half of the repetitions (near 1: the SM itself is slow; near 0: timing noise).

    python3 tools/profile/sm_probe.py [--reps 20] [--mb 1024] [--iters 20000]
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict


def per_sm(records):
    """records: [(smid, mem_ns, compute_ns)] over all repetitions -> {smid: (median mem_ns, median compute_ns)}."""
    by_sm = defaultdict(list)
    for smid, mem, comp in records:
        by_sm[smid].append((mem, comp))
    return {s: (statistics.median(m for m, _ in v), statistics.median(c for _, c in v)) for s, v in by_sm.items()}


def summary(first_half, second_half, top=5):
    """Lines of the report from two halves of the repetitions (lists of records)."""
    a, b = per_sm(first_half), per_sm(second_half)
    both = per_sm(first_half + second_half)
    lines = []
    for k, name in ((0, "memory"), (1, "compute")):
        med = statistics.median(v[k] for v in both.values())
        slow = sorted(both, key=lambda s: both[s][k], reverse=True)[:top]
        common = sorted(set(a) & set(b))
        r = (statistics.correlation([a[s][k] for s in common], [b[s][k] for s in common])
             if len(common) > 2 and len({a[s][k] for s in common}) > 1 and len({b[s][k] for s in common}) > 1
             else float("nan"))
        lines.append(f"{name:8s} median SM {med / 1e3:8.1f} us; slowest SMs "
                     + ", ".join(f"{s} {both[s][k] / med:.2f}x" for s in slow)
                     + f"; halves r = {r:.2f} over {len(common)} SMs")
    return lines


def main():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def probe(buf, out, n_per_prog, iters, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        t0 = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [pid], dtype=tl.int64, is_pure=False,
                                       pack=1)
        smid = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [pid], dtype=tl.int32, is_pure=False, pack=1)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        base = buf + pid.to(tl.int64) * n_per_prog
        for i in range(0, n_per_prog, BLOCK):
            acc += tl.load(base + i + tl.arange(0, BLOCK))
        t1 = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [pid], dtype=tl.int64, is_pure=False,
                                       pack=1)
        x = acc
        for _ in range(iters):
            x = x * 0.999 + 0.5
        t2 = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [pid], dtype=tl.int64, is_pure=False,
                                       pack=1)
        tl.store(out + 4 * pid, smid.to(tl.int64))
        tl.store(out + 4 * pid + 1, t1 - t0)
        tl.store(out + 4 * pid + 2, t2 - t1)
        tl.store(out + 4 * pid + 3, tl.sum(x, axis=0).to(tl.int64))  # keeps the chains alive

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--mb", type=int, default=1024, help="buffer streamed by all programs together (>> L2)")
    ap.add_argument("--iters", type=int, default=20000, help="FMA chain length of the compute phase")
    args = ap.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    block = 1024
    n_per_prog = (args.mb << 20) // 4 // sms // block * block
    buf = torch.ones(n_per_prog * sms, dtype=torch.float32, device="cuda")
    out = torch.empty(4 * sms, dtype=torch.int64, device="cuda")
    records = []
    for rep in range(args.reps + 2):
        probe[(sms,)](buf, out, n_per_prog, args.iters, BLOCK=block, num_warps=4)
        torch.cuda.synchronize()
        if rep >= 2:  # two warm-up launches (compilation, clocks)
            rows = out.view(sms, 4).tolist()
            records.append([(int(s), float(m), float(c)) for s, m, c, _ in rows])
    half = len(records) // 2
    flat = lambda rs: [x for r in rs for x in r]  # noqa: E731
    print(f"{sms} programs per launch, {args.reps} launches, {n_per_prog * 4 >> 20} MB per program")
    for line in summary(flat(records[:half]), flat(records[half:])):
        print(line)


if __name__ == "__main__":
    main()
