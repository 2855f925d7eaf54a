#!/usr/bin/env bash
# Per-SM busy time of one decode launch: how evenly the static split-KV plan loads the 132 SMs. ncu prints
# sm__cycles_active for every SM (one value per SM, --print-metric-instances values) and
# scripts/sm_balance.py sums them up (min / mean / max, and the time the SMs idle while the slowest finishes).
# Run on the H200 after the extension is built (gpu_check.sh with SNAPMLA_SKIP_TESTS=1 builds it).
#   usage: scripts/ncu_sm_balance.sh CASE [CASE ...]    (bench_decode.py case names, e.g. b64_sq1_h16_sk16384)
#   env:   SNAPMLA_NCU_ENV="SNAPMLA_FORCE_SPLIT=264" (extra environment of the measured process)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/.out}
mkdir -p "$OUT"
for c in "$@"; do
  log="$OUT/sm_balance_${c}${SNAPMLA_NCU_TAG:-}.txt"
  env ${SNAPMLA_NCU_ENV:-} timeout 120 ncu --clock-control none --kernel-name regex:snapmla_decode_fp8 \
    --launch-skip 3 --launch-count 1 --print-metric-instances values \
    --metrics sm__cycles_active.avg,gpu__time_duration.sum python3 bench/bench_decode.py --cases "$c" > "$log" 2>&1
  echo "$c ${SNAPMLA_NCU_ENV:-}: $(python3 scripts/sm_balance.py "$log")"
done
