// Explicit instantiation of the wide decode kernel (64-row query tiles) for the FP8 (e4m3) SnapMLA cache, and
// the decode launcher, which picks the narrow kernel (instantiations/decode_fp8_e4m3_narrow.cu) for q_rows <= 16.
#include <cuda_fp8.h>

#include <cstdlib>
#include <cstring>

#include "kernels/sm90/decode_fp8/kernel.cuh"
#include "kernels/sm90/decode_fp8/kernel_params.h"
#include "kernels/sm90/decode_fp8/launch.h"

namespace snapmla::sm90::decode_fp8 {

template __global__ void snapmla_decode_fp8_kernel<__nv_fp8_e4m3>(const __grid_constant__ KernelParams kp);

namespace {

// SNAPMLA_DECODE_KERNEL=wide keeps q_rows <= 16 on the wide kernel: for side-by-side benchmarks and tests of
// both kernels in one process (read per call, so a test can switch it).
bool force_wide() {
  const char* v = std::getenv("SNAPMLA_DECODE_KERNEL");
  return v != nullptr && std::strcmp(v, "wide") == 0;
}

}  // namespace

void launch_decode_fp8(const DecodeParams& params, cudaStream_t stream) {
  TORCH_CHECK(params.q_rows > 0 && params.b > 0 && params.num_sm_parts > 0 && params.num_blocks > 0,
              "launch_decode_fp8: empty problem (b = ", params.b, ", q_rows = ", params.q_rows,
              ", num_sm_parts = ", params.num_sm_parts, ", num_blocks = ", params.num_blocks, ")");
  if (params.q_rows <= NARROW_MAX_Q_ROWS && !force_wide()) {
    launch_decode_fp8_narrow(params, stream);
    return;
  }
  const KernelParams kp = make_kernel_params(params, rows_per_warp(params.q_rows));
  auto kernel = snapmla_decode_fp8_kernel<__nv_fp8_e4m3>;
  static std::once_flag smem_configured[MAX_DEVICES];
  opt_in_smem(kernel, SMEM_BYTES, smem_configured);
  const dim3 grid(num_m_tiles(params.q_rows), params.num_sm_parts);
  kernel<<<grid, NUM_THREADS, SMEM_BYTES, stream>>>(kp);
  SNAPMLA_CHECK_LAUNCH();
}

}  // namespace snapmla::sm90::decode_fp8
