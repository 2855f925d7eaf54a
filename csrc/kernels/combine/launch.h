// Host-side entry of the split-KV combine kernel (combine.cu).
#pragma once

#include <cuda_runtime.h>

#include "common/params.h"

namespace snapmla::combine {

// Warps per CTA: one CTA per (query row, request), grid (q_rows, b); each warp merges a 128-column quarter of
// the row. The host checks that b fits the grid's y dimension.
inline constexpr int COMBINE_WARPS_PER_ROW = 4;

// Merges the pieces of every request that the scheduler split (num_splits[r + 1] - num_splits[r] > 1) into
// params.out / params.lse; requests done in one piece were written by the decode kernel and are left alone.
// Reads from params: b, s_q, h_q, q_rows, num_splits, o_accum, lse_accum, out, lse.
//   o_accum   (total_splits, q_rows, 512) fp32: each piece's own normalised output O~/L~ (NaN-free when its
//             lse is finite; not read when its lse is -inf)
//   lse_accum (total_splits, q_rows) fp32: log2(sum over the piece's tokens of exp(logit)), -inf for a piece
//             that saw no token
// Launch cost when nothing is split: b * q_rows CTAs that exit after reading num_splits.
void launch_combine(const DecodeParams& params, cudaStream_t stream);

}  // namespace snapmla::combine
