"""CUDA tools for the CPU tests that compile device code (the microbenchmarks, the probe, the trace builds)."""

import os
import runpy
import shutil

import pytest


def nvcc_or_skip() -> str:
    """nvcc on PATH or under CUDA_HOME (default /usr/local/cuda); the calling test is skipped without it."""
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    nvcc = shutil.which("nvcc") or os.path.join(cuda, "bin", "nvcc")
    if not os.path.exists(nvcc):
        pytest.skip("nvcc not found")
    return nvcc


def device_include_flags(root: str) -> list[str]:
    """-I flags for plain-nvcc builds of code that includes csrc/ headers: csrc, and CUTLASS/CuTe found as setup.py
    finds them (find_cutlass: SNAPMLA_CUTLASS_DIR, the third_party/cutlass submodule, else the nvidia-cutlass
    package); the calling test is skipped when CUTLASS is not installed."""
    try:
        dirs = runpy.run_path(os.path.join(root, "setup.py"), run_name="snapmla_flags")["cutlass_include_dirs"]()
    except SystemExit as exc:  # find_cutlass stops the build with its reason
        pytest.skip(f"CUTLASS headers not found: {exc}")
    flags = ["-I", os.path.join(root, "csrc")]
    for d in dirs:
        flags += ["-I", d]
    return flags
