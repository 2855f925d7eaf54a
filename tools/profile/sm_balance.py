"""Summarises one log of tools/profile/ncu_sm_balance.sh: the kernel time and the SMs' active cycles (min / mean /
max over the SMs), with idle = 1 - mean / max (the share of the launch the average SM waits for the slowest)."""
import re
import sys


def parse(text):
    """{metric name: value} of the ncu metrics table (durations in us)."""
    vals = {}
    for line in text.splitlines():
        m = re.match(r"\s*(sm__cycles_active\.(?:min|avg|max)|gpu__time_duration\.sum)\s+(\S+)\s+([\d.,]+)\s*$", line)
        if m:
            v = float(m.group(3).replace(",", ""))
            vals[m.group(1)] = v * 1e-3 if m.group(2) == "ns" else v
    return vals


def summary(vals):
    keys = ("sm__cycles_active.min", "sm__cycles_active.avg", "sm__cycles_active.max")
    if not all(k in vals for k in keys):
        return "no sm__cycles_active min / avg / max in the log"
    lo, mean, hi = (vals[k] for k in keys)
    dur = vals.get("gpu__time_duration.sum")
    d = f"{dur:.1f} us, " if dur is not None else ""
    return f"{d}cycles min {lo:.0f} mean {mean:.0f} max {hi:.0f}, min/max {lo / hi:.2f}, idle {1 - mean / hi:.1%}"


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(summary(parse(f.read())))
