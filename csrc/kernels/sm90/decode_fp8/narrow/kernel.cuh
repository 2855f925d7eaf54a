// sm_90a FP8 SnapMLA decode kernel for narrow query tiles: q_rows = s_q * h_q <= 16 (h_q = 16 at s_q = 1, the
// memory-bound case of DeepSeek decode with the heads split 8 ways). Same inputs, numerics and outputs as the
// wide kernel (decode_fp8/wide/kernel.cuh), which pads such a tile to the WGMMA M of 64 rows: 4x the tensor work,
// the full 40 KB query tile re-read per block, and a V^T buffer round trip through shared memory.
//
// Here the query rows are the WGMMA N dimension of both GEMMs ("swap AB"):
//   S^T (64 tokens x 16 rows) = K8 . Q8^T + K_rope . Q_rope^T: 16 QGMMA m64n16k32 + 4 HGMMA m64n16k16, A = the
//     page's content / RoPE tiles as TMA left them, B = the 16-row query tile; the 16 FP8 k-steps in 8 fresh
//     accumulator chains of 2, summed in fp32 (qk_softmax.cuh issue_qk_t says why);
//   O^T (512 dims x 16 rows) += V^T . P^T: 16 QGMMA m64n16k32, A = V^T built in registers by ldmatrix.trans from
//     the page's content tiles, B = P^T (1 KB) in shared memory (pv.cuh).
// Each math warpgroup holds all of O^T (64 fp32 per thread), so the two need not exchange P or state per block:
//   WG0, WG1 (math, N_MATH_REGS = 232): block n of the CTA's walk belongs to WG(n % 2), which runs its QK, its
//     softmax (per query row = accumulator column: shuffles + 2 named-barrier reductions over its 4 warps), P^T
//     and its PV, folding into its own O~ and state. At the end of a piece both states merge like two splits
//     (merge_store.cuh), each warpgroup storing half the dims.
//   WG2 (producer, N_PRODUCER_REGS = 40): lane 0 of warp 0 issues the TMA loads: the query tile once per piece
//     (10 KB, rows past q_rows zero-filled) and the page of each block (41216 B, 3 bulk copies of the stage's
//     image, kv_layout.h); the warp loads the page ids,
//     32 at a time. Nothing else runs there, so it simply blocks on each barrier it needs.
// Pipeline: 4 KV stages (kv_full: TMA bytes; kv_empty: the owner's 128 threads once its QK retired; the V^T
// fragments and k scales are in registers by then), 2 query buffers (q_full / q_empty, by piece parity).
// Barrier phases come from one running block index and one running piece index that every role counts the
// same way (decode_fp8/shared/schedule.cuh).
// Shared memory: 4 x 40.25 KB stages + 2 x 10 KB query + 2 KB P^T + 32 KB merge + 2.5 KB = 216.5 KB
// (narrow/config.h).
// Per block: 41216 B from HBM; shared-memory reads QK 50 KB, V 32 KB, P^T 8 KB (the wide kernel: ~190 KB with
// the transpose); tensor work 2 x 64 x 16 x 512 (QK and PV each, FP8) + 2 x 64 x 16 x 64 (RoPE, BF16).
#pragma once

#include "kernels/sm90/common/stage_ring.cuh"
#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/decode_fp8/narrow/merge_store.cuh"
#include "kernels/sm90/decode_fp8/narrow/piece_rows.cuh"
#include "kernels/sm90/decode_fp8/narrow/pv.cuh"
#include "kernels/sm90/decode_fp8/narrow/qk_softmax.cuh"
#include "kernels/sm90/decode_fp8/shared/kernel_prologue.cuh"
#include "kernels/sm90/decode_fp8/shared/schedule.cuh"
#include "kernels/sm90/decode_fp8/shared/tma_producer.cuh"
#include "kernels/sm90/decode_fp8/shared/traits.h"
#include "kernels/sm90/decode_fp8/trace/hook.cuh"

namespace snapmla::sm90::decode_fp8::narrow {

static_assert(BAR_WG0 >= 1 && BAR_WG0 + NUM_MATH_WG - 1 <= MAX_NAMED_BARRIER_ID,
              "named barrier ids (common/mbarrier.cuh)");

// One block owned by this warpgroup: QK issued, V^T fragments loaded and the k scales read while it runs; the
// stage goes back to the producer once the QK retired (the earlier a stage is free, the more pages are in
// flight: the kernel is bound by HBM). Then the softmax, P^T and the PV from registers. Every block runs this one
// masked body (run-time masks; a whole block's keep every token): see run_math.
__device__ __forceinline__ void own_block(NarrowStorage& ss, int wg, int warp, int lane, int stage, int qbuf,
                                          const float (&q_mul)[COLS_PER_THREAD], const int (&n_vis)[COLS_PER_THREAD],
                                          int n_valid, ColState (&cs)[COLS_PER_THREAD], float (&o)[M_TILES][ACC],
                                          bool release_q) {
  // qk_softmax.cuh issue_qk_t: one accumulator per chain. Not initialised: each chain's first WGMMA has
  // scale-d = 0 (a compile-time immediate), so it overwrites the registers rather than adding to them.
  float sc[QK_CHAINS][ACC];
#pragma unroll
  for (int c = 0; c < QK_CHAINS; ++c) wgmma_fence_operands(sc[c]);
  cute::warpgroup_arrive();
  issue_qk_t<ROWS>(sc, smem_u32(ss.kv_content[stage]), smem_u32(ss.kv_rope[stage]), smem_u32(ss.q_content[qbuf]),
                   smem_u32(ss.q_rope[qbuf]));
  cute::warpgroup_commit_batch();
  uint32_t a[M_TILES][PV_STEPS][4];
  load_v_block<true, M_TILES>(a, smem_u32(ss.kv_content[stage]), 0, warp, lane, n_valid);
  const int tau0 = 16 * warp + lane / 4;  // the thread's tokens tau0, tau0 + 8 (qk_softmax.cuh)
  const float ks[2] = {ss.kv_scale[stage][tau0], ss.kv_scale[stage][tau0 + 8]};
  cute::warpgroup_wait<0>();
  float s[ACC];
#pragma unroll
  for (int c = 0; c < QK_CHAINS; ++c) wgmma_fence_operands(sc[c]);
#pragma unroll
  for (int k = 0; k < ACC; ++k) {
    static_assert(QK_CHAINS == 8, "the pairwise sum below");
    s[k] = ((sc[0][k] + sc[1][k]) + (sc[2][k] + sc[3][k])) + ((sc[4][k] + sc[5][k]) + (sc[6][k] + sc[7][k]));
  }
  // The stage's last reads (ldmatrix of V^T, the k scales, the QK operands) are done: release it, without a
  // proxy fence (mbarrier.cuh release_stage says why).
  release_stage(&ss.kv_empty[stage]);
  if (release_q) mbarrier_arrive(&ss.q_empty[qbuf]);
  const int bar_id = BAR_WG0 + wg;
  float o_scale[COLS_PER_THREAD];
  softmax_cols<ROWS>(s, ks, q_mul, n_vis, cs, o_scale, &ss.red[wg][0][0][0], &ss.red[wg][1][0][0], warp, lane, bar_id);
  const uint32_t pt = smem_u32(ss.pt[wg]);
  store_pt<ROWS>(pt, s, cs, warp, lane, bar_id);
  pv_block<ROWS, M_TILES, WAVE_MT>(o, o_scale, a, pt);
}

__device__ void run_math(const KernelParams& kp, NarrowStorage& ss, const SchedRow& row, int wg) {
  const DecodeParams& p = kp.p;
  const int tid = threadIdx.x % WG_THREADS;
  const int warp = tid / 32, lane = tid % 32, t = lane % 4;

  int block_idx = 0;  // running index of the piece's first block
  int piece = 0;
  CtaTimeline ct(wg);  // -DSNAPMLA_TRACE_CTA only (trace/cta.cuh)
  BlockTrace bt(tid == 0);  // -DSNAPMLA_TRACE_BLOCKS only (trace/block.cuh): own blocks' arrival and end
  for (int req = row.begin_req; req <= row.end_req; ++req, ++piece) {
    const Piece pc = make_piece(p, row, req);
    const PieceRows<ROWS> pr = piece_rows<ROWS>(p, req, pc, t);
    ColState cs[COLS_PER_THREAD];
#pragma unroll
    for (int ce = 0; ce < COLS_PER_THREAD; ++ce) cs[ce] = ColState{-INFINITY, 1.f, 0.f};
    float o[M_TILES][ACC];
#pragma unroll
    for (int m = 0; m < M_TILES; ++m) {
#pragma unroll
      for (int k = 0; k < ACC; ++k) o[m][k] = 0.f;
    }

    const int qbuf = piece % Q_BUFS;
    const int n_blocks = pc.blk_end - pc.blk_begin;
    const int first_own = (block_idx & 1) == wg ? 0 : 1;
    StageRing<Q_BUFS>::wait_full(ss.q_full, piece);
    if (first_own >= n_blocks) mbarrier_arrive(&ss.q_empty[qbuf]);  // no QK of this warpgroup in the piece
    if (piece == 0) ct.mark();
    for (int j = first_own; j < n_blocks; j += 2) {
      const int n = block_idx + j;
      const int stage = n % STAGES;
      const int blk = pc.blk_begin + j;
      int n_vis[COLS_PER_THREAD];
#pragma unroll
      for (int ce = 0; ce < COLS_PER_THREAD; ++ce) n_vis[ce] = pr.limit[ce] - blk * BLOCK_N;
      const int n_valid = pc.seqlen - blk * BLOCK_N;
      const bool release_q = j + 2 >= n_blocks;
      StageRing<STAGES>::wait_full(ss.kv_full, n);
      bt.mark();
      // One block body for every block, masked at run time
      // (for a whole block n_vis >= 64 and n_valid >= 64 keep every token). The whole-block and causal-only
      // variants were two more copies of the body (~12 KB each); a request's partial last block ran its own
      // copy, fetched cold at every request end (docs/design.md).
      own_block(ss, wg, warp, lane, stage, qbuf, pr.q_mul, n_vis, n_valid, cs, o, release_q);
      ct.first_block_mark(piece, j - first_own);
      bt.mark();
    }
    ct.mark();
    block_idx += n_blocks;
    // The piece merge (merge_store.cuh), ordered by two mbarriers of 256 arrivals each (both math warpgroups), one
    // phase per piece: an arrival releases this thread's stores and the completed phase acquires the peer's
    // (CTA scope). They replaced two bar.sync over 256 threads, for which compute-sanitizer racecheck reported
    // hazards between the publish and the peer's read (docs/design.md, narrow kernel, racecheck); same times.
    float l_sum[COLS_PER_THREAD];
    publish_piece_state(ss, wg, tid, piece, o, cs, l_sum);
    mbarrier_arrive(&ss.merge_bar[MERGE_PUBLISHED]);
    mbarrier_wait(&ss.merge_bar[MERGE_PUBLISHED], piece & 1);
    const int split = piece_split(p, row, req);
    merge_and_store(p, ss, wg, req, split, tid, piece, o, cs, l_sum);
    mbarrier_arrive(&ss.merge_bar[MERGE_READ]);
    mbarrier_wait(&ss.merge_bar[MERGE_READ], piece & 1);
    ct.mark();
    ct.piece_done(n_blocks);
  }
  ct.print("narrow");
  bt.print("narrow", wg == 0 ? "math0" : "math1");
}

template <typename KvElem>
__global__ void __launch_bounds__(NUM_THREADS, 1) snapmla_decode_fp8_narrow_kernel(const __grid_constant__ KernelParams kp) {
  static_assert(KvTraits<KvElem>::NEEDS_V_TRANSPOSE, "the 8-bit cache path (V transposed by ldmatrix)");
  extern __shared__ uint8_t smem_raw[];
  NarrowStorage& ss = aligned_storage<NarrowStorage>(smem_raw);

  if (threadIdx.x == 0) {
    mbarrier_init(&ss.merge_bar[MERGE_PUBLISHED], MATH_THREADS);  // fenced by init_pipeline
    mbarrier_init(&ss.merge_bar[MERGE_READ], MATH_THREADS);
  }
  init_pipeline(kp, ss, WG_THREADS);  // kv_empty: the block owner
  __syncthreads();

  split_roles<N_PRODUCER_REGS, N_MATH_REGS>(kp, ss, [&](const SchedRow& row, int wg) { run_math(kp, ss, row, wg); });
}

}  // namespace snapmla::sm90::decode_fp8::narrow
