"""bench/bench_decode.py's printed line (CPU): with FlashMLA measured in several rounds it shows each round's
time and the SM clock (NVML's median during the round with its clock-event reasons when sampled, else the clock
after the round), so a throttled round can be told from a slow kernel in the device's output."""

from types import SimpleNamespace

import pytest

from utils.scripts import script_module


@pytest.fixture(scope="module")
def bench():
    with script_module("bench_decode", folder="bench") as mod:
        yield mod


def _result(**params):
    base = dict(speedup=1.5, baseline="measured", tflops=100.0, kv_gbps=3000.0, pct_roofline=70.0,
                ours_rounds_us=[100.0, 120.0], ours_rounds_sm_mhz=[1980.0, 1710.0],
                baseline_rounds_us=[150.0, 151.0], baseline_rounds_sm_mhz=[1980.0, 1975.0])
    base.update(params)
    return SimpleNamespace(name="b64_sq1_h128_sk16384", us=100.0, params=base)


def test_rounds_and_clocks_are_printed(bench, capsys):
    bench.print_line(_result())
    line = capsys.readouterr().out
    assert "ours 100.0@1980/120.0@1710" in line and "FlashMLA 150.0@1980/151.0@1975" in line, line
    assert "1.50x (measured)" in line


def test_one_round_prints_no_rounds(bench, capsys):
    bench.print_line(_result(ours_rounds_us=[100.0], ours_rounds_sm_mhz=[1980.0], baseline_rounds_us=[150.0],
                             baseline_rounds_sm_mhz=[1980.0]))
    bench.print_line(_result(ours_rounds_us=[100.0], ours_rounds_sm_mhz=[1980.0], baseline_rounds_us=None,
                             baseline_rounds_sm_mhz=None, speedup=None))
    out = capsys.readouterr().out
    assert "rounds" not in out, out


def test_our_rounds_alone_are_printed_without_flashmla(bench, capsys):
    """--ours-rounds without FlashMLA: our rounds and clocks, no FlashMLA part."""
    bench.print_line(_result(baseline_rounds_us=None, baseline_rounds_sm_mhz=None, speedup=None))
    line = capsys.readouterr().out
    assert "[rounds us@MHz after: ours 100.0@1980/120.0@1710]" in line and "FlashMLA" not in line, line


def _during(mhz, reasons=()):
    return dict(sm_mhz_median=mhz, sm_mhz_min=mhz - 10, power_w_median=600.0, temp_c_max=70.0,
                reasons=list(reasons), samples=40)


def test_clock_during_the_round_and_its_reasons_replace_the_clock_after(bench, capsys):
    bench.print_line(_result(ours_rounds_nvml=[_during(1830.0), _during(1605.0, ["sw_power_cap"])],
                             baseline_rounds_nvml=[_during(1700.0), _during(1690.0)]))
    line = capsys.readouterr().out
    assert "[rounds us@MHz during (NVML): ours 100.0@1830/120.0@1605(sw_power_cap)" in line, line
    assert "FlashMLA 150.0@1700/151.0@1690]" in line, line


def test_a_round_without_nvml_falls_back_to_the_clock_after(bench, capsys):
    bench.print_line(_result(ours_rounds_nvml=[None, None], baseline_rounds_nvml=None))
    line = capsys.readouterr().out
    assert "[rounds us@MHz after: ours 100.0@1980/120.0@1710, FlashMLA 150.0@1980/151.0@1975]" in line, line


def _peer(label, precision, us, speedup):
    return dict(label=label, precision=precision, note="", us=us, speedup=speedup, rounds_us=[us, us + 1.0],
                rounds_sm_mhz=[1980.0, 1970.0], rounds_nvml=[None, None])


def test_other_peers_and_the_best_bf16_ratio_are_printed(bench, capsys):
    peers = {"flashmla_bf16": _peer("FlashMLA BF16", "bf16", 150.0, 1.5),
             "fa3_bf16": _peer("FA3 BF16", "bf16", 130.0, 1.3), "vllm_fp8": _peer("vLLM FP8", "fp8", 105.0, 1.05)}
    bench.print_line(_result(peers=peers, best_bf16_peer="fa3_bf16", speedup_vs_best_bf16=1.3))
    line = capsys.readouterr().out
    assert "1.50x (measured) | FA3 BF16 1.30x | vLLM FP8 1.05x | best BF16 1.30x" in line, line
    assert "FA3 BF16 130.0@1980/131.0@1970" in line and "vLLM FP8 105.0@1980/106.0@1970" in line, line


def test_sides_that_ran_eager_are_named(bench, capsys):
    peers = {"fa3_bf16": dict(_peer("FA3 BF16", "bf16", 130.0, 1.3), mode="eager: capture failed: RuntimeError")}
    bench.print_line(_result(peers=peers, timing="graph"))
    assert "[eager: FA3 BF16]" in capsys.readouterr().out
    bench.print_line(_result(peers=None, timing="eager"))
    assert "[eager: ours]" in capsys.readouterr().out


def test_prequantized_q_time_and_the_fp8_peer_ratio(bench, capsys):
    """Ours with q quantized before the call (as vLLM's FP8 kernel is timed), and that peer over it."""
    bench.print_line(_result(prequant_q_us=91.5, vllm_fp8_vs_prequant=1.04))
    bench.print_line(_result(prequant_q_us=91.5))
    out = capsys.readouterr().out.splitlines()
    assert "[q pre-quantized: 91.5 us, vLLM FP8 1.04x]" in out[0], out[0]
    assert "[q pre-quantized: 91.5 us]" in out[1], out[1]


def test_markdown_table_takes_the_faster_bf16_peer_per_case(bench, tmp_path):
    """--table JSON: README's table from a run's file; the faster BF16 peer is named per case, a peer missing in a
    case prints "-" and its ratio too, a partial length keeps its token count."""
    import json

    def case(b, h_q, s_k, ours, got, varlen=False):  # the fields run_case records
        bf16 = [n for n in got if n.endswith("bf16")]
        best = min(bf16, key=got.get) if bf16 else None
        return dict(name="x", us=ours, params=dict(b=b, s_q=1, h_q=h_q, s_k=s_k, varlen=varlen, best_bf16_peer=best,
                                                   speedup_vs_best_bf16=got[best] / ours if best else None,
                                                   peers={n: dict(us=t, speedup=t / ours) for n, t in got.items()}))

    data = dict(environment=dict(gpu="NVIDIA H200", torch="2.11.0", git_revision="abc1234", date="2026-12-07"),
                peers={"flashmla_bf16": dict(label="FlashMLA BF16", precision="bf16"),
                       "fa3_bf16": dict(label="FA3 BF16", precision="bf16"),
                       "vllm_fp8": dict(label="vLLM FP8", precision="fp8")},
                results=[case(64, 128, 32768, 100.0, {"flashmla_bf16": 130.0, "fa3_bf16": 150.0, "vllm_fp8": 110.0}),
                         case(1, 64, 8192, 20.0, {"flashmla_bf16": 30.0, "fa3_bf16": 25.0, "vllm_fp8": 19.0},
                              varlen=True),
                         case(16, 16, 8191, 50.0, {"flashmla_bf16": 60.0})])
    path = tmp_path / "bench_decode_x.json"
    path.write_text(json.dumps(data))
    lines = bench.markdown_table(str(path)).splitlines()
    assert lines[0] == ("| b, s_q, h_q, s_k | ours (us) | FlashMLA BF16 (us) | FA3 BF16 (us) | vLLM FP8 (us) | "
                        "ours vs faster BF16 | ours vs vLLM FP8 |"), lines[0]
    assert lines[2] == "| 64, 1, 128, 32k | 100.0 | 130.0 | 150.0 | 110.0 | 1.30x (FlashMLA) | 1.10x |", lines[2]
    assert lines[3] == "| 1, 1, 64, 8k (varlen) | 20.0 | 30.0 | 25.0 | 19.0 | 1.25x (FA3) | 0.95x |", lines[3]
    assert lines[4] == "| 16, 1, 16, 8191 | 50.0 | 60.0 | - | - | 1.20x (FlashMLA) | - |", lines[4]
    assert "NVIDIA H200, torch 2.11.0, commit abc1234" in lines[-1] and "bench_decode_x.json" in lines[-1]


def test_readme_decode_table_is_the_cited_result_file(bench):
    """README's decode table is what `--table` prints for the result file its Numbers section cites first, row for
    row: a table edited by hand, or a result file replaced without the table, fails here."""
    import os
    import re

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    readme = open(os.path.join(root, "README.md")).read()
    numbers = readme[readme.index("## Numbers"):]
    cited = re.search(r"bench/results/(bench_decode_\w+\.json)", numbers)
    assert cited, "README's Numbers section cites no bench_decode result file"
    table = [ln for ln in bench.markdown_table(os.path.join(root, "bench", "results", cited.group(1))).splitlines()
             if ln.startswith("|")]
    assert table[0] in readme, "README has no decode table with the header `--table` prints"
    at = readme.index(table[0])
    readme_rows = readme[at:].split("\n\n")[0].splitlines()
    assert readme_rows == table, "README's decode table differs from `bench_decode.py --table` of " + cited.group(1)
