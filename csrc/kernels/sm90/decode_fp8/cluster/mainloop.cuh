// Math warpgroups of the cluster decode kernel (4 per cluster: (rank, wg) for rank, wg in {0, 1}). Warpgroup
// (rank, wg) owns the blocks n of the walk with n % 4 == rank + 2 wg: for those it runs the QK over all 576
// dims, the state-free softmax (cluster/softmax_state_free.cuh) and P8, and publishes P^T and the state
// (cluster/handoff.cuh). Every warpgroup runs PV for every block, in block order, over its 128 dims (content
// tile 2 rank + wg): 2 m-tiles of O^T = V^T . P^T as in the wide kernel (mainloop.cuh), each folded in fp32.
//
// Order of a warpgroup's work around its own block j (local index in the piece):
//   PV of the blocks up to j - 3 -> wait the page -> QK(j) issued and retired -> logits, exponentials and P8
//   against the block's own maxima -> publish P^T -> PV up to j - 2 -> wait the state of block j - 1 (from the
//   other CTA) -> state of j -> publish it -> PV up to j.
// Each PV waits for its block's page in this CTA and for its hand-off. A stage is back to the producer ~1-1.5
// blocks after its hand-off, leaving ~4.5 block periods for the 6-stage ring to refill it. Waits only ever look
// back (pages of earlier blocks released, hand-offs of earlier blocks): no cycle.
// Measured (phase trace, b64 h_q 64 16k, H200, 2026-12-02; cycles per own block = 4 blocks of the walk, per
// warpgroup): PV up to j - 3 705, page 200, QK 825, softmax 1235, P^T 190, PV up to j - 2 675, state wait 195,
// state 575, PV up to j 1400, hand-off waits inside the PVs 1080: ~7100, i.e. ~1775 per block per pair, where the
// wide kernel takes ~2860 per block and SM (docs/design.md, "Built and measured").
//
// Registers per thread: O^T 2 x 32; QK 2 chains x 32 (not live across a PV); during a PV both m-tile
// accumulators 2 x 32, A fragments 2 x 8, column scales 16; the softmax in the QK registers; 8 P words.
#pragma once

#include "kernels/sm90/common/cluster.cuh"
#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/wgmma.cuh"
#include "kernels/sm90/decode_fp8/cluster/config.h"
#include "kernels/sm90/decode_fp8/cluster/epilogue.cuh"
#include "kernels/sm90/decode_fp8/cluster/handoff.cuh"
#include "kernels/sm90/decode_fp8/cluster/phase_trace_c.cuh"
#include "kernels/sm90/decode_fp8/cluster/softmax_state_free.cuh"
#include "kernels/sm90/decode_fp8/exchange.cuh"
#include "kernels/sm90/decode_fp8/narrow/pv.cuh"
#include "kernels/sm90/decode_fp8/schedule.cuh"
#include "kernels/sm90/decode_fp8/softmax.cuh"
#include "kernels/sm90/decode_fp8/traits.h"

namespace snapmla::sm90::decode_fp8::cluster {

// S = Q . K^T of the owned block at stage v, as the wide kernel's issue_qk (2 fp32-promoted chains of 8 FP8
// k-steps, the RoPE k-group into the second), with the page's 4 content tiles at their own addresses
// (config.h StageView::owner_tile). Issued and committed, not waited for.
__device__ __forceinline__ void issue_qk_c(float (&sc)[QK_CHAINS_C][32], const ClusterStorage& ss,
                                           const StageView& v) {
  constexpr int CHAIN = QK_CONTENT_STEPS / QK_CHAINS_C;
  constexpr uint32_t SBO = 8 * SWIZZLE_ROW_BYTES;  // 1024 B between 8-row groups
  const uint64_t q_desc = opaque(make_smem_desc(smem_u32(ss.q_content), SBO, SmemSwizzle::k128B));
#pragma unroll
  for (int c = 0; c < QK_CHAINS_C; ++c) wgmma_fence_operands(sc[c]);
  wgmma_arrive();
#pragma unroll
  for (int tile = 0; tile < CONTENT_TILES; ++tile) {
    const uint64_t k_desc = make_smem_desc(smem_u32(v.owner_tile(tile)), SBO, SmemSwizzle::k128B);
#pragma unroll
    for (int kk = 0; kk < STEPS_PER_SWIZZLE_ROW; ++kk) {
      const int step = tile * STEPS_PER_SWIZZLE_ROW + kk;
      const uint32_t koff16 = (kk * K_STEP_BYTES) >> 4;
      const uint32_t qoff16 = (tile * Q_CONTENT_TILE_BYTES + kk * K_STEP_BYTES) >> 4;
      wgmma_m64n64k32_e4m3_ss(sc[step / CHAIN], q_desc + qoff16, k_desc + koff16, step % CHAIN > 0);
    }
  }
  const uint64_t qr_desc = opaque(make_smem_desc(smem_u32(ss.q_rope), SBO, SmemSwizzle::k128B));
  const uint64_t kr_desc = make_smem_desc(smem_u32(v.pr.own_rope), SBO, SmemSwizzle::k128B);
#pragma unroll
  for (int kk = 0; kk < QK_ROPE_STEPS; ++kk) {
    const uint32_t off16 = (kk * K_STEP_BYTES) >> 4;
    wgmma_m64n64k16_bf16_ss(sc[QK_CHAINS_C - 1], qr_desc + off16, kr_desc + off16, 1);
  }
  wgmma_commit();
}

// PV of block n (stage v) for this warpgroup's 128 dims: both m-tiles in flight at once, each a fresh
// accumulator from 2 RS QGMMA m64n64k32 (A = V^T fragments of content tile 2 rank + wg, B = P^T), then folded as
// O^T = O^T * o_scale[column] + acc. The V^T fragments load after this CTA's copy of the page landed (kv_full:
// a multicast completes in each CTA on its own, so the owner's hand-off does not imply the content is here) and
// before the wait for the hand-off; the column scales load while the WGMMAs run.
// With O^T at 64 registers both accumulators fit (64 + 64 + 16 fragments + 16 scales); one m-tile at a time
// (the wide kernel's order) measured ~950 cycles per block and warpgroup (phase trace, H200, 2026-12-02).
template <bool MASKED>
__device__ __forceinline__ void pv_block_c(float (&o)[PV_M_TILES_C][32], const StageView& v, int n, int wg, int warp,
                                           int lane, int n_valid, ClusterTimer& tm, int phase) {
  tm.mark(phase);
  mbarrier_wait(v.kv_full(), stage_phase(n));
  tm.mark(CP_PV_WAIT);
  const uint32_t content = smem_u32(v.my_dims_tile(wg));
  uint32_t a[PV_M_TILES_C][PV_STEPS][4];
#pragma unroll
  for (int mt = 0; mt < PV_M_TILES_C; ++mt) {
    narrow::load_v_frags<MASKED>(a[mt], content, mt, warp, lane, n_valid);
#pragma unroll
    for (int g = 0; g < PV_STEPS; ++g) wgmma_fence_operands(a[mt][g]);
  }
  tm.mark(phase);  // the fragment loads
  mbarrier_wait(v.xchg_full(), stage_phase(n));
  tm.mark(CP_PV_WAIT);
  const uint32_t tile = smem_u32(v.handoff());
  const uint64_t pt_desc = make_smem_desc(tile, 8 * BLOCK_N, SmemSwizzle::k64B);  // P^T: 512 B per 8 rows of 64 B
  float acc[PV_M_TILES_C][32];
#pragma unroll
  for (int mt = 0; mt < PV_M_TILES_C; ++mt) wgmma_fence_operands(acc[mt]);
  wgmma_arrive();
#pragma unroll
  for (int mt = 0; mt < PV_M_TILES_C; ++mt) {
#pragma unroll
    for (int g = 0; g < PV_STEPS; ++g)
      wgmma_m64n64k32_e4m3_rs(acc[mt], a[mt][g], pt_desc + ((g * K_STEP_BYTES) >> 4), g > 0);
  }
  wgmma_commit();
  float col_scale[16];
  read_col_scales(tile, lane % 4, col_scale);
  wgmma_wait<0>();
#pragma unroll
  for (int mt = 0; mt < PV_M_TILES_C; ++mt) {
    wgmma_fence_operands(acc[mt]);
#pragma unroll
    for (int g = 0; g < PV_STEPS; ++g) wgmma_fence_operands(a[mt][g]);
#pragma unroll
    for (int k = 0; k < 32; ++k) o[mt][k] = fmaf(o[mt][k], col_scale[2 * (k / 4) + k % 2], acc[mt][k]);
  }
}

// phase: the trace phase the PV's time goes to (its hand-off wait goes to CP_PV_WAIT); nothing in default builds.
__device__ __forceinline__ void pv_c(float (&o)[PV_M_TILES_C][32], const StageView& v, int n, int wg, int warp,
                                     int lane, int n_valid, ClusterTimer& tm, int phase) {
  if (n_valid >= BLOCK_N)
    pv_block_c<false>(o, v, n, wg, warp, lane, n_valid, tm, phase);
  else
    pv_block_c<true>(o, v, n, wg, warp, lane, n_valid, tm, phase);
}

__device__ void run_math_c(const KernelParams& kp, ClusterStorage& ss, const SchedRow& row, int wg) {
  const DecodeParams& p = kp.p;
  const int tid = threadIdx.x % WG_THREADS;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int t = lane % 4;
  const int row0 = 16 * warp + lane / 4;
  const int m_tile = blockIdx.x / CLUSTER_CTAS;
  const int rpw = rows_per_warp(p.q_rows);
  const bool live_rows = warp_first_q_row(m_tile, warp, rpw) < p.q_rows;
  const int my_slot = static_cast<int>(cluster_ctarank()) + 2 * wg;  // own blocks: n % 4 == my_slot

  int block_idx = 0;  // running index of the piece's first block
  int piece = 0;
  ClusterTimer tm;  // -DSNAPMLA_TRACE_PHASES only (phase_trace_c.cuh)
  for (int req = row.begin_req; req <= row.end_req; ++req, ++piece) {
    const Piece pc = make_piece(p, row, req);
    float q_mul[2];
    int limit[2];
    tile_rows(p, req, pc.seqlen, warp_first_q_row(m_tile, warp, rpw), rpw, lane, q_mul, limit);
    float o[PV_M_TILES_C][32];
#pragma unroll
    for (int m = 0; m < PV_M_TILES_C; ++m) {
#pragma unroll
      for (int k = 0; k < 32; ++k) o[m][k] = 0.f;
    }
    const int n_blocks = pc.blk_end - pc.blk_begin;
    const int first_own = (my_slot - block_idx % OWNER_CYCLE + OWNER_CYCLE) % OWNER_CYCLE;
    mbarrier_wait(&ss.pair[0].q_full, piece & 1);
    if (first_own >= n_blocks) mbarrier_arrive(&ss.pair[0].q_empty);  // no QK of this warpgroup in the piece

    int pv_next = 0;  // next local block to run PV for; the piece's last one is left to the epilogue
    auto pv_upto = [&](int j_last, int phase) {
      j_last = min(j_last, n_blocks - 2);
      for (; pv_next <= j_last; ++pv_next) {
        const int n = block_idx + pv_next;
        const StageView v = stage_view(ss, n);
        pv_c(o, v, n, wg, warp, lane, pc.seqlen - (pc.blk_begin + pv_next) * BLOCK_N, tm, phase);
        release_stage_c(v, lane);
      }
    };

    for (int j = first_own; j < n_blocks; j += OWNER_CYCLE) {
      const int n = block_idx + j;
      const StageView v = stage_view(ss, n);
      tm.count_block();
      tm.mark(CP_TAIL);  // what came before the block: the previous one's tail or the piece's start
      pv_upto(j - 3, CP_PV_A);
      tm.mark(CP_PV_A);
      mbarrier_wait(v.kv_full(), stage_phase(n));
      tm.mark(CP_WAIT_KV);
      float sc[QK_CHAINS_C][32];  // not initialised: each chain's first WGMMA has scale-d = 0
      issue_qk_c(sc, ss, v);
      wgmma_wait<0>();
#pragma unroll
      for (int c = 0; c < QK_CHAINS_C; ++c) wgmma_fence_operands(sc[c]);
      float s[32];
#pragma unroll
      for (int k = 0; k < 32; ++k) s[k] = sc[0][k] + sc[1][k];
      if (j + OWNER_CYCLE >= n_blocks) mbarrier_arrive(&ss.pair[0].q_empty);  // the last QK of the piece
      tm.mark(CP_QK_WAIT);

      const int blk = pc.blk_begin + j;
      const int n_vis[2] = {limit[0] - blk * BLOCK_N, limit[1] - blk * BLOCK_N};
      const bool whole = n_vis[0] >= BLOCK_N && n_vis[1] >= BLOCK_N;
      float mx[2] = {-INFINITY, -INFINITY}, e_loc[2] = {0.f, 0.f}, p_loc[2] = {0.f, 0.f};
      {
        uint32_t p_blk[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (live_rows) {
          if (whole) {
            softmax_logits<false>(s, v.pr.own_scale, q_mul, n_vis, t, mx);
            softmax_block_local<false>(s, v.pr.own_scale, mx, n_vis, t, e_loc, p_loc);
          } else {
            softmax_logits<true>(s, v.pr.own_scale, q_mul, n_vis, t, mx);
            softmax_block_local<true>(s, v.pr.own_scale, mx, n_vis, t, e_loc, p_loc);
          }
          const float mult[2] = {p8_mult(p_loc[0]), p8_mult(p_loc[1])};
          pack_p(s, mult, p_blk);
        }
        tm.mark(CP_SOFTMAX);
        publish_pt_c(v, wg, tid, p_blk, row0, t);
      }
      tm.mark(CP_PUB_PT);
      pv_upto(j - 2, CP_PV_B);
      tm.mark(CP_PV_B);
      // The state after block j - 1 (owned by the other CTA; its hand-off was pushed here).
      RowState st[2] = {{-INFINITY, 1.f, 0.f}, {-INFINITY, 1.f, 0.f}};
      if (j > 0) {
        const StageView vp = stage_view(ss, n - 1);
        mbarrier_wait(vp.xchg_full(), stage_phase(n - 1));
        float unused[2];
        read_block_state(smem_u32(vp.handoff()), row0, st, unused);
      }
      tm.mark(CP_WAIT_STATE);
      float o_scale[2] = {1.f, 1.f};
      if (live_rows) softmax_state(mx, e_loc, p_loc, st, o_scale);
      publish_state_c(v, wg, tid, st, o_scale, row0, t);
      tm.mark(CP_STATE_PUB);
      pv_upto(j, CP_PV_C);
      tm.mark(CP_PV_C);
    }
    pv_upto(n_blocks - 2, CP_TAIL);
    uint32_t final_tile = 0;
    if (n_blocks > 0) {
      const int n = block_idx + n_blocks - 1;
      const StageView v = stage_view(ss, n);
      pv_c(o, v, n, wg, warp, lane, pc.seqlen - (pc.blk_end - 1) * BLOCK_N, tm, CP_TAIL);
      final_tile = smem_u32(v.handoff());
    }
    store_piece_c(p, req, piece_split(p, row, req), m_tile, static_cast<int>(cluster_ctarank()), wg, warp, lane, o,
                  final_tile);
    if (n_blocks > 0) release_stage_c(stage_view(ss, block_idx + n_blocks - 1), lane);
    tm.mark(CP_EPILOGUE);
    block_idx += n_blocks;
  }
  tm.print(wg);
}

}  // namespace snapmla::sm90::decode_fp8::cluster
