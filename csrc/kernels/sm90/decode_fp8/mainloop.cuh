// Math warpgroups (WG0, WG1) of the decode kernel. Both compute the full 64x64 QK of every block (the same
// instructions on the same data, so both hold bit-identical softmax state and P without exchanging anything);
// warpgroup wg then accumulates O~[:, 256wg .. 256wg+255] += P8 * V8, A (P) from registers, B from the V^T
// buffer the producer wrote.
//
// Per block n of a piece (blocks walked in increasing order by both warpgroups):
//   wait kv_full -> 16 x QGMMA m64n64k32 (Q8 . K8, 512 dims) + 4 x HGMMA m64n64k16 (RoPE) -> retire
//   (q_empty after the piece's last QK) -> softmax (reads the stage's k_scales, then kv_empty) -> P to e4m3
//   -> wait vt_full -> PV in 8 chunks of 32 output columns, each 2 x QGMMA m64n32k32 into a fresh accumulator
//   (two of them, so chunk c+1 runs while chunk c is folded in) -> O~ = O~ * scale + chunk (FFMA, fp32)
//   -> vt_empty.
//
// Why PV is not accumulated in place: an FP8 WGMMA adds into its fp32 accumulator with only ~14 significant
// bits (the limit DeepSeek-V3 reports for Hopper FP8 GEMMs). O~ grows with every block while one block adds
// a small share, so accumulating a long piece inside the tensor core lost precision linearly in its length:
// measured against the fp32 emulation, rel L2 3e-3 after ~120 blocks and 2.6e-2 after 1024 blocks (65536
// tokens in one piece). Each block's P8 . V8 (64 tokens) is now summed by the tensor core alone and added to O~
// in fp32 by the CUDA cores, which also folds the O~ rescale into the same FFMA.
//
// Registers per thread: O~ 128 + S 32 (dead during PV) + 2 x 16 PV chunks + P 8 + row state, within MATH_REGS.
#pragma once

#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/wgmma.cuh"
#include "kernels/sm90/decode_fp8/epilogue.cuh"
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

// QK of the block, retired. The stage stays held until the softmax has read its k_scales (kv_empty in run_math).
__device__ __forceinline__ void qk_block(float (&s)[32], SharedStorage& ss, int block_idx, bool last_of_piece) {
  const int stage = block_idx % KV_STAGES;
  mbarrier_wait(&ss.kv_full[stage], (block_idx / KV_STAGES) & 1);
  wgmma_fence_operands(s);
  wgmma_arrive();
  issue_qk(s, ss, stage);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operands(s);
  if (last_of_piece) mbarrier_arrive(&ss.q_empty);
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
__device__ __forceinline__ void fold_chunk(float (&o)[128], const float (&acc)[16], const float (&o_scale)[2],
                                           int c) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    o[16 * c + 4 * i + 0] = fmaf(o[16 * c + 4 * i + 0], o_scale[0], acc[4 * i + 0]);
    o[16 * c + 4 * i + 1] = fmaf(o[16 * c + 4 * i + 1], o_scale[0], acc[4 * i + 1]);
    o[16 * c + 4 * i + 2] = fmaf(o[16 * c + 4 * i + 2], o_scale[1], acc[4 * i + 2]);
    o[16 * c + 4 * i + 3] = fmaf(o[16 * c + 4 * i + 3], o_scale[1], acc[4 * i + 3]);
  }
}

// PV of one block for this warpgroup's 256 columns, folded into O~ (see the header). Chunk c + 1 is issued
// before chunk c is folded; the accumulator a chunk reuses was folded one step earlier. Warps with only padding
// rows (live_rows false) still take part in every WGMMA but leave O~ alone.
__device__ __forceinline__ void pv_block(float (&o)[128], uint32_t (&p)[8], const float (&o_scale)[2],
                                         SharedStorage& ss, int block_idx, int wg, bool live_rows) {
  const int vbuf = block_idx % VT_STAGES;
  mbarrier_wait(&ss.vt_full[vbuf], (block_idx / VT_STAGES) & 1);
  const uint32_t vt_base = smem_u32(ss.vt[vbuf]) + wg * D_V_PER_WG * BLOCK_N;
  float acc[2][16];
  wgmma_fence_operands(p);
  wgmma_arrive();
  issue_pv_chunk(acc[0], p, vt_base, 0);
  wgmma_commit();
#pragma unroll
  for (int c = 0; c < PV_CHUNKS; ++c) {
    if (c + 1 < PV_CHUNKS) {
      wgmma_fence_operands(acc[(c + 1) % 2]);
      wgmma_arrive();
      issue_pv_chunk(acc[(c + 1) % 2], p, vt_base, c + 1);
      wgmma_commit();
      wgmma_wait<1>();
    } else {
      wgmma_wait<0>();
    }
    wgmma_fence_operands(acc[c % 2]);
    if (live_rows) fold_chunk(o, acc[c % 2], o_scale, c);
  }
  wgmma_fence_operands(p);
  mbarrier_arrive(&ss.vt_empty[vbuf]);
}

__device__ void run_math(const KernelParams& kp, SharedStorage& ss, const SchedRow& row, int wg) {
  const DecodeParams& p = kp.p;
  const int warp = (threadIdx.x / 32) % 4;
  const int lane = threadIdx.x % 32;
  const int t = lane % 4;
  const int m_tile = blockIdx.x;
  const float q_mul_common = p.softmax_scale * LOG2E;
  const bool live_rows = m_tile * BLOCK_M + 16 * warp < p.q_rows;  // warp-uniform

  int block_idx = 0;
  int piece_idx = 0;
  for (int req = row.begin_req; req <= row.end_req; ++req, ++piece_idx) {
    const Piece pc = make_piece(p, row, req);
    float q_mul[2];
    int limit[2];  // visible tokens of the row: causal query token s sees 0 .. seqlen - s_q + s
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int q_row = m_tile * BLOCK_M + 16 * warp + lane / 4 + 8 * r;
      const bool valid = q_row < p.q_rows;
      const float qs = valid ? p.q_scale[static_cast<int64_t>(req) * p.q_scale_batch_stride + q_row] : 0.f;  // (b, q_rows)
      q_mul[r] = qs * q_mul_common;
      limit[r] = p.causal && valid ? pc.seqlen - p.s_q + q_row / p.h_q + 1 : pc.seqlen;
    }
    RowState st[2] = {{-INFINITY, 1.f, 0.f}, {-INFINITY, 1.f, 0.f}};
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;

    mbarrier_wait(&ss.q_full, piece_idx & 1);
    if (pc.blk_begin == pc.blk_end) mbarrier_arrive(&ss.q_empty);
    // A warp whose 16 rows are all padding (rows >= q_rows: 48 of the 64 at h_q = 16) skips the softmax and
    // the packing: its P stays 0 and its O~ rows stay 0 (never stored).
    uint32_t p_blk[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int blk = pc.blk_begin; blk < pc.blk_end; ++blk, ++block_idx) {
      float s[32];
      qk_block(s, ss, block_idx, blk + 1 == pc.blk_end);
      const int n_vis[2] = {limit[0] - blk * BLOCK_N, limit[1] - blk * BLOCK_N};
      float o_scale[2] = {1.f, 1.f};
      if (live_rows) softmax_block(s, ss.kv_scale[block_idx % KV_STAGES], q_mul, n_vis, t, st, o_scale);
      mbarrier_arrive(&ss.kv_empty[block_idx % KV_STAGES]);
      if (live_rows) pack_p(s, st, p_blk);
      pv_block(o, p_blk, o_scale, ss, block_idx, wg, live_rows);
    }
    store_piece(p, pc, m_tile, wg, warp, lane, o, st);
  }
}

}  // namespace snapmla::sm90::decode_fp8
