#!/usr/bin/env bash
# README's first command: install, build where nvcc exists, and run the main job (python -m snapmla_ext.demo):
# on a Hopper GPU it runs the kernels; elsewhere it runs the pure-PyTorch reference on small shapes and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh
${PYTHON:-python3} -m snapmla_ext.demo "$@"
