// The wide decode kernel (wide/kernel.cuh) for the FP8 (e4m3) SnapMLA cache: its instantiation and launch shape
// (grid (num_m_tiles, num_sm_parts), 384 threads; launch.cu chooses it).
#include <cuda_fp8.h>

#include "kernels/sm90/decode_fp8/launch.h"
#include "kernels/sm90/decode_fp8/launch_kernel.h"
#include "kernels/sm90/decode_fp8/wide/kernel.cuh"

namespace snapmla::sm90::decode_fp8 {

template __global__ void snapmla_decode_fp8_kernel<__nv_fp8_e4m3>(const __grid_constant__ KernelParams kp);

namespace {
struct WideLaunch {
  static constexpr auto kernel = snapmla_decode_fp8_kernel<__nv_fp8_e4m3>;
  static constexpr int threads = NUM_THREADS;
  static constexpr int smem_bytes = SMEM_BYTES;
  static int q_box_rows(int q_rows) { return rows_per_warp(q_rows); }  // one box per math warp's slab
  static int grid_x(int q_rows) { return num_m_tiles(q_rows); }
};
}  // namespace

void launch_decode_fp8_wide(const DecodeParams& params, cudaStream_t stream, const LaunchFirst& launch_first) {
  launch_decode_kernel<WideLaunch>(params, stream, launch_first);
}

}  // namespace snapmla::sm90::decode_fp8
