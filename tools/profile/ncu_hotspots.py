"""Where the warps of one kernel launch wait, per SASS instruction: reads the CSV of
`ncu --section SourceCounters --page source --csv --print-source sass ...` and prints the instructions with the
most warp-stall samples (with the stall reasons that ncu names for each), then the samples summed per opcode.

    python3 tools/profile/ncu_hotspots.py ncu_source.csv [--top 40]

ncu's column names differ between versions: every column whose name contains "Samp" is a sample count, the SASS
text is the "Source" column and the address the "Address" one (found by name, case-insensitive).
"""

from __future__ import annotations

import argparse
import csv
import io
import re
from collections import defaultdict


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
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
        op = r[i_src].split()[0] if r[i_src].split() else "?"
        if op.startswith("@"):
            op = r[i_src].split()[1] if len(r[i_src].split()) > 1 else op
        per_op[op.split(".")[0]] += num(r[i_all])
    print("per opcode:", ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in sorted(per_op.items(), key=lambda kv: -kv[1])[:15]))


if __name__ == "__main__":
    main()
