#!/usr/bin/env bash
# Build the extension on the GPU machine, run the GPU tests and the benchmarks, all in one call.
#   scripts/gpu_check.sh [pytest-args...]     (env: SNAPMLA_BUILD_GROUPS, SNAPMLA_BENCH="bench_quant bench_decode",
#                                              SNAPMLA_SKIP_TESTS=1, SNAPMLA_SANITIZE=1)
# Logs and JSON go under $OUT when set (the device tool brings them back), else under .out/.
# Needs the nvidia-cutlass wheel in .whl/ (carried; see README "Development on the H200").
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/.out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
t0=$(date +%s)
# In-place build_ext, not `pip install -e .`: that machine has no network, and pip may try to fetch build deps.
MAX_JOBS=${MAX_JOBS:-16} NVCC_THREADS=${NVCC_THREADS:-4} SNAPMLA_PTXAS_VERBOSE=1 \
  python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
grep -E "spill|Used [0-9]+ registers|bytes stack" "$OUT/build.log" | sort | uniq | head -40 > "$OUT/ptxas.txt"
rc=0
if [ "${SNAPMLA_SKIP_TESTS:-0}" != "1" ]; then
  python3 -X faulthandler -m pytest -q -p no:cacheprovider --junitxml="$OUT/junit.xml" "${@:-tests}" 2>&1 | tee "$OUT/tests.log" | tail -40
  rc=${PIPESTATUS[0]}
fi
for b in ${SNAPMLA_BENCH:-}; do
  python3 "bench/$b.py" --out "$OUT" 2>&1 | tee "$OUT/$b.log" | tail -40
done
exit $rc
