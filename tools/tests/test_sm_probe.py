"""tools/profile/sm_probe.py's report (CPU): per-SM medians over repetitions, the slowest SMs relative to the median
SM, and the correlation between the two halves of the repetitions (a slow SM in both halves gives r near 1)."""

import random

import pytest

from utils.scripts import script_module



@pytest.fixture(scope="module")
def sm_probe():
    with script_module("sm_probe", "tools/profile") as mod:
        yield mod


def _launches(n, slow_sm, rng, sms=16):
    # 16 SMs; SM slow_sm takes 1.5x in the memory phase, compute is noise only.
    return [[(s, 1000.0 * (1.5 if s == slow_sm else 1.0) + rng.random(), 2000.0 + rng.random()) for s in range(sms)]
            for _ in range(n)]


def test_per_sm_takes_medians(sm_probe):
    assert sm_probe.per_sm([(3, 10.0, 1.0), (3, 30.0, 2.0), (3, 20.0, 9.0), (4, 5.0, 5.0)]) == {3: (20.0, 2.0),
                                                                                                 4: (5.0, 5.0)}


def test_a_slow_sm_is_named_first_and_correlates(sm_probe):
    rng = random.Random(0)
    flat = lambda rs: [x for r in rs for x in r]  # noqa: E731
    mem, comp = sm_probe.summary(flat(_launches(5, 12, rng)), flat(_launches(5, 12, rng)))
    assert mem.startswith("memory") and "slowest SMs 12 1.50x" in mem
    r_mem = float(mem.rsplit("r = ", 1)[1].split()[0])
    r_comp = float(comp.rsplit("r = ", 1)[1].split()[0])
    assert r_mem > 0.9 and abs(r_comp) < 0.9, (mem, comp)
