// Host-side entry of the split-KV combine kernel (combine.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/params.h"
#include "kernels/combine/layout.h"

namespace snapmla::combine {

// Merges the pieces of every request that the scheduler split (num_splits[r + 1] - num_splits[r] > 1) into
// params.out / params.lse; requests done in one piece were written by the decode kernel and are left alone.
// The work split is choose_combine_layout's (layout.h). Grid (row CTAs, b): the host checks that b fits the
// grid's y dimension.
// Reads from params: b, s_q, h_q, q_rows, num_sm_parts, num_splits, o_accum, lse_accum, out, lse.
//   o_accum   (total_splits, q_rows, 512) bf16: each piece's own normalised output O~/L~ (NaN-free when its
//             lse is finite; not used when its lse is -inf)
//   lse_accum (total_splits, q_rows) fp32: log2(sum over the piece's tokens of exp(logit)), -inf for a piece
//             that saw no token
// Launch cost when nothing is split: CTAs that exit after reading num_splits.
void launch_combine(const DecodeParams& params, cudaStream_t stream);

}  // namespace snapmla::combine
