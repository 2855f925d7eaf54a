// Per-piece query-row constants of the narrow kernel's math threads: each thread's N / 4 rows (accumulator
// columns c = 8i + 2t + e, qk_softmax.cuh), their logit multiplier and how many tokens each may see.
#pragma once

#include "common/params.h"
#include "kernels/sm90/decode_fp8/shared/config.h"
#include "kernels/sm90/decode_fp8/shared/schedule.cuh"

namespace snapmla::sm90::decode_fp8::narrow {

template <int N>
struct PieceRows {
  float q_mul[N / 4];  // q_scale * softmax_scale * log2 e (0 for rows past q_rows)
  int limit[N / 4];    // visible tokens: causal query token s sees 0 .. seqlen - s_q + s
};

template <int N>
__device__ __forceinline__ PieceRows<N> piece_rows(const DecodeParams& p, int req, const Piece& pc, int t) {
  PieceRows<N> pr;
#pragma unroll
  for (int ce = 0; ce < N / 4; ++ce) {
    const int q_row = 8 * (ce / 2) + 2 * t + ce % 2;
    const bool valid = q_row < p.q_rows;
    pr.q_mul[ce] = row_logit_multiplier(p, req, q_row, valid);
    pr.limit[ce] = row_visible_tokens(p, pc.seqlen, q_row, valid);
  }
  return pr;
}

}  // namespace snapmla::sm90::decode_fp8::narrow
