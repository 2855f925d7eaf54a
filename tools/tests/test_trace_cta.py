"""tools/trace/trace_cta.py's summary of the -DSNAPMLA_TRACE_CTA printf lines (CPU): parsing, the zero point, the
per-piece epilogue times and the per-block rate, on synthetic lines whose answers are known."""


import pytest

from utils.scripts import script_module



@pytest.fixture(scope="module")
def trace_cta():
    with script_module("trace_cta", "tools/trace") as mod:
        yield mod


def _line(x, y, pieces, blocks, stamps_ns, sm=None):
    v = list(stamps_ns) + [0] * (12 - len(stamps_ns))
    return f"ctatrace wide {x} {y} {y if sm is None else sm} {pieces} {blocks} " + " ".join(str(t) for t in v)


def test_summary_of_known_timelines(trace_cta, capsys):
    t0 = 5_000_000_000  # global time of the earliest start, ns
    us = 1000
    lines = [
        "ctatrace wide 0 0 5 1 9 1 2 3 4 5 6 7 8 9 10 11 12",  # a warm-up call's line: dropped
        "=== traced call 1",
        # entry, q ready, first QK, loop end, store end (one piece of 10 blocks)
        _line(0, 0, 1, 10, [t0, t0 + 2 * us, t0 + 6 * us, t0 + 26 * us, t0 + 31 * us]),
        # two pieces of 10 blocks each, starting 1 us later; second epilogue 9 us
        _line(0, 1, 2, 20, [t0 + us, t0 + 3 * us, t0 + 7 * us, t0 + 20 * us, t0 + 25 * us, t0 + 40 * us,
                            t0 + 49 * us]),
        # a CTA with no work stamps its entry only
        _line(0, 2, 0, 0, [t0 + us // 2]),
        "=== blocks 30 parts 3 splits 4",
    ]
    trace_cta.summarize("case", "\n".join(lines))
    out = capsys.readouterr().out
    assert "wide kernel, 3 CTAs, 1 without work; blocks 30 parts 3 splits 4" in out
    assert "start     min     0.0  median     0.5  p90     1.0  max     1.0 us" in out
    assert "q ready   min     2.0  median     2.5" in out  # the CTA without work has no q ready
    assert "first QK  min     6.0  median     6.5  p90     7.0  max     7.0 us" in out
    assert "end       min    31.0  median    40.0  p90    49.0  max    49.0 us" in out
    # epilogues 5, 5 and 9 us: median 5, max 9
    assert "epilogue  per piece: median  5.00  max  9.00 us" in out
    # (31 - 6) / 10 = 2.5 and (49 - 7) / 20 = 2.1 us per block
    assert "median  2.30" in out and "max  2.50" in out
    assert "slowest: cta (0, 1) on SM 1 pieces 2 blocks 20: 1.0 3.0 7.0 20.0 25.0 40.0 49.0" in out
    assert "call 1 against call 2" not in out  # one traced call only
    assert "cta (0, 2)" not in out


def test_producer_stamps(trace_cta, capsys):
    """The ws kernel's trailing field: the producer's issue of the first query tile."""
    t0, us = 5_000_000_000, 1000
    stamps = [t0, t0 + 6 * us, t0 + 8 * us, t0 + 20 * us, t0 + 24 * us]
    line = _line(0, 0, 1, 10, stamps).replace("wide", "ws") + f" {t0 + 5 * us}"
    early = _line(0, 1, 1, 10, stamps).replace("wide", "ws") + f" {t0 + us}"
    trace_cta.summarize("case", "\n".join(["=== traced call 1", line, early]))
    out = capsys.readouterr().out
    assert "q issued  min     1.0  median     3.0  p90     5.0  max     5.0 us" in out
    assert "; q issued 5.0" in out
    # without the trailing field (narrow and wide kernels, older builds) there are no producer rows
    trace_cta.summarize("case", "\n".join(["=== traced call 1", _line(0, 0, 1, 10, stamps)]))
    assert "q issued" not in capsys.readouterr().out


def test_summary_without_trace_lines(trace_cta, capsys):
    trace_cta.summarize("case", "=== traced call 1\nno kernel output")
    assert "no ctatrace lines" in capsys.readouterr().out


def _call(rates_us_per_block, sm_of_cta):
    """One traced call: CTA y runs 10 blocks on SM sm_of_cta[y] at the given us per block."""
    t0, us = 5_000_000_000, 1000
    return [_line(0, y, 1, 10, [t0, t0 + us, t0 + 2 * us, t0 + 2 * us + int(10 * r * us), t0 + 3 * us + int(10 * r * us)],
                  sm=sm_of_cta[y]) for y, r in enumerate(rates_us_per_block)]


@pytest.mark.parametrize("same_sms", [True, False])
def test_per_sm_rates_of_two_calls(trace_cta, capsys, same_sms):
    """SMs 0..7 with fixed speeds. Call 2 puts the CTAs on the same SMs (their rates follow the SMs: r = 1) or
    moves the slow rates to other SMs (r < 0)."""
    rates = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 3.0]
    sms = list(range(8))
    second = sms if same_sms else list(reversed(sms))
    out = "\n".join(["=== traced call 1"] + _call(rates, sms) + ["=== traced call 2"] + _call(rates, second))
    trace_cta.summarize("case", out)
    text = capsys.readouterr().out
    if same_sms:
        assert "r = 1.00 over 8 SMs; slowest SMs [7, 6, 0, 1, 2] / [7, 6, 0, 1, 2]" in text
    else:
        assert "r = -0.29 over 8 SMs; slowest SMs [7, 6, 0, 1, 2] / [0, 1, 7, 6, 5]" in text  # -1.125 / 3.875
