// Host-side entry of the sm_90a FP8 SnapMLA decode kernels (wide/kernel.cuh, narrow/kernel.cuh and ws/kernel.cuh
// have the design headers) and the query-row geometry the host and the kernels share.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>

#include "common/params.h"
#include "kernels/sm90/decode_fp8/kernel_choice.h"

namespace snapmla::sm90::decode_fp8 {

// Query rows (row = s * h_q + h) per CTA tile: the WGMMA M of both GEMMs.
inline constexpr int BLOCK_M = 64;

inline int num_m_tiles(int q_rows) { return (q_rows + BLOCK_M - 1) / BLOCK_M; }

// Query rows each of the 4 math warps of a tile holds, in the first of its 16 accumulator rows (the rest is
// padding): 16 for full tiles; a tile of fewer than 64 rows spreads them evenly over the warps (h_q = 16,
// s_q = 1: 4 per warp instead of 16 in warp 0 and none elsewhere), so the softmax and the O~ fold of the live
// rows run on all four SM sub-partitions, and with at most 8 per warp only one of each thread's two rows is
// live (half the work per warp). Tile m holds query rows 4 R m .. 4 R m + 4 R - 1, warp w rows 4 R m + R w ..
// (num_m_tiles is unchanged: R < 16 only when q_rows < 64, a single tile). The query TMA box is R rows.
__host__ __device__ constexpr int rows_per_warp(int q_rows) { return q_rows >= BLOCK_M ? 16 : (q_rows + 3) / 4; }

// The query row held by accumulator row 0 of math warp `warp` (0..3) of tile m_tile; its k-th row (k < rpw) holds
// query row first + k. rpw = rows_per_warp(q_rows).
__host__ __device__ constexpr int warp_first_q_row(int m_tile, int warp, int rpw) { return (4 * m_tile + warp) * rpw; }

// Launches the decode kernel that choose_decode_kernel (kernel_choice.h) gives for params.q_rows under the
// override (launch.cu): the narrow one over grid (1, num_sm_parts), the wide or ws one over grid
// (num_m_tiles(q_rows), num_sm_parts). Writes out/lse for requests done in one piece and o_accum/lse_accum
// for split ones (the combine kernel runs after, see combine/launch.h).
// launch_first (may be empty) is launched right before the decode kernel, once the kernel parameters (tensor
// maps) are built: the call's Fused-Q-Quant goes there, so that no host work separates the two kernels.
using LaunchFirst = std::function<void()>;
void launch_decode_fp8(const DecodeParams& params, cudaStream_t stream, const LaunchFirst& launch_first = {});

// One launcher per kernel (instantiations/*.cu), each through launch_kernel.h.
void launch_decode_fp8_narrow(const DecodeParams& params, cudaStream_t stream, const LaunchFirst& launch_first);
void launch_decode_fp8_wide(const DecodeParams& params, cudaStream_t stream, const LaunchFirst& launch_first);
void launch_decode_fp8_ws(const DecodeParams& params, cudaStream_t stream, const LaunchFirst& launch_first);

// The process-wide kernel override: SNAPMLA_DECODE_KERNEL (auto, narrow, wide, ws), read on first use, then
// whatever set_decode_kernel_override last set. Returns the previous override's name.
DecodeKernel decode_kernel_override();
std::string set_decode_kernel_override(const std::string& choice);

}  // namespace snapmla::sm90::decode_fp8
