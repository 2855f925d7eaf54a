"""Who waits for whom, block by block, in a decode launch (GPU; needs a -DSNAPMLA_TRACE_BLOCKS build, trace/block.cuh).
For the ws kernel (SNAPMLA_DECODE_KERNEL=ws or q_rows >= 64) it prints per-block medians of its softmax and PV
warpgroups instead (summarize_ws).

Runs tools/trace/trace_cta.py's child per case (five warm-up calls, then traced ones) and reads the first traced
call's `blocktrace` lines:
per CTA, for each of the first 128 blocks of its walk, when the producer issued the page (after its kv_empty
wait), and when the owning math warpgroup (block n belongs to warpgroup n % 2 in both kernels) saw it arrive and
finished it. Per block n of a CTA:
  latency  arrival - issue: the page's TMA time, if the math was already waiting
  starve   arrival - the warpgroup's previous block's end: time its math warpgroup waited for the page (at a
           piece's first block it also holds the previous piece's epilogue and the query tile's wait)
  work     end - arrival: the block's QK, softmax, hand-off and PV for that warpgroup (in the wide kernel also
           the wait for the other warpgroup's hand-off and its PV of the block before)
A CTA whose lines have a gap (a line lost when the printf FIFO wrapped) is left out and counted.
Printed per case: the medians over all CTAs, then the slowest CTAs (latest last block end) with their sums,
and for the slowest one its medians by 16-block windows (a timeline: where in its walk it slowed down) and the
blocks where it lost the most against the medians.

    NVCC_APPEND_FLAGS=-DSNAPMLA_TRACE_BLOCKS python3 setup.py build_ext --inplace
    python3 tools/trace/trace_blocks.py --cases b64_sq1_h16_sk16384 [--raw DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys

UNUSED = 0xFFFFFFFF


@dataclasses.dataclass
class Cta:
    key: tuple[int, int]  # blockIdx.x, blockIdx.y
    sm: int = -1
    kernel: str = "?"
    issue: list[int] = dataclasses.field(default_factory=list)  # ns, per block of the walk
    own: dict[int, list[int]] = dataclasses.field(default_factory=dict)  # warpgroup -> [arrival, end, arrival, ...]
    # ws kernel: role (smx, pv0, pv1) -> stamps per block of the walk: smx SMX_STAMPS (ws_per_block), pv0 / pv1
    # two [hand-off seen, PV done].
    roles: dict[str, list[int]] = dataclasses.field(default_factory=dict)

    def blocks(self):
        """[(n, issue, arrival, end, previous end of the same warpgroup or None)] for the blocks with all stamps."""
        out = []
        for wg, st in self.own.items():
            prev = None
            for k in range(len(st) // 2):
                n = 2 * k + wg
                if n < len(self.issue):
                    out.append((n, self.issue[n], st[2 * k], st[2 * k + 1], prev))
                prev = st[2 * k + 1]
        return sorted(out)

    def end(self) -> int:
        return max((v[-1] for v in self.own.values() if v), default=0)


def parse(text: str) -> tuple[dict[tuple[int, int], Cta], int]:
    """The traced call's blocktrace lines (after the marker) -> (CTAs, stamps in absolute ns; how many CTAs were
    dropped for a lost line)."""
    ctas: dict[tuple[int, int], Cta] = {}
    # The first traced call's lines: between its marker and the next one (tools/trace/trace_cta.py's child traces two).
    body = text.split("=== traced call")[1] if "=== traced call" in text else ""
    chunks: dict[tuple[tuple[int, int], str], dict[int, tuple[int, list[int]]]] = {}
    for ln in body.splitlines():
        f = ln.split()
        if len(f) < 8 or f[0] != "blocktrace":
            continue
        key = (int(f[2]), int(f[3]))
        c = ctas.setdefault(key, Cta(key))
        c.sm = int(f[4])
        if f[1] != "any":
            c.kernel = f[1]
        base, first = int(f[6]), int(f[7])
        vals = [int(v) for v in f[8:]]
        chunks.setdefault((key, f[5]), {})[first] = (len(vals), [base + v for v in vals if v != UNUSED])
    broken = set()
    for (key, role), parts in chunks.items():
        # Lines hold 16 stamps from index `first`: a missing line (the printf FIFO wrapped) would shift every
        # later stamp onto the wrong block, so such a CTA is dropped.
        at = 0
        for first in sorted(parts):
            if first != at:
                broken.add(key)
            at = first + len(parts[first][1])
        stamps = [t for first in sorted(parts) for t in parts[first][1]]
        if role == "prod":
            ctas[key].issue = stamps
        elif role.startswith("math"):
            ctas[key].own[int(role[-1])] = stamps
        else:
            ctas[key].roles[role] = stamps
    for key in broken:
        del ctas[key]
    return ctas, len(broken)


def per_block(c: Cta):
    """[(n, latency, starve or None, work)] in ns."""
    return [(n, a - i, None if prev is None else a - prev, e - a) for n, i, a, e, prev in c.blocks()]


SMX_STAMPS = 7  # per block of the ws softmax warpgroup (trace/block.cuh)


def ws_per_block(c: Cta):
    """The ws kernel's blocks of one CTA: [(n, smx_work, smx_wait or None, pv_work, pv_starve or None, to_pv,
    logits, page_wait, a_issue, softmax, b_issue, publish)] in ns for the blocks with every stamp, where (QK = the
    block's QK retired, LG = its logits and row maxima done, PG = the next page in, AI = the next chain A issued,
    ST = the hand-off's stores issued, BI = the next chain B issued, PUB = its hand-off published, IN / OUT = PV
    warpgroup 0 saw the hand-off / finished the block):
      smx_work   PUB(n) - QK(n): the softmax warpgroup's k scales, logits, wait for the next page, next chain A,
                 softmax, P8, next chain B and hand-off
      smx_wait   QK(n) - PUB(n-1): what the softmax warpgroup waited for block n's QK to retire
      pv_work    OUT(n) - IN(n): PV warpgroup 0's PV and fold of the block
      pv_starve  IN(n) - OUT(n-1): what it waited for the hand-off
      to_pv      IN(n) - PUB(n): from the hand-off to PV warpgroup 0 seeing it
      logits     LG(n) - QK(n): k scales, logits and row maxima
      page_wait  PG(n) - LG(n): the wait for page n + 1's kv_full (0 at a piece's last block)
      a_issue    AI(n) - PG(n): issuing chain A of n + 1 (8 WGMMAs; 0 at a piece's last block)
      softmax    ST(n) - AI(n): exponentials, state, P8 and the hand-off's stores
      b_issue    BI(n) - ST(n): issuing chain B of n + 1 (12 WGMMAs; 0 at a piece's last block)
      publish    PUB(n) - BI(n): the proxy fence and the arrival"""
    smx, pv = c.roles.get("smx", []), c.roles.get("pv0", [])
    k = SMX_STAMPS
    out = []
    for n in range(min(len(smx) // k, len(pv) // 2)):
        qk, lg, pg, ai, st, bi, pub = smx[k * n:k * n + k]
        i, o = pv[2 * n], pv[2 * n + 1]
        wait = qk - smx[k * n - 1] if n else None
        starve = i - pv[2 * n - 1] if n else None
        out.append((n, pub - qk, wait, o - i, starve, i - pub, lg - qk, pg - lg, ai - pg, st - ai, bi - st, pub - bi))
    return out


def summarize_ws(name: str, ctas: dict[tuple[int, int], Cta], dropped: int) -> None:
    per_cta = {key: ws_per_block(c) for key, c in ctas.items()}
    busy = [ctas[key] for key, blocks in per_cta.items() if blocks]
    rows = [r for blocks in per_cta.values() for r in blocks]
    def med(k: int) -> float:
        v = [r[k] for r in rows if r[k] is not None]
        return statistics.median(v) / 1e3 if v else float("nan")

    print(f"== {name} (ws kernel, {len(busy)} CTAs with traced blocks"
          + (f", {dropped} dropped: lines lost" if dropped else "") + ")")
    print(f"  median per block: softmax work {med(1):.2f}  softmax wait {med(2):.2f}  PV work {med(3):.2f}  "
          f"PV starve {med(4):.2f}  hand-off to PV {med(5):.2f} us")
    print(f"  softmax work by part: logits {med(6):.2f}  wait for the next page {med(7):.2f}  chain A issue "
          f"{med(8):.2f}  softmax and stores {med(9):.2f}  chain B issue {med(10):.2f}  fence and arrival "
          f"{med(11):.2f} us")
    k = SMX_STAMPS
    period = [c.roles["smx"][k * n + k - 1] - c.roles["smx"][k * n - 1]
              for c in busy for n in range(1, len(c.roles["smx"]) // k)]
    if period:
        print(f"  median block period (hand-off to hand-off): {statistics.median(period) / 1e3:.2f} us")


def summarize(name: str, text: str, top: int = 3) -> None:
    ctas, dropped = parse(text)
    if any(c.roles for c in ctas.values()):
        summarize_ws(name, ctas, dropped)
        return
    busy = [c for c in ctas.values() if c.blocks()]
    if not busy:
        print(f"{name}: no blocktrace lines (build with -DSNAPMLA_TRACE_BLOCKS)")
        return
    t0 = min(min(c.issue) for c in busy if c.issue)
    rows = [r for c in busy for r in per_block(c)]
    med = lambda v: statistics.median(v) / 1e3 if v else float("nan")  # noqa: E731
    lat_med = med([r[1] for r in rows])
    starve_med = med([r[2] for r in rows if r[2] is not None])
    work_med = med([r[3] for r in rows])
    print(f"== {name} ({busy[0].kernel} kernel, {len(busy)} CTAs with traced blocks"
          + (f", {dropped} dropped: lines lost" if dropped else "") + ")")
    print(f"  median per block: latency {lat_med:.2f}  starve {starve_med:.2f}  work {work_med:.2f} us")
    ranked = sorted(busy, key=lambda c: -c.end())
    for c in ranked[:top]:
        r = per_block(c)
        starve = sum(x[2] for x in r if x[2] is not None) / 1e3
        work = sum(x[3] for x in r) / 1e3
        print(f"  cta {c.key} on SM {c.sm}: last block ends {(c.end() - t0) / 1e3:.1f} us; {len(r)} blocks, "
              f"starve {starve:.1f} us, work {work:.1f} us, max latency {max(x[1] for x in r) / 1e3:.1f} us")
    worst = ranked[0]
    lost = sorted(per_block(worst), key=lambda x: -max((x[2] or 0) / 1e3 - starve_med, x[3] / 1e3 - work_med))
    print(f"  slowest cta {worst.key} by 16-block windows (blocks: median latency / starve / work us):")
    wrows = per_block(worst)
    for w0 in range(0, len(wrows), 16):
        win = wrows[w0:w0 + 16]
        st = [x[2] for x in win if x[2] is not None]
        print(f"    {win[0][0]:3d}-{win[-1][0]:3d}: {med([x[1] for x in win]):.2f} / {med(st):.2f} / "
              f"{med([x[3] for x in win]):.2f}")
    print(f"  slowest cta {worst.key}, blocks that lost the most (n: latency / starve / work us):")
    print("    " + "  ".join(f"{n}: {lat / 1e3:.1f}/{(st or 0) / 1e3:.1f}/{wk / 1e3:.1f}" for n, lat, st, wk in lost[:8]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", required=True, help="comma-separated case names of bench/bench_decode.py")
    ap.add_argument("--raw", default=None, help="also write each case's whole output to RAW/blocks_<case>.txt")
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from trace_cta import trace_cases  # the same child process (warm-up calls, then traced ones)

    trace_cases(args.cases, args.raw, "blocks", summarize)


if __name__ == "__main__":
    main()
