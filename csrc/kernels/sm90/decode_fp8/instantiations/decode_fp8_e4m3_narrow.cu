// Explicit instantiation of the narrow decode kernel (q_rows <= 16, narrow/kernel.cuh) for the FP8 (e4m3)
// SnapMLA cache, and its launcher (called by launch_decode_fp8).
#include <cuda_fp8.h>

#include "common/pdl.h"
#include "kernels/sm90/decode_fp8/kernel_params.h"
#include "kernels/sm90/decode_fp8/launch.h"
#include "kernels/sm90/decode_fp8/narrow/kernel.cuh"

namespace snapmla::sm90::decode_fp8 {

template __global__ void narrow::snapmla_decode_fp8_narrow_kernel<__nv_fp8_e4m3>(const __grid_constant__ KernelParams kp);

void launch_decode_fp8_narrow(const DecodeParams& params, cudaStream_t stream, const LaunchFirst& launch_first) {
  TORCH_CHECK(params.q_rows <= narrow::ROWS, "launch_decode_fp8_narrow: q_rows = ", params.q_rows, " > ", narrow::ROWS);
  const KernelParams kp = make_kernel_params(params, narrow::ROWS);
  auto kernel = narrow::snapmla_decode_fp8_narrow_kernel<__nv_fp8_e4m3>;
  static std::once_flag smem_configured[MAX_DEVICES];
  opt_in_smem(kernel, narrow::N_SMEM_BYTES, smem_configured);
  // One CTA row: the 16-row tile holds every query row of a request.
  const dim3 grid(1, params.num_sm_parts);
  if (launch_first) launch_first();
  launch_pdl(kernel, grid, dim3(NUM_THREADS), narrow::N_SMEM_BYTES, stream, kp);
#ifdef SNAPMLA_TRACE_SINK
  launch_trace_print(stream);  // trace builds: the tracers' lines (trace_sink.cuh)
#endif
}

}  // namespace snapmla::sm90::decode_fp8
