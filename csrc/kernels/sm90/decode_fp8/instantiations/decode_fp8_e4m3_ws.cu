// Explicit instantiation of the warp-specialised wide decode kernel (ws/kernel.cuh) for the FP8 (e4m3) SnapMLA
// cache, and its launcher (called by launch_decode_fp8 when SNAPMLA_DECODE_KERNEL=ws and q_rows > 16).
#include <cuda_fp8.h>

#include "common/pdl.h"
#include "kernels/sm90/decode_fp8/kernel_params.h"
#include "kernels/sm90/decode_fp8/launch.h"
#include "kernels/sm90/decode_fp8/ws/kernel.cuh"

namespace snapmla::sm90::decode_fp8 {

template __global__ void ws::snapmla_decode_fp8_ws_kernel<__nv_fp8_e4m3>(const __grid_constant__ KernelParams kp);

void launch_decode_fp8_ws(const DecodeParams& params, cudaStream_t stream, const LaunchFirst& launch_first) {
  const KernelParams kp = make_kernel_params(params, rows_per_warp(params.q_rows));
  auto kernel = ws::snapmla_decode_fp8_ws_kernel<__nv_fp8_e4m3>;
  static std::once_flag smem_configured[MAX_DEVICES];
  opt_in_smem(kernel, SMEM_BYTES, smem_configured);
  const dim3 grid(num_m_tiles(params.q_rows), params.num_sm_parts);
  if (launch_first) launch_first();
  launch_pdl(kernel, grid, dim3(ws::WS_THREADS), SMEM_BYTES, stream, kp);
#ifdef SNAPMLA_TRACE_SINK
  launch_trace_print(stream);  // trace builds: the tracers' lines (trace_sink.cuh)
#endif
}

}  // namespace snapmla::sm90::decode_fp8
