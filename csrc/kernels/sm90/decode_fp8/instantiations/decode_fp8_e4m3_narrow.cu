// The narrow decode kernel (narrow/kernel.cuh, q_rows <= 16) for the FP8 (e4m3) SnapMLA cache: its
// instantiation and launch shape (grid (1, num_sm_parts), 384 threads; launch.cu chooses it).
#include <cuda_fp8.h>

#include "kernels/sm90/decode_fp8/kernel_choice.h"
#include "kernels/sm90/decode_fp8/launch.h"
#include "kernels/sm90/decode_fp8/launch_kernel.h"
#include "kernels/sm90/decode_fp8/narrow/kernel.cuh"

namespace snapmla::sm90::decode_fp8 {

template __global__ void narrow::snapmla_decode_fp8_narrow_kernel<__nv_fp8_e4m3>(const __grid_constant__ KernelParams kp);

static_assert(NARROW_MAX_Q_ROWS <= narrow::ROWS, "choose_decode_kernel gives the narrow kernel rows it cannot hold");

namespace {
struct NarrowLaunch {
  static constexpr auto kernel = narrow::snapmla_decode_fp8_narrow_kernel<__nv_fp8_e4m3>;
  static constexpr int threads = NUM_THREADS;
  static constexpr int smem_bytes = narrow::N_SMEM_BYTES;
  static int q_box_rows(int) { return narrow::ROWS; }  // the 16-row tile holds every query row of a request
  static int grid_x(int) { return 1; }
};
}  // namespace

void launch_decode_fp8_narrow(const DecodeParams& params, cudaStream_t stream, const LaunchFirst& launch_first) {
  launch_decode_kernel<NarrowLaunch>(params, stream, launch_first);
}

}  // namespace snapmla::sm90::decode_fp8
