// Narrow decode kernel, end of a piece: the two math warpgroups each hold the online-softmax result of their
// own blocks of the piece (alternate blocks: O~ as O^T fragments, m, inv and a partial L~ per thread). They are
// merged like two splits of the combine kernel and stored, each warpgroup storing 256 of the 512 dims:
//   L_w = sum of the warpgroup's partial L~ (reduce_cols);  M = max(m_0, m_1);
//   w_k = 2^(m_k - M) / inv_k (0 for a warpgroup that saw no token);  L = L_0 w_0 + L_1 w_1;
//   o = (O~_0 w_0 + O~_1 w_1) / L;  lse2 = M + log2 L (log2 domain; with one side empty this is the wide
//   kernel's m + log2(L~ / inv)).
//   one piece in the request:  out (bf16) = o and lse = ln 2 * lse2; a row with no visible token gets o = 0 and
//                              lse = +inf.
//   split request:             o_accum[num_splits[r] + split] (bf16) = o and lse_accum = lse2 (-inf when empty).
// Warpgroup wg keeps m-tiles 4wg .. 4wg + 3 and hands the other four to its peer through xfer (16 KB each way,
// thread i's fragment to thread i: the same rows and dims in both warpgroups, so float4 stores and loads with
// no permutation). Two steps, ordered by two mbarriers of 256 arrivals over both warpgroups (narrow/kernel.cuh,
// run_math; NarrowStorage::merge_bar, one phase per piece):
//   publish_piece_state;  arrive + wait merge_bar[MERGE_PUBLISHED];  merge_and_store;  arrive + wait [MERGE_READ]
// (the second keeps the next piece's publish from overwriting xfer and col_state before they are read). Two
// bar.sync over 256 threads did the same until racecheck reported hazards between the publish and the peer's
// read across them in some runs (docs/design.md, narrow kernel, racecheck); the mbarrier form is clean under it
// at the same times.
// Debug build -DSNAPMLA_DEBUG_MERGE_TAG (docs/design.md, narrow kernel, racecheck): col_state's unused .w carries
// the CTA's running piece number, the peer traps if it reads another piece's state, and thread 0 sleeps 2 us before
// its store to widen any window. A real ordering problem then fails the GPU tests loudly.
#pragma once

#include <cuda_bf16.h>

#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/decode_fp8/narrow/config.h"
#include "kernels/sm90/decode_fp8/narrow/qk_softmax.cuh"
#include "kernels/sm90/decode_fp8/shared/piece_out.cuh"
#include "kernels/sm90/decode_fp8/shared/schedule.cuh"

namespace snapmla::sm90::decode_fp8::narrow {

// Step 1: the warpgroup's L~ column sums (returned in l_sum), its {m, inv, L~} into col_state[wg] and the four
// m-tiles of O~ it gives into xfer[wg].
// wg is a run-time value: the m-tiles a warpgroup keeps or gives are picked by selects (kept_tile, given_tile),
// 32 per step. As templates on the warpgroup the two steps were two copies of the code, and both warpgroups of
// an SM fetch the instructions cold at every piece end (piece_out.cuh).
#ifdef SNAPMLA_DEBUG_MERGE_TAG
inline constexpr bool DEBUG_MERGE_TAG = true;
#else
inline constexpr bool DEBUG_MERGE_TAG = false;
#endif

// Element k of the m-th m-tile that warpgroup wg keeps (m-tiles 4wg + m) or gives to its peer (4(1 - wg) + m).
__device__ __forceinline__ float kept_tile(const float (&o)[M_TILES][ACC], int wg, int m, int k) {
  return wg == 0 ? o[m][k] : o[M_TILES / 2 + m][k];
}
__device__ __forceinline__ float given_tile(const float (&o)[M_TILES][ACC], int wg, int m, int k) {
  return wg == 0 ? o[M_TILES / 2 + m][k] : o[m][k];
}

// piece: the CTA's running piece index (only the debug tag uses it).
__device__ __forceinline__ void publish_piece_state(NarrowStorage& ss, int wg, int tid, int piece,
                                                    const float (&o)[M_TILES][ACC],
                                                    const ColState (&cs)[COLS_PER_THREAD],
                                                    float (&l_sum)[COLS_PER_THREAD]) {
  const int warp = tid / 32, lane = tid % 32, t = lane % 4;
#pragma unroll
  for (int ce = 0; ce < COLS_PER_THREAD; ++ce) l_sum[ce] = cs[ce].l;
  reduce_cols<false>(l_sum, &ss.red[wg][0][0][0], warp, lane, BAR_WG0 + wg);
  if (warp == 0 && lane < 4) {
    if (DEBUG_MERGE_TAG && lane == 0) __nanosleep(2000);
    const float tag = DEBUG_MERGE_TAG ? __int_as_float(piece + 1) : 0.f;
#pragma unroll
    for (int ce = 0; ce < COLS_PER_THREAD; ++ce)
      ss.col_state[wg][8 * (ce / 2) + 2 * t + ce % 2] = make_float4(cs[ce].m, cs[ce].inv, l_sum[ce], tag);
  }
#pragma unroll
  for (int m = 0; m < M_TILES / 2; ++m) {
#pragma unroll
    for (int k4 = 0; k4 < ACC / 4; ++k4)
      ss.xfer[wg][2 * m + k4][tid] = make_float4(given_tile(o, wg, m, 4 * k4), given_tile(o, wg, m, 4 * k4 + 1),
                                                 given_tile(o, wg, m, 4 * k4 + 2), given_tile(o, wg, m, 4 * k4 + 3));
  }
}

// Step 2 (after merge_bar[MERGE_PUBLISHED]): the merge of the peer's state into the kept m-tiles, and the store.
__device__ __forceinline__ void merge_and_store(const DecodeParams& p, NarrowStorage& ss, int wg, int req, int split,
                                                int tid, int piece, const float (&o)[M_TILES][ACC],
                                                const ColState (&cs)[COLS_PER_THREAD],
                                                const float (&l_sum)[COLS_PER_THREAD]) {
  const int warp = tid / 32, lane = tid % 32, t = lane % 4, r = lane / 4;
  const int keep = wg * (M_TILES / 2);  // first m-tile this warpgroup stores
  float f_own[COLS_PER_THREAD], f_peer[COLS_PER_THREAD], lse2[COLS_PER_THREAD];
  bool empty[COLS_PER_THREAD];
#pragma unroll
  for (int ce = 0; ce < COLS_PER_THREAD; ++ce) {
    const int c = 8 * (ce / 2) + 2 * t + ce % 2;
    const float4 peer = ss.col_state[wg ^ 1][c];
    if (DEBUG_MERGE_TAG && __float_as_int(peer.w) != piece + 1) __trap();  // another piece's state
    const float m = fmaxf(cs[ce].m, peer.x);
    empty[ce] = m == -INFINITY;
    // MUFU forms (softmax.cuh fast_*), as in the block loop: the exact exp2f / division / log2f with their
    // slow paths were 8 KB of the piece end's code (2496 instructions in the kernel at 97993be, 3008 with them),
    // fetched cold (piece_out.cuh).
    const float w_own = cs[ce].m == -INFINITY ? 0.f : fast_exp2(cs[ce].m - m) * fast_rcp(cs[ce].inv);
    const float w_peer = peer.x == -INFINITY ? 0.f : fast_exp2(peer.x - m) * fast_rcp(peer.y);
    const float l = l_sum[ce] * w_own + peer.z * w_peer;
    const float inv_l = empty[ce] ? 0.f : fast_rcp(l);
    f_own[ce] = w_own * inv_l;
    f_peer[ce] = w_peer * inv_l;
    lse2[ce] = empty[ce] ? -INFINITY : m + fast_log2(l);
  }

  const PieceOut po = piece_out(p, req, split);
  // Accumulator index 4i + 2rr + e: query row 8i + 2t + e, dim 64 mt + 16 warp + 2r + rr (pv.cuh).
  const int dim0 = 64 * keep + 16 * warp + 2 * r;  // + 64 m
  __nv_bfloat16* at[2][2];  // row 8i + 2t + e's address, or null for a row past q_rows
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int row = 8 * i + 2 * t + e;
      at[i][e] = row < p.q_rows ? piece_out_row(po, row, dim0) : nullptr;
    }
  }
#pragma unroll
  for (int m = 0; m < M_TILES / 2; ++m) {
    float v[ACC];
#pragma unroll
    for (int k4 = 0; k4 < ACC / 4; ++k4) {
      const float4 x = ss.xfer[wg ^ 1][2 * m + k4][tid];
      const float peer[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int k = 4 * k4 + j, ce = 2 * (k / 4) + k % 2;
        v[k] = kept_tile(o, wg, m, k) * f_own[ce] + peer[j] * f_peer[ce];
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (at[i][e] == nullptr) continue;
        store_pair(po, at[i][e], 64 * m, v[4 * i + e], v[4 * i + 2 + e]);
      }
    }
  }
  if (wg == 0 && warp == 0 && lane < 4) {
#pragma unroll
    for (int ce = 0; ce < COLS_PER_THREAD; ++ce) {
      const int row = 8 * (ce / 2) + 2 * t + ce % 2;
      if (row < p.q_rows) store_piece_lse(p, po, req, row, lse2[ce], empty[ce]);
    }
  }
}

}  // namespace snapmla::sm90::decode_fp8::narrow
