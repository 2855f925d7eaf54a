// Host-side entry of the sm_90a FP8 SnapMLA decode kernel (kernel.cuh has the design header).
#pragma once

#include <cuda_runtime.h>

#include <functional>

#include "common/params.h"

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

// Query rows from which SNAPMLA_DECODE_KERNEL=auto runs the warp-specialised wide kernel (ws/kernel.cuh) instead
// of the wide one: the two give the same bits, and side by side on the H200 (2026-12-03, bench_variants, rounds)
// ws was 1.02-1.03x at b = 64 with 64 and 128 rows (h_q 64 / 128, s_q 2 at h_q 64, varlen), 1.00x at b = 1 / 16,
// but 0.91x at 32 rows (b64 s_q 2 h_q 16, memory-bound: its softmax warpgroup waits for the next page before it
// starts a block's softmax).
inline constexpr int WS_MIN_Q_ROWS = 64;

// Query rows up to which the narrow kernel (narrow/kernel.cuh, query rows as the WGMMA N) runs instead, unless
// SNAPMLA_DECODE_KERNEL=wide (instantiations/decode_fp8_e4m3.cu, use_narrow, says why).
inline constexpr int NARROW_MAX_Q_ROWS = 16;

// Launches the decode kernel: the narrow one over grid (1, num_sm_parts) when use_narrow (q_rows <=
// NARROW_MAX_Q_ROWS and SNAPMLA_DECODE_KERNEL is not "wide"), else the wide one over grid
// (num_m_tiles(q_rows), num_sm_parts). Writes out/lse for requests done in one piece and o_accum/lse_accum
// for split ones (the combine kernel runs after, see combine/launch.h).
// launch_first (may be empty) is launched right before the decode kernel, once the kernel parameters (tensor
// maps) are built: the call's Fused-Q-Quant goes there, so that no host work separates the two kernels.
using LaunchFirst = std::function<void()>;
void launch_decode_fp8(const DecodeParams& params, cudaStream_t stream, const LaunchFirst& launch_first = {});
void launch_decode_fp8_narrow(const DecodeParams& params, cudaStream_t stream, const LaunchFirst& launch_first = {});
void launch_decode_fp8_cluster(const DecodeParams& params, cudaStream_t stream, const LaunchFirst& launch_first = {});
void launch_decode_fp8_ws(const DecodeParams& params, cudaStream_t stream, const LaunchFirst& launch_first = {});

}  // namespace snapmla::sm90::decode_fp8
