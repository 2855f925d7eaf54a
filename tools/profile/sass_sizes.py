"""Code size of the decode kernels' SASS, by region (CPU; cuobjdump on the built extension or an object file).

Why: a CTA runs its piece epilogue once per piece and its masked block body once per request end, so an SM
fetches those instructions cold in the middle of a launch, from an L2 busy with the other SMs' page stream. The
traces measured 13-33 us epilogues to that and won 1.05-1.21x by shrinking one (docs/design.md
). This prints, per kernel, its instruction count and the spans that matter:
    python3 tools/profile/sass_sizes.py [path to _C*.so or a .o]    (default: the built snapmla_ext/_C*.so)
    python3 tools/profile/sass_sizes.py x.o --stalls=ws_kernel      (also each loop's stall cycles, stall_report)
  kernel  instructions  KB  | stores: first-last STG span | TMA: first-last UTMALDG span | QGMMA / HGMMA counts
tests/test_sass.py uses its tool lookup and SASS split; tests/test_sass.py test_piece_epilogues_are_compact holds
the STG spans to a budget.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INSTRUCTION_BYTES = 16
DECODE_KERNELS = ("snapmla_decode_fp8_kernel", "snapmla_decode_fp8_narrow_kernel")


def find_tool(name: str) -> Optional[str]:
    """cuobjdump / nvdisasm: on PATH, or from the nvidia-cuda-* wheels (requirements.txt)."""
    found = shutil.which(name)
    if found:
        return found
    try:
        import nvidia

        for base in nvidia.__path__:
            for sub in ("cu13", "cu12", "cuda_cuobjdump", "cuda_nvdisasm"):
                path = os.path.join(base, sub, "bin", name)
                if os.path.exists(path):
                    return path
    except ImportError:
        pass
    return None


def built_extension() -> Optional[str]:
    """This checkout's snapmla_ext/_C*.so, else the one next to an importable snapmla_ext, else
    $SNAPMLA_EXT_PATH."""
    dirs = [os.path.join(ROOT, "snapmla_ext")]
    try:
        import snapmla_ext

        dirs.append(os.path.dirname(snapmla_ext.__file__))
    except ImportError:
        pass
    for d in dirs:
        found = glob.glob(os.path.join(d, "_C*.so"))
        if found:
            return found[0]
    return os.environ.get("SNAPMLA_EXT_PATH") or None


def sass_by_function(path: str) -> dict[str, str]:
    """{mangled function name: its SASS text} of every kernel in a .so or .o (cuobjdump -sass)."""
    cuobjdump, nvdisasm = find_tool("cuobjdump"), find_tool("nvdisasm")
    if not cuobjdump or not nvdisasm:
        raise FileNotFoundError("cuobjdump/nvdisasm not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    env = dict(os.environ, PATH=os.path.dirname(nvdisasm) + os.pathsep + os.environ.get("PATH", ""))
    text = subprocess.run([cuobjdump, "-sass", path], capture_output=True, text=True, env=env, check=True).stdout
    functions = {}
    for chunk in re.split(r"\n\s*Function : ", text)[1:]:
        name, _, body = chunk.partition("\n")
        functions[name.strip()] = body
    return functions


# The start of one instruction in a cuobjdump listing: its offset comment (group 1) and an optional predicate;
# the opcode follows.
INSTRUCTION = r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?"


def offsets(sass: str, opcode: str) -> list[int]:
    """Byte offsets of the instructions `opcode` (predicated or not) in one function's SASS."""
    return [int(m.group(1), 16) for m in re.finditer(INSTRUCTION + rf"{opcode}\b", sass)]


def code_span(sass: str, opcode: str) -> tuple[int, int]:
    """(bytes from the first to the last `opcode`, inclusive, and how many there are); (0, 0) if none."""
    found = offsets(sass, opcode)
    return (found[-1] - found[0] + INSTRUCTION_BYTES, len(found)) if found else (0, 0)


def instruction_count(sass: str) -> int:
    return len(re.findall(r"/\*[0-9a-f]{4,}\*/\s+\S", sass))


def _instructions(sass: str) -> list[tuple[int, str, str]]:
    """(address, opcode with its modifiers, operands) of each instruction of one function's SASS."""
    return [(int(m.group(1), 16), m.group(2), m.group(3))
            for m in re.finditer(INSTRUCTION + r"([A-Z][A-Z0-9_.]*)([^;]*);", sass)]


def loop_spans(sass: str) -> list[tuple[int, int]]:
    """The loops of one function's SASS as (first, last) instruction addresses: from a backward branch's target to
    the branch. A barrier wait's retry path sits after the function's end and branches back into a loop, so its
    span starts inside that loop and ends outside it: only spans that nest are loops."""
    spans = [(int(m.group(1), 16), addr) for addr, op, rest in _instructions(sass) if op == "BRA"
             for m in [re.match(r"\s*(0x[0-9a-f]+)", rest)] if m and int(m.group(1), 16) < addr]
    return [(b, e) for b, e in spans if not any(b0 < b <= e0 < e for b0, e0 in spans)]


def loops(sass: str) -> list[Counter]:
    """The loops of loop_spans, each as the opcode counts of its body (base opcode: QGMMA, MUFU, ...)."""
    ins = _instructions(sass)
    return [Counter(op.split(".")[0] for addr, op, _ in ins if b <= addr <= e) for b, e in loop_spans(sass)]


# One instruction with both encoding words: its offset comment, then the low and the high 64 bits of its 128-bit
# encoding (the high word on the listing's next line).
ENCODED = r"/\*([0-9a-f]{4,})\*/[^\n]*?/\* (0x[0-9a-f]{16}) \*/\s*\n\s*/\* (0x[0-9a-f]{16}) \*/"


def stall_counts(sass: str) -> dict[int, int]:
    """{address: stall count} of each instruction. The stall count is bits 41-44 of the high encoding word (bits
    105-108 of the instruction): the cycles the warp's scheduler waits after issuing it, which ptxas sets for
    fixed-latency results (FP32, integer, uniform datapath). Variable-latency results (MUFU, LDS, SHFL, WGMMA,
    barriers) are waited for on scoreboards instead, which the count does not include."""
    return {int(m.group(1), 16): (int(m.group(3), 16) >> 41) & 0xF for m in re.finditer(ENCODED, sass)}


def loop_stalls(sass: str) -> list[tuple[tuple[int, int], int, Counter]]:
    """Per loop of loop_spans: (its span, its instruction count, the stall counts summed per base opcode). The total
    is the cycles one warp needs for an iteration on its fixed-latency schedule alone: a lower bound on the
    iteration's time, which the measured time exceeds by the scoreboard waits."""
    stalls = stall_counts(sass)
    instructions = _instructions(sass)
    out = []
    for b, e in loop_spans(sass):
        per_op: Counter = Counter()
        n = 0
        for addr, op, _ in instructions:
            if b <= addr <= e:
                per_op[op.split(".")[0]] += stalls.get(addr, 0)
                n += 1
        out.append(((b, e), n, per_op))
    return out


def stall_report(functions: dict[str, str], kernel: str, top: int = 6) -> list[str]:
    """One line per loop of the functions whose name contains `kernel`."""
    lines = []
    for name, sass in sorted(functions.items()):
        if kernel not in name:
            continue
        for (b, e), n, per_op in loop_stalls(sass):
            ops = ", ".join(f"{op} {c}" for op, c in per_op.most_common(top))
            lines.append(f"{kernel} loop {b:#x}-{e:#x}: {n} instructions, {sum(per_op.values())} stall cycles ({ops})")
    return lines


def summary(functions: dict[str, str]) -> list[str]:
    lines = []
    for kernel in DECODE_KERNELS:
        for name, sass in sorted(functions.items()):
            if kernel not in name:
                continue
            n = instruction_count(sass)
            stg, n_stg = code_span(sass, "STG")
            tma, n_tma = code_span(sass, "UTMALDG")
            lines.append(f"{kernel:34s} {n:5d} instructions {n * INSTRUCTION_BYTES / 1024:6.1f} KB | "
                         f"{n_stg:3d} STG over {stg / 1024:5.1f} KB | {n_tma:3d} UTMALDG over {tma / 1024:5.1f} KB | "
                         f"QGMMA {len(offsets(sass, 'QGMMA'))} HGMMA {len(offsets(sass, 'HGMMA'))}")
    return lines


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--stalls")]
    stalls_of = [a.partition("=")[2] for a in sys.argv[1:] if a.startswith("--stalls")]
    path = args[0] if args else built_extension()
    if not path:
        sys.exit("no built extension (snapmla_ext/_C*.so): pass a .so or .o")
    functions = sass_by_function(path)
    for line in summary(functions):
        print(line)
    for kernel in stalls_of:
        for line in stall_report(functions, kernel or "decode_fp8"):
            print(line)


if __name__ == "__main__":
    main()
