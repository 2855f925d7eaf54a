// Narrow decode kernel, math warpgroup, first half of a block: S^T = K . Q^T on the tensor cores, the online
// softmax of SnapMLA per query row (= per accumulator column), and P^T to shared memory for the PV WGMMA.
//
// Fragment of S^T (m64nN, N = ROWS = 16 query rows, wgmma.cuh; the pieces below keep N as a template
// parameter, only N = 16 is instantiated: the dual kernel that ran N = 32 was dropped, docs/design.md):
// thread (warp w, lane l, r = l / 4, t = l % 4)
// holds tokens tau_0 = 16w + r and tau_1 = tau_0 + 8 (accumulator rows) of the query rows (columns)
// c = 8i + 2t + e, i < N / 8, e in {0, 1}: s[4i + 2rr + e] = (token tau_rr, row 8i + 2t + e). Index ce = 2i + e
// names the thread's N / 4 rows.
// A row's 64 tokens sit in 8 lanes (same t) of each of the 4 warps: row maxima and sums take 3 xor-shuffles and
// one exchange between the warps through shared memory (red, one named barrier of the warpgroup).
//
// Per row and block, in base 2, exactly as the wide kernel (decode_fp8/shared/softmax.cuh) and the reference:
//   x2_j = acc_j * (q_scale * softmax_scale * log2 e) * k_scale_j  (-inf by select when token j is masked)
//   m_n = max(m_{n-1}, max_j x2_j);  e_j = 2^(x2_j - m_n);  p'_j = e_j * k_scale_j (0 by select when masked)
//   inv_n = 448 / max(max_j p'_j, P_FLOOR);  p8_j = e4m3(p'_j * inv_n)
//   O~, L~ scaled by 2^(m_{n-1} - m_n) * inv_n / inv_{n-1}, then L~ += sum_j e_j * inv_n.
// L~ is kept as a per-thread partial sum (every thread of a row applies the same scales), summed over the
// warpgroup once per piece (merge_store.cuh).
#pragma once

#include <cstdint>

#include <cutlass/numeric_conversion.h>

#include "kernels/sm90/common/swizzle.cuh"
#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/wgmma.cuh"
#include "kernels/sm90/decode_fp8/narrow/config.h"
#include "kernels/sm90/decode_fp8/shared/softmax.cuh"

namespace snapmla::sm90::decode_fp8::narrow {

// Online-softmax state of one query row; m and inv are the same in every thread holding the row, l is this
// thread's share of L~.
struct ColState {
  float m;    // running max of the base-2 logits, -inf before the first visible token
  float inv;  // 448 / max p' of the last block with a visible token
  float l;    // partial L~ (probability-scale domain)
};

// S^T (64 tokens x N rows) = K8 (64 x 512, the stage's content tiles) . Q8^T + K_rope . Q_rope^T, fp32.
// A = the page's tiles (64 rows x 128 B, Swizzle-128B), B = the query tiles (N rows x 128 B, Swizzle-128B, one
// tile every q_tile_bytes); k-step kk reads bytes 32 (kk % 4) of tile kk / 4 of both.
// The 16 FP8 k-steps go into QK_CHAINS accumulators
// of QK_CONTENT_STEPS / QK_CHAINS chained steps each (the RoPE k-group into the last), summed in fp32 by the
// caller. The FP8 tensor cores keep ~14 significant bits while they accumulate, so a chain of 16 k32 steps
// loses bits against its growing sum; where all 512 products of a dominant logit have the same sign this was
// 0.37-0.52 nats of lse at lse ~100 (tests/test_decode_kernel_gpu.py test_block_far_above_the_others);
// 4 chains of 4: -0.05..-0.06 nats. 8 chains of 2 (8 registers each, 0 spills): -0.016..-0.019 nats (H200,
// 2026-12-01), 0.99-1.01x side by side at b = 1 / 4 / 16 / 64 / 128. The model
// (tools/numerics/qk_accumulation_model.py) says 1.48e-3 (from 1.74e-3) on the heavy-tailed layer, and 5.6e-4 with the
// outlier-channel format of docs/design.md (section 6).
inline constexpr int QK_CHAINS = 8;
template <int N>
__device__ __forceinline__ void issue_qk_t(float (&s)[QK_CHAINS][N / 2], uint32_t kv_content, uint32_t kv_rope,
                                           uint32_t q_content, uint32_t q_rope) {
  constexpr uint32_t SBO = 8 * SWIZZLE_ROW_BYTES;  // 1024 B between 8-row groups, both operands
  constexpr int Q_TILE = N * SWIZZLE_ROW_BYTES;
  constexpr int CHAIN = QK_CONTENT_STEPS / QK_CHAINS;
  static_assert(QK_CONTENT_STEPS % QK_CHAINS == 0, "every chain has CHAIN steps, the first with scale-d = 0");
  const uint64_t k_desc = make_smem_desc(kv_content, SBO, SmemSwizzle::B128);
  const uint64_t q_desc = make_smem_desc(q_content, SBO, SmemSwizzle::B128);
#pragma unroll
  for (int kk = 0; kk < QK_CONTENT_STEPS; ++kk) {
    const int in_row = (kk % STEPS_PER_SWIZZLE_ROW) * K_STEP_BYTES;
    const uint32_t k_off = ((kk / STEPS_PER_SWIZZLE_ROW) * CONTENT_TILE_BYTES + in_row) >> 4;
    const uint32_t q_off = ((kk / STEPS_PER_SWIZZLE_ROW) * Q_TILE + in_row) >> 4;
    wgmma_m64n16k32_e4m3_ss(s[kk / CHAIN], k_desc + k_off, q_desc + q_off, kk % CHAIN > 0);
  }
  const uint64_t kr_desc = make_smem_desc(kv_rope, SBO, SmemSwizzle::B128);
  const uint64_t qr_desc = make_smem_desc(q_rope, SBO, SmemSwizzle::B128);
#pragma unroll
  for (int kk = 0; kk < QK_ROPE_STEPS; ++kk) {
    const uint32_t off = (kk * K_STEP_BYTES) >> 4;
    wgmma_m64n16k16_bf16_ss(s[QK_CHAINS - 1], kr_desc + off, qr_desc + off);
  }
}

// Reduction of v[ce] (C = N / 4 rows per thread) over the 64 tokens of each of the thread's rows: the 8 lanes
// of the warp with the same t (xor 4, 8, 16), then the 4 warps of the warpgroup through red (4 warps x N rows,
// written by lanes 0..3). Every thread of the warpgroup must call it (named barrier bar_id over 128 threads).
template <bool MAX, int C>
__device__ __forceinline__ void reduce_cols(float (&v)[C], float* red, int warp, int lane, int bar_id) {
  constexpr int N = 4 * C;
#pragma unroll
  for (int ce = 0; ce < C; ++ce) {
#pragma unroll
    for (int x = 4; x < 32; x *= 2) {
      const float o = __shfl_xor_sync(0xffffffffu, v[ce], x);
      v[ce] = MAX ? fmaxf(v[ce], o) : v[ce] + o;
    }
  }
  const int t = lane % 4;
  if (lane < 4) {
    // Rows 8i + 2t, 8i + 2t + 1 (ce 2i, 2i + 1) of this warp.
    // Own PTX: a shared-memory access through a 32-bit address (CuTe's copies take pointers: 64-bit registers).
#pragma unroll
    for (int i = 0; i < C / 2; ++i)
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(smem_u32(red + N * warp + 8 * i + 2 * t)), "f"(v[2 * i]),
                   "f"(v[2 * i + 1])
                   : "memory");
  }
  named_barrier_sync(bar_id, WG_THREADS);
#pragma unroll
  for (int ce = 0; ce < C; ++ce) v[ce] = MAX ? -INFINITY : 0.f;
#pragma unroll
  for (int w = 0; w < MATH_WARPS_PER_WG; ++w) {
#pragma unroll
    for (int i = 0; i < C / 2; ++i) {
      float a, b;
      // Own PTX: a shared-memory access through a 32-bit address (CuTe's copies take pointers: 64-bit registers).
      asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];"
                   : "=f"(a), "=f"(b)
                   : "r"(smem_u32(red + N * w + 8 * i + 2 * t))
                   : "memory");
      v[2 * i] = MAX ? fmaxf(v[2 * i], a) : v[2 * i] + a;
      v[2 * i + 1] = MAX ? fmaxf(v[2 * i + 1], b) : v[2 * i + 1] + b;
    }
  }
}

// The softmax of one block on the thread's S^T fragment. ks: the k scales of the thread's tokens tau0, tau0 + 8; q_mul[ce]:
// q_scale * softmax_scale * log2 e of row ce; n_vis[ce]: visible tokens of the row in this block (<= 0 none,
// >= 64 all). red_max / red_pmax: the warpgroup's two reduction slots (distinct, so one barrier each suffices:
// a slot is rewritten only after every thread passed the other slot's barrier). Out: s holds p'_j (0 where
// masked), cs the state after the block, o_scale[ce] the factor O^T column ce takes before this block's PV.
// Masked by select for every block (the kernel's one block body; n_vis >= 64 keeps every token). A row with no
// visible token keeps its state (o_scale 1; its p' are 0), as in the wide kernel.
template <int N>
__device__ __forceinline__ void softmax_cols(float (&s)[N / 2], const float (&ks)[2], const float (&q_mul)[N / 4],
                                             const int (&n_vis)[N / 4], ColState (&cs)[N / 4], float (&o_scale)[N / 4],
                                             float* red_max, float* red_pmax, int warp, int lane, int bar_id) {
  constexpr int C = N / 4;
  const int tau0 = 16 * warp + lane / 4;  // tokens tau0 (rr = 0) and tau0 + 8 (rr = 1)
  float mx[C];
#pragma unroll
  for (int i = 0; i < C / 2; ++i) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int ce = 2 * i + e;
      float m = -INFINITY;
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        float& v = s[4 * i + 2 * rr + e];
        const float x = v * q_mul[ce] * ks[rr];
        v = tau0 + 8 * rr < n_vis[ce] ? x : -INFINITY;
        m = fmaxf(m, v);
      }
      mx[ce] = m;
    }
  }
  reduce_cols<true>(mx, red_max, warp, lane, bar_id);

  float m_new[C], e_sum[C], p_max[C];
#pragma unroll
  for (int i = 0; i < C / 2; ++i) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int ce = 2 * i + e;
      m_new[ce] = fmaxf(cs[ce].m, mx[ce]);
      const float m_use = m_new[ce] == -INFINITY ? 0.f : m_new[ce];
      e_sum[ce] = 0.f;
      p_max[ce] = 0.f;
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        float& v = s[4 * i + 2 * rr + e];
        const float ex = fast_exp2(v - m_use);  // exactly 0 for a masked (-inf) logit
        // Masked: the select, not 0 * k_scale (an unused slot's scale may be NaN).
        const float pp = tau0 + 8 * rr < n_vis[ce] ? ex * ks[rr] : 0.f;
        e_sum[ce] += ex;
        p_max[ce] = fmaxf(p_max[ce], pp);
        v = pp;
      }
    }
  }
  reduce_cols<true>(p_max, red_pmax, warp, lane, bar_id);
  // The update is computed for every row and kept by select, with approximate reciprocals, as in the wide
  // kernel (softmax.cuh softmax_probs): a branch per row around IEEE divisions (each with its slow-path call)
  // kept the compiler from overlapping the rows' chains.
  float inv_new[C];
#pragma unroll
  for (int ce = 0; ce < C; ++ce) {
    // P_FLOOR = 2^-60 bounds inv_new by 448 * 2^60: finite, so 0 * inv = 0 for masked tokens.
    inv_new[ce] = kvl::FP8_E4M3_MAX * fast_rcp(fmaxf(p_max[ce], kvl::P_FLOOR));
  }
#pragma unroll
  for (int ce = 0; ce < C; ++ce) {
    const bool seen = p_max[ce] > 0.f;
    // 2^(-inf - -inf) = NaN for a row that has seen nothing yet: replaced by the 0 of the select below.
    const float ratio = fast_exp2(cs[ce].m - m_new[ce]) * (inv_new[ce] * fast_rcp(cs[ce].inv));
    const float scale = cs[ce].m == -INFINITY ? 0.f : ratio;
    o_scale[ce] = seen ? scale : 1.f;
    cs[ce].l = seen ? cs[ce].l * scale + e_sum[ce] * inv_new[ce] : cs[ce].l;
    cs[ce].inv = seen ? inv_new[ce] : cs[ce].inv;
    cs[ce].m = seen ? m_new[ce] : cs[ce].m;
  }
}

// e4m3 bytes of (lo, hi) in the low / high byte, round to nearest even, saturating.
__device__ __forceinline__ uint32_t e4m3x2(float lo, float hi) {
  cutlass::Array<float, 2> src;
  src[0] = lo; src[1] = hi;
  const auto r =
      cutlass::NumericArrayConverter<cutlass::float_e4m3_t, float, 2, cutlass::FloatRoundStyle::round_to_nearest>::convert(src);
  return reinterpret_cast<const uint16_t&>(r);
}

// p8 = e4m3(p' * inv) into P^T (N rows x 64 k positions, K-major Swizzle-64B: row c at 64 c, 16-B chunk
// XOR (c >> 1) & 3), then made visible to the warpgroup's PV WGMMA (async proxy fence + named barrier).
// K positions follow pv.cuh: position 32g + 16h + 4q + j holds token 32g + 16h + 2q + {0, 1, 8, 9}[j], so the
// thread's tokens tau0 = 16w + r and tau0 + 8 go to positions kap0 = 16w + 4 (r >> 1) + (r & 1) and kap0 + 2,
// both in 16-B chunk w.
template <int N>
__device__ __forceinline__ void store_pt(uint32_t pt,  // (N x 64 B) Swizzle-64B, the warpgroup's P^T buffer
                                         const float (&s)[N / 2], const ColState (&cs)[N / 4], int warp, int lane,
                                         int bar_id) {
  const int r = lane / 4, t = lane % 4;
  const int kap0 = 4 * (r >> 1) + (r & 1);  // inside chunk `warp`
#pragma unroll
  for (int i = 0; i < N / 8; ++i) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int ce = 2 * i + e;
      const int c = 8 * i + 2 * t + e;
      const uint32_t b = e4m3x2(s[4 * i + e] * cs[ce].inv, s[4 * i + 2 + e] * cs[ce].inv);
      const uint32_t addr = pt + sw64_chunk_offset(c, warp) + kap0;
      // Own PTX: a shared-memory access through a 32-bit address (CuTe's copies take pointers: 64-bit registers).
      asm volatile("st.shared.u8 [%0], %1;" ::"r"(addr), "r"(b & 0xffu) : "memory");
      asm volatile("st.shared.u8 [%0], %1;" ::"r"(addr + 2), "r"(b >> 8) : "memory");
    }
  }
  fence_proxy_async_smem();
  named_barrier_sync(bar_id, WG_THREADS);
}

}  // namespace snapmla::sm90::decode_fp8::narrow
