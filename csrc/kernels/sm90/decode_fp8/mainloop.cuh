// Math warpgroups (WG0, WG1) of the decode kernel. Both compute the full 64x64 QK of every block (the same
// instructions on the same data, so both hold bit-identical softmax state and P without exchanging anything);
// warpgroup wg then accumulates O~[:, 256wg .. 256wg+255] += P8 * V8 with one m64n256k32 FP8 WGMMA per 32
// tokens, A (P) from registers, B from the V^T buffer the producer wrote.
//
// Per block n of a piece (blocks walked in increasing order by both warpgroups):
//   QK(n+1) is issued and retired, then PV(n) is issued and the softmax of block n+1 runs while it executes:
//     wait kv_full -> 16 x QGMMA m64n64k32 (Q8 . K8, 512 dims) + 4 x HGMMA m64n64k16 (RoPE) -> wait
//     (q_empty after the piece's last QK)
//     -> wait vt_full(n) -> O~ *= scale(n) -> PV(n) issue -> softmax(n+1) (reads the k_scales of its stage,
//     then releases the stage: kv_empty) -> wait PV(n) -> release vt_empty(n)
//     -> pack P(n+1) to e4m3 (A registers may only be written while no WGMMA is in flight)
//   Retiring QK(n+1) before PV(n) needs V^T(n) keeps the producer free to wait for q_empty (see producer.cuh).
//
// Registers per thread: O~ 128 + S 32 + P 8 + row state and addresses, inside MATH_REGS.
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

// O~[:, 256wg ..] += P8 . V8: the warpgroup's 256 rows of V^T (64 B each, Swizzle-64B: 512 B per 8 rows).
__device__ __forceinline__ void issue_pv(float (&o)[128], const uint32_t (&p)[8], const SharedStorage& ss, int vbuf,
                                         int wg) {
  constexpr uint32_t SBO = 8 * BLOCK_N;
  const uint32_t v_base = smem_u32(ss.vt[vbuf]) + wg * D_V_PER_WG * BLOCK_N;
#pragma unroll
  for (int g = 0; g < PV_STEPS; ++g) {
    const uint32_t a[4] = {p[4 * g], p[4 * g + 1], p[4 * g + 2], p[4 * g + 3]};
    wgmma_m64n256k32_e4m3_rs(o, a, make_smem_desc(v_base, SBO, SmemSwizzle::k64B) + ((g * K_STEP_BYTES) >> 4));
  }
}

// QK of the block, retired. The stage stays held until its softmax has read the k_scales (release_stage).
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

__device__ __forceinline__ void scale_rows(float (&o)[128], const float (&o_scale)[2]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    o[4 * i + 0] *= o_scale[0];
    o[4 * i + 1] *= o_scale[0];
    o[4 * i + 2] *= o_scale[1];
    o[4 * i + 3] *= o_scale[1];
  }
}

// Waits for V^T of the block, rescales O~ and issues its PV (async: O~ and P stay untouched until pv_retire).
__device__ __forceinline__ void pv_issue(float (&o)[128], uint32_t (&p)[8], const float (&o_scale)[2],
                                         SharedStorage& ss, int block_idx, int wg) {
  const int vbuf = block_idx % VT_STAGES;
  mbarrier_wait(&ss.vt_full[vbuf], (block_idx / VT_STAGES) & 1);
  scale_rows(o, o_scale);
  wgmma_fence_operands(o);
  wgmma_fence_operands(p);
  wgmma_arrive();
  issue_pv(o, p, ss, vbuf, wg);
  wgmma_commit();
}

__device__ __forceinline__ void pv_retire(float (&o)[128], uint32_t (&p)[8], SharedStorage& ss, int block_idx) {
  wgmma_wait<0>();
  wgmma_fence_operands(o);
  wgmma_fence_operands(p);
  mbarrier_arrive(&ss.vt_empty[block_idx % VT_STAGES]);
}

__device__ void run_math(const KernelParams& kp, SharedStorage& ss, const SchedRow& row, int wg) {
  const DecodeParams& p = kp.p;
  const int warp = (threadIdx.x / 32) % 4;
  const int lane = threadIdx.x % 32;
  const int t = lane % 4;
  const int m_tile = blockIdx.x;
  const float q_mul_common = p.softmax_scale * LOG2E;

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
    if (pc.blk_begin == pc.blk_end) {
      mbarrier_arrive(&ss.q_empty);
    } else {
      float s[32];
      uint32_t p_cur[8];
      float scale_cur[2];
      qk_block(s, ss, block_idx, pc.blk_begin + 1 == pc.blk_end);
      {
        const int n_vis[2] = {limit[0] - pc.blk_begin * BLOCK_N, limit[1] - pc.blk_begin * BLOCK_N};
        softmax_block(s, ss.kv_scale[block_idx % KV_STAGES], q_mul, n_vis, t, st, scale_cur);
        mbarrier_arrive(&ss.kv_empty[block_idx % KV_STAGES]);
        pack_p(s, st, p_cur);
      }
      // Steady state: every block but the last has a successor whose QK and softmax overlap this block's PV.
      for (int blk = pc.blk_begin; blk + 1 < pc.blk_end; ++blk, ++block_idx) {
        qk_block(s, ss, block_idx + 1, blk + 2 == pc.blk_end);
        pv_issue(o, p_cur, scale_cur, ss, block_idx, wg);
        const int n_vis[2] = {limit[0] - (blk + 1) * BLOCK_N, limit[1] - (blk + 1) * BLOCK_N};
        softmax_block(s, ss.kv_scale[(block_idx + 1) % KV_STAGES], q_mul, n_vis, t, st, scale_cur);
        mbarrier_arrive(&ss.kv_empty[(block_idx + 1) % KV_STAGES]);
        pv_retire(o, p_cur, ss, block_idx);
        pack_p(s, st, p_cur);
      }
      pv_issue(o, p_cur, scale_cur, ss, block_idx, wg);
      pv_retire(o, p_cur, ss, block_idx);
      ++block_idx;
    }
    store_piece(p, pc, m_tile, wg, warp, lane, o, st);
  }
}

}  // namespace snapmla::sm90::decode_fp8
