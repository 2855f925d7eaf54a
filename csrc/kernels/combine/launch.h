// Host-side entry of the split-KV combine kernel (combine.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/params.h"

namespace snapmla::combine {

// 4 warps per CTA. Up to COMBINE_SPLIT_ROWS_MAX rows in all (b * q_rows) the combine gives each row a CTA (4
// warps, a 128-column quarter each: small batch, many pieces per request); above, one warp per row and 4 rows per
// CTA (combine.cu has the measurements). Grid (row CTAs, b): the host checks that b fits the grid's y dimension.
inline constexpr int COMBINE_WARPS_PER_CTA = 4;
inline constexpr int64_t COMBINE_SPLIT_ROWS_MAX = 4096;

// Sets of 4 warps that share one row's pieces in the few-rows layout (1, 2 or 4). The plan lives on the device,
// so this is an estimate: a request holds about num_sm_parts / b + 1 pieces (sched/sched_meta.h spreads the
// blocks evenly over the parts), and each set takes load groups of 8 pieces round robin. One set per 8-piece
// group expected, at most 4: b1 at 132 parts (~133 pieces) gets 4, b16 (~9 pieces) 1 (at 2 a CTA of 256
// threads would wait on one set's single group). Any value is correct for any plan.
inline int combine_piece_groups(int b, int num_sm_parts) {
  const int expected_pieces = num_sm_parts / (b > 0 ? b : 1) + 1;
  const int load_groups = (expected_pieces + 7) / 8;
  return load_groups >= 4 ? 4 : load_groups >= 2 ? 2 : 1;
}

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
