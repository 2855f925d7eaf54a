// Host-side entry of the split-KV combine kernel (combine.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/params.h"
#include "kernels/combine/piece_sets.h"

namespace snapmla::combine {

// 4 warps per CTA (per piece set, piece_sets.h). Up to COMBINE_SPLIT_ROWS_MAX rows in all (b * q_rows) the combine gives each row a CTA (4
// warps, a 128-column quarter each: small batch, many pieces per request); above, one warp per row and 4 rows per
// CTA (combine.cu has the measurements). Grid (row CTAs, b): the host checks that b fits the grid's y dimension.
inline constexpr int COMBINE_WARPS_PER_CTA = 4;
inline constexpr int64_t COMBINE_SPLIT_ROWS_MAX = 4096;

// Piece sets of the few-rows layout: combine_piece_groups in piece_sets.h.

// Merges the pieces of every request that the scheduler split (num_splits[r + 1] - num_splits[r] > 1) into
// params.out / params.lse; requests done in one piece were written by the decode kernel and are left alone.
// Reads from params: b, s_q, h_q, q_rows, num_splits, o_accum, lse_accum, out, lse.
//   o_accum   (total_splits, q_rows, 512) fp32: each piece's own normalised output O~/L~ (NaN-free when its
//             lse is finite; not read when its lse is -inf)
//   lse_accum (total_splits, q_rows) fp32: log2(sum over the piece's tokens of exp(logit)), -inf for a piece
//             that saw no token
// Launch cost when nothing is split: CTAs that exit after reading num_splits.
void launch_combine(const DecodeParams& params, cudaStream_t stream);

}  // namespace snapmla::combine
