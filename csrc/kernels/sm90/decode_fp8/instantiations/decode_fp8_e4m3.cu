// Explicit instantiation of the wide decode kernel (64-row query tiles) for the FP8 (e4m3) SnapMLA cache, and
// the decode launcher, which runs the narrow kernel (instantiations/decode_fp8_e4m3_narrow.cu) instead for
// q_rows <= 16, or the cluster kernel (decode_fp8_e4m3_cluster.cu) when asked for (choose_kernel).
#include <cuda_fp8.h>

#include <cstdlib>
#include <string>

#include "common/pdl.h"
#include "kernels/sm90/decode_fp8/kernel.cuh"
#include "kernels/sm90/decode_fp8/kernel_params.h"
#include "kernels/sm90/decode_fp8/launch.h"

namespace snapmla::sm90::decode_fp8 {

template __global__ void snapmla_decode_fp8_kernel<__nv_fp8_e4m3>(const __grid_constant__ KernelParams kp);

namespace {

// Which kernel runs a call. SNAPMLA_DECODE_KERNEL (read per call, so tests and benchmarks can switch it in one
// process): "narrow" or "wide" force one for q_rows <= NARROW_MAX_Q_ROWS (and "wide" the wide kernel above it);
// "cluster" runs the 2-CTA cluster kernel (cluster/kernel.cuh, experimental, opt-in) and "ws" the
// warp-specialised wide kernel (ws/kernel.cuh) for q_rows > NARROW_MAX_Q_ROWS, the narrow one below; unset or
// "auto" is the narrow kernel up to NARROW_MAX_Q_ROWS, the wide one up to WS_MIN_Q_ROWS - 1 and the ws kernel
// from WS_MIN_Q_ROWS (launch.h says why).
// Earlier, auto took the wide kernel below 32 blocks per CTA (the narrow one was 0.8-0.95x of it
// at b <= 16 with 8k tokens). With the narrow kernel's code cut from 6144 to 2496 instructions (one block body,
// one merge copy, the producer loop rolled) it is the faster one at every measured size (H200, 97993be, forced,
// same process, bench_decode_20261201T201711Z.json): b = 1 / 4 / 16 at 8k 1.08 / 1.10 / 1.04x, b16 at 8191
// tokens 1.07x, b128 4k 1.17x, b64 16k-128k 1.14-1.18x.
enum class Kernel { kNarrow, kWide, kCluster, kWs };
Kernel choose_kernel(const DecodeParams& p) {
  const char* v = std::getenv("SNAPMLA_DECODE_KERNEL");
  const std::string choice = v == nullptr ? "auto" : v;
  TORCH_CHECK(choice == "auto" || choice == "narrow" || choice == "wide" || choice == "cluster" || choice == "ws",
              "SNAPMLA_DECODE_KERNEL must be auto, narrow, wide, cluster or ws, got '", choice, "'");
  if (p.q_rows > NARROW_MAX_Q_ROWS) {
    if (choice == "cluster") return Kernel::kCluster;
    if (choice == "ws" || (choice == "auto" && p.q_rows >= WS_MIN_Q_ROWS)) return Kernel::kWs;
    return Kernel::kWide;
  }
  return choice == "wide" ? Kernel::kWide : Kernel::kNarrow;
}

}  // namespace

void launch_decode_fp8(const DecodeParams& params, cudaStream_t stream, const LaunchFirst& launch_first) {
  TORCH_CHECK(params.q_rows > 0 && params.b > 0 && params.num_sm_parts > 0 && params.num_blocks > 0,
              "launch_decode_fp8: empty problem (b = ", params.b, ", q_rows = ", params.q_rows,
              ", num_sm_parts = ", params.num_sm_parts, ", num_blocks = ", params.num_blocks, ")");
  const Kernel which = choose_kernel(params);
  if (which == Kernel::kNarrow) {
    launch_decode_fp8_narrow(params, stream, launch_first);
    return;
  }
  if (which == Kernel::kCluster) {
    launch_decode_fp8_cluster(params, stream, launch_first);
    return;
  }
  if (which == Kernel::kWs) {
    launch_decode_fp8_ws(params, stream, launch_first);
    return;
  }
  const KernelParams kp = make_kernel_params(params, rows_per_warp(params.q_rows));
  auto kernel = snapmla_decode_fp8_kernel<__nv_fp8_e4m3>;
  static std::once_flag smem_configured[MAX_DEVICES];
  opt_in_smem(kernel, SMEM_BYTES, smem_configured);
  const dim3 grid(num_m_tiles(params.q_rows), params.num_sm_parts);
  if (launch_first) launch_first();
  launch_pdl(kernel, grid, dim3(NUM_THREADS), SMEM_BYTES, stream, kp);
#ifdef SNAPMLA_TRACE_SINK
  launch_trace_print(stream);  // trace builds: the tracers' lines (trace_sink.cuh)
#endif
}

}  // namespace snapmla::sm90::decode_fp8
