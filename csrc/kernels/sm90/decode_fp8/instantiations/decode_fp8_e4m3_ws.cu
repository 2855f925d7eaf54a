// The warp-specialised wide decode kernel (ws/kernel.cuh) for the FP8 (e4m3) SnapMLA cache: its instantiation
// and launch shape (grid (num_m_tiles, num_sm_parts), 512 threads; launch.cu chooses it).
#include <cuda_fp8.h>

#include "kernels/sm90/decode_fp8/launch.h"
#include "kernels/sm90/decode_fp8/launch_kernel.h"
#include "kernels/sm90/decode_fp8/ws/kernel.cuh"

namespace snapmla::sm90::decode_fp8 {

template __global__ void ws::snapmla_decode_fp8_ws_kernel<__nv_fp8_e4m3>(const __grid_constant__ KernelParams kp);

namespace {
struct WsLaunch {
  static constexpr auto kernel = ws::snapmla_decode_fp8_ws_kernel<__nv_fp8_e4m3>;
  static constexpr int threads = ws::WS_THREADS;
  static constexpr int smem_bytes = SMEM_BYTES;  // the wide kernel's SharedStorage
  static int q_box_rows(int q_rows) { return rows_per_warp(q_rows); }
  static int grid_x(int q_rows) { return num_m_tiles(q_rows); }
};
}  // namespace

void launch_decode_fp8_ws(const DecodeParams& params, cudaStream_t stream, const LaunchFirst& launch_first) {
  launch_decode_kernel<WsLaunch>(params, stream, launch_first);
}

}  // namespace snapmla::sm90::decode_fp8
