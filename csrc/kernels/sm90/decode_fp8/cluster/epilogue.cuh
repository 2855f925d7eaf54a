// Epilogue of one piece of the cluster decode kernel, per math thread: its warpgroup's O^T (128 dims x 64 tile
// rows: dims 128 (2 rank + wg) + 64 mt + 16 warp + 2 (lane / 4) + {0, 1}, tile rows 8i + 2t + e) divided by L~,
// into out (bf16, one piece) or o_accum (fp32, split), and the lse of the tile rows by warpgroup (0, 0).
// The final state is read from the last block's hand-off (`final_tile`, still held: the caller releases its
// stage afterwards), by columns for O^T and by rows for the lse; a piece without blocks has the initial state
// (o = 0, lse = +inf, or -inf in lse_accum). piece_out.cuh has the formulas and the addressing.
#pragma once

#include <cuda_bf16.h>

#include "kernels/sm90/decode_fp8/cluster/config.h"
#include "kernels/sm90/decode_fp8/exchange.cuh"
#include "kernels/sm90/decode_fp8/piece_out.cuh"
#include "kernels/sm90/decode_fp8/schedule.cuh"
#include "kernels/sm90/decode_fp8/softmax.cuh"

namespace snapmla::sm90::decode_fp8::cluster {

// final_tile: shared address of the last block's hand-off, or 0 for a piece without blocks.
__device__ __forceinline__ void store_piece_c(const DecodeParams& p, int req, int split, int m_tile, int rank, int wg,
                                              int warp, int lane, const float (&o)[PV_M_TILES_C][32],
                                              uint32_t final_tile) {
  lane = opaque(lane);
  req = opaque(req);
  const int t = lane % 4, r = lane / 4;
  const int row0 = 16 * warp + r;
  const PieceOut po = piece_out(p, req, split);
  const int rpw = rows_per_warp(p.q_rows);
  if (rank == 0 && wg == 0 && t == 0) {
    RowState st[2] = {{-INFINITY, 1.f, 0.f}, {-INFINITY, 1.f, 0.f}};
    float unused[2];
    if (final_tile != 0) read_block_state(final_tile, row0, st, unused);
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int k = r + 8 * rr;
      const int row = warp_first_q_row(m_tile, warp, rpw) + k;
      if (k >= rpw || row >= p.q_rows) continue;
      store_piece_lse(p, po, req, row, st[rr].m + log2f(st[rr].l / st[rr].inv), st[rr].m == -INFINITY);
    }
  }
  const int dim0 = D_V_PER_WG_C * (2 * rank + wg) + 16 * warp + 2 * r;  // + 64 mt
#pragma unroll
  for (int i = 0; i < 8; ++i) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int c = 8 * i + 2 * t + e;  // tile row = O^T column
      const int k = c % 16;
      const int row = warp_first_q_row(m_tile, c / 16, rpw) + k;
      if (k >= rpw || row >= p.q_rows) continue;
      float inv_l = 0.f;  // a row that saw nothing: o = 0
      if (final_tile != 0) {
        float4 s4;
        asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(s4.x), "=f"(s4.y), "=f"(s4.z), "=f"(s4.w)
                     : "r"(final_tile + XCHG_STATE_OFFSET + 16 * c)
                     : "memory");
        // {m, inv, l, o_scale}; MUFU.RCP (<= 1 ulp): 16 per thread, where an IEEE division has a slow path.
        inv_l = s4.x == -INFINITY ? 0.f : fast_rcp(s4.z);
      }
      char* const at = piece_out_row(po, row, dim0);
#pragma unroll
      for (int mt = 0; mt < PV_M_TILES_C; ++mt)
        store_pair(po, at, 64 * mt, o[mt][4 * i + e] * inv_l, o[mt][4 * i + 2 + e] * inv_l);
    }
  }
}

}  // namespace snapmla::sm90::decode_fp8::cluster
