#!/usr/bin/env bash
# Everything the H200 session needs in one call: build the extension in place, run the GPU tests (each file in
# its own pytest process, so a crash in one cannot hide the others) and the CPU tests, compute-sanitizer on small
# shapes, optional ncu, and the benchmarks. Logs and JSON go under $OUT when set (the device tool brings them
# back), else under .out/. Needs the nvidia-cutlass wheel in .whl/ (carried; see README).
#   env: SNAPMLA_TESTS="<test files>" (default: every GPU test file, then the CPU suite),  SNAPMLA_SKIP_TESTS=1,
#        SNAPMLA_SANITIZE=1 (memcheck + racecheck on scripts/sanitize_small.py),
#        SNAPMLA_NCU="16 128" (ncu of one decode launch per head count),
#        SNAPMLA_BENCH="bench_quant bench_decode" (bench/<name>.py --out $OUT), SNAPMLA_BENCH_ARGS="--quick"
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/.out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
t0=$(date +%s)
# In-place build_ext, not `pip install -e .`: that machine has no network, and pip may try to fetch build deps.
MAX_JOBS=${MAX_JOBS:-16} NVCC_THREADS=${NVCC_THREADS:-4} SNAPMLA_PTXAS_VERBOSE=1 \
  python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1 \
  || { grep -E "error" "$OUT/build.log" | head -30; echo "BUILD FAILED"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
grep -E "^ptxas|bytes stack frame" "$OUT/build.log" | sort | uniq > "$OUT/ptxas.txt"

rc=0
if [ "${SNAPMLA_SKIP_TESTS:-0}" != "1" ]; then
  files=${SNAPMLA_TESTS:-$(grep -l "pytest.mark.gpu\|pytestmark = pytest.mark.gpu" tests/test_*.py)}
  for f in $files; do
    t1=$(date +%s)
    python3 -X faulthandler -m pytest -q -p no:cacheprovider -rfE "$f" > "$OUT/$(basename "$f" .py).log" 2>&1
    frc=$?
    [ $frc -ne 0 ] && rc=$frc
    echo "$f: rc=$frc $(tail -1 "$OUT/$(basename "$f" .py).log") [$(( $(date +%s) - t1 )) s]"
  done
  if [ -z "${SNAPMLA_TESTS:-}" ]; then
    python3 -m pytest -q -p no:cacheprovider -m "not gpu" tests > "$OUT/cpu_tests.log" 2>&1 || rc=1
    echo "CPU suite: $(tail -1 "$OUT/cpu_tests.log")"
  fi
fi
for h in ${SNAPMLA_NCU:-}; do
  timeout 200 ncu --clock-control none --kernel-name regex:snapmla_decode_fp8 --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    python3 bench/bench_decode.py --cases "b64_sq1_h${h}_sk32768" > "$OUT/ncu_h$h.txt" 2>&1
  grep -E "Duration|Throughput|Stall|Issued|Eligible|Bank" "$OUT/ncu_h$h.txt" | head -40
done
for b in ${SNAPMLA_BENCH:-}; do
  timeout 420 python3 "bench/$b.py" --out "$OUT" ${SNAPMLA_BENCH_ARGS:-} > "$OUT/$b.log" 2>&1
  tail -45 "$OUT/$b.log"
done
if [ "${SNAPMLA_SANITIZE:-0}" = "1" ]; then
  for tool in memcheck racecheck; do
    timeout ${SNAPMLA_SANITIZE_TIMEOUT:-150} compute-sanitizer --tool $tool --error-exitcode 3 python3 scripts/sanitize_small.py \
      > "$OUT/sanitize_$tool.log" 2>&1
    echo "compute-sanitizer $tool: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sanitize_$tool.log" | tail -1)"
  done
fi
exit $rc
