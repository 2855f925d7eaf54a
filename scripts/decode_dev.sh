#!/usr/bin/env bash
# Device-run script of the FP8 decode kernel (H200): build the decode + quant groups, run the kernel's focused
# tests, optionally the full decode sweep, compute-sanitizer and the quick benchmark, all in one call.
#   scripts/decode_dev.sh            env: DEV_SWEEP=1 (tests/test_decode_gpu.py too), DEV_SANITIZE=1 (memcheck +
#                                    racecheck on one small case), DEV_BENCH=quick|full|0 (default quick)
# Logs go under $OUT (the device tool brings them back), else .out/. Needs the nvidia-cutlass wheel in .whl/.
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
SNAPMLA_BUILD_GROUPS=${SNAPMLA_BUILD_GROUPS:-decode,quant} MAX_JOBS=16 SNAPMLA_PTXAS_VERBOSE=1 \
  python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1 \
  || { grep -E "error|Error" "$OUT/build.log" | head -30; echo "BUILD FAILED"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
grep -E "spill|Used [0-9]+ registers|bytes stack|C7513" "$OUT/build.log" | sort | uniq > "$OUT/ptxas.txt"
rc=0
python3 -m pytest -q -s -x tests/test_decode_kernel_gpu.py 2>&1 | tee "$OUT/kernel_tests.log" | grep -E "rel_l2|passed|failed|Error|error" | tail -30
rc=${PIPESTATUS[0]}
if [ "${DEV_SWEEP:-0}" = "1" ]; then
  timeout 300 python3 -m pytest -q tests/test_decode_gpu.py tests/test_decode_graph_gpu.py 2>&1 | tee "$OUT/sweep.log" | tail -25
fi
if [ "${DEV_SANITIZE:-0}" = "1" ]; then
  for tool in memcheck racecheck; do
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 3 python3 -m pytest -q -x \
      "tests/test_decode_kernel_gpu.py::test_kernel_matches_emulation[causal_sq4_h16]" > "$OUT/sanitize_$tool.log" 2>&1
    echo "compute-sanitizer $tool: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sanitize_$tool.log" | tail -1)"
  done
fi
if [ "${DEV_NCU:-0}" = "1" ]; then
  # One decode launch of the b = 64, h_q = 16, s_k = 32768 case (bench/bench_decode.py's data), profiled.
  cat > /tmp/ncu_case.py <<'PY'
import sys, torch
sys.path.insert(0, "bench")
import bench_decode as B
from snapmla_ext.decode_ops import flash_mla_with_kvcache, get_mla_metadata
b, h, s_k = 64, int(sys.argv[1]), 32768
pages = s_k // 64
block_table = torch.randperm(b * pages, dtype=torch.int32).view(b, pages).cuda()
seqlens = torch.full((b,), s_k, dtype=torch.int32, device="cuda")
q = (torch.randn(b, 1, h, 576, device="cuda") * 0.1).to(torch.bfloat16)
cache = B.random_snapmla_cache(b * pages, seed=1)
meta, splits = get_mla_metadata(seqlens, h, 1)
for _ in range(5):
    flash_mla_with_kvcache(q, cache, block_table, seqlens, 512, meta, splits)
torch.cuda.synchronize()
PY
  for h in ${DEV_NCU_HEADS:-16}; do
    timeout 200 ncu --kernel-name regex:snapmla_decode_fp8 --launch-skip 3 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      --section SourceCounters python3 /tmp/ncu_case.py $h > "$OUT/ncu_h$h.txt" 2>&1
    grep -E "Duration|Throughput|Shared|Stall|Issued|Eligible|No Eligible|Warp Cycles|Bank|L1/TEX Hit|Mem Busy|Max Bandwidth" \
      "$OUT/ncu_h$h.txt" | head -60
  done
fi
case "${DEV_BENCH:-quick}" in
  quick) timeout 240 python3 bench/bench_decode.py --quick --out "$OUT" 2>&1 | tee "$OUT/bench.log" | tail -20 ;;
  full) timeout 420 python3 bench/bench_decode.py --out "$OUT" 2>&1 | tee "$OUT/bench.log" | tail -40 ;;
esac
exit $rc
