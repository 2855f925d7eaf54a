"""The debug trace builds (-DSNAPMLA_TRACE_PHASES / _CTA / _BLOCKS) time the kernel as it is (CPU; nvcc only).

With printf inside the decode kernels, ptxas serialised every WGMMA of a trace build (C7510, "wgmma pipeline
crossing function boundary"): the wide kernel then waited after each of its WGMMAs, and its phase traces
measured that. The tracers now hand their lines to trace/sink.cuh, printed by a separate
kernel. These tests compile the trace builds and check that ptxas keeps the WGMMAs as written and that the trace
build has as many WGMMA waits as the default build."""

import os
import re
import shutil
import subprocess

import pytest

from utils.cuda_tools import nvcc_or_skip
from utils.scripts import script_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INST = "csrc/kernels/sm90/decode_fp8/instantiations"


def _tools():
    """cuobjdump (as tools/profile/sass_sizes.py finds it: PATH, CUDA_HOME or the pip package), or None."""
    nvcc_or_skip()
    with script_module("sass_sizes", "tools/profile") as sizes:
        return sizes.find_tool("cuobjdump")


def _compile(src, flags, out_dir):
    """ptxas output of tools/device/compile_one.sh for src with extra flags, and a copy of the object in out_dir."""
    env = dict(os.environ, CUDA_HOME=os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    res = subprocess.run(["bash", "tools/device/compile_one.sh", src, *flags], cwd=ROOT, capture_output=True, text=True,
                         env=env)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    obj = out_dir / "k.o"
    shutil.copy(f"/tmp/snapmla_obj/{os.path.basename(src)}.o", obj)  # compile_one.sh's object
    return res.stdout + res.stderr, obj


def _waits(cuobjdump, obj):
    sass = subprocess.run([cuobjdump, "-sass", str(obj)], capture_output=True, text=True).stdout
    return len(re.findall(r"WARPGROUP\.DEPBAR", sass))


@pytest.mark.parametrize("src,flag", [("decode_fp8_e4m3_wide.cu", "SNAPMLA_TRACE_PHASES"),
                                      ("decode_fp8_e4m3_narrow.cu", "SNAPMLA_TRACE_BLOCKS"),
                                      ("decode_fp8_e4m3_ws.cu", "SNAPMLA_TRACE_CTA"),
                                      ("decode_fp8_e4m3_ws.cu", "SNAPMLA_TRACE_BLOCKS")])
def test_trace_build_keeps_the_wgmma_pipeline(tmp_path, src, flag):
    cuobjdump = _tools()
    (tmp_path / "trace").mkdir()
    (tmp_path / "plain").mkdir()
    log, obj = _compile(f"{INST}/{src}", [f"-D{flag}"], tmp_path / "trace")
    for code in ("C7510", "C7511", "C7514", "C7518", "C7519", "C7520"):
        assert code not in log, log[-3000:]
    assert "snapmla_trace_print_kernel" in log, "the trace build must print through trace/sink.cuh's kernel"
    if cuobjdump is None:
        return
    _, plain = _compile(f"{INST}/{src}", [], tmp_path / "plain")
    assert _waits(cuobjdump, obj) == _waits(cuobjdump, plain), "the trace build has other WGMMA waits"
