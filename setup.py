"""Build of snapmla_ext: the single source of truth for the extension's sources and flags.

Environment:
  SNAPMLA_CUTLASS_DIR     a local CUTLASS checkout (its include/ is used); without it the build takes the
                          third_party/cutlass submodule when checked out, else the nvidia-cutlass package
  SNAPMLA_BUILD_GROUPS    comma list of source groups to build (default: all), e.g. "quant" while another
                          group is being written
  SNAPMLA_PTXAS_VERBOSE=1 add `ptxas -v` (registers, shared memory, spills) to the build log
  SNAPMLA_SKIP_EXT=1      install the pure-Python package only (reference path; torch still required)
  NVCC_THREADS            nvcc --threads (default 4); MAX_JOBS is torch's ninja parallelism
  SNAPMLA_EXTRA_LDFLAGS   extra linker flags (space separated), e.g. "-static-libgcc" for toolchains whose
                          unwinder differs from the one torch runs with
"""

import glob
import os
import sys

from setuptools import setup

ROOT = os.path.dirname(os.path.abspath(__file__))

# One group per kernel family; csrc/api/module.cpp (Python module stub + library definition) is always built.
# Each group's api file registers its own operators with TORCH_LIBRARY_FRAGMENT, so a subset still links.
SOURCE_GROUPS = {
    "quant": ["csrc/api/quant_api.cpp", "csrc/kernels/quant/*.cu"],
    "decode": [
        "csrc/api/decode_api.cpp",
        "csrc/api/sched_api.cpp",
        "csrc/kernels/sched/*.cu",
        "csrc/kernels/combine/*.cu",
        "csrc/kernels/sm90/decode_fp8/*.cu",
        "csrc/kernels/sm90/decode_fp8/instantiations/*.cu",
    ],
}
ALWAYS = ["csrc/api/module.cpp"]


def selected_sources():
    groups = os.environ.get("SNAPMLA_BUILD_GROUPS", ",".join(SOURCE_GROUPS)).split(",")
    unknown = [g for g in groups if g and g not in SOURCE_GROUPS]
    if unknown:
        sys.exit(f"SNAPMLA_BUILD_GROUPS: unknown group(s) {unknown}; known: {sorted(SOURCE_GROUPS)}")
    sources = list(ALWAYS)
    for g in groups:
        for pattern in SOURCE_GROUPS.get(g, []):
            sources += sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern)))
    return [s for s in sources if os.path.exists(os.path.join(ROOT, s))]


CUTLASS_SUBMODULE = os.path.join(ROOT, "third_party", "cutlass")  # NVIDIA/cutlass v4.2.0, the pip package's tag


def find_cutlass():
    """(include dirs, where they came from) of the CUTLASS/CuTe headers. In order: SNAPMLA_CUTLASS_DIR when set
    (an explicit choice wins), the third_party/cutlass submodule when checked out (`git submodule update --init`),
    else the nvidia-cutlass package (CI's route: no network needed). All three are CUTLASS 4.2.0's headers."""
    local = os.environ.get("SNAPMLA_CUTLASS_DIR")
    if local:
        root, origin = local, f"SNAPMLA_CUTLASS_DIR={local}"
    elif os.path.isfile(os.path.join(CUTLASS_SUBMODULE, "include", "cute", "tensor.hpp")):
        root, origin = CUTLASS_SUBMODULE, "the third_party/cutlass submodule"
    else:
        try:
            import cutlass_library
        except ImportError:
            sys.exit("CUTLASS headers not found: `git submodule update --init third_party/cutlass`, "
                     "`pip install nvidia-cutlass==4.2.0.0`, or set SNAPMLA_CUTLASS_DIR")
        root = os.path.join(os.path.dirname(cutlass_library.__file__), "source")
        origin = f"the nvidia-cutlass package ({root})"
    base = os.path.join(root, "include")
    if not os.path.isfile(os.path.join(base, "cute", "tensor.hpp")):
        sys.exit(f"CUTLASS/CuTe headers not found under {base} (from {origin})")
    return [base, os.path.join(root, "tools", "util", "include")], origin


def cutlass_include_dirs():
    return find_cutlass()[0]


def cuda_include_dirs():
    """CUDA 13 keeps libcu++ under include/cccl; pip-installed torch keeps cublas/cusparse headers in nvidia/cu13."""
    dirs = []
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    cccl = os.path.join(cuda_home, "include", "cccl")
    if os.path.isdir(cccl):
        dirs.append(cccl)
    try:
        import nvidia

        for p in nvidia.__path__:
            for sub in ("cu13", "cu12"):
                inc = os.path.join(p, sub, "include")
                if os.path.isdir(inc):
                    dirs.append(inc)
    except ImportError:
        pass
    return dirs


def ext_include_dirs():
    return [os.path.join(ROOT, "csrc")] + cutlass_include_dirs() + cuda_include_dirs()


def nvcc_flags():
    """nvcc flags of every .cu file (torch adds -gencode arch=compute_90a,code=sm_90a from TORCH_CUDA_ARCH_LIST)."""
    flags = [
        "-O3",
        "-std=c++20",
        "-DNDEBUG",
        "-lineinfo",
        "--expt-relaxed-constexpr",
        "--expt-extended-lambda",
        "-U__CUDA_NO_HALF_OPERATORS__",
        "-U__CUDA_NO_HALF_CONVERSIONS__",
        "-U__CUDA_NO_BFLOAT16_OPERATORS__",
        "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
        # CUTLASS's PDL primitives (common/griddep.cuh) are no-ops without it.
        "-DCUTLASS_ENABLE_GDC_FOR_SM90",
        "--ptxas-options=--warn-on-spills,--warn-on-local-memory-usage",
        f"--threads={os.environ.get('NVCC_THREADS', '4')}",
    ]
    if os.environ.get("SNAPMLA_PTXAS_VERBOSE") == "1":
        flags.append("--ptxas-options=-v")
    return flags


NO_TORCH = """snapmla_ext: torch is not importable in the build environment.
This is a CUDA extension built against the torch you run it with: install torch (>= 2.11) first, then
    pip install --no-build-isolation .      (or: pip install --no-build-isolation -e .)
Plain `pip install .` builds in an isolated environment without torch and stops here."""

NO_NVCC = """snapmla_ext: nvcc not found at {nvcc} (set CUDA_HOME to a CUDA >= 12.3 toolkit).
To install the pure-PyTorch package only (snapmla_ext.reference, no kernels):
    SNAPMLA_SKIP_EXT=1 pip install --no-build-isolation ."""


def extensions():
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit(NO_TORCH)
    if os.environ.get("SNAPMLA_SKIP_EXT") == "1":
        return [], {}
    os.environ.setdefault("CUDA_HOME", "/usr/local/cuda")
    nvcc = os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
    if not os.path.exists(nvcc):
        sys.exit(NO_NVCC.format(nvcc=nvcc))
    # Only Hopper with its arch-specific features (wgmma, setmaxnreg): one target, no PTX fallback.
    os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0a"
    from torch.utils.cpp_extension import BuildExtension, CUDAExtension

    include_dirs = ext_include_dirs()
    print(f"snapmla_ext: CUTLASS headers from {find_cutlass()[1]}", flush=True)
    nvcc = nvcc_flags()
    ext = CUDAExtension(
        name="snapmla_ext._C",
        sources=selected_sources(),
        include_dirs=include_dirs,
        # Host files take torch's own C++ standard (c++17 in older torch, c++20 in 2.14): c10::Error crosses the
        # library boundary when a check fails, so host code must see the same c10 headers torch was built with.
        # nvcc files use C++20; the few that raise (launchers) include only c10/util/Exception.h.
        extra_compile_args={"cxx": ["-O3", "-DNDEBUG"], "nvcc": nvcc},
        extra_link_args=os.environ.get("SNAPMLA_EXTRA_LDFLAGS", "").split(),
    )
    return [ext], {"build_ext": BuildExtension.with_options(use_ninja=True)}


if __name__ == "snapmla_flags":  # tools/device/compile_one.sh reads the include dirs only
    ext_modules, cmdclass = [], {}
else:
    ext_modules, cmdclass = extensions()

if __name__ != "snapmla_flags":
    # Name, version and dependencies live in pyproject.toml.
    setup(ext_modules=ext_modules, cmdclass=cmdclass)
