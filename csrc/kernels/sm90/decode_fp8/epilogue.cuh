// Epilogue of one piece, per math thread: its two rows of O~ restricted to its warpgroup's 256 columns.
//   one piece in the request:  out (bf16) = O~ / L~ and lse = ln 2 * (m + log2(L~ / inv)) (natural log);
//                              a row with no visible token gets o = 0 and lse = +inf.
//   split request:             o_accum[num_splits[r] + split] (fp32) = O~ / L~ and
//                              lse_accum = m + log2(L~ / inv) (log2 domain), -inf for a row that saw nothing.
// Rows past q_rows (padding of the 64-row tile) are not stored. Stores go straight from the fragment: per
// 8-column chunk the 4 lanes of a quad write 16 contiguous bytes of bf16 (32 of fp32) of one row.
#pragma once

#include <cuda_bf16.h>

#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/decode_fp8/schedule.cuh"
#include "kernels/sm90/decode_fp8/softmax.cuh"

namespace snapmla::sm90::decode_fp8 {

// req, split: the piece's request and its index among the request's pieces (passed apart from the Piece so the
// caller need not keep them in registers across its block loop).
__device__ __forceinline__ void store_piece(const DecodeParams& p, int req, int split, int m_tile, int wg, int warp,
                                            int lane, const float (&o)[128], const RowState (&st)[2]) {
  // Row indices are rebuilt here rather than kept live across the block loop (register pressure).
  lane = opaque(lane);
  req = opaque(req);
  const int t = lane % 4;
  const int split_begin = p.num_splits[req];
  const bool single = p.num_splits[req + 1] - split_begin == 1;
  const int rpw = rows_per_warp(p.q_rows);  // launch.h: the warp's rows are its first rpw accumulator rows
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int k = lane / 4 + 8 * r;
    const int row = warp_first_q_row(m_tile, warp, rpw) + k;
    if (k >= rpw || row >= p.q_rows) continue;
    const bool empty = st[r].m == -INFINITY;
    const float inv_l = empty ? 0.f : 1.f / st[r].l;
    const float lse2 = empty ? -INFINITY : st[r].m + log2f(st[r].l / st[r].inv);
    const int col0 = wg * D_V_PER_WG + 2 * t;
    if (single) {
      __nv_bfloat16* g_out = p.out + (static_cast<int64_t>(req) * p.q_rows + row) * D_V + col0;  // (b, q_rows, 512)
#pragma unroll
      for (int i = 0; i < D_V_PER_WG / 8; ++i)
        *reinterpret_cast<__nv_bfloat162*>(g_out + 8 * i) =
            __floats2bfloat162_rn(o[4 * i + 2 * r] * inv_l, o[4 * i + 2 * r + 1] * inv_l);
      if (wg == 0 && t == 0) {
        const int s = row / p.h_q, h = row % p.h_q;
        p.lse[(static_cast<int64_t>(req) * p.h_q + h) * p.s_q + s] = empty ? INFINITY : lse2 * LN2;  // (b, h_q, s_q)
      }
    } else {
      const int64_t acc_row = static_cast<int64_t>(split_begin + split) * p.q_rows + row;
      float* g_acc = p.o_accum + acc_row * D_V + col0;  // (total_splits, q_rows, 512)
#pragma unroll
      for (int i = 0; i < D_V_PER_WG / 8; ++i)
        *reinterpret_cast<float2*>(g_acc + 8 * i) = make_float2(o[4 * i + 2 * r] * inv_l, o[4 * i + 2 * r + 1] * inv_l);
      if (wg == 0 && t == 0) p.lse_accum[acc_row] = lse2;  // (total_splits, q_rows)
    }
  }
}

}  // namespace snapmla::sm90::decode_fp8
