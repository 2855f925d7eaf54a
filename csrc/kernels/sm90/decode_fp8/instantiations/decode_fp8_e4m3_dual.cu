// Explicit instantiation of the dual narrow decode kernel (16 < q_rows <= 32, narrow/dual_kernel.cuh) for the
// FP8 (e4m3) SnapMLA cache, and its launcher (called by launch_decode_fp8).
#include <cuda_fp8.h>

#include "kernels/sm90/decode_fp8/kernel_params.h"
#include "kernels/sm90/decode_fp8/launch.h"
#include "kernels/sm90/decode_fp8/narrow/dual_kernel.cuh"

namespace snapmla::sm90::decode_fp8 {

template __global__ void narrow::snapmla_decode_fp8_dual_kernel<__nv_fp8_e4m3>(const __grid_constant__ KernelParams kp);

void launch_decode_fp8_dual(const DecodeParams& params, cudaStream_t stream) {
  TORCH_CHECK(params.q_rows <= narrow::DUAL_ROWS, "launch_decode_fp8_dual: q_rows = ", params.q_rows, " > ",
              narrow::DUAL_ROWS);
  const KernelParams kp = make_kernel_params(params, narrow::DUAL_ROWS);
  auto kernel = narrow::snapmla_decode_fp8_dual_kernel<__nv_fp8_e4m3>;
  static std::once_flag smem_configured[MAX_DEVICES];
  opt_in_smem(kernel, narrow::DUAL_SMEM_BYTES, smem_configured);
  const dim3 grid(1, params.num_sm_parts);  // the 32-row tile holds every query row of a request
  kernel<<<grid, NUM_THREADS, narrow::DUAL_SMEM_BYTES, stream>>>(kp);
  SNAPMLA_CHECK_LAUNCH();
}

}  // namespace snapmla::sm90::decode_fp8
