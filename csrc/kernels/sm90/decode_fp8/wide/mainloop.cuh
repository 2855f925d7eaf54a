// Math warpgroups (WG0, WG1) of the wide decode kernel. The blocks a CTA walks are dealt out by the parity of
// their running index: WG(n % 2) owns block n and computes its QK and softmax alone, then hands P^T and the
// softmax state to the other warpgroup through shared memory (exchange.cuh). Both warpgroups run PV for every
// block, warpgroup wg for dims 256wg .. 256wg + 255, in increasing block order, as O^T = V^T . P^T (swap AB:
// A = V^T built in registers by ldmatrix.trans from the page's content tiles, B = P^T in the hand-off).
// Against PV as P . V with V^T transposed into shared memory by a transposer warpgroup, this is 1.05-1.20x at
// h_q 64 / 128 (H200, docs/design.md section 5).
//
// Per own block n of a piece (the owner of n - 1, if it is in the piece, is the other warpgroup):
//   wait kv_full -> 16 x QGMMA m64n64k32 (Q8 . K8, 512 dims) + 4 x HGMMA m64n64k16 (RoPE) -> retire
//   -> softmax half 1 (logits, row maxima) -> wait the hand-off of n - 1 (its state) -> softmax half 2
//   -> P to e4m3 -> hand-off of n (P^T, state, fold scales; xchg_full) -> PV(n - 1) -> wait the own hand-off
//   (all 128 owner threads' stores) -> PV(n); after the piece's last own block, PV of a trailing block of the
//   other warpgroup. Each PV ends with this warpgroup's kv_empty arrival for the block's stage.
// The chain between the warpgroups is only softmax -> hand-off -> softmax.
//
// PV per block: 4 m-tiles of 64 dims, each 2 x QGMMA m64n64k32 (RS) into a fresh accumulator, the next
// m-tile's V^T fragments (1 LDSM.x4.trans + 4 PRMT per k-step) loaded while it runs, then
// O^T = O^T * o_scale[row] + acc (FFMA, fp32; o_scale per column of the accumulator, 16 per thread).
//
// Why PV is not accumulated in place: an FP8 WGMMA adds into its fp32 accumulator with only ~14 significant
// bits (the limit DeepSeek-V3 reports for Hopper FP8 GEMMs). O~ grows with every block while one block adds
// a small share, so accumulating a long piece inside the tensor core lost precision linearly in its length:
// measured against the fp32 emulation, rel L2 3e-3 after ~120 blocks and 2.6e-2 after 1024 blocks (65536
// tokens in one piece). Each block's P8 . V8 (64 tokens) is summed by the tensor core alone and added to O^T
// in fp32 by the CUDA cores, which also folds the rescale into the same FFMA.
//
// Registers per thread: O^T 128 + the two QK chains 2 x 32 during the QK (issue_qk); O^T 128 + S 32 + k scales
// 16 (one half at a time, re-read) during the softmax; O^T 128 +
// one m-tile accumulator 32 + A fragments 2 x 8 + 16 column scales during PV, within MATH_REGS = 232. Two
// m-tiles in flight (a second 32-register accumulator) spill: 720 B at 232 / 40, 436 B at 240 / 24 (ptxas,
// 2026-11-29).
#pragma once

#include "kernels/sm90/common/stage_ring.cuh"
#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/wgmma.cuh"
#include "kernels/sm90/decode_fp8/shared/block_pv.cuh"
#include "kernels/sm90/decode_fp8/shared/epilogue.cuh"
#include "kernels/sm90/decode_fp8/shared/exchange.cuh"
#include "kernels/sm90/decode_fp8/shared/qk_steps.cuh"
#include "kernels/sm90/decode_fp8/shared/schedule.cuh"
#include "kernels/sm90/decode_fp8/shared/softmax.cuh"
#include "kernels/sm90/decode_fp8/shared/traits.h"
#include "kernels/sm90/decode_fp8/trace/hook.cuh"

namespace snapmla::sm90::decode_fp8 {

// S = Q . K^T over 512 FP8 dims and 64 BF16 RoPE dims (qk_steps.cuh).
// The 16 FP8 k-steps go into WIDE_QK_CHAINS = 2 fresh accumulators of 8 chained steps each (the RoPE k-group into the
// second), summed in fp32 by qk_block. An FP8 WGMMA step aligns its 32 products to the accumulator's exponent and
// keeps 13 fraction bits there (H200 probe, tools/microbench/wgmma_fp8_accumulation.cu), so one chain of 16
// steps loses the products' low bits to its own growing sum; where all 512 products of a dominant logit have one
// sign this was 0.37-0.52 nats of lse at lse ~100. tools/numerics/qk_accumulation_model.py: 2 chains -0.15..-0.19
// nats there (measured on the H200, 2026-12-01: -0.13..-0.20) and 2.3e-3 (from 5.9e-3) on the heavy-tailed
// layer. 4 chains (the narrow kernel's) would need
// 4 x 32 accumulator registers next to O^T's 128: over MATH_REGS = 232.
inline constexpr int WIDE_QK_CHAINS = 2;
__device__ __forceinline__ void issue_qk(float (&s)[WIDE_QK_CHAINS][32], const SharedStorage& ss, int stage) {
  constexpr int CHAIN = QK_CONTENT_STEPS / WIDE_QK_CHAINS;
  static_assert(WIDE_QK_CHAINS == 2 && QK_CONTENT_STEPS % WIDE_QK_CHAINS == 0, "two chains of CHAIN steps");
  const uint64_t q_desc = q_content_desc(ss);
  const uint64_t k_desc = k_content_desc(ss, stage);
  issue_qk_content_steps<0, CHAIN>(s[0], q_desc, k_desc);
  issue_qk_content_steps<CHAIN, CHAIN>(s[1], q_desc, k_desc);
  issue_qk_rope_steps(s[WIDE_QK_CHAINS - 1], q_rope_desc(ss), k_rope_desc(ss, stage));
}

// QK of the block, retired. The stage stays held until the hand-off of the block was read (kv_empty).
// release_q: this is the warpgroup's last QK of the piece, so its use of the query tile ends here.
__device__ __forceinline__ void qk_block(float (&s)[32], SharedStorage& ss, int block_idx, bool release_q,
                                         PhaseTimer& tm, BlockTrace& bt) {
  const int stage = block_idx % KV_STAGES;
  StageRing<KV_STAGES>::wait_full(ss.kv_full, block_idx);
  tm.mark(TP_WAIT_KV);
  bt.mark();
  float sc[WIDE_QK_CHAINS][32];  // not initialised: each chain's first WGMMA has scale-d = 0 (issue_qk)
#pragma unroll
  for (int c = 0; c < WIDE_QK_CHAINS; ++c) wgmma_fence_operands(sc[c]);
  cute::warpgroup_arrive();
  issue_qk(sc, ss, stage);
  cute::warpgroup_commit_batch();
  cute::warpgroup_wait<0>();
#pragma unroll
  for (int c = 0; c < WIDE_QK_CHAINS; ++c) wgmma_fence_operands(sc[c]);
  static_assert(WIDE_QK_CHAINS == 2, "the sum below");
#pragma unroll
  for (int k = 0; k < 32; ++k) s[k] = sc[0][k] + sc[1][k];
  tm.mark(TP_QK);
  if (release_q) mbarrier_arrive(&ss.q_empty[0]);
}

__device__ void run_math(const KernelParams& kp, SharedStorage& ss, const SchedRow& row, int wg) {
  const DecodeParams& p = kp.p;
  const auto [warp, lane, t, row0] = math_thread();
  const int m_tile = blockIdx.x;
  // Query rows of this warp: launch.h rows_per_warp. Warp-uniform: live_rows (any of them is a real query row:
  // at h_q = 16 every warp holds 4). The softmax runs both of a thread's rows even when r0 + 8 is padding.
  const int rpw = rows_per_warp(p.q_rows);
  const int warp_q_row0 = warp_first_q_row(m_tile, warp, rpw);
  const bool live_rows = warp_q_row0 < p.q_rows;

  int block_idx = 0;  // running index of the piece's first block
  int piece = 0;
  PhaseTimer tm(SNAPMLA_TRACE_BUFFER(ss, wg));  // -DSNAPMLA_TRACE_PHASES only (trace/phase.cuh)
  CtaTimeline ct(wg);                           // -DSNAPMLA_TRACE_CTA only (trace/cta.cuh)
  BlockTrace bt(threadIdx.x % WG_THREADS == 0);  // -DSNAPMLA_TRACE_BLOCKS only: own blocks' arrival and end
  for (int req = row.begin_req; req <= row.end_req; ++req, ++piece) {
    const Piece pc = make_piece(p, row, req);
    float q_mul[2];
    int limit[2];  // visible tokens of the row: causal query token s sees 0 .. seqlen - s_q + s
    tile_rows(p, req, pc.seqlen, warp_q_row0, rpw, lane, q_mul, limit);
    RowState st[2] = {{-INFINITY, 1.f, 0.f}, {-INFINITY, 1.f, 0.f}};
    float o[PV_M_TILES][32];
#pragma unroll
    for (int m = 0; m < PV_M_TILES; ++m) {
#pragma unroll
      for (int k = 0; k < 32; ++k) o[m][k] = 0.f;
    }

    // Local block j of the piece is running block block_idx + j, owned by warpgroup (block_idx + j) % 2.
    const int n_blocks = pc.blk_end - pc.blk_begin;
    const int first_own = (block_idx & 1) == wg ? 0 : 1;
    StageRing<1>::wait_full(ss.q_full, piece);  // one query tile per piece
    if (first_own >= n_blocks) mbarrier_arrive(&ss.q_empty[0]);  // no QK of this warpgroup in the piece
    tm.mark(TP_PIECE_EDGES);
    if (piece == 0) ct.mark();
    for (int j = first_own; j < n_blocks; j += 2) {
      const int n = block_idx + j;
      const int stage = n % KV_STAGES;
      float s[32];
      tm.count_block();
      qk_block(s, ss, n, j + 2 >= n_blocks, tm, bt);
      ct.first_block_mark(piece, j - first_own);
      const int blk = pc.blk_begin + j;
      const int n_vis[2] = {limit[0] - blk * BLOCK_N, limit[1] - blk * BLOCK_N};
      // A warp whose 16 rows are all padding (rows >= q_rows) skips the softmax and the packing: its P stays 0.
      // mx is set for those warps too: left unset it was carried round the block loop in 2 registers.
      float mx[2] = {-INFINITY, -INFINITY};
      const bool whole = n_vis[0] >= BLOCK_N && n_vis[1] >= BLOCK_N;
      if (live_rows) {
        if (whole)
          softmax_logits<false>(s, ss.kv_scale[stage], q_mul, n_vis, t, mx);
        else
          softmax_logits<true>(s, ss.kv_scale[stage], q_mul, n_vis, t, mx);
      }
      tm.mark(TP_SOFTMAX_LOGITS);
      // The previous block (the other warpgroup's) gives the state this block starts from.
      float o_scale_prev[2] = {1.f, 1.f};
      if (j > 0) take_handoff_state(ss, n - 1, row0, st, o_scale_prev);
      tm.mark(TP_WAIT_HANDOFF);
      float o_scale[2] = {1.f, 1.f};
      {
        uint32_t p_blk[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (live_rows) {
          if (whole)
            softmax_probs<false>(s, ss.kv_scale[stage], mx, n_vis, t, st, o_scale);
          else
            softmax_probs<true>(s, ss.kv_scale[stage], mx, n_vis, t, st, o_scale);
          const float inv[2] = {st[0].inv, st[1].inv};
          pack_p(s, inv, p_blk);
        }
        publish_block(smem_u32(ss.kv_rope[stage]), p_blk, st, o_scale, row0, t);
        mbarrier_arrive(&ss.xchg_full[stage]);
      }
      tm.mark(TP_SOFTMAX_PUBLISH);
      if (j > 0) pv_after_handoff(o, ss, n - 1, wg, warp, lane, pc.seqlen - (blk - 1) * BLOCK_N);
      tm.mark(TP_PV_PREV);
      StageRing<KV_STAGES>::wait_full(ss.xchg_full, n);  // the own hand-off: all 128 threads' stores
      tm.mark(TP_WAIT_OWN);
      pv_after_handoff(o, ss, n, wg, warp, lane, pc.seqlen - blk * BLOCK_N);
      tm.mark(TP_PV_OWN);
      bt.mark();
    }
    // A last block owned by the other warpgroup: its hand-off carries the final state of the piece.
    if (n_blocks > 0 && ((block_idx + n_blocks - 1) & 1) != wg) {
      const int n = block_idx + n_blocks - 1;
      float o_scale_last[2];
      take_handoff_state(ss, n, row0, st, o_scale_last);
      pv_after_handoff(o, ss, n, wg, warp, lane, pc.seqlen - (pc.blk_end - 1) * BLOCK_N);
    }
    tm.mark(TP_PIECE_EDGES);
    ct.mark();
    block_idx += n_blocks;
    store_piece(p, ss, req, piece_split(p, row, req), m_tile, wg, warp, lane, o, st);
    tm.mark(TP_EPILOGUE);
    ct.mark();
    ct.piece_done(n_blocks);
  }
  tm.print(wg);
  ct.print("wide");
  bt.print("wide", wg == 0 ? "math0" : "math1");
}

}  // namespace snapmla::sm90::decode_fp8
