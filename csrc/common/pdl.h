// Host side of programmatic dependent launch (PDL; device side: common/griddep.cuh) for the kernels of one
// decode call: Fused-Q-Quant -> decode -> combine. With the programmatic-stream-serialization attribute a
// kernel's launch and prologue (barrier init, tensor-map prefetch) overlap the tail of the kernel before it;
// each kernel waits (griddep_wait) before its first global access, so results are bit-identical to plain
// launches. Inside a CUDA-graph capture the attribute becomes a programmatic edge.
// Off by default; SNAPMLA_PDL=1 turns it on (read per call, so tests and benchmarks compare both in one
// process). Measured on the H200 (2026-12-01, bench_decode --pdl-ab, neighbouring timings in one process), with
// the three kernels launched by one op: 0.88-0.90x at b = 1, 0.99-1.05x at b = 4 / 16, 0.95-1.06x at b = 64
// (before that op, 0.71-0.83x for the wide kernel at b = 1 / 4). Not understood yet (docs/decode_kernel.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "common/cuda_check.h"

namespace snapmla {

inline bool pdl_enabled() {
  const char* v = std::getenv("SNAPMLA_PDL");
  if (v == nullptr) return false;
  const std::string s = v;
  TORCH_CHECK(s == "0" || s == "1", "SNAPMLA_PDL must be 0 or 1, got '", s, "'");
  return s == "1";
}

// kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute when SNAPMLA_PDL=1; a launch error
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
