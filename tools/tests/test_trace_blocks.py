"""tools/trace/trace_blocks.py's reading of the -DSNAPMLA_TRACE_BLOCKS printf lines (CPU): lines of 16 stamps
relative to a base, blocks mapped to warpgroup n % 2, the first traced call only, and the per-block latency /
starve / work on a synthetic CTA whose answers are known."""


import pytest

from utils.scripts import script_module

UNUSED = 0xFFFFFFFF


@pytest.fixture(scope="module")
def tb():
    with script_module("trace_blocks", "tools/trace") as mod:
        yield mod


def _lines(kernel, x, y, sm, role, base, stamps):
    out = []
    for i in range(0, len(stamps), 16):
        v = stamps[i:i + 16] + [UNUSED] * (16 - len(stamps[i:i + 16]))
        out.append(f"blocktrace {kernel} {x} {y} {sm} {role} {base} {i} " + " ".join(str(t) for t in v))
    return out


def _cta(y, base, n_blocks, slow_block=None):
    """Producer issues block n at 1000 n ns; it arrives 400 ns later; each block's work is 1500 ns, 9000 for
    slow_block; warpgroup n % 2 owns block n (so a warpgroup's blocks are 2000 ns apart when nothing is slow)."""
    issue = [1000 * n for n in range(n_blocks)]
    own = {0: [], 1: []}
    end = {0: 0, 1: 0}
    for n in range(n_blocks):
        wg = n % 2
        arrival = max(issue[n] + 400, end[wg])
        e = arrival + (9000 if n == slow_block else 1500)
        own[wg] += [arrival, e]
        end[wg] = e
    lines = _lines("any", 0, y, 7 + y, "prod", base, issue)
    for wg in (0, 1):
        lines += _lines("narrow", 0, y, 7 + y, f"math{wg}", base, own[wg])
    return lines


def test_parse_maps_blocks_to_warpgroups(tb):
    text = "\n".join(["blocktrace any 0 9 1 prod 5 0 1 2", "=== traced call 1"] + _cta(0, 10**9, 20)
                     + ["=== traced call 2"] + _cta(0, 2 * 10**9, 20, slow_block=3))
    ctas, dropped = tb.parse(text)
    assert list(ctas) == [(0, 0)] and dropped == 0  # the warm-up line and the second call are ignored
    c = ctas[(0, 0)]
    assert c.kernel == "narrow" and c.sm == 7 and len(c.issue) == 20  # two lines of the producer, 16 + 4
    rows = tb.per_block(c)
    assert [r[0] for r in rows] == list(range(20))
    assert all(lat == 400 for _, lat, _, _ in rows) and all(wk == 1500 for *_, wk in rows)
    # a warpgroup's blocks arrive 2000 ns apart and take 1500: it waits 500 ns for each but its first
    assert [st for _, _, st, _ in rows[:4]] == [None, None, 500, 500]


def test_slow_block_is_named_first(tb, capsys):
    text = "\n".join(["=== traced call 1"] + _cta(0, 10**9, 20) + _cta(1, 10**9 + 50, 20, slow_block=6))
    tb.summarize("case", text)
    out = capsys.readouterr().out
    assert "narrow kernel, 2 CTAs with traced blocks" in out
    assert "median per block: latency 0.40" in out and "work 1.50 us" in out
    lines = out.splitlines()
    first_cta = next(ln for ln in lines if ln.strip().startswith("cta "))
    assert first_cta.strip().startswith("cta (0, 1) on SM 8")  # the CTA with the slow block ends last
    # The slow block's CTA by 16-block windows: its first 16 blocks at the medians; blocks 16-19 are reached late
    # by a warpgroup still behind from block 6's 9 us, so their latency (counted from the issue) grows to 2.65 us
    # and their starve shrinks: the page waited for the math, not the math for the page.
    windows = [ln.strip() for ln in lines if ln.strip()[:1].isdigit() and ln.split(":")[0].count("-") == 1]
    assert windows == ["0- 15: 0.40 / 0.50 / 1.50", "16- 19: 2.65 / 0.25 / 1.50"], windows
    lost = lines[lines.index(next(ln for ln in lines if "lost the most" in ln)) + 1]
    assert lost.strip().startswith("6: 0.4/")  # block 6's 9 us of work
    assert "/9.0" in lost.split()[1]


def test_a_lost_line_drops_its_cta(tb, capsys):
    lines = _cta(0, 10**9, 40) + _cta(1, 10**9, 40)
    lost = next(i for i, ln in enumerate(lines) if ln.startswith("blocktrace any 0 1 ") and " prod " in ln
                and ln.split()[7] == "16")  # CTA 1's producer stamps 16..31
    text = "\n".join(["=== traced call 1"] + lines[:lost] + lines[lost + 1:])
    ctas, dropped = tb.parse(text)
    assert list(ctas) == [(0, 0)] and dropped == 1
    tb.summarize("case", text)
    assert "1 CTAs with traced blocks, 1 dropped: lines lost" in capsys.readouterr().out


def test_summary_without_lines(tb, capsys):
    tb.summarize("case", "=== traced call 1\nno kernel output")
    assert "no blocktrace lines" in capsys.readouterr().out


def _ws_cta(y, base, n_blocks, softmax_ns=2000, pv_ns=1500, hop_ns=100, page_ns=200):
    """The ws kernel's roles: the softmax warpgroup's QK of block n retires 300 ns after the previous hand-off, its
    logits take 400 ns, then it waits page_ns for the next page, issues chain A in 100 ns, runs the softmax and
    stores for 500 ns, issues chain B in 150 ns, and its hand-off follows softmax_ns after the QK; PV warpgroup 0
    sees it hop_ns later (or when its previous block is done) and takes pv_ns."""
    smx, pv = [], []
    pub = 0
    out = 0
    for n in range(n_blocks):
        qk = pub + 300
        pub = qk + softmax_ns
        i = max(pub + hop_ns, out)
        out = i + pv_ns
        pg = qk + 400 + page_ns
        smx += [qk, qk + 400, pg, pg + 100, pg + 600, pg + 750, pub]
        pv += [i, out]
    lines = _lines("any", 0, y, 3, "prod", base, [100 * n for n in range(n_blocks)])
    lines += _lines("ws", 0, y, 3, "smx", base, smx)
    lines += _lines("ws", 0, y, 3, "pv0", base, pv)
    return lines


def test_ws_roles(tb, capsys):
    text = "\n".join(["=== traced call 1"] + _ws_cta(0, 10**9, 18) + _ws_cta(1, 10**9, 18, softmax_ns=2400))
    ctas, dropped = tb.parse(text)
    assert dropped == 0 and ctas[(0, 0)].roles["smx"][:7] == [10**9 + t for t in (300, 700, 900, 1000, 1500, 1650, 2300)]
    rows = tb.ws_per_block(ctas[(0, 0)])
    # 18 blocks x 7 softmax stamps = 126 of the kernel's 128: all 18 blocks are read, none shifted onto another.
    assert len(rows) == 18
    assert rows[0] == (0, 2000, None, 1500, None, 100, 400, 200, 100, 500, 150, 650)
    # PV idles from 3900 to the next hand-off at 4600 + 100 ns
    assert rows[1] == (1, 2000, 300, 1500, 800, 100, 400, 200, 100, 500, 150, 650)
    tb.summarize("case", text)
    out = capsys.readouterr().out
    assert "ws kernel, 2 CTAs with traced blocks" in out
    assert "softmax work 2.20" in out and "softmax wait 0.30" in out and "PV work 1.50" in out
    assert "median block period (hand-off to hand-off): 2.50 us" in out
    # The second CTA's 400 ns more of softmax work land in its last part: the median of 650 and 1050 ns.
    assert ("logits 0.40  wait for the next page 0.20  chain A issue 0.10  softmax and stores 0.50  chain B issue "
            "0.15  fence and arrival 0.85 us") in out
