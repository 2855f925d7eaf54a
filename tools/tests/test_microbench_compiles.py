"""The microbenchmarks of tools/microbench/ compile for sm_90a (CPU; nvcc only) without spills, and ptxas keeps
their WGMMAs as written: a microbenchmark whose WGMMAs ptxas serialised (C7520) or fenced (C7519) would time
something else than the kernels' issue patterns (the first mixed test of wgmma_rate.cu did, 2026-12-01).
The probe wgmma_fp8_accumulation.cu has its own test (test_qk_accumulation_model.py)."""

import os
import subprocess

import pytest

from utils.cuda_tools import device_include_flags, nvcc_or_skip

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _compile(src: str, out: str, *flags: str) -> subprocess.CompletedProcess:
    """nvcc for sm_90a, the way the file headers tell to build them; asserts that it compiled."""
    cmd = [nvcc_or_skip(), "-std=c++17", "-gencode", "arch=compute_90a,code=sm_90a", *flags, "-o", out, src]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    return res


@pytest.mark.parametrize("name", ["wgmma_rate.cu", "wgmma_pv_ring.cu", "page_stream.cu", "pair_stream.cu",
                                  "e2_stage_stream.cu", "datapath_mix.cu", "epilogue_stores.cu"])
def test_microbench_compiles_without_serialised_wgmma(tmp_path, name):
    src = os.path.join(ROOT, "tools", "microbench", name)
    res = _compile(src, str(tmp_path / "bench"), "-O3", *device_include_flags(ROOT), "-Xptxas", "-v")
    for code in ("C7519", "C7520"):
        assert code not in res.stderr, res.stderr[-2000:]
    assert " 0 bytes spill stores" in res.stderr and "bytes spill stores" in res.stderr, res.stderr[-2000:]
    spills = [ln for ln in res.stderr.splitlines() if "bytes spill stores" in ln and " 0 bytes spill stores" not in ln]
    assert not spills, spills


@pytest.mark.parametrize("flags", [[], ["-DREPRO_PDL", "-DREPRO_PIPELINE", "-DREPRO_SETMAXNREG", "-DREPRO_OWN_BLOCKS"],
                                   ["-DREPRO_PDL", "-DREPRO_PIPELINE", "-DREPRO_SETMAXNREG", "-DREPRO_OWN_BLOCKS",
                                    "-DREPRO_MERGE_MBARRIER"],
                                   ["-DREPRO_GENERIC", "-DREPRO_PIPELINE"], ["-DREPRO_MERGE_MBARRIER"]])
def test_racecheck_repro_compiles(tmp_path, flags):
    """tools/repro/racecheck_count_barrier.cu builds with its ingredient flags, so that a device call can run it."""
    src = os.path.join(ROOT, "tools", "repro", "racecheck_count_barrier.cu")
    _compile(src, str(tmp_path / "rc"), "-lineinfo", *flags)
