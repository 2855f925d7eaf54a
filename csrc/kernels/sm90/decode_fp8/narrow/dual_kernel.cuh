// sm_90a FP8 SnapMLA decode kernel for 16 < q_rows <= 32 (h_q = 16 at s_q = 2, h_q = 32 at s_q = 1): the narrow
// kernel's swap-AB GEMMs at N = 32 (narrow/kernel.cuh has the data movement), with the work split the other way.
// EXPERIMENT (branch narrow32-exp, 2026-11-29): compile-checked only, not run on a GPU yet.
//
// Why not the narrow kernel's split (each warpgroup runs alternate blocks over all 512 dims and the two merge
// per piece): at N = 32 all of O^T is 128 fp32 per thread, and the merge would move 64 KB. Here both math
// warpgroups run every block:
//   WG0, WG1 (math, DUAL_MATH_REGS = 232): S^T = K . Q^T (16 QGMMA m64n32k32 + 4 HGMMA m64n32k16) and the online
//     softmax, both computed by each warpgroup (the same inputs and instructions, so the same state, bit for
//     bit), its own copy of P^T, and PV for its 256 dims only (m-tiles 4wg .. 4wg + 3: 8 QGMMA m64n32k32 with
//     V^T from ldmatrix.trans, in waves of one m-tile). O^T is 4 x 16 = 64 fp32 per thread; each warpgroup stores its dims, so there is
//     no merge and no exchange between the warpgroups at all.
//   WG2 (producer, DUAL_PRODUCER_REGS = 40): as the narrow kernel (tma_producer.cuh).
// The cost: QK (64 x 32 x 576 MACs, 50 KB of shared-memory operand reads) and the softmax run twice per block,
// and each warpgroup's chain must fit in one block time (two in the narrow kernel).
// Pipeline: 4 KV stages (kv_empty: 256 arrivals, both warpgroups once their QK retired; the V^T fragments and
// the k scales are in registers by then), 2 query buffers (20 KB each). Shared memory: DualStorage, ~207 KB.
#pragma once

#include <cuda_bf16.h>

#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/decode_fp8/narrow/piece_rows.cuh"
#include "kernels/sm90/decode_fp8/tma_producer.cuh"
#include "kernels/sm90/decode_fp8/narrow/pv.cuh"
#include "kernels/sm90/decode_fp8/narrow/qk_softmax.cuh"
#include "kernels/sm90/decode_fp8/schedule.cuh"
#include "kernels/sm90/decode_fp8/traits.h"

namespace snapmla::sm90::decode_fp8::narrow {

inline constexpr int DC = DUAL_ROWS / 4;    // query rows per thread (8)
inline constexpr int DACC = DUAL_ROWS / 2;  // fp32 per m64n32 accumulator (16)

template <bool MASKED_SOFTMAX, bool MASKED_V>
__device__ __forceinline__ void dual_block(DualStorage& ss, int wg, int warp, int lane, int stage, int qbuf,
                                           const float (&q_mul)[DC], const int (&n_vis)[DC], int n_valid,
                                           ColState (&cs)[DC], float (&o)[DUAL_M_TILES][DACC], bool release_q) {
  float s[DACC];
#pragma unroll
  for (int k = 0; k < DACC; ++k) s[k] = 0.f;
  wgmma_fence_operands(s);
  wgmma_arrive();
  issue_qk_t<DUAL_ROWS>(s, smem_u32(ss.kv_content[stage]), smem_u32(ss.kv_rope[stage]),
                        smem_u32(ss.q_content[qbuf]), smem_u32(ss.q_rope[qbuf]));
  wgmma_commit();
  uint32_t a[DUAL_M_TILES][PV_STEPS][4];
  load_v_block<MASKED_V, DUAL_M_TILES>(a, smem_u32(ss.kv_content[stage]), DUAL_M_TILES * wg, warp, lane, n_valid);
  const int tau0 = 16 * warp + lane / 4;
  const float ks[2] = {ss.kv_scale[stage][tau0], ss.kv_scale[stage][tau0 + 8]};
  wgmma_wait<0>();
  wgmma_fence_operands(s);
  mbarrier_arrive(&ss.kv_empty[stage]);
  if (release_q) mbarrier_arrive(&ss.q_empty[qbuf]);
  const int bar_id = BAR_WG0 + wg;
  float o_scale[DC];
  softmax_cols<MASKED_SOFTMAX, DUAL_ROWS>(s, ks, q_mul, n_vis, cs, o_scale, &ss.red[wg][0][0][0], &ss.red[wg][1][0][0],
                                          warp, lane, bar_id);
  const uint32_t pt = smem_u32(ss.pt[wg]);
  store_pt<DUAL_ROWS>(pt, s, cs, warp, lane, bar_id);
  pv_block<DUAL_ROWS, DUAL_M_TILES, 1>(o, o_scale, a, pt);  // waves of one m-tile: 2 x 16 accumulator registers
}

// End of a piece: L~ summed over the warpgroup, then O~ / L~ of this warpgroup's 256 dims (the epilogue rules of
// narrow/merge_store.cuh with one state: lse2 = m + log2(L~ / inv)). Accumulator index 4i + 2rr + e of m-tile m
// is query row 8i + 2t + e, dim 64 (4wg + m) + 16 warp + 2r + rr (pv.cuh).
__device__ __forceinline__ void dual_store(const DecodeParams& p, DualStorage& ss, int req, int split, int wg, int tid,
                                           const float (&o)[DUAL_M_TILES][DACC], const ColState (&cs)[DC]) {
  const int warp = tid / 32, lane = tid % 32, t = lane % 4, r = lane / 4;
  float l_sum[DC];
#pragma unroll
  for (int ce = 0; ce < DC; ++ce) l_sum[ce] = cs[ce].l;
  // Slot 1 (the p' maxima), not 0: there is no barrier after these reads, and the next block's first reduction
  // writes slot 0 while a slower warp may still read here; slot 1 is next written only after that reduction's
  // barrier, which every thread passes after this epilogue.
  reduce_cols<false>(l_sum, &ss.red[wg][1][0][0], warp, lane, BAR_WG0 + wg);
  float inv_l[DC], lse2[DC];
  bool empty[DC];
#pragma unroll
  for (int ce = 0; ce < DC; ++ce) {
    empty[ce] = cs[ce].m == -INFINITY;
    inv_l[ce] = empty[ce] ? 0.f : 1.f / l_sum[ce];
    lse2[ce] = empty[ce] ? -INFINITY : cs[ce].m + log2f(l_sum[ce] / cs[ce].inv);
  }
  const int split_begin = p.num_splits[req];
  const bool single = p.num_splits[req + 1] - split_begin == 1;
#pragma unroll
  for (int m = 0; m < DUAL_M_TILES; ++m) {
    const int dim = 64 * (DUAL_M_TILES * wg + m) + 16 * warp + 2 * r;
#pragma unroll
    for (int i = 0; i < DUAL_ROWS / 8; ++i) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int row = 8 * i + 2 * t + e, ce = 2 * i + e;
        if (row >= p.q_rows) continue;
        const float v0 = o[m][4 * i + e] * inv_l[ce], v1 = o[m][4 * i + 2 + e] * inv_l[ce];
        if (single) {
          __nv_bfloat16* g_out = p.out + (static_cast<int64_t>(req) * p.q_rows + row) * D_V + dim;  // (b, q_rows, 512)
          *reinterpret_cast<__nv_bfloat162*>(g_out) = __floats2bfloat162_rn(v0, v1);
        } else {
          const int64_t acc_row = static_cast<int64_t>(split_begin + split) * p.q_rows + row;
          *reinterpret_cast<float2*>(p.o_accum + acc_row * D_V + dim) = make_float2(v0, v1);  // (total_splits, q_rows, 512)
        }
      }
    }
  }
  if (wg == 0 && warp == 0 && lane < 4) {
#pragma unroll
    for (int ce = 0; ce < DC; ++ce) {
      const int row = 8 * (ce / 2) + 2 * t + ce % 2;
      if (row >= p.q_rows) continue;
      if (single) {
        const int s = row / p.h_q, h = row % p.h_q;
        p.lse[(static_cast<int64_t>(req) * p.h_q + h) * p.s_q + s] = empty[ce] ? INFINITY : lse2[ce] * LN2;  // (b, h_q, s_q)
      } else {
        p.lse_accum[static_cast<int64_t>(split_begin + split) * p.q_rows + row] = lse2[ce];  // (total_splits, q_rows)
      }
    }
  }
}

__device__ void run_math_dual(const KernelParams& kp, DualStorage& ss, const SchedRow& row, int wg) {
  const DecodeParams& p = kp.p;
  const int tid = threadIdx.x % WG_THREADS;
  const int warp = tid / 32, lane = tid % 32, t = lane % 4;
  int block_idx = 0;
  int piece = 0;
  for (int req = row.begin_req; req <= row.end_req; ++req, ++piece) {
    const Piece pc = make_piece(p, row, req);
    const PieceRows<DUAL_ROWS> pr = piece_rows<DUAL_ROWS>(p, req, pc, t);
    ColState cs[DC];
#pragma unroll
    for (int ce = 0; ce < DC; ++ce) cs[ce] = ColState{-INFINITY, 1.f, 0.f};
    float o[DUAL_M_TILES][DACC];
#pragma unroll
    for (int m = 0; m < DUAL_M_TILES; ++m) {
#pragma unroll
      for (int k = 0; k < DACC; ++k) o[m][k] = 0.f;
    }
    const int qbuf = piece % Q_BUFS;
    const int n_blocks = pc.blk_end - pc.blk_begin;
    mbarrier_wait(&ss.q_full[qbuf], (piece / Q_BUFS) & 1);
    if (n_blocks == 0) mbarrier_arrive(&ss.q_empty[qbuf]);
    for (int j = 0; j < n_blocks; ++j) {
      const int n = block_idx + j;
      const int stage = n % STAGES;
      const int blk = pc.blk_begin + j;
      int n_vis[DC];
#pragma unroll
      for (int ce = 0; ce < DC; ++ce) n_vis[ce] = pr.limit[ce] - blk * BLOCK_N;
      const int n_valid = pc.seqlen - blk * BLOCK_N;
      const bool release_q = j + 1 == n_blocks;
      mbarrier_wait(&ss.kv_full[stage], (n / STAGES) & 1);
      // Uniform over the CTA: the named barriers inside are the same on every path.
      if (pr.limit_min - blk * BLOCK_N >= BLOCK_N)
        dual_block<false, false>(ss, wg, warp, lane, stage, qbuf, pr.q_mul, n_vis, n_valid, cs, o, release_q);
      else if (n_valid >= BLOCK_N)
        dual_block<true, false>(ss, wg, warp, lane, stage, qbuf, pr.q_mul, n_vis, n_valid, cs, o, release_q);
      else
        dual_block<true, true>(ss, wg, warp, lane, stage, qbuf, pr.q_mul, n_vis, n_valid, cs, o, release_q);
    }
    block_idx += n_blocks;
    dual_store(p, ss, req, piece_split(p, row, req), wg, tid, o, cs);
  }
}

template <typename KvElem>
__global__ void __launch_bounds__(NUM_THREADS, 1) snapmla_decode_fp8_dual_kernel(const __grid_constant__ KernelParams kp) {
  static_assert(KvTraits<KvElem>::NEEDS_V_TRANSPOSE, "the 8-bit cache path (V transposed by ldmatrix)");
  extern __shared__ uint8_t smem_raw[];
  DualStorage& ss = aligned_storage<DualStorage>(smem_raw);
  init_pipeline(kp, ss, MATH_THREADS);  // kv_empty: both math warpgroups
  __syncthreads();
  const int wg = threadIdx.x / WG_THREADS;
  if (wg == PRODUCER_WG) {
    setmaxnreg_dec<DUAL_PRODUCER_REGS>();
    if (threadIdx.x < PRODUCER_WG * WG_THREADS + 32) run_producer<DualStorage>(kp, ss, load_sched_row(kp.p));
  } else {
    setmaxnreg_inc<DUAL_MATH_REGS>();
    run_math_dual(kp, ss, load_sched_row(kp.p), wg);
  }
}

}  // namespace snapmla::sm90::decode_fp8::narrow
