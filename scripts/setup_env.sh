#!/usr/bin/env bash
# Shared by scripts/main.sh and scripts/test.sh: install what is missing and build the extension in place.
# Without nvcc (or with SNAPMLA_SKIP_EXT=1) only the pure-Python package is installed (reference path).
set -euo pipefail
cd "$(dirname "$0")/.."
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PY=${PYTHON:-python3}
$PY -c "import torch" 2>/dev/null || $PY -m pip install -q torch==2.14.1
$PY -m pip install -q -r requirements.txt
mkdir -p .out
source scripts/host_compiler.sh
# The editable install only links the source tree (no compilation); the extension is built in place by
# `setup.py build_ext`, whose ninja build under build/ is incremental: a second command recompiles nothing.
$PY -m pip show -q snapmla_ext >/dev/null 2>&1 || SNAPMLA_SKIP_EXT=1 $PY -m pip install -q --no-build-isolation --no-deps -e .
if [ "${SNAPMLA_SKIP_EXT:-0}" != "1" ] && [ -x "$CUDA_HOME/bin/nvcc" ]; then
  echo "building snapmla_ext._C (incremental; log: .out/build.log) ..."
  t0=$(date +%s)
  if ! MAX_JOBS=${MAX_JOBS:-2} NVCC_THREADS=${NVCC_THREADS:-1} \
      $PY setup.py build_ext --inplace > .out/build.log 2>&1; then
    tail -80 .out/build.log
    echo "extension build FAILED"
    exit 1
  fi
  echo "built in $(( $(date +%s) - t0 )) s"
  export SNAPMLA_REQUIRE_EXT=1
else
  echo "no nvcc at $CUDA_HOME (or SNAPMLA_SKIP_EXT=1): the pure-Python package only (reference path)"
fi
