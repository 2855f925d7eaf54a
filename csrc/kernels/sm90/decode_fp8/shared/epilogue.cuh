// Epilogue of one piece of the wide decode kernel, per math thread: its warpgroup's O^T (256 dims x 64 tile
// rows) fragments, i.e. dims 64 (4wg + mt) + 16 warp + 2r + {0, 1} (r = lane / 4) of the tile rows 8i + 2t + e
// (t = lane % 4, i = 0..7, e = 0, 1) (mainloop.cuh pv_block).
//   one piece in the request:  out (bf16) = O~ / L~ and lse = ln 2 * (m + log2(L~ / inv)) (natural log);
//                              a row with no visible token gets o = 0 and lse = +inf.
//   split request:             o_accum[num_splits[r] + split] (bf16) = O~ / L~ and
//                              lse_accum = m + log2(L~ / inv) (log2 domain), -inf for a row that saw nothing.
// The softmax state lives in row layout (each thread its rows row0, row0 + 8); O^T needs it by columns, so the
// quad leads write it to row_state and the warpgroup reads it back by columns between two named barriers (the
// second keeps the next piece's epilogue from overwriting it early). Tile rows that are padding (launch.h
// rows_per_warp) are not stored. Per (m-tile, row) the 8 lanes of a quad column write 32 contiguous bytes.
#pragma once

#include <cuda_bf16.h>

#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/decode_fp8/shared/piece_out.cuh"
#include "kernels/sm90/decode_fp8/shared/schedule.cuh"
#include "kernels/sm90/decode_fp8/shared/softmax.cuh"
#include "kernels/sm90/decode_fp8/shared/traits.h"

namespace snapmla::sm90::decode_fp8 {

inline constexpr int BAR_EPILOGUE_WG0 = 1;  // named barrier of math warpgroup wg: + wg (0 is __syncthreads)
static_assert(BAR_EPILOGUE_WG0 + 1 <= MAX_NAMED_BARRIER_ID, "named barrier ids (common/mbarrier.cuh)");

// req, split: the piece's request and its index among the request's pieces (passed apart from the Piece so the
// caller need not keep them in registers across its block loop). state_of(rr): the state of the thread's row
// row0 + 8 rr after the piece, asked for by the quad leads only (t = 0): the wide kernel passes its registers,
// the warp-specialised one reads the last block's hand-off in shared memory (ws/pv_wg.cuh), so that no state is
// held in registers next to O^T there.
template <typename StateOf>
__device__ __forceinline__ void store_piece_state_of(const DecodeParams& p, SharedStorage& ss, int req, int split,
                                                     int m_tile, int wg, int warp, int lane,
                                                     const float (&o)[PV_M_TILES][32], StateOf&& state_of) {
  // Row indices are rebuilt here rather than kept live across the block loop (register pressure).
  lane = opaque(lane);
  req = opaque(req);
  const int t = lane % 4, r = lane / 4;
  const int row0 = 16 * warp + r;
  const PieceOut po = piece_out(p, req, split);
  const int rpw = rows_per_warp(p.q_rows);  // launch.h: the warp slab's rows are its first rpw tile rows
  // .w = 1 / L~ (0 for a row that saw nothing): two divisions per quad lead instead of 16 per thread below.
  if (t == 0) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const RowState st = state_of(rr);
      const float inv_l = st.m == -INFINITY ? 0.f : 1.f / st.l;
      ss.row_state[wg][row0 + 8 * rr] = make_float4(st.m, st.inv, st.l, inv_l);
      // lse, in row layout, by warpgroup 0.
      const int k = r + 8 * rr;
      const int row = warp_first_q_row(m_tile, warp, rpw) + k;
      if (wg != 0 || k >= rpw || row >= p.q_rows) continue;
      store_piece_lse(p, po, req, row, st.m + log2f(st.l / st.inv), st.m == -INFINITY);
    }
  }
  named_barrier_sync(BAR_EPILOGUE_WG0 + wg, WG_THREADS);
  const int dim0 = PV_M_TILES * 64 * wg + 16 * warp + 2 * r;  // + 64 mt
#pragma unroll
  for (int i = 0; i < 8; ++i) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int c = 8 * i + 2 * t + e;  // tile row = O^T column
      const int k = c % 16;
      const int row = warp_first_q_row(m_tile, c / 16, rpw) + k;
      if (k >= rpw || row >= p.q_rows) continue;
      const float inv_l = ss.row_state[wg][c].w;
      __nv_bfloat16* const at = piece_out_row(po, row, dim0);
#pragma unroll
      for (int mt = 0; mt < PV_M_TILES; ++mt)
        store_pair(po, at, 64 * mt, o[mt][4 * i + e] * inv_l, o[mt][4 * i + 2 + e] * inv_l);
    }
  }
  named_barrier_sync(BAR_EPILOGUE_WG0 + wg, WG_THREADS);
}

// The wide kernel's form: the state in registers.
__device__ __forceinline__ void store_piece(const DecodeParams& p, SharedStorage& ss, int req, int split, int m_tile,
                                            int wg, int warp, int lane, const float (&o)[PV_M_TILES][32],
                                            const RowState (&st)[2]) {
  store_piece_state_of(p, ss, req, split, m_tile, wg, warp, lane, o, [&](int rr) { return st[rr]; });
}

}  // namespace snapmla::sm90::decode_fp8
