// sm_90a FP8 SnapMLA decode kernel for narrow query tiles: q_rows = s_q * h_q <= 16 (h_q = 16 at s_q = 1, the
// memory-bound case of DeepSeek decode with the heads split 8 ways). Same inputs, numerics and outputs as the
// wide kernel (decode_fp8/kernel.cuh), which pads such a tile to the WGMMA M of 64 rows: 4x the tensor work,
// the full 40 KB query tile re-read per block, and a V^T buffer round trip through shared memory.
//
// Here the query rows are the WGMMA N dimension of both GEMMs ("swap AB"):
//   S^T (64 tokens x 16 rows) = K8 . Q8^T + K_rope . Q_rope^T: 16 QGMMA m64n16k32 + 4 HGMMA m64n16k16, A = the
//     page's content / RoPE tiles as TMA left them, B = the 16-row query tile (qk_softmax.cuh);
//   O^T (512 dims x 16 rows) += V^T . P^T: 16 QGMMA m64n16k32, A = V^T built in registers by ldmatrix.trans from
//     the page's content tiles, B = P^T (1 KB) in shared memory (pv.cuh).
// Each math warpgroup holds all of O^T (64 fp32 per thread), so the two need not exchange P or state per block:
//   WG0, WG1 (math, N_MATH_REGS = 232): block n of the CTA's walk belongs to WG(n % 2), which runs its QK, its
//     softmax (per query row = accumulator column: shuffles + 2 named-barrier reductions over its 4 warps), P^T
//     and its PV, folding into its own O~ and state. At the end of a piece both states merge like two splits
//     (merge_store.cuh), each warpgroup storing half the dims.
//   WG2 (producer, N_PRODUCER_REGS = 40): lane 0 of warp 0 issues the TMA loads: the query tile once per piece
//     (10 KB, rows past q_rows zero-filled) and the page of each block (41216 B); the warp loads the page ids,
//     32 at a time. Nothing else runs there, so it simply blocks on each barrier it needs.
// Pipeline: 4 KV stages (kv_full: TMA bytes; kv_empty: the owner's 128 threads once its QK retired; the V^T
// fragments and k scales are in registers by then), 2 query buffers (q_full / q_empty, by piece parity).
// Barrier phases come from one running block index and one running piece index that every role counts the
// same way (decode_fp8/schedule.cuh).
// Shared memory: 4 x 40.25 KB stages + 2 x 10 KB query + 2 KB P^T + 32 KB merge + 2.5 KB = 216.5 KB
// (narrow/config.h).
// Per block: 41216 B from HBM; shared-memory reads QK 50 KB, V 32 KB, P^T 8 KB (the wide kernel: ~190 KB with
// the transpose); tensor work 2 x 64 x 16 x 512 (QK and PV each, FP8) + 2 x 64 x 16 x 64 (RoPE, BF16).
#pragma once

#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/decode_fp8/kernel_prologue.cuh"
#include "kernels/sm90/decode_fp8/narrow/merge_store.cuh"
#include "kernels/sm90/decode_fp8/narrow/pv.cuh"
#include "kernels/sm90/decode_fp8/narrow/qk_softmax.cuh"
#include "kernels/sm90/decode_fp8/schedule.cuh"
#include "kernels/sm90/decode_fp8/traits.h"

namespace snapmla::sm90::decode_fp8::narrow {

// Warp 0 of the producer warpgroup: lane 0 issues the query tile of each piece, then its pages, in the order
// the math warpgroups consume them, blocking on each barrier it needs (it has nothing else to do). The page
// ids come 32 at a time, one coalesced load per 32 blocks by the whole warp, issued a chunk ahead and handed to
// lane 0 by shuffles: read one by one, each id's global-load latency sat between two TMA issues (small
// batches, ~16 blocks per CTA: 10 us of 60, H200).
__device__ void run_producer(const KernelParams& kp, NarrowStorage& ss, const SchedRow& row) {
  const DecodeParams& p = kp.p;
  const int lane = threadIdx.x % 32;
  int n = 0;  // running block index
  int piece = 0;
  for (int req = row.begin_req; req <= row.end_req; ++req, ++piece) {
    const Piece pc = make_piece(p, row, req);
    const int qbuf = piece % Q_BUFS;
    const int* bt = p.block_table + static_cast<int64_t>(req) * p.block_table_batch_stride;  // (b, max_pages)
    // Ids of blocks blk_begin + 32 c + lane (chunk c); past blk_end nothing is read (the table may hold garbage
    // or sentinels there, and its row may end).
    auto chunk_ids = [&](int c) {
      const int blk = pc.blk_begin + 32 * c + lane;
      return blk < pc.blk_end ? bt[blk] : 0;
    };
    int ids = chunk_ids(0);
    if (lane == 0) {
      // The buffer of piece - 2 is free once both math warpgroups did their last QK of that piece.
      if (piece >= Q_BUFS) mbarrier_wait(&ss.q_empty[qbuf], ((piece / Q_BUFS) - 1) & 1);
      mbarrier_arrive_expect_tx(&ss.q_full[qbuf], Q_TX_BYTES);
#pragma unroll
      for (int t = 0; t < CONTENT_TILES; ++t)
        tma_load_3d(ss.q_content[qbuf][t], &kp.tm_q_content, &ss.q_full[qbuf], t * SWIZZLE_ROW_BYTES, 0, req);
      tma_load_3d(ss.q_rope[qbuf], &kp.tm_q_rope, &ss.q_full[qbuf], 0, 0, req);
    }
    for (int c = 0; 32 * c < pc.blk_end - pc.blk_begin; ++c) {
      const int next_ids = chunk_ids(c + 1);
      const int in_chunk = min(32, pc.blk_end - pc.blk_begin - 32 * c);
      for (int k = 0; k < in_chunk; ++k, ++n) {
        const int page = __shfl_sync(0xffffffffu, ids, k);
        if (lane == 0) {
          const int stage = n % STAGES;
          if (n >= STAGES) mbarrier_wait(&ss.kv_empty[stage], ((n / STAGES) - 1) & 1);
          uint64_t* bar = &ss.kv_full[stage];
          mbarrier_arrive_expect_tx(bar, kvl::PAGE_BYTES);
#pragma unroll
          for (int t = 0; t < CONTENT_TILES; ++t)
            tma_load_3d(ss.kv_content[stage][t], &kp.tm_kv_content, bar, t * SWIZZLE_ROW_BYTES, 0, page);
          tma_load_3d(ss.kv_rope[stage], &kp.tm_kv_rope, bar, 0, 0, page);
          tma_load_2d(ss.kv_scale[stage], &kp.tm_kv_scale, bar, 0, page);
        }
        __syncwarp();
      }
      ids = next_ids;
    }
  }
}

// One block owned by this warpgroup: QK issued, V^T fragments loaded and the k scales read while it runs; the
// stage goes back to the producer once the QK retired (the earlier a stage is free, the more pages are in
// flight: the kernel is bound by HBM). Then the softmax, P^T and the PV from registers.
template <bool MASKED_SOFTMAX, bool MASKED_V>
__device__ __forceinline__ void own_block(NarrowStorage& ss, int wg, int warp, int lane, int stage, int qbuf,
                                          const float (&q_mul)[COLS_PER_THREAD], const int (&n_vis)[COLS_PER_THREAD],
                                          int n_valid, ColState (&cs)[COLS_PER_THREAD], float (&o)[M_TILES][ACC],
                                          bool release_q) {
  float s[ACC];
#pragma unroll
  for (int k = 0; k < ACC; ++k) s[k] = 0.f;
  wgmma_fence_operands(s);
  wgmma_arrive();
  issue_qk_t(s, ss, stage, qbuf);
  wgmma_commit();
  uint32_t a[M_TILES][PV_STEPS][4];
  load_v_block<MASKED_V>(a, smem_u32(ss.kv_content[stage]), warp, lane, n_valid);
  const int tau0 = 16 * warp + lane / 4;  // the thread's tokens tau0, tau0 + 8 (qk_softmax.cuh)
  const float ks[2] = {ss.kv_scale[stage][tau0], ss.kv_scale[stage][tau0 + 8]};
  wgmma_wait<0>();
  wgmma_fence_operands(s);
  mbarrier_arrive(&ss.kv_empty[stage]);
  if (release_q) mbarrier_arrive(&ss.q_empty[qbuf]);
  const int bar_id = BAR_WG0 + wg;
  float o_scale[COLS_PER_THREAD];
  softmax_cols<MASKED_SOFTMAX>(s, ks, q_mul, n_vis, cs, o_scale, &ss.red[wg][0][0][0], &ss.red[wg][1][0][0], warp,
                               lane, bar_id);
  const uint32_t pt = smem_u32(ss.pt[wg]);
  store_pt(pt, s, cs, warp, lane, bar_id);
  pv_block(o, o_scale, a, pt);
}

__device__ void run_math(const KernelParams& kp, NarrowStorage& ss, const SchedRow& row, int wg) {
  const DecodeParams& p = kp.p;
  const int tid = threadIdx.x % WG_THREADS;
  const int warp = tid / 32, lane = tid % 32, t = lane % 4;
  const float q_mul_common = p.softmax_scale * LOG2E;

  int block_idx = 0;  // running index of the piece's first block
  int piece = 0;
  for (int req = row.begin_req; req <= row.end_req; ++req, ++piece) {
    const Piece pc = make_piece(p, row, req);
    float q_mul[COLS_PER_THREAD];
    int limit[COLS_PER_THREAD];  // visible tokens of the row: causal query token s sees 0 .. seqlen - s_q + s
#pragma unroll
    for (int ce = 0; ce < COLS_PER_THREAD; ++ce) {
      const int q_row = 8 * (ce / 2) + 2 * t + ce % 2;
      const bool valid = q_row < p.q_rows;
      const float qs = valid ? p.q_scale[static_cast<int64_t>(req) * p.q_scale_batch_stride + q_row] : 0.f;  // (b, q_rows)
      q_mul[ce] = qs * q_mul_common;
      limit[ce] = p.causal && valid ? pc.seqlen - p.s_q + q_row / p.h_q + 1 : pc.seqlen;
    }
    // The fewest tokens any row sees (query token 0): blocks below it take the select-free paths.
    const int limit_min = p.causal ? pc.seqlen - p.s_q + 1 : pc.seqlen;
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
    mbarrier_wait(&ss.q_full[qbuf], (piece / Q_BUFS) & 1);
    if (first_own >= n_blocks) mbarrier_arrive(&ss.q_empty[qbuf]);  // no QK of this warpgroup in the piece
    for (int j = first_own; j < n_blocks; j += 2) {
      const int n = block_idx + j;
      const int stage = n % STAGES;
      const int blk = pc.blk_begin + j;
      int n_vis[COLS_PER_THREAD];
#pragma unroll
      for (int ce = 0; ce < COLS_PER_THREAD; ++ce) n_vis[ce] = limit[ce] - blk * BLOCK_N;
      const int n_valid = pc.seqlen - blk * BLOCK_N;
      const bool release_q = j + 2 >= n_blocks;
      mbarrier_wait(&ss.kv_full[stage], (n / STAGES) & 1);
      // Uniform over the CTA (limit_min <= seqlen): the barriers inside are the same on every path.
      if (limit_min - blk * BLOCK_N >= BLOCK_N)
        own_block<false, false>(ss, wg, warp, lane, stage, qbuf, q_mul, n_vis, n_valid, cs, o, release_q);
      else if (n_valid >= BLOCK_N)
        own_block<true, false>(ss, wg, warp, lane, stage, qbuf, q_mul, n_vis, n_valid, cs, o, release_q);
      else
        own_block<true, true>(ss, wg, warp, lane, stage, qbuf, q_mul, n_vis, n_valid, cs, o, release_q);
    }
    block_idx += n_blocks;
    if (wg == 0)
      merge_and_store<0>(p, ss, req, piece_split(p, row, req), tid, o, cs);
    else
      merge_and_store<1>(p, ss, req, piece_split(p, row, req), tid, o, cs);
  }
}

template <typename KvElem>
__global__ void __launch_bounds__(NUM_THREADS, 1) snapmla_decode_fp8_narrow_kernel(const __grid_constant__ KernelParams kp) {
  static_assert(KvTraits<KvElem>::NEEDS_V_TRANSPOSE, "the 8-bit cache path (V transposed by ldmatrix)");
  extern __shared__ uint8_t smem_raw[];
  NarrowStorage& ss = aligned_storage<NarrowStorage>(smem_raw);

  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < STAGES; ++i) {
      mbarrier_init(&ss.kv_full[i], 1);
      mbarrier_init(&ss.kv_empty[i], WG_THREADS);
    }
#pragma unroll
    for (int i = 0; i < Q_BUFS; ++i) {
      mbarrier_init(&ss.q_full[i], 1);
      mbarrier_init(&ss.q_empty[i], MATH_THREADS);
    }
    fence_barrier_init();
  }
  prefetch_tensor_maps(kp);
  __syncthreads();

  // The schedule row is read after the role split: values live across setmaxnreg would be spilled.
  const int wg = threadIdx.x / WG_THREADS;
  if (wg == PRODUCER_WG) {
    setmaxnreg_dec<N_PRODUCER_REGS>();
    if (threadIdx.x < PRODUCER_WG * WG_THREADS + 32) run_producer(kp, ss, load_sched_row(kp.p));
  } else {
    setmaxnreg_inc<N_MATH_REGS>();
    run_math(kp, ss, load_sched_row(kp.p), wg);
  }
}

}  // namespace snapmla::sm90::decode_fp8::narrow
