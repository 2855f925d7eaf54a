#!/usr/bin/env bash
# Sourced by the scripts that run on the H200 (gpu_check.sh, bench_variants.sh), from the repository root:
# $OUT (default .out/), CUDA_HOME, unbuffered Python, the carried nvidia-cutlass wheel installed into
# /tmp/site (that machine has no network; README), and the host compiler fix of host_compiler.sh.
OUT=${OUT:-$PWD/.out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
source scripts/host_compiler.sh
