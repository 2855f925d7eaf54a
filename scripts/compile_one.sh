#!/usr/bin/env bash
# Compile one source file with the extension's flags (no link), for a quick check and ptxas -v on this machine.
#   scripts/compile_one.sh csrc/kernels/quant/q_quant.cu [extra nvcc flags]
# Prints the ptxas report (registers, spills, stack) and leaves the object in /tmp/snapmla_obj/.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$1; shift || true
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
flags=$(python3 - <<'PY'
import os, sys
sys.argv = ["setup.py"]
os.environ["SNAPMLA_PRINT_FLAGS"] = "1"
import runpy
g = runpy.run_path("setup.py", run_name="snapmla_flags")
inc = g["ext_include_dirs"]()
from torch.utils.cpp_extension import include_paths
import sysconfig
print(" ".join("-I" + p for p in inc + include_paths(device_type="cuda") + [sysconfig.get_paths()["include"]]))
PY
)
mkdir -p /tmp/snapmla_obj
obj=/tmp/snapmla_obj/$(basename "$src").o
if [[ $src == *.cu ]]; then
  "$CUDA_HOME/bin/nvcc" -c "$src" -o "$obj" $flags -gencode arch=compute_90a,code=sm_90a -O3 -std=c++20 -DNDEBUG \
    -lineinfo --expt-relaxed-constexpr --expt-extended-lambda -U__CUDA_NO_HALF_OPERATORS__ \
    -U__CUDA_NO_HALF_CONVERSIONS__ -U__CUDA_NO_BFLOAT16_OPERATORS__ -U__CUDA_NO_BFLOAT16_CONVERSIONS__ \
    -Xcompiler -fPIC -D_GLIBCXX_USE_CXX11_ABI=1 --ptxas-options=-v,--warn-on-spills,--warn-on-local-memory-usage "$@"
else
  g++ -c "$src" -o "$obj" $flags -O3 -std=c++20 -DNDEBUG -fPIC -D_GLIBCXX_USE_CXX11_ABI=1 "$@"
fi
echo "ok: $obj"
