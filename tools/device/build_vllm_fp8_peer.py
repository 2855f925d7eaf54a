"""Builds vLLM's sm90 dense FP8 MLA kernel (vllm-project/FlashMLA, csrc/extension/sm90/dense_fp8) as the module
`vllm_flashmla_fp8` that bench/peers.py imports, in place in that repository's checkout (its own setup.py does not
build this kernel: docs/development.md). The sources are the user's checkout; nothing of them is kept here.

    CUTLASS_SRC=<cutlass with include/ and tools/util/include/> \
        python3 tools/device/build_vllm_fp8_peer.py <vllm FlashMLA checkout>
"""

import os
import site
import sys

# torch.utils.cpp_extension reads CUDA_HOME when imported; without it, it may pair torch's own CUDA headers with an
# nvcc whose crt/ headers they do not find.
os.environ.setdefault("CUDA_HOME", "/usr/local/cuda")

from setuptools import setup  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CUDAExtension  # noqa: E402


def main() -> None:
    repo = os.path.abspath(sys.argv[1])
    kernel_dir = os.path.join(repo, "csrc", "extension", "sm90", "dense_fp8")
    cutlass = os.environ["CUTLASS_SRC"]
    cuda = os.environ["CUDA_HOME"]
    # CUDA 13 keeps libcu++ under include/cccl; torch's CUDA headers live in site-packages (as our setup.py adds).
    extra = [os.path.join(cuda, "include", "cccl")]
    torch_cuda = (os.path.join(d, "nvidia", "cu13", "include") for d in site.getsitepackages())
    extra += [p for p in torch_cuda if os.path.isdir(p)]
    flags = ["-O3", "-std=c++20", "-DNO_PYBIND11=1"]  # its module definition is compiled only with NO_PYBIND11
    ext = CUDAExtension(
        name="vllm_flashmla_fp8",
        sources=[os.path.join(kernel_dir, f)
                 for f in ("pybind.cpp", "flash_fwd_mla_fp8_sm90.cu", "flash_fwd_mla_metadata.cu")],
        include_dirs=[os.path.join(repo, "csrc"), kernel_dir, os.path.join(cutlass, "include"),
                      os.path.join(cutlass, "tools", "util", "include")] + extra,
        extra_compile_args={"cxx": flags, "nvcc": flags + ["-gencode", "arch=compute_90a,code=sm_90a",
                                                           "--expt-relaxed-constexpr", "--expt-extended-lambda",
                                                           "--use_fast_math"]},
    )
    os.chdir(repo)
    setup(name="vllm_flashmla_fp8", ext_modules=[ext], cmdclass={"build_ext": BuildExtension},
          script_args=["build_ext", "--inplace"])


if __name__ == "__main__":
    main()
