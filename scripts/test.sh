#!/usr/bin/env bash
# README's second command: install, build the extension (compile only without a GPU), run the C++ unit tests
# (ctest) and the Python tests. GPU tests (marker `gpu`) run only where a Hopper GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh
if command -v cmake >/dev/null 2>&1; then
  cmake -S . -B build/cpp -DCMAKE_BUILD_TYPE=Release > .out/cmake.log 2>&1 || { cat .out/cmake.log; exit 1; }
  cmake --build build/cpp -j "${MAX_JOBS:-2}" >> .out/cmake.log 2>&1 || { tail -40 .out/cmake.log; exit 1; }
  (cd build/cpp && ctest --output-on-failure)
else
  echo "cmake not found: C++ unit tests skipped"
fi
${PYTHON:-python3} -m pytest -q "$@"
