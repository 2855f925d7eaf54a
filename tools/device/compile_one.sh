#!/usr/bin/env bash
# Compile one source file with the extension's flags (no link), for a quick check and ptxas -v on this machine.
#   tools/device/compile_one.sh csrc/kernels/quant/q_quant.cu [extra compiler flags]
# Include dirs and nvcc flags come from setup.py (ext_include_dirs, nvcc_flags), the one place they are defined.
# Prints the ptxas report (registers, spills, stack) and leaves the object in /tmp/snapmla_obj/.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=$1; shift || true
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
mapfile -t setup_out < <(SNAPMLA_PTXAS_VERBOSE=1 python3 - <<'PY'
import runpy, sysconfig
from torch.utils.cpp_extension import include_paths
g = runpy.run_path("setup.py", run_name="snapmla_flags")
inc = g["ext_include_dirs"]() + include_paths(device_type="cuda") + [sysconfig.get_paths()["include"]]
print(" ".join("-I" + p for p in inc))
print(" ".join(g["nvcc_flags"]()))
PY
)
includes=${setup_out[0]}
nvcc_flags=${setup_out[1]}
mkdir -p /tmp/snapmla_obj
obj=/tmp/snapmla_obj/$(basename "$src").o
if [[ $src == *.cu ]]; then
  # shellcheck disable=SC2086
  "$CUDA_HOME/bin/nvcc" -c "$src" -o "$obj" $includes $nvcc_flags -gencode arch=compute_90a,code=sm_90a \
    -Xcompiler -fPIC "$@"
else
  # shellcheck disable=SC2086
  g++ -c "$src" -o "$obj" $includes -O3 -std=c++20 -DNDEBUG -fPIC "$@"
fi
echo "ok: $obj"
