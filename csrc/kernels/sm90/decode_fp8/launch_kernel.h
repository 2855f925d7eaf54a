// The one launcher of the decode kernels (instantiations/*.cu each call it with their kernel's Launch type).
// A Launch type names the kernel and its launch shape:
//   static constexpr auto kernel;           __global__ void(const __grid_constant__ KernelParams)
//   static constexpr int threads, smem_bytes;
//   static int q_box_rows(int q_rows);      query rows per TMA box of the query tile (make_kernel_params)
//   static int grid_x(int q_rows);          CTA columns per part (grid = (grid_x, num_sm_parts))
// Host work only, no sync: capturable in a CUDA graph.
#pragma once

#include <cuda_runtime.h>

#include <mutex>

#include "common/params.h"
#include "common/pdl.h"
#include "kernels/sm90/decode_fp8/launch.h"
#include "kernels/sm90/decode_fp8/shared/kernel_params.h"
#include "kernels/sm90/decode_fp8/trace/sink.cuh"

namespace snapmla::sm90::decode_fp8 {

template <typename Launch>
void launch_decode_kernel(const DecodeParams& params, cudaStream_t stream, const LaunchFirst& launch_first) {
  const KernelParams kp = make_kernel_params(params, Launch::q_box_rows(params.q_rows));
  static std::once_flag smem_configured[MAX_DEVICES];  // one set per kernel: each Launch type has its own
  opt_in_smem(Launch::kernel, Launch::smem_bytes, smem_configured);
  const dim3 grid(Launch::grid_x(params.q_rows), params.num_sm_parts);
  if (launch_first) launch_first();
  launch_pdl(Launch::kernel, grid, dim3(Launch::threads), Launch::smem_bytes, stream, kp);
  launch_trace_print(stream);  // trace builds: the tracers' lines of this kernel (trace/sink.cuh); else nothing
}

}  // namespace snapmla::sm90::decode_fp8
