"""tools/device/bench_variants.sh without a GPU (CPU): a stub python3 on PATH stands in for the build, pytest and
bench/bench_decode.py (it writes a benchmark JSON whose time depends on SNAPMLA_FORCE_SPLIT and the round), the
real interpreter runs the script's summary. Checks the rounds and their rotating order, the warm-up, a variant that
reuses another's build (@name) with its own environment, the table's fastest-round ratios, the tests of named
variants only, and one variant's ncu pass (a stub ncu) summarised per loop."""

import json
import os
import shutil
import subprocess

import pytest
from utils.scripts import device_script_sandbox

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STUB = r"""#!/usr/bin/env bash
# Stand-in for python3 inside tools/device/bench_variants.sh (tools/tests/test_bench_variants.py).
if [ "$1" = "setup.py" ]; then
  mkdir -p snapmla_ext && touch snapmla_ext/_C.stub.so && echo "$PWD $NVCC_APPEND_FLAGS" >> "$STUB_LOG/builds"; exit 0
fi
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then exit 0; fi
if [ "$1" = "-m" ] && [ "$2" = "pytest" ]; then echo "3 passed (split ${SNAPMLA_FORCE_SPLIT:-default})"; exit 0; fi
if [ "$1" = "bench/bench_decode.py" ]; then
  out=""; prev=""; for a in "$@"; do [ "$prev" = "--out" ] && out=$a; prev=$a; done
  mkdir -p "$out"
  n=$(cat "$STUB_LOG/bench_runs" 2>/dev/null || echo 0); echo $((n + 1)) > "$STUB_LOG/bench_runs"
  echo "$out" >> "$STUB_LOG/bench_order"
  split=${SNAPMLA_FORCE_SPLIT:-132}
  # round 0 of every variant is 10 us slower than the later rounds: the table must take the fastest round
  case "$out" in *round_0*) slow=10 ;; *) slow=0 ;; esac
  echo "{\"results\": [{\"name\": \"case_a\", \"us\": $((100 + split - 132 + slow))}], \"rev\": \"$SNAPMLA_GIT_REV\"}" \
    > "$out/bench_decode_$n.json"
  exit 0
fi
exec "$REAL_PYTHON" "$@"
"""


@pytest.fixture
def sandbox(tmp_path):
    if shutil.which("bash") is None or shutil.which("tar") is None:
        pytest.skip("needs bash and tar")
    repo, env, log, out = device_script_sandbox(tmp_path, ("bench_variants.sh",), STUB)
    (repo / "csrc").mkdir()
    (repo / "csrc" / "kernel.cu").write_text("// stub\n")
    env.update(SNAPMLA_VARIANT_ROUNDS="3", SNAPMLA_VARIANT_DIR=str(tmp_path / "v"))
    env.pop("SNAPMLA_FORCE_SPLIT", None)
    return repo, env, log, out


def test_rounds_reuse_and_environment(sandbox):
    repo, env, log, out = sandbox
    tmp_v = env["SNAPMLA_VARIANT_DIR"]
    env["SNAPMLA_VARIANTS"] = "base:.:;split:@base::SNAPMLA_FORCE_SPLIT=142;dbg:.:-DSNAPMLA_TRACE_CTA"
    r = subprocess.run(["bash", "tools/device/bench_variants.sh"], cwd=repo, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    builds = (log / "builds").read_text().splitlines()
    assert len(builds) == 2, builds  # "split" runs base's build
    assert any(b.endswith("-DSNAPMLA_TRACE_CTA") for b in builds)
    assert int((log / "bench_runs").read_text()) == 1 + 3 * 3  # the warm-up, then 3 rounds of 3 variants
    # each round starts one variant later, so no variant holds the same slot in every round
    order = [os.path.relpath(o, tmp_v).split(os.sep)[0].removeprefix("variant_out_")
             for o in (log / "bench_order").read_text().splitlines()]
    assert order == ["warmup", "base", "split", "dbg", "split", "dbg", "base", "dbg", "base", "split"], order
    assert "split tests: 3 passed (split 142)" in r.stdout
    assert "base tests: 3 passed (split default)" in r.stdout
    # fastest round: base 100 us, split 110 us (ratio 100 / 110 = 0.91), dbg 100 us
    row = next(line for line in r.stdout.splitlines() if line.startswith("case_a"))
    assert "100.0 (1.00x) [110/100/100]" in row and "110.0 (0.91x) [120/110/110]" in row, row
    saved = [f for f in os.listdir(out) if f.startswith("bench_variants_")]
    assert len(saved) == 1
    data = json.load(open(out / saved[0]))
    assert data["baseline"] == "base"
    assert data["fastest_us"] == {"base": {"case_a": 100}, "split": {"case_a": 110}, "dbg": {"case_a": 100}}
    assert data["rounds_us"]["split"]["case_a"] == [120, 110, 110]


NCU_STUB = r"""#!/usr/bin/env bash
# Stand-in for ncu: the source page of a kernel with one loop, in ncu's CSV layout.
echo "==PROF== Connected"
echo '"Address","Source","Warp Stall Sampling (All Samples)","stall_long_sb","stall_selected"'
echo '"0x7f0000000000","MOV R1, c[0x0][0x28]","2","0","2"'
echo '"0x7f0000000010","QGMMA.64x64x32.F32.E4M3.E4M3 R24, gdesc[UR4], R24","30","20","10"'
echo '"0x7f0000000020","@!P0 BRA 0x7f0000000010","8","0","8"'
echo "args: $*" >> "$STUB_LOG/ncu"
"""


def test_tests_of_named_variants_and_ncu_of_one(sandbox):
    repo, env, log, out = sandbox
    (repo / "tools" / "profile").mkdir(parents=True)
    for f in ("ncu_hotspots.py", "sass_sizes.py"):
        shutil.copy(os.path.join(ROOT, "tools", "profile", f), repo / "tools" / "profile" / f)
    ncu = log.parent / "bin" / "ncu"
    ncu.write_text(NCU_STUB)
    ncu.chmod(0o755)
    env.update(SNAPMLA_VARIANTS="base:.:;exp:.:-DSNAPMLA_X", SNAPMLA_VARIANT_ROUNDS="1",
               SNAPMLA_VARIANT_TEST_NAMES="exp", SNAPMLA_VARIANT_NCU="exp:b64_sq1_h128_sk32768")
    r = subprocess.run(["bash", "tools/device/bench_variants.sh"], cwd=repo, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "exp tests: 3 passed" in r.stdout and "base tests" not in r.stdout, r.stdout
    args = (log / "ncu").read_text()
    assert "--page source" in args and "--cases b64_sq1_h128_sk32768" in args, args
    assert os.path.exists(out / "ncu_source_exp.csv")
    loop = next(line for line in r.stdout.splitlines() if line.startswith("loop "))
    assert loop.startswith("loop 0x7f0000000010-0x7f0000000020: 2 instructions,  95.0% of the samples [QGMMA 1]"), loop
    env["SNAPMLA_VARIANT_NCU"] = "nosuch:case"
    r = subprocess.run(["bash", "tools/device/bench_variants.sh"], cwd=repo, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "SNAPMLA_VARIANT_NCU: no variant nosuch" in r.stdout, r.stdout
    assert "builds:" not in r.stdout  # refused before any build


def test_a_variant_that_fails_to_patch_shows_no_stale_results(sandbox):
    """A second call on the same machine (the variant folders kept) whose variant no longer applies its patch:
    its column is empty, not the first call's numbers."""
    repo, env, log, out = sandbox
    env.update(SNAPMLA_VARIANTS="base:.:;exp:.:-DSNAPMLA_X", SNAPMLA_VARIANT_ROUNDS="1", SNAPMLA_VARIANT_TESTS="")
    r = subprocess.run(["bash", "tools/device/bench_variants.sh"], cwd=repo, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    (repo / "bad.patch").write_text("--- a/csrc/nosuch.cu\n+++ b/csrc/nosuch.cu\n@@ -1 +1 @@\n-x\n+y\n")
    env["SNAPMLA_VARIANTS"] = "base:.:;exp:+bad.patch:"
    r = subprocess.run(["bash", "tools/device/bench_variants.sh"], cwd=repo, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PATCH FAILED: exp" in r.stdout and "exp: no build" in r.stdout, r.stdout
    row = next(line for line in r.stdout.splitlines() if line.startswith("case_a"))
    assert row.split()[-1] == "-", row
    newest = sorted(f for f in os.listdir(out) if f.startswith("bench_variants_"))[-1]
    assert "exp" not in json.load(open(out / newest))["fastest_us"]
