"""CUDA tools for the CPU tests that compile device code (the microbenchmarks, the probe, the trace builds)."""

import os
import shutil

import pytest


def nvcc_or_skip() -> str:
    """nvcc on PATH or under CUDA_HOME (default /usr/local/cuda); the calling test is skipped without it."""
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    nvcc = shutil.which("nvcc") or os.path.join(cuda, "bin", "nvcc")
    if not os.path.exists(nvcc):
        pytest.skip("nvcc not found")
    return nvcc
