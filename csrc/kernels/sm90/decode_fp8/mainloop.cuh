// Math warpgroups (WG0, WG1) of the decode kernel. The blocks a CTA walks are dealt out by the parity of their
// running index: WG(n % 2) owns block n and computes its QK and softmax alone, then hands P and the softmax
// state to the other warpgroup through shared memory (exchange.cuh). Both warpgroups run PV for every block,
// warpgroup wg for O~[:, 256wg .. 256wg+255], in increasing block order (A = P from registers, B = V^T).
//
// Per own block n of a piece (the owner of n - 1, if it is in the piece, is the other warpgroup):
//   wait kv_full -> 16 x QGMMA m64n64k32 (Q8 . K8, 512 dims) + 4 x HGMMA m64n64k16 (RoPE) -> retire
//   -> softmax half 1 (logits, row maxima) -> wait the hand-off of n - 1 (its state) -> softmax half 2
//   -> P to e4m3 -> hand-off of n (publish, xchg_full) -> P of n - 1 from its hand-off (kv_empty) -> PV(n - 1)
//   -> own P read back from the hand-off (kv_empty) -> PV(n); after the piece's last own block, PV of a
//   trailing block of the other warpgroup.
// The chain between the warpgroups is only softmax -> hand-off -> softmax: while one runs its softmax the
// other's QK or PV keeps the tensor cores busy, and QK is computed once per block (it was computed by both
// warpgroups before 2026-11-29, which doubled the QK tensor work and its shared-memory reads).
//
// PV per block runs in 8 chunks of 32 output columns, each 2 x QGMMA m64n32k32 into a fresh accumulator (three
// of them, so chunks c+1 and c+2 run while chunk c is folded in) -> O~ = O~ * scale + chunk (FFMA, fp32)
// -> vt_empty.
//
// Why PV is not accumulated in place: an FP8 WGMMA adds into its fp32 accumulator with only ~14 significant
// bits (the limit DeepSeek-V3 reports for Hopper FP8 GEMMs). O~ grows with every block while one block adds
// a small share, so accumulating a long piece inside the tensor core lost precision linearly in its length:
// measured against the fp32 emulation, rel L2 3e-3 after ~120 blocks and 2.6e-2 after 1024 blocks (65536
// tokens in one piece). Each block's P8 . V8 (64 tokens) is now summed by the tensor core alone and added to O~
// in fp32 by the CUDA cores, which also folds the O~ rescale into the same FFMA.
//
// Registers per thread: O~ 128 + S 32 + k scales 16 (one half at a time, re-read) during the softmax; O~ 128 + 8 P
// + 3 x 16 PV chunks during PV (one block's P at a time: that is why the own P is read back rather than kept),
// within MATH_REGS = 216 (docs/decode_kernel.md, Next steps).
#pragma once

#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/wgmma.cuh"
#include "kernels/sm90/decode_fp8/epilogue.cuh"
#include "kernels/sm90/decode_fp8/exchange.cuh"
#include "kernels/sm90/decode_fp8/schedule.cuh"
#include "kernels/sm90/decode_fp8/softmax.cuh"
#include "kernels/sm90/decode_fp8/traits.h"

namespace snapmla::sm90::decode_fp8 {

// S = Q . K^T over 512 FP8 dims and 64 BF16 RoPE dims, one fp32 accumulator. Both operands are K-major
// Swizzle-128B tiles of 64 rows x 128 B; k-step kk reads bytes 32*(kk%4) of tile kk/4.
__device__ __forceinline__ void issue_qk(float (&s)[32], const SharedStorage& ss, int stage) {
  constexpr uint32_t SBO = 8 * SWIZZLE_ROW_BYTES;  // 1024 B between 8-row groups
  // One descriptor per operand; k-steps add their byte offset / 16 to the start-address field (addresses stay
  // below 256 KB, so the 14-bit field never carries). The Q descriptor goes through an opaque move so the
  // compiler rebuilds the 20 Q descriptors per block (2 integer adds each) instead of hoisting 40 registers.
  const uint64_t q_desc = opaque(make_smem_desc(smem_u32(ss.q_content), SBO, SmemSwizzle::k128B));
  const uint64_t k_desc = make_smem_desc(smem_u32(ss.kv_content[stage]), SBO, SmemSwizzle::k128B);
#pragma unroll
  for (int kk = 0; kk < QK_CONTENT_STEPS; ++kk) {
    const uint32_t off16 =
        ((kk / STEPS_PER_SWIZZLE_ROW) * CONTENT_TILE_BYTES + (kk % STEPS_PER_SWIZZLE_ROW) * K_STEP_BYTES) >> 4;
    wgmma_m64n64k32_e4m3_ss(s, q_desc + off16, k_desc + off16, kk > 0);
  }
  const uint64_t qr_desc = opaque(make_smem_desc(smem_u32(ss.q_rope), SBO, SmemSwizzle::k128B));
  const uint64_t kr_desc = make_smem_desc(smem_u32(ss.kv_rope[stage]), SBO, SmemSwizzle::k128B);
#pragma unroll
  for (int kk = 0; kk < QK_ROPE_STEPS; ++kk) {
    const uint32_t off16 = (kk * K_STEP_BYTES) >> 4;
    wgmma_m64n64k16_bf16_ss(s, qr_desc + off16, kr_desc + off16, 1);
  }
}

// QK of the block, retired. The stage stays held until the hand-off of the block was read (kv_empty).
// release_q: this is the warpgroup's last QK of the piece, so its use of the query tile ends here.
__device__ __forceinline__ void qk_block(float (&s)[32], SharedStorage& ss, int block_idx, bool release_q) {
  const int stage = block_idx % KV_STAGES;
  mbarrier_wait(&ss.kv_full[stage], (block_idx / KV_STAGES) & 1);
  wgmma_fence_operands(s);
  wgmma_arrive();
  issue_qk(s, ss, stage);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operands(s);
  if (release_q) mbarrier_arrive(&ss.q_empty);
}

// One 32-column chunk of this warpgroup's PV: V^T rows 256wg + 32c .. +31 (64 B each, Swizzle-64B, 512 B per
// 8 rows), both 32-token k-steps, into a fresh accumulator.
__device__ __forceinline__ void issue_pv_chunk(float (&acc)[16], const uint32_t (&p)[8], uint32_t vt_base, int c) {
  constexpr uint32_t SBO = 8 * BLOCK_N;
  const uint64_t desc = make_smem_desc(vt_base + c * PV_CHUNK_N * BLOCK_N, SBO, SmemSwizzle::k64B);
#pragma unroll
  for (int g = 0; g < PV_STEPS; ++g) {
    const uint32_t a[4] = {p[4 * g], p[4 * g + 1], p[4 * g + 2], p[4 * g + 3]};
    wgmma_m64n32k32_e4m3_rs(acc, a, desc + ((g * K_STEP_BYTES) >> 4), g > 0);
  }
}

// O~ columns of chunk c (accumulator chunks 4c .. 4c+3 of the m64n256 layout, i.e. o[16c .. 16c+15]) become
// O~ * o_scale + acc, in fp32.
// The second rows (o_scale[1]) only when two_rows (warp-uniform; otherwise they are padding, launch.h).
__device__ __forceinline__ void fold_chunk(float (&o)[128], const float (&acc)[16], const float (&o_scale)[2],
                                           int c, bool two_rows) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    o[16 * c + 4 * i + 0] = fmaf(o[16 * c + 4 * i + 0], o_scale[0], acc[4 * i + 0]);
    o[16 * c + 4 * i + 1] = fmaf(o[16 * c + 4 * i + 1], o_scale[0], acc[4 * i + 1]);
  }
  if (!two_rows) return;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    o[16 * c + 4 * i + 2] = fmaf(o[16 * c + 4 * i + 2], o_scale[1], acc[4 * i + 2]);
    o[16 * c + 4 * i + 3] = fmaf(o[16 * c + 4 * i + 3], o_scale[1], acc[4 * i + 3]);
  }
}

// PV of one block for this warpgroup's 256 columns, folded into O~ (see the header). Chunks up to
// c + PV_DEPTH - 1 are issued before chunk c is folded; the accumulator a chunk reuses was folded one step
// earlier. Warps with only padding
// rows (live_rows false) still take part in every WGMMA but leave O~ alone.
__device__ __forceinline__ void pv_block(float (&o)[128], uint32_t (&p)[8], const float (&o_scale)[2],
                                         SharedStorage& ss, int block_idx, int wg, bool live_rows, bool two_rows) {
  const int vbuf = block_idx % VT_STAGES;
  mbarrier_wait(&ss.vt_full[vbuf][wg], (block_idx / VT_STAGES) & 1);
  const uint32_t vt_base = smem_u32(ss.vt[vbuf]) + wg * D_V_PER_WG * BLOCK_N;
  float acc[PV_DEPTH][16];
  wgmma_fence_operands(p);
#pragma unroll
  for (int c = 0; c + 1 < PV_DEPTH; ++c) {
    wgmma_arrive();
    issue_pv_chunk(acc[c], p, vt_base, c);
    wgmma_commit();
  }
#pragma unroll
  for (int c = 0; c < PV_CHUNKS; ++c) {
    const int next = c + PV_DEPTH - 1;
    if (next < PV_CHUNKS) {
      wgmma_fence_operands(acc[next % PV_DEPTH]);
      wgmma_arrive();
      issue_pv_chunk(acc[next % PV_DEPTH], p, vt_base, next);
      wgmma_commit();
    }
    // Chunks issued after c may stay in flight: min(PV_DEPTH - 1, PV_CHUNKS - 1 - c) of them.
    if (PV_CHUNKS - 1 - c >= PV_DEPTH - 1) wgmma_wait<PV_DEPTH - 1>();
    else if (PV_CHUNKS - 1 - c == 1) wgmma_wait<1>();
    else wgmma_wait<0>();
    wgmma_fence_operands(acc[c % PV_DEPTH]);
    if (live_rows) fold_chunk(o, acc[c % PV_DEPTH], o_scale, c, two_rows);
  }
  wgmma_fence_operands(p);
  mbarrier_arrive(&ss.vt_empty[vbuf][wg]);
}

// The other warpgroup's block n, in two steps: wait for its hand-off and take the state after it and its fold
// scale (needed by the softmax of the next block), then, with no WGMMA in flight and after this warpgroup's own
// softmax (register pressure: S and the k scales are dead by then), its P; the stage then goes back to the
// producer.
__device__ __forceinline__ void take_handoff_state(SharedStorage& ss, int n, int row0, RowState (&st)[2],
                                                   float (&o_scale)[2]) {
  const int stage = n % KV_STAGES;
  mbarrier_wait(&ss.xchg_full[stage], (n / KV_STAGES) & 1);
  read_block_state(smem_u32(ss.kv_rope[stage]), row0, st, o_scale);
}

__device__ __forceinline__ void take_handoff_p(SharedStorage& ss, int n, int tid, uint32_t (&p)[8]) {
  const int stage = n % KV_STAGES;
  read_block_p(smem_u32(ss.kv_rope[stage]), tid, p);
  // The next TMA load of the stage overwrites the hand-off: order these reads (and, for the owner, its
  // writes) before the async proxy's writes.
  fence_proxy_async_smem();
  mbarrier_arrive(&ss.kv_empty[stage]);
}

__device__ void run_math(const KernelParams& kp, SharedStorage& ss, const SchedRow& row, int wg) {
  const DecodeParams& p = kp.p;
  const int tid = threadIdx.x % WG_THREADS;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int t = lane % 4;
  const int row0 = 16 * warp + lane / 4;
  const int m_tile = blockIdx.x;
  const float q_mul_common = p.softmax_scale * LOG2E;
  // Query rows of this warp: launch.h rows_per_warp. Warp-uniform: live_rows (any of them is a real query row:
  // at h_q = 16 every warp holds 4) and two_rows (the thread's second rows r0 + 8 are real rows too).
  const int rpw = rows_per_warp(p.q_rows);
  const int warp_q_row0 = warp_first_q_row(m_tile, warp, rpw);
  const bool live_rows = warp_q_row0 < p.q_rows;
  const bool two_rows = rpw > 8;

  int block_idx = 0;  // running index of the piece's first block
  for (int req = row.begin_req; req <= row.end_req; ++req) {
    const Piece pc = make_piece(p, row, req);
    float q_mul[2];
    int limit[2];  // visible tokens of the row: causal query token s sees 0 .. seqlen - s_q + s
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int q_row = warp_q_row0 + lane / 4 + 8 * r;
      const bool valid = lane / 4 + 8 * r < rpw && q_row < p.q_rows;
      const float qs = valid ? p.q_scale[static_cast<int64_t>(req) * p.q_scale_batch_stride + q_row] : 0.f;  // (b, q_rows)
      q_mul[r] = qs * q_mul_common;
      limit[r] = p.causal && valid ? pc.seqlen - p.s_q + q_row / p.h_q + 1 : pc.seqlen;
    }
    RowState st[2] = {{-INFINITY, 1.f, 0.f}, {-INFINITY, 1.f, 0.f}};
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;

    // Local block j of the piece is running block block_idx + j, owned by warpgroup (block_idx + j) % 2.
    const int n_blocks = pc.blk_end - pc.blk_begin;
    const int first_own = (block_idx & 1) == wg ? 0 : 1;
    mbarrier_wait(&ss.q_full, (req - row.begin_req) & 1);  // one query tile per piece
    if (first_own >= n_blocks) mbarrier_arrive(&ss.q_empty);  // no QK of this warpgroup in the piece
    for (int j = first_own; j < n_blocks; j += 2) {
      const int n = block_idx + j;
      const int stage = n % KV_STAGES;
      float s[32];
      qk_block(s, ss, n, j + 2 >= n_blocks);
      const int blk = pc.blk_begin + j;
      const int n_vis[2] = {limit[0] - blk * BLOCK_N, limit[1] - blk * BLOCK_N};
      // A warp whose 16 rows are all padding (rows >= q_rows: 48 of the 64 at h_q = 16) skips the softmax and
      // the packing: its P stays 0 and its O~ rows stay 0 (never stored).
      float mx[2];
      const bool whole = n_vis[0] >= BLOCK_N && n_vis[1] >= BLOCK_N;
      if (live_rows) {
        if (whole)
          softmax_logits<false>(s, ss.kv_scale[stage], q_mul, n_vis, t, two_rows, mx);
        else
          softmax_logits<true>(s, ss.kv_scale[stage], q_mul, n_vis, t, two_rows, mx);
      }
      // The previous block (the other warpgroup's) gives the state this block starts from.
      float o_scale_prev[2] = {1.f, 1.f};
      if (j > 0) take_handoff_state(ss, n - 1, row0, st, o_scale_prev);
      float o_scale[2] = {1.f, 1.f};
      {
        uint32_t p_blk[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (live_rows) {
          if (whole)
            softmax_probs<false>(s, ss.kv_scale[stage], mx, n_vis, t, two_rows, st, o_scale);
          else
            softmax_probs<true>(s, ss.kv_scale[stage], mx, n_vis, t, two_rows, st, o_scale);
          pack_p(s, st, p_blk);
        }
        publish_block(smem_u32(ss.kv_rope[stage]), p_blk, st, o_scale, tid, row0, t == 0);
        mbarrier_arrive(&ss.xchg_full[stage]);
      }
      if (j > 0) {
        uint32_t p_prev[8];
        take_handoff_p(ss, n - 1, tid, p_prev);
        pv_block(o, p_prev, o_scale_prev, ss, n - 1, wg, live_rows, two_rows);
      }
      // The own P is read back from the hand-off rather than kept in 8 registers across PV(n - 1).
      uint32_t p_own[8];
      take_handoff_p(ss, n, tid, p_own);
      pv_block(o, p_own, o_scale, ss, n, wg, live_rows, two_rows);
    }
    // A last block owned by the other warpgroup: its hand-off carries the final state of the piece.
    if (n_blocks > 0 && ((block_idx + n_blocks - 1) & 1) != wg) {
      const int n = block_idx + n_blocks - 1;
      float o_scale_last[2];
      uint32_t p_last[8];
      take_handoff_state(ss, n, row0, st, o_scale_last);
      take_handoff_p(ss, n, tid, p_last);
      pv_block(o, p_last, o_scale_last, ss, n, wg, live_rows, two_rows);
    }
    block_idx += n_blocks;
    store_piece(p, req, piece_split(p, row, req), m_tile, wg, warp, lane, o, st);
  }
}

}  // namespace snapmla::sm90::decode_fp8
