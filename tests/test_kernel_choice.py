"""The decode kernel choice as the extension exposes it (CPU; needs the compiled extension): which kernel runs a
call (torch.ops.snapmla.decode_kernel, the one the launcher takes), the override and its checks, and the
environment variable read once. tests/cpp/test_kernel_choice.cpp checks the function itself."""

import os
import subprocess
import sys

import pytest

from snapmla_ext.decode_ops import decode_kernel, forced_decode_kernel


def test_auto_choice_by_query_rows(requires_ext):
    assert [decode_kernel(r) for r in (1, 16, 17, 63, 64, 128, 512)] == ["narrow"] * 2 + ["wide"] * 2 + ["ws"] * 3


@pytest.mark.parametrize("choice,rows,expected", [("wide", 16, "wide"), ("wide", 64, "wide"), ("narrow", 17, "wide"),
                                                  ("narrow", 16, "narrow"), ("ws", 16, "narrow"), ("ws", 17, "ws"),
                                                  ("auto", 64, "ws")])
def test_forced_kernel_and_its_fallbacks(requires_ext, choice, rows, expected):
    with forced_decode_kernel(choice):
        assert decode_kernel(rows) == expected
    assert decode_kernel(rows) == decode_kernel(rows) and decode_kernel(64) == "ws"  # restored to auto


def test_set_decode_kernel_returns_the_previous_choice(requires_ext):
    assert requires_ext.set_decode_kernel("wide") == "auto"
    assert requires_ext.set_decode_kernel("ws") == "wide"
    assert requires_ext.set_decode_kernel("auto") == "ws"


def test_bad_choices_are_rejected(requires_ext):
    with pytest.raises(RuntimeError, match="set_decode_kernel: choice must be auto, narrow, wide or ws, got 'cluster'"):
        requires_ext.set_decode_kernel("cluster")
    with pytest.raises(RuntimeError, match=r"decode_kernel: q_rows must be in \[1, 262140\], got 0"):
        requires_ext.decode_kernel(0)
    assert decode_kernel(64) == "ws"  # a rejected choice leaves the override as it was


def _child(env_value: str, code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SNAPMLA_DECODE_KERNEL=env_value)
    return subprocess.run([sys.executable, "-c", "import torch, snapmla_ext._C\n" + code], env=env,
                          capture_output=True, text=True, timeout=120)


def test_environment_variable_is_read_once(requires_ext):
    # The value at the first call holds for the process: changing the variable later changes nothing.
    r = _child("wide", "import os\nprint(torch.ops.snapmla.decode_kernel(64))\nos.environ['SNAPMLA_DECODE_KERNEL'] = 'ws'\n"
                       "print(torch.ops.snapmla.decode_kernel(64))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["wide", "wide"]


def test_invalid_environment_variable_raises(requires_ext):
    r = _child("fast", "try:\n    torch.ops.snapmla.decode_kernel(64)\nexcept RuntimeError as e:\n    print(e)")
    assert r.returncode == 0, r.stderr
    assert "SNAPMLA_DECODE_KERNEL must be auto, narrow, wide or ws, got 'fast'" in r.stdout
