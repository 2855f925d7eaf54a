"""tools/device/gpu_check.sh without a GPU (CPU): a stub python3 on PATH stands in for the build and for pytest.
Test files named test_meet_* rendezvous through marker files (each passes only if the other runs at the same
time), test_broken fails. Checks that SNAPMLA_TEST_JOBS runs files side by side, that one at a time is the
default, that a failed file sets the exit status and its summary line, that tests.log names each line's file, and
that the script ends (a bare `wait` there would also wait for the tee behind run.log and never return)."""

import shutil
import subprocess

import pytest
from utils.scripts import device_script_sandbox


STUB = r"""#!/usr/bin/env bash
# Stand-in for python3 inside tools/device/gpu_check.sh (tools/tests/test_gpu_check.py).
if [ "$1" = "setup.py" ]; then echo "ptxas info    : Used 96 registers, used 1 barriers"; exit 0; fi
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then exit 0; fi
if [ "$1" = "-X" ] && [ "$3" = "-m" ] && [ "$4" = "pytest" ]; then
  file=""; for a in "$@"; do file=$a; done
  name=$(basename "$file" .py)
  echo "collected 1 item"
  case "$name" in
    test_meet_*)
      me=${name#test_meet_}; other=$([ "$me" = a ] && echo b || echo a)
      touch "$STUB_LOG/here_$me"
      for _ in $(seq 1 $((10 * STUB_MEET_S))); do
        [ -e "$STUB_LOG/here_$other" ] && { echo "$file::test_meet PASSED"; echo "1 passed in 0.1s"; exit 0; }
        sleep 0.1
      done
      echo "$file::test_meet FAILED"; echo "1 failed in 0.1s"; exit 1 ;;
    test_broken) echo "$file::test_broken FAILED"; echo "1 failed in 0.1s"; exit 1 ;;
  esac
  echo "no stub behaviour for $file"; exit 2
fi
exec "$REAL_PYTHON" "$@"
"""


@pytest.fixture
def sandbox(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    repo, env, _, out = device_script_sandbox(tmp_path, ("gpu_check.sh",), STUB)
    for k in ("SNAPMLA_TEST_JOBS", "SNAPMLA_SKIP_TESTS", "SNAPMLA_NCU", "SNAPMLA_BENCH", "SNAPMLA_SANITIZE"):
        env.pop(k, None)
    return repo, env, out


def run_check(repo, env):
    r = subprocess.run(["bash", "tools/device/gpu_check.sh"], cwd=repo, env=env, capture_output=True, text=True,
                       timeout=120)
    return r.returncode, r.stdout


def test_files_side_by_side_and_a_failed_file(sandbox):
    repo, env, out = sandbox
    env.update(SNAPMLA_TEST_JOBS="2", STUB_MEET_S="30",
               SNAPMLA_TESTS="tests/test_meet_a.py tests/test_meet_b.py tests/test_broken.py")
    rc, stdout = run_check(repo, env)
    assert rc == 1, stdout  # test_broken's status
    assert "tests/test_meet_a.py: rc=0 1 passed in 0.1s" in stdout, stdout
    assert "tests/test_meet_b.py: rc=0 1 passed in 0.1s" in stdout, stdout
    assert "tests/test_broken.py: rc=1 1 failed in 0.1s" in stdout, stdout
    log = (out / "tests.log").read_text().splitlines()
    assert "test_meet_a: tests/test_meet_a.py::test_meet PASSED" in log, log
    assert "test_broken: tests/test_broken.py::test_broken FAILED" in log, log
    assert all(line.split(": ", 1)[0] in ("test_meet_a", "test_meet_b", "test_broken") for line in log), log
    assert "tests/test_broken.py: rc=1" in (out / "run.log").read_text()


def test_one_file_at_a_time_by_default(sandbox):
    repo, env, out = sandbox
    env.update(STUB_MEET_S="2", SNAPMLA_TESTS="tests/test_meet_a.py tests/test_meet_b.py")
    rc, stdout = run_check(repo, env)
    # test_meet_a runs alone and waits in vain; test_meet_b then finds a's marker
    assert rc == 1, stdout
    assert "tests/test_meet_a.py: rc=1 1 failed in 0.1s" in stdout, stdout
    assert "tests/test_meet_b.py: rc=0 1 passed in 0.1s" in stdout, stdout
