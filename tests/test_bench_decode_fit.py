"""bench/bench_decode.py --fit (CPU): each side's time over context length as a fixed part and a slope, read from a
result file. Synthetic files with known lines check the fit, which series and sides it keeps, and its residual."""

import json

import pytest

from utils.scripts import script_module


@pytest.fixture(scope="module")
def bench():
    with script_module("bench_decode", folder="bench") as mod:
        yield mod


PEERS = {
    "fa3_bf16": {"label": "FA3 BF16", "precision": "bf16", "note": ""},
    "vllm_fp8": {"label": "vLLM FP8", "precision": "fp8", "note": ""},
}


def _result(b, s_q, h_q, s_k, us, prequant=None, peers=None, varlen=False):
    return {"name": f"b{b}_sq{s_q}_h{h_q}_sk{s_k}", "us": us,
            "params": {"b": b, "s_q": s_q, "h_q": h_q, "s_k": s_k, "varlen": varlen, "prequant_q_us": prequant,
                       "peers": {n: {"us": t} for n, t in (peers or {}).items()}}}


def _write(tmp_path, results, **extra):
    path = tmp_path / "bench_decode_test.json"
    env = {"gpu": "NVIDIA H100 80GB HBM3", "git_revision": "abc1234", "date": "2026-12-08T00:00:00+00:00"}
    path.write_text(json.dumps({"environment": env, "peers": PEERS, **extra, "results": results}))
    return str(path)


def _rows(table: str) -> dict[tuple[str, str], list[str]]:
    """Table rows by (series, side): the remaining cells."""
    out = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 7 and cells[0][0].isdigit():
            out[(cells[0], cells[2])] = cells[3:]
    return out


def test_lines_are_recovered_and_compared_with_ours(bench, tmp_path):
    rs = []
    for s_k in (16384, 32768, 65536):
        x = s_k / 1000
        # FA3 streams 1.8x slower per token; vLLM's kernel is missing at one length: no row for it.
        rs.append(_result(64, 1, 64, s_k, 40.0 + 13.0 * x, prequant=37.5 + 13.0 * x,
                          peers={"fa3_bf16": 31.0 + 23.4 * x, **({"vllm_fp8": 50.0} if s_k != 32768 else {})}))
    # Ignored: a partial last page (masked code), a varlen case and a series of lengths one token apart.
    rs.append(_result(64, 1, 64, 16383, 999.0, peers={"fa3_bf16": 999.0}))
    rs.append(_result(64, 1, 64, 32768, 777.0, varlen=True))
    rs += [_result(16, 1, 64, 8191, 59.0), _result(16, 1, 64, 8192, 58.0)]
    rows = _rows(bench.length_fit(_write(tmp_path, rs)))
    assert set(rows) == {("64, 1, 64", "ours"), ("64, 1, 64", "ours, q pre-quantized"), ("64, 1, 64", "FA3 BF16")}
    fixed, slope, resid, rel = rows[("64, 1, 64", "ours")]
    assert (fixed, slope, resid) == ("40.0", "13.00", "0.0")
    # 64 requests x 1000 tokens x 644 B per 13 us.
    assert rel == f"1.00x ({64 * 1000 * 644 / 13e-6 / 1e12:.2f} TB/s of KV)"
    assert rows[("64, 1, 64", "ours, q pre-quantized")][:2] == ["37.5", "13.00"]
    assert rows[("64, 1, 64", "FA3 BF16")] == ["31.0", "23.40", "0.0", "1.80x"]


def test_the_residual_shows_a_bend_and_two_lengths_have_none(bench, tmp_path):
    rs = [_result(64, 1, 128, 16384, 100.0), _result(64, 1, 128, 32768, 230.0), _result(64, 1, 128, 65536, 400.0),
          _result(1, 1, 64, 8192, 22.0), _result(1, 1, 64, 131072, 50.0)]
    rows = _rows(bench.length_fit(_write(tmp_path, rs)))
    fixed, slope, resid, _ = rows[("64, 1, 128", "ours")]
    xs, ys = [16.384, 32.768, 65.536], [100.0, 230.0, 400.0]
    f, s, r = bench.line_fit(xs, ys)
    assert r > 10.0 and (fixed, slope, resid) == (f"{f:.1f}", f"{s:.2f}", f"{r:.1f}")
    assert rows[("1, 1, 64", "ours")][2] == "-"


def test_a_line_needs_two_lengths(bench):
    with pytest.raises(ValueError, match="two or more distinct lengths"):
        bench.line_fit([16.384, 16.384], [1.0, 2.0])


def test_the_footer_names_the_flush_mode(bench, tmp_path):
    rs = [_result(1, 1, 64, 8192, 22.0), _result(1, 1, 64, 131072, 50.0)]
    # Result files from before the mode was recorded zeroed the buffer.
    assert "L2 flush by write (bench_decode_test.json)" in bench.length_fit(_write(tmp_path, rs))
    assert "L2 flush by read (bench_decode_test.json)" in bench.length_fit(_write(tmp_path, rs, l2_flush="read"))
