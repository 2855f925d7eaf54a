"""Where the warps of one kernel launch wait, per SASS instruction: reads the CSV of
`ncu --section SourceCounters --page source --csv --print-source sass ...` and prints the instructions with the
most warp-stall samples (with the stall reasons that ncu names for each), then the samples summed per opcode, and
with --loops the samples of each loop of the kernel (sass_sizes.loop_spans on the CSV's own SASS) by stall reason:
in a warp-specialised kernel each role runs its own loop, so this is where each role's time goes.

    python3 tools/profile/ncu_hotspots.py ncu_source.csv [--top 40] [--loops]

ncu's column names differ between versions: every column whose name contains "Samp" is a sample count, the SASS
text is the "Source" column and the address the "Address" one (found by name, case-insensitive).
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
import sys
from collections import Counter, defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sass_sizes  # noqa: E402


def read_rows(path: str) -> tuple[list[str], list[list[str]]]:
    text = open(path, encoding="utf-8", errors="replace").read()
    start = text.find('"Address"')  # ncu prints its own log lines before the CSV
    if start < 0:
        raise SystemExit(f"{path}: no CSV header with an Address column")
    rows = list(csv.reader(io.StringIO(text[start:])))
    return rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]


def num(v: str) -> float:
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return 0.0


def short(name: str) -> str:
    return re.sub(r"(?i)warp stall sampling|\(all samples\)|samples", "", name).strip()


def opcode(src: str) -> str:
    """The base opcode of a SASS line ("@!P0 BRA 0x10" -> "BRA", "QGMMA.64x64x32..." -> "QGMMA")."""
    words = src.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def loop_lines(rows: list[list[str]], i_addr: int, i_src: int, i_all: int, reasons: list[int],
               header: list[str], total: float) -> list[str]:
    """One line per loop with at least 0.5 % of the samples (a barrier wait's two-instruction retry loop has
    fewer): its address span, instructions, share of all samples, the stall reasons with the most samples (ncu's
    stall_* columns, as shares of the loop's samples), and the counts of the opcodes that tell the roles apart."""
    listing = "\n".join(f"/*{int(r[i_addr], 16):04x}*/ {r[i_src]} ;" for r in rows)
    stalls = [i for i in reasons if header[i].startswith("stall_") and "issued" not in header[i].lower()] or reasons
    lines = []
    for b, e in sass_sizes.loop_spans(listing):
        body = [r for r in rows if b <= int(r[i_addr], 16) <= e]
        samples = sum(num(r[i_all]) for r in body)
        if samples < 0.005 * total:
            continue
        why = sorted(((sum(num(r[i]) for r in body), header[i].removeprefix("stall_")) for i in stalls),
                     reverse=True)[:6]
        ops = Counter(opcode(r[i_src]) for r in body)
        sig = " ".join(f"{op} {ops[op]}" for op in ("QGMMA", "HGMMA", "MUFU", "LDSM", "FFMA", "SYNCS") if ops[op])
        lines.append(f"loop {b:#x}-{e:#x}: {len(body)} instructions, {100 * samples / total:5.1f}% of the samples "
                     f"[{sig}]; " + ", ".join(f"{short(n)} {100 * v / samples:.0f}%" for v, n in why if v > 0))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--loops", action="store_true", help="also the samples of each loop by stall reason")
    args = ap.parse_args()
    header, rows = read_rows(args.csv)
    low = [h.lower() for h in header]
    i_addr = low.index("address")
    i_src = next(i for i, h in enumerate(low) if h == "source")
    samp = [i for i, h in enumerate(low) if "samp" in h]
    i_all = next((i for i in samp if "all" in low[i]), samp[0])
    reasons = [i for i, h in enumerate(low)
               if ("samp" in h or "stall" in h) and i != i_all and "not-issued" not in h and "not issued" not in h]
    total = sum(num(r[i_all]) for r in rows) or 1.0
    print(f"{len(rows)} SASS instructions, {total:.0f} stall samples ({header[i_all]})")
    ranked = sorted(rows, key=lambda r: -num(r[i_all]))[: args.top]
    for r in ranked:
        why = sorted(((num(r[i]), header[i]) for i in reasons if num(r[i]) > 0), reverse=True)[:3]
        why_s = ", ".join(f"{short(n)} {v:.0f}" for v, n in why)
        print(f"{100 * num(r[i_all]) / total:5.1f}%  {r[i_addr]:>8}  {r[i_src][:70]:<70} {why_s}")
    per_op: dict[str, float] = defaultdict(float)
    for r in rows:
        per_op[opcode(r[i_src])] += num(r[i_all])
    print("per opcode:", ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in sorted(per_op.items(), key=lambda kv: -kv[1])[:15]))
    if args.loops:
        print("\n".join(loop_lines(rows, i_addr, i_src, i_all, reasons, header, total)))


if __name__ == "__main__":
    main()
