// Host side of programmatic dependent launch (PDL; device side: common/griddep.cuh) for the kernels of one
// decode call: Fused-Q-Quant -> decode -> combine. With the programmatic-stream-serialization attribute a
// kernel's launch and prologue (barrier init, tensor-map prefetch) overlap the tail of the kernel before it;
// each kernel waits (griddep_wait) before its first global access (the decode kernels' L2 prefetch of guessed
// pages aside, which reads nothing it computes with: decode_fp8/shared/pdl_point.cuh), so results are
// bit-identical to plain launches. Inside a CUDA-graph capture the attribute becomes a programmatic edge.
// On by default; SNAPMLA_PDL=0 turns it off (read per call, so tests and benchmarks compare both in one
// process). Measured on the H200 against plain launches, in rounds in one call, twice (2026-12-01): 1.01-1.04x at
// b = 4 / 16 / 64 / 128 (h_q 16 / 64 / 128, s_q 1 / 2, varlen), 0.98x at b = 1 h_q 16 (20.4 -> 20.8 us) and
// 0.98-1.00x at b = 1 h_q 64, 1.02-1.03x at b = 1 h_q 128.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "common/cuda_check.h"

namespace snapmla {

inline bool pdl_enabled() {
  const char* v = std::getenv("SNAPMLA_PDL");
  if (v == nullptr) return true;
  const std::string s = v;
  TORCH_CHECK(s == "0" || s == "1", "SNAPMLA_PDL must be 0 or 1, got '", s, "'");
  return s == "1";
}

// kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute unless SNAPMLA_PDL=0; a launch error
// raises (SNAPMLA_CUDA_CHECK).
template <typename... KernelArgs, typename... Args>
void launch_pdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  SNAPMLA_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace snapmla
