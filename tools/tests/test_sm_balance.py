"""tools/profile/sm_balance.py's summary of an ncu log of tools/profile/ncu_sm_balance.sh (CPU): the metric table as ncu
prints it (thousands separators, us and ns durations), a log without the metrics, and the idle share."""


import pytest

from utils.scripts import script_module


# The metric table of a real log (H200, b64 h_q 64 32k, 2026-12-01), with ncu's other lines around it.
LOG = """==PROF== Profiling "snapmla_decode_fp8_kernel": 0%....50%....100% - 1 pass
    Section: Command line profiler metrics
    ---------------------- ----------- ------------
    Metric Name            Metric Unit Metric Value
    ---------------------- ----------- ------------
    gpu__time_duration.sum          us       417.60
    sm__cycles_active.avg        cycle   701,284.98
    sm__cycles_active.max        cycle      729,957
    sm__cycles_active.min        cycle      578,615
    ---------------------- ----------- ------------
"""


@pytest.fixture(scope="module")
def sm_balance():
    with script_module("sm_balance", "tools/profile") as mod:
        yield mod


def test_parse_and_summary(sm_balance):
    vals = sm_balance.parse(LOG)
    assert vals == {"gpu__time_duration.sum": 417.60, "sm__cycles_active.avg": 701284.98,
                    "sm__cycles_active.max": 729957.0, "sm__cycles_active.min": 578615.0}
    text = sm_balance.summary(vals)
    assert text.startswith("417.6 us, cycles min 578615 mean 701285 max 729957")
    assert "min/max 0.79" in text and "idle 3.9%" in text  # 1 - 701284.98 / 729957 = 0.0393


def test_nanosecond_durations_become_us(sm_balance):
    vals = sm_balance.parse(LOG.replace("us       417.60", "ns    417,600.00"))
    assert vals["gpu__time_duration.sum"] == pytest.approx(417.6)


def test_log_without_the_metrics(sm_balance):
    assert sm_balance.summary(sm_balance.parse("==ERROR== no kernels were profiled\n")) == (
        "no sm__cycles_active min / avg / max in the log")
