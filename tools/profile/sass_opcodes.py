"""Instruction counts of each kernel's SASS by opcode class (CPU; cuobjdump on the built extension or an object).

Why: a change of primitives (our PTX wrappers for CUTLASS/CuTe's, say) should leave the machine code the same in
substance. Counting by class makes two builds comparable where instruction order and registers differ:
    python3 tools/profile/sass_opcodes.py [_C*.so or .o] [--json OUT]          one build, a table per kernel
    python3 tools/profile/sass_opcodes.py --diff BEFORE.json AFTER.json          classes that moved, in percent
Classes: QGMMA (FP8 WGMMA), HGMMA (BF16), WARPGROUP (arrive/depbar), TMA (UTMALDG/UBLKCP/UTMAPF), SYNCS
(mbarrier), BAR (named barriers), LDSM/STSM, LDS/STS, LDG/STG, MUFU, FP32 (FADD/FMUL/FFMA/FMNMX), CVT (F2FP/F2F/
I2F/F2I), LOCAL (LDL/STL: spills), BRA, OTHER.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sass_sizes  # noqa: E402

CLASSES = (
    ("QGMMA", ("QGMMA",)), ("HGMMA", ("HGMMA",)), ("WARPGROUP", ("WARPGROUP", "WARPSYNC")),
    ("TMA", ("UTMALDG", "UBLKCP", "UTMAPF", "UTMACCTL")), ("SYNCS", ("SYNCS",)), ("BAR", ("BAR",)),
    ("LDSM/STSM", ("LDSM", "STSM")), ("LDS/STS", ("LDS", "STS")), ("LDG/STG", ("LDG", "STG")),
    ("MUFU", ("MUFU",)), ("FP32", ("FADD", "FMUL", "FFMA", "FMNMX", "FSEL", "FSETP")),
    ("CVT", ("F2FP", "F2F", "I2F", "F2I", "F2IP")), ("LOCAL", ("LDL", "STL")), ("BRA", ("BRA", "BSSY", "BSYNC")),
)
_OPCODE = re.compile(sass_sizes.INSTRUCTION + r"([A-Z][A-Z0-9_]*)")


def classify(opcode: str) -> str:
    for name, prefixes in CLASSES:
        if opcode in prefixes or any(opcode == p or opcode.startswith(p + "_") for p in prefixes):
            return name
    return "OTHER"


def counts(sass: str) -> dict[str, int]:
    """{class: instructions} of one function's SASS listing (NOP padding left out)."""
    c = Counter()
    for op in (m.group(2) for m in _OPCODE.finditer(sass)):
        if op != "NOP":
            c[classify(op)] += 1
    c["TOTAL"] = sum(c.values())
    return dict(c)


def normal_name(mangled: str) -> str:
    """The mangled name without the per-file hash of an anonymous namespace, so two builds' names match."""
    return re.sub(r"_GLOBAL__N__[0-9a-f]+_\d+_(\w+?)_[0-9a-f]{8}", r"_GLOBAL__N_\1", mangled)


def table(path: str) -> dict[str, dict[str, int]]:
    """{mangled kernel name: counts} of every function in the build."""
    return {normal_name(name): counts(sass) for name, sass in sass_sizes.sass_by_function(path).items()}


def diff(before: dict, after: dict, tolerance_pct: float = 3.0) -> list[str]:
    """Lines for each kernel present in both: the classes whose count moved by more than tolerance_pct."""
    lines = []
    for name in sorted(set(before) | set(after)):
        if name not in before or name not in after:
            lines.append(f"{name[:90]}: only in {'after' if name in after else 'before'}")
            continue
        b, a = before[name], after[name]
        moved = []
        for cls in sorted(set(b) | set(a)):
            x, y = b.get(cls, 0), a.get(cls, 0)
            if x != y and (x == 0 or abs(y - x) / x * 100 > tolerance_pct):
                moved.append(f"{cls} {x}->{y}")
        lines.append(f"{name[:90]}: {'same within %g %%' % tolerance_pct if not moved else ', '.join(moved)} "
                     f"(total {b.get('TOTAL', 0)}->{a.get('TOTAL', 0)})")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", nargs="?", help="_C*.so or .o (default: the built extension)")
    ap.add_argument("--json", help="write {kernel: counts} here")
    ap.add_argument("--diff", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two --json files")
    ap.add_argument("--tolerance", type=float, default=3.0, help="percent a class may move in --diff (3)")
    args = ap.parse_args()
    if args.diff:
        with open(args.diff[0]) as f, open(args.diff[1]) as g:
            print("\n".join(diff(json.load(f), json.load(g), args.tolerance)))
        return 0
    path = args.path or sass_sizes.built_extension()
    if not path:
        print("no built extension (snapmla_ext/_C*.so) and no path given")
        return 2
    t = table(path)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(t, f, indent=1)
    for name, c in sorted(t.items()):
        print(name[:110])
        print("   " + "  ".join(f"{k} {v}" for k, v in sorted(c.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
