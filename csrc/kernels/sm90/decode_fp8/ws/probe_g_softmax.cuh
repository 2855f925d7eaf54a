// PROBE (compile-only, not a kernel): candidate G of docs/design.md section 4, a softmax warpgroup that owns half
// of each block's 64 tokens (32 columns, QK m64n32), exchanging its row maxima with the other half's warpgroup
// once per block through shared memory and a named barrier. Measures the registers of one such warpgroup.
#pragma once
#include <cstdint>
#include "kernels/sm90/common/stage_ring.cuh"
#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/wgmma.cuh"
#include "kernels/sm90/decode_fp8/launch.h"
#include "kernels/sm90/decode_fp8/shared/exchange.cuh"
#include "kernels/sm90/decode_fp8/shared/qk_steps.cuh"
#include "kernels/sm90/decode_fp8/shared/schedule.cuh"
#include "kernels/sm90/decode_fp8/shared/softmax.cuh"
#include "kernels/sm90/decode_fp8/shared/traits.h"
#include "kernels/sm90/decode_fp8/ws/config.h"

namespace snapmla::sm90::decode_fp8::ws::probe_g {

__device__ __forceinline__ void mma_e4m3_n32(float (&d)[16], uint64_t a, uint64_t b, int acc) {
  detail::fma_ss<gmma::MMA_64x32x32_F32E4M3E4M3_SS_TN<>>(d, a, b, acc, std::make_index_sequence<16>{});
}
__device__ __forceinline__ void mma_bf16_n32(float (&d)[16], uint64_t a, uint64_t b, int acc) {
  detail::fma_ss<gmma::MMA_64x32x16_F32BF16BF16_SS<gmma::Major::K, gmma::Major::K>>(d, a, b, acc,
                                                                                   std::make_index_sequence<16>{});
}
template <int FIRST, int COUNT, bool ROPE>
__device__ __forceinline__ void issue_half_chain(float (&acc)[16], const SharedStorage& ss, int stage, int h) {
  wgmma_fence_operands(acc);
  cute::warpgroup_arrive();
  const uint64_t qd = q_content_desc(ss), kd = k_content_desc(ss, stage) + ((h * 32 * 128) >> 4);
#pragma unroll
  for (int kk = FIRST; kk < FIRST + COUNT; ++kk) {
    const uint32_t off16 =
        ((kk / STEPS_PER_SWIZZLE_ROW) * CONTENT_TILE_BYTES + (kk % STEPS_PER_SWIZZLE_ROW) * K_STEP_BYTES) >> 4;
    mma_e4m3_n32(acc, qd + off16, kd + off16, kk > FIRST);
  }
  if constexpr (ROPE) {
    const uint64_t qr = q_rope_desc(ss), kr = k_rope_desc(ss, stage) + ((h * 32 * 128) >> 4);
#pragma unroll
    for (int kk = 0; kk < QK_ROPE_STEPS; ++kk) mma_bf16_n32(acc, qr + ((kk * K_STEP_BYTES) >> 4), kr + ((kk * K_STEP_BYTES) >> 4), 1);
  }
  cute::warpgroup_commit_batch();
}

template <bool MASKED>
__device__ __forceinline__ void half_block(float (&s)[16], SharedStorage& ss, int stage, int blk, int h,
                                           const float (&q_mul)[2], const int (&limit)[2], int row0, int t,
                                           RowState (&st)[2], float (&acc_a)[16], float (&acc_b)[16], int n,
                                           bool issue_next) {
  float ks[8];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(ks[2 * i]), "=f"(ks[2 * i + 1])
                 : "r"(smem_u32(&ss.kv_scale[stage][32 * h + 8 * i + 2 * t])));
  float mh[2], eh[2], ph[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int vis_lim = limit[r] - blk * BLOCK_N - 32 * h - 2 * t;
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float x = s[4 * i + 2 * r + e] * q_mul[r] * ks[2 * i + e];
        s[4 * i + 2 * r + e] = !MASKED || 8 * i + e < vis_lim ? x : -INFINITY;
        m = fmaxf(m, s[4 * i + 2 * r + e]);
      }
    mh[r] = quad_max(m);
  }
  if (issue_next) {
    StageRing<KV_STAGES>::wait_full(ss.kv_full, n + 1);
    issue_half_chain<0, WS_CHAIN_STEPS, false>(acc_a, ss, (n + 1) % KV_STAGES, h);
  }
  // Exponentials against the half's own maximum (p_ref = "block" per half).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float mu = mh[r] == -INFINITY ? 0.f : mh[r];
    const int vis_lim = limit[r] - blk * BLOCK_N - 32 * h - 2 * t;
    float sum = 0.f, pmax = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float ex = fast_exp2(s[4 * i + 2 * r + e] - mu);
        const float pp = !MASKED || 8 * i + e < vis_lim ? ex * ks[2 * i + e] : 0.f;
        sum += ex;
        pmax = fmaxf(pmax, pp);
        s[4 * i + 2 * r + e] = pp;
      }
    eh[r] = quad_sum(sum);
    ph[r] = quad_max(pmax);
  }
  // Exchange (m_half, pmax_half) per row with the other half's warpgroup.
  float2* xb = reinterpret_cast<float2*>(&ss.row_state[0][0]);
  if (t == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) xb[64 * h + row0 + 8 * r] = make_float2(mh[r], ph[r]);
  }
  asm volatile("bar.sync 1, 256;" ::: "memory");
  float mult[2], o_scale[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float2 o = xb[64 * (1 - h) + row0 + 8 * r];
    const float mb = fmaxf(mh[r], o.x);
    const float m_new = fmaxf(st[r].m, mb);
    const float mu = m_new == -INFINITY ? 0.f : m_new;
    const float c_me = fast_exp2((mh[r] == -INFINITY ? mu : mh[r]) - mu);
    const float c_ot = fast_exp2((o.x == -INFINITY ? mu : o.x) - mu);
    const float pm = fmaxf(ph[r] * c_me, o.y * c_ot);
    const float inv_new = kvl::FP8_E4M3_MAX * fast_rcp(fmaxf(pm, kvl::P_FLOOR));
    const float ratio = fast_exp2(st[r].m - m_new) * (inv_new * fast_rcp(st[r].inv));
    const bool seen = pm > 0.f;
    const float scale = st[r].m == -INFINITY ? 0.f : ratio;
    o_scale[r] = seen ? scale : 1.f;
    st[r].l = seen ? st[r].l * scale + eh[r] * c_me * inv_new : st[r].l;
    st[r].inv = seen ? inv_new : st[r].inv;
    st[r].m = seen ? m_new : st[r].m;
    mult[r] = c_me * inv_new;
  }
  uint32_t p[4];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i0 = 2 * hh;
      p[2 * hh + r] = pack_e4m3x4(s[4 * i0 + 2 * r] * mult[r], s[4 * i0 + 2 * r + 1] * mult[r],
                                  s[4 * (i0 + 1) + 2 * r] * mult[r], s[4 * (i0 + 1) + 2 * r + 1] * mult[r]);
    }
  const uint32_t tile = smem_u32(ss.kv_rope[stage]);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      asm volatile("st.shared.u32 [%0], %1;" ::"r"(tile + sw64_chunk_offset(row0 + 8 * r, 2 * h + hh) + 4 * t),
                   "r"(p[2 * hh + r]) : "memory");
  if (t == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 8 * r;
      asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(tile + XCHG_STATE_OFFSET + 16 * row + 0),
                   "f"(st[r].m), "f"(st[r].inv), "f"(st[r].l), "f"(o_scale[r]) : "memory");
      asm volatile("st.shared.f32 [%0], %1;" ::"r"(tile + XCHG_SCALE_OFFSET + 4 * row), "f"(o_scale[r]) : "memory");
    }
  }
  if (issue_next) issue_half_chain<WS_CHAIN_STEPS, WS_CHAIN_STEPS, true>(acc_b, ss, (n + 1) % KV_STAGES, h);
  fence_proxy_async_smem();
  mbarrier_arrive(&ss.xchg_full[stage]);
}

template <bool MASKED>
__device__ __forceinline__ void half_blocks(float (&acc_a)[16], float (&acc_b)[16], SharedStorage& ss, int first,
                                            int end, int n0, const Piece& pc, int h, const float (&q_mul)[2],
                                            const int (&limit)[2], int row0, int t, RowState (&st)[2]) {
#pragma unroll 1
  for (int n = first; n < end; ++n) {
    float s[16];
    cute::warpgroup_wait<0>();
    wgmma_fence_operands(acc_a);
    wgmma_fence_operands(acc_b);
#pragma unroll
    for (int k = 0; k < 16; ++k) s[k] = acc_a[k] + acc_b[k];
    half_block<MASKED>(s, ss, n % KV_STAGES, pc.blk_begin + (n - n0), h, q_mul, limit, row0, t, st, acc_a, acc_b,
                       n, true);
  }
}

__device__ void run_half_softmax_wg(const KernelParams& kp, SharedStorage& ss, const SchedRow& row) {
  const DecodeParams& p = kp.p;
  const auto [warp, lane, t, row0] = math_thread();
  const int h = (threadIdx.x / WG_THREADS) & 1;
  const int rpw = rows_per_warp(p.q_rows);
  const int warp_q_row0 = warp_first_q_row(blockIdx.x, warp, rpw);
  int block_idx = 0, piece = 0;
  for (int req = row.begin_req; req <= row.end_req; ++req, ++piece) {
    const Piece pc = make_piece(p, row, req);
    const int n_blocks = pc.blk_end - pc.blk_begin;
    StageRing<1>::wait_full(ss.q_full, piece);
    if (n_blocks == 0) { mbarrier_arrive(&ss.q_empty[0]); continue; }
    float q_mul[2];
    int limit[2];
    tile_rows(p, req, pc.seqlen, warp_q_row0, rpw, lane, q_mul, limit);
    RowState st[2] = {{-INFINITY, 1.f, 0.f}, {-INFINITY, 1.f, 0.f}};
    float acc_a[16], acc_b[16];
    StageRing<KV_STAGES>::wait_full(ss.kv_full, block_idx);
    issue_half_chain<0, WS_CHAIN_STEPS, false>(acc_a, ss, block_idx % KV_STAGES, h);
    issue_half_chain<WS_CHAIN_STEPS, WS_CHAIN_STEPS, true>(acc_b, ss, block_idx % KV_STAGES, h);
    const int last = block_idx + n_blocks - 1;
    const int whole_end = block_idx + min(max(whole_blocks(p, pc.seqlen) - pc.blk_begin, 0), n_blocks - 1);
    half_blocks<false>(acc_a, acc_b, ss, block_idx, whole_end, block_idx, pc, h, q_mul, limit, row0, t, st);
    half_blocks<true>(acc_a, acc_b, ss, whole_end, last, block_idx, pc, h, q_mul, limit, row0, t, st);
    {
      float s[16];
      cute::warpgroup_wait<0>();
      wgmma_fence_operands(acc_a);
      wgmma_fence_operands(acc_b);
#pragma unroll
      for (int k = 0; k < 16; ++k) s[k] = acc_a[k] + acc_b[k];
      mbarrier_arrive(&ss.q_empty[0]);
      half_block<true>(s, ss, last % KV_STAGES, pc.blk_end - 1, h, q_mul, limit, row0, t, st, acc_a, acc_b, last,
                       false);
    }
    block_idx += n_blocks;
  }
}

}  // namespace snapmla::sm90::decode_fp8::ws::probe_g
