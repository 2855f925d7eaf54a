#!/usr/bin/env bash
# How evenly one decode launch loads the SMs: ncu's min / mean / max of sm__cycles_active over the SMs and the
# kernel time; idle = 1 - mean / max is the share of the launch that the average SM waits for the slowest one
# (what a perfectly balanced split would save at most). Run on the H200 after the extension is built
# (gpu_check.sh with SNAPMLA_SKIP_TESTS=1 builds it).
#   usage: tools/profile/ncu_sm_balance.sh CASE [CASE ...]    (bench_decode.py case names, e.g. b64_sq1_h16_sk16384)
#   env:   SNAPMLA_NCU_ENV="SNAPMLA_FORCE_SPLIT=264" (extra environment of the measured process),
#          SNAPMLA_NCU_TAG=_s264 (suffix of the log names, $OUT/sm_balance_<case><tag>.txt)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/.out}
mkdir -p "$OUT"
for c in "$@"; do
  log="$OUT/sm_balance_${c}${SNAPMLA_NCU_TAG:-}.txt"
  env ${SNAPMLA_NCU_ENV:-} timeout 120 ncu --clock-control none --kernel-name regex:snapmla_decode_fp8 \
    --launch-skip 3 --launch-count 1 \
    --metrics sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,gpu__time_duration.sum \
    python3 bench/bench_decode.py --cases "$c" > "$log" 2>&1
  echo "$c ${SNAPMLA_NCU_ENV:-}: $(python3 tools/profile/sm_balance.py "$log")"
done
