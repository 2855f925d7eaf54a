"""Summarises scripts/ncu_sm_balance.sh's ncu log: per-SM active cycles of one decode launch.

Prints the kernel time, the SMs' busy cycles (min / mean / max) and idle = 1 - mean / max, the share of the
launch that the average SM waits for the slowest one (what a perfectly balanced split would save at most).
"""
import re
import sys


def parse(text):
    """(duration_us, [cycles per SM]) from ncu's --print-metric-instances values output."""
    dur = None
    cycles = []
    for line in text.splitlines():
        m = re.match(r"\s*gpu__time_duration\.sum\s+(\S+)\s+([\d.,]+)", line)
        if m:
            dur = float(m.group(2).replace(",", "")) * (1e-3 if m.group(1) == "ns" else 1.0)
        m = re.match(r"\s*sm__cycles_active\.\w+\s+cycle\s+(.*)", line)
        if m and not cycles:
            vals = [v.replace(",", "") for v in m.group(1).replace(";", " ").split()]
            cycles = [float(v) for v in vals if re.fullmatch(r"[\d.]+", v)]
    return dur, cycles


def summary(dur, cycles):
    if not cycles:
        return "no sm__cycles_active values in the log"
    lo, hi = min(cycles), max(cycles)
    mean = sum(cycles) / len(cycles)
    s = sorted(cycles)
    dec = " ".join(f"{s[int(q * (len(s) - 1))] / hi:.2f}" for q in (0.1, 0.25, 0.5, 0.75, 0.9))
    d = f"{dur:.1f} us, " if dur is not None else ""
    return (f"{d}{len(cycles)} SMs, cycles min {lo:.0f} mean {mean:.0f} max {hi:.0f}, idle {1 - mean / hi:.1%}, "
            f"deciles/max 10-90%: {dec}")


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(summary(*parse(f.read())))
