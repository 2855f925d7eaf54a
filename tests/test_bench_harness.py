"""bench/harness.py's L2 flush mode (CPU): the two modes, the default, and the error for any other."""

import pytest

from utils.scripts import script_module


@pytest.fixture()
def harness():
    with script_module("harness", folder="bench") as mod:
        yield mod


def test_flush_mode_defaults_to_write_and_takes_read(harness):
    assert harness.flush_mode() == "write"
    harness.set_flush_mode("read")
    assert harness.flush_mode() == "read"


def test_unknown_flush_mode_is_refused_by_name(harness):
    with pytest.raises(ValueError, match=r"flush mode: expected one of \('write', 'read'\), got 'clean'"):
        harness.set_flush_mode("clean")
    assert harness.flush_mode() == "write"
