#!/usr/bin/env bash
# Everything an H200 run needs in one call: build the extension in place, run the GPU tests (each file in
# its own pytest process, so a crash in one cannot hide the others) and the CPU tests, compute-sanitizer on small
# shapes, optional ncu, and the benchmarks. Logs and JSON go under $OUT when set (the device tool brings them
# back), else under .out/: build.log, run.log (this script's summary), tests.log (every pytest output),
# sanitize.log, ncu_h<h>.txt and the benchmarks' JSON/PNG (the device tool brings back at most 8 files). Needs the
# nvidia-cutlass wheel in .whl/ (carried; see README).
#   env: SNAPMLA_TESTS="<test files>" (default: every GPU test file, then the CPU suite),  SNAPMLA_SKIP_TESTS=1,
#        SNAPMLA_TEST_TIMEOUT=420 (seconds per test file), SNAPMLA_TEST_HANG_S=240 (stack dump of a hung test),
#        SNAPMLA_TEST_JOBS=1 (test files run side by side on the one GPU; each line of tests.log names its file),
#        SNAPMLA_SANITIZE=1 (compute-sanitizer on tools/device/sanitize_small.py; SNAPMLA_SANITIZE_TOOLS="memcheck
#        racecheck synccheck", SNAPMLA_RACECHECK_ARGS="--racecheck-report hazard", SNAPMLA_SANITIZE_CASES="4"),
#        SNAPMLA_NCU="16 128" (ncu of one decode launch per head count),
#        SNAPMLA_BENCH="bench_quant bench_decode" (bench/<name>.py --out $OUT), SNAPMLA_BENCH_ARGS="--quick"
#        SNAPMLA_GIT_REV=<local HEAD> (recorded in the bench JSON: the device's own clone HEAD is stale)
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/device/device_env.sh
exec > >(tee -a "$OUT/run.log") 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
echo "host compiler: ${CXX:-c++}"
t0=$(date +%s)
# In-place build_ext, not `pip install -e .`: that machine has no network, and pip may try to fetch build deps.
MAX_JOBS=${MAX_JOBS:-16} NVCC_THREADS=${NVCC_THREADS:-4} SNAPMLA_PTXAS_VERBOSE=1 \
  python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1 \
  || { grep -E "error" "$OUT/build.log" | head -30; echo "BUILD FAILED"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
grep -E "registers|bytes stack frame" "$OUT/build.log" | sort | uniq -c | sort -rn | head -20

# One GPU test file in its own pytest process, so a crash in one cannot hide the others: verbose and straight
# into tests.log, each line prefixed with the file's name (files may run side by side), so a run cut short by the
# device's time limit still shows which test was running; a test that hangs gets its Python stack dumped
# (faulthandler_timeout) and the file is killed after SNAPMLA_TEST_TIMEOUT seconds (rc 124), so the other files
# still run. Prints the file's summary and leaves its exit status in $TEST_LOGS/<name>.rc.
TEST_LOGS=$(mktemp -d)
run_test_file() {
  local f=$1 name t1
  name=$(basename "$f" .py)
  t1=$(date +%s)
  timeout "${SNAPMLA_TEST_TIMEOUT:-420}" python3 -X faulthandler -m pytest -v -p no:cacheprovider -rfE \
    -o faulthandler_timeout="${SNAPMLA_TEST_HANG_S:-240}" "$f" 2>&1 \
    | tee "$TEST_LOGS/$name.log" | sed -u "s|^|$name: |" >> "$OUT/tests.log"
  local frc=${PIPESTATUS[0]}
  echo "$frc" > "$TEST_LOGS/$name.rc"
  local summary
  summary=$(grep -E "passed|failed|error|skipped" "$TEST_LOGS/$name.log" | tail -1)
  echo "$f: rc=$frc $summary [$(( $(date +%s) - t1 )) s]"
}

rc=0
if [ "${SNAPMLA_SKIP_TESTS:-0}" != "1" ]; then
  # The fuzz sweep (~7 min for 500 configurations) runs only when named: SNAPMLA_TESTS=tests/test_fuzz_gpu.py.
  files=${SNAPMLA_TESTS:-$(grep -l "pytest.mark.gpu\|pytestmark = pytest.mark.gpu" tests/test_*.py | grep -v test_fuzz_gpu)}
  # Side by side, the files share the GPU and the host's cores: torch's CPU threads are divided among them.
  test_jobs=${SNAPMLA_TEST_JOBS:-1}
  [ "$test_jobs" -gt 1 ] && export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( ($(nproc) + test_jobs - 1) / test_jobs ))}
  # The files' own pids, not `jobs` or a bare `wait`: those also count and wait for the tee behind run.log.
  pids=()
  for f in $files; do
    while :; do
      running=0
      for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && running=$(( running + 1 )); done
      [ "$running" -lt "$test_jobs" ] && break
      sleep 1
    done
    run_test_file "$f" &
    pids+=($!)
  done
  [ ${#pids[@]} -gt 0 ] && wait "${pids[@]}"
  for r in "$TEST_LOGS"/*.rc; do
    [ -e "$r" ] || continue
    frc=$(cat "$r")
    [ "$frc" -ne 0 ] && rc=$frc
  done
  if [ -z "${SNAPMLA_TESTS:-}" ]; then
    echo "=== CPU suite" >> "$OUT/tests.log"
    python3 -m pytest -q -p no:cacheprovider -m "not gpu" tests > /tmp/one_test.log 2>&1 || rc=1
    cat /tmp/one_test.log >> "$OUT/tests.log"
    echo "CPU suite: $(tail -1 /tmp/one_test.log)"
  fi
fi
for h in ${SNAPMLA_NCU:-}; do
  timeout 200 ncu --clock-control none --kernel-name regex:snapmla_decode_fp8 --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section SourceCounters \
    python3 bench/bench_decode.py --cases "b64_sq1_h${h}_sk32768" > "$OUT/ncu_h${h}.txt" 2>&1
  grep -E "Duration|Throughput|Stall|Issued|Eligible|Bank" "$OUT/ncu_h${h}.txt" | head -40
done
for b in ${SNAPMLA_BENCH:-}; do
  timeout 420 python3 "bench/$b.py" --out "$OUT" ${SNAPMLA_BENCH_ARGS:-} 2>&1 | tail -45
done
if [ "${SNAPMLA_SANITIZE:-0}" = "1" ]; then
  for tool in ${SNAPMLA_SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
    timeout ${SNAPMLA_SANITIZE_TIMEOUT:-150} compute-sanitizer --tool $tool --error-exitcode 3 \
      $([ $tool = racecheck ] && echo "${SNAPMLA_RACECHECK_ARGS:-}") \
      python3 tools/device/sanitize_small.py \
      > /tmp/sanitize.log 2>&1
    src=$?
    { echo "=== $tool rc=$src"; tail -${SNAPMLA_SANITIZE_TAIL:-60} /tmp/sanitize.log; } >> "$OUT/sanitize.log"
    echo "compute-sanitizer $tool: rc=$src $(grep -E 'ERROR SUMMARY' /tmp/sanitize.log | tail -1)"
  done
fi
exit $rc
