// Online softmax of SnapMLA (docs/numerics_contract.md section 4) on the QK accumulator fragment of one math thread: two rows
// (r0 = 16*warp + lane/4 and r0 + 8), 16 columns each (8i + 2(lane%4) + {0, 1}, i = 0..7), the other 48
// columns of those rows sitting in the 3 sibling lanes of the quad (row reductions: 2 xor-shuffles).
//
// Per row and block, in base 2 (x2 = x * log2 e):
//   x2_j = acc_j * (q_scale * softmax_scale * log2 e) * k_scale_j, -inf by select when token j is masked
//   m_n = max(m_{n-1}, max_j x2_j);  e_j = 2^(x2_j - m_n);  p'_j = e_j * k_scale_j (0 by select when masked)
//   sigma_n = max(max_j p'_j, P_FLOOR) / 448, kept as its inverse inv_n = 448 / max(max_j p'_j, P_FLOOR)
//   p8_j = e4m3(p'_j * inv_n)
//   O~ and L~ are scaled by alpha * sigma_{n-1} / sigma_n = 2^(m_{n-1} - m_n) * inv_n / inv_{n-1}, then
//   L~ += sum_j e_j * inv_n (and O~ += P8 V8 by the PV WGMMA).
// A block with no visible token for a row (causal rows near the end) leaves that row's m, sigma, O~ and L~
// untouched: its P is all zero, and taking sigma_n = P_FLOOR / 448 there would scale O~ by sigma_{n-1}/sigma_n
// (up to ~1.7e20, kv_layout.h) for no contribution. Before the first visible token the scale is 0 (O~ = L~ = 0 anyway).
#pragma once

#include <cfloat>
#include <cstdint>

#include <cutlass/functional.h>          // reciprocal_approximate_ftz
#include <cutlass/numeric_conversion.h>  // NumericArrayConverter (cvt.rn.satfinite.e4m3x2.f32)

#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/decode_fp8/shared/config.h"

namespace snapmla::sm90::decode_fp8 {

struct RowState {
  float m;    // running max of the base-2 logits, -inf before the first visible token
  float inv;  // 1 / sigma of the last block that had a visible token
  float l;    // L~ (probability-scale domain)
};

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// 2^x with one MUFU.EX2 (flush-to-zero: an e_j below 2^-126 of the row max counts as 0, far below what FP8 P
// can represent after scaling by 448 / max p').
// Own PTX: CUTLASS/CuTe have no ex2.approx wrapper (exp2f compiles to a range-reduced sequence).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 1 / x with one MUFU.RCP (rcp.approx.ftz, <= 1 ulp, flush-to-zero). The callers' x lie in [2^-60, 448 * 2^60]: normal.
__device__ __forceinline__ float fast_rcp(float x) { return cutlass::reciprocal_approximate_ftz<float>{}(x); }

// log2 x with one MUFU.LG2 (abs error <= 2^-22 near 1, flush-to-zero). The narrow merge's x = L of a row that
// saw a token, >= 1 up to the rounding of its rescales (its largest e_j is 1 on the side holding the row
// maximum): normal, far from lg2's special cases.
// Own PTX: CUTLASS/CuTe have no lg2.approx wrapper.
__device__ __forceinline__ float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Four floats -> four e4m3 bytes (v0 in the low byte), round to nearest even, saturating at +-448.
__device__ __forceinline__ uint32_t pack_e4m3x4(float v0, float v1, float v2, float v3) {
  cutlass::Array<float, 4> src;
  src[0] = v0; src[1] = v1; src[2] = v2; src[3] = v3;
  const auto r =
      cutlass::NumericArrayConverter<cutlass::float_e4m3_t, float, 4, cutlass::FloatRoundStyle::round_to_nearest>::convert(src);
  return reinterpret_cast<const uint32_t&>(r);
}

// ks[2i + e] = the k scale of the thread's column 8i + 2t + e (t = lane % 4), 8 LDS.64.
__device__ __forceinline__ void load_k_scales(const float (&k_scale)[BLOCK_N], int t, float (&ks)[16]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    // Own PTX: a shared-memory access through a 32-bit address (CuTe's copies take pointers: 64-bit registers).
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];"
                 : "=f"(ks[2 * i]), "=f"(ks[2 * i + 1])
                 : "r"(smem_u32(&k_scale[8 * i + 2 * t])));
  }
}

// The softmax of a block runs in two halves so that the owner of a block (mainloop.cuh) can compute its logits
// and row maxima before it has the state of the previous block, which the other math warpgroup may still be
// producing.
//
// Half 1. s: the thread's QK accumulator (32 fp32, fragment layout of wgmma.cuh), turned into base-2 logits
// (-inf where masked). k_scale: the block's 64 per-token scales in shared memory (each half reads the thread's
// 16 columns as float2: 8 LDS.64 again rather than 16 registers held across the hand-off wait). q_mul[r]: q_scale * softmax_scale * log2 e of row r; n_vis[r]: visible tokens of
// row r in this block (<= 0: none, >= 64: all). mx[r]: the row's block maximum (-inf when nothing is visible).
// MASKED = false is the path for blocks both rows see whole (all but the last block or two of a piece): no
// selects, 2 x 32 instructions per thread fewer over both halves.
// Both rows always run, without a branch between them, so the compiler interleaves their dependent chains
// (quad shuffles, the reciprocals and exponentials of half 2): with a warp-uniform skip of row r0 + 8 (when it is
// padding) the two chains ran one after the other. A padding row (past q_rows) has q_mul = 0 and sees every
// token (schedule.cuh); whatever its state, its P and its O~ column hold (NaN too, from stale query bytes), they
// stay in that row's own P^T row and O^T column (the PV sums over tokens only) and are never stored.
// The _ks forms take the thread's 16 k scales already in registers (load_k_scales; the warp-specialised kernel
// loads them before it issues the next block's QK, ws/softmax_wg.cuh); the others read them here.
template <bool MASKED>
__device__ __forceinline__ void softmax_logits_ks(float (&s)[32], const float (&ks)[16], const float (&q_mul)[2],
                                                  const int (&n_vis)[2], int t, float (&mx)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    // Column 8i + 2t + e is visible iff 8i + e < n_vis - 2t: one register, immediates for the 16 columns.
    const int vis_lim = n_vis[r] - 2 * t;
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float x = s[4 * i + 2 * r + e] * q_mul[r] * ks[2 * i + e];
        s[4 * i + 2 * r + e] = !MASKED || 8 * i + e < vis_lim ? x : -INFINITY;
        m = fmaxf(m, s[4 * i + 2 * r + e]);
      }
    }
    mx[r] = m;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) mx[r] = quad_max(mx[r]);
}

template <bool MASKED>
__device__ __forceinline__ void softmax_logits(float (&s)[32], const float (&k_scale)[BLOCK_N], const float (&q_mul)[2],
                                               const int (&n_vis)[2], int t, float (&mx)[2]) {
  float ks[16];
  load_k_scales(k_scale, t, ks);
  softmax_logits_ks<MASKED>(s, ks, q_mul, n_vis, t, mx);
}

// The block's exponentials against m_use[r] per row (0 for a row that has seen nothing: its logits are all
// -inf): s <- p'_j = 2^(x2_j - m_use) k_scale_j (0 by select where masked, never 0 * k_scale: an unused slot's
// scale may be NaN), e_sum[r] = sum_j 2^(x2_j - m_use), p_max[r] = max_j p'_j, both quad-reduced (half 2 below,
// m_use = the new running maximum).
template <bool MASKED>
__device__ __forceinline__ void block_exps(float (&s)[32], const float (&ks)[16], const float (&m_use)[2],
                                           const int (&n_vis)[2], int t, float (&e_sum)[2], float (&p_max)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int vis_lim = n_vis[r] - 2 * t;
    float sum = 0.f, pmax = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float ex = fast_exp2(s[4 * i + 2 * r + e] - m_use[r]);  // exactly 0 for a masked (-inf) logit
        const float pp = !MASKED || 8 * i + e < vis_lim ? ex * ks[2 * i + e] : 0.f;
        sum += ex;
        pmax = fmaxf(pmax, pp);
        s[4 * i + 2 * r + e] = pp;
      }
    }
    e_sum[r] = sum;
    p_max[r] = pmax;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    e_sum[r] = quad_sum(e_sum[r]);
    p_max[r] = quad_max(p_max[r]);
  }
}

// Half 2, given st = the state after the previous block of the piece. Out: s holds p'_j (0 where masked), st
// the state after this block, o_scale[r] the factor O~ takes before this block's PV is added. The update is
// computed for every row and kept by select (no branch on p_max, see half 1); where it is dropped (no visible
// token) its operands are finite or its NaN never selected: 448 / max(0, P_FLOOR) is finite, and the
// 2^(-inf - -inf) of a row that has seen nothing yet is replaced by the 0 of the select before it.
template <bool MASKED>
__device__ __forceinline__ void softmax_probs_ks(float (&s)[32], const float (&ks)[16], const float (&mx)[2],
                                                 const int (&n_vis)[2], int t, RowState (&st)[2], float (&o_scale)[2]) {
  // Three passes over the two rows (exponentials, quad reductions, state update) rather than one per row: the
  // division's slow-path call is a scheduling barrier, so per-row code ran the rows' chains one after the other.
  float m_new[2], m_use[2], e_sum[2], p_max[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    m_new[r] = fmaxf(st[r].m, mx[r]);
    m_use[r] = m_new[r] == -INFINITY ? 0.f : m_new[r];
  }
  block_exps<MASKED>(s, ks, m_use, n_vis, t, e_sum, p_max);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    // P_FLOOR = 2^-60 bounds inv_new by 448 * 2^60 ~ 5.2e20: finite, so 0 * inv = 0 for masked columns.
    // Approximate reciprocals (MUFU.RCP, <= 1 ulp) instead of IEEE divisions: each division was a
    // MUFU.RCP + Newton chain with a slow-path call, four of them serial per block on the softmax chain.
    const float inv_new = kvl::FP8_E4M3_MAX * fast_rcp(fmaxf(p_max[r], kvl::P_FLOOR));
    const float ratio = fast_exp2(st[r].m - m_new[r]) * (inv_new * fast_rcp(st[r].inv));
    const bool seen = p_max[r] > 0.f;
    const float scale = st[r].m == -INFINITY ? 0.f : ratio;
    o_scale[r] = seen ? scale : 1.f;
    st[r].l = seen ? st[r].l * scale + e_sum[r] * inv_new : st[r].l;
    st[r].inv = seen ? inv_new : st[r].inv;
    st[r].m = seen ? m_new[r] : st[r].m;
  }
}

template <bool MASKED>
__device__ __forceinline__ void softmax_probs(float (&s)[32], const float (&k_scale)[BLOCK_N], const float (&mx)[2],
                                              const int (&n_vis)[2], int t, RowState (&st)[2], float (&o_scale)[2]) {
  float ks[16];  // read again rather than kept from half 1: 16 registers at the math warpgroups' peak
  load_k_scales(k_scale, t, ks);
  softmax_probs_ks<MASKED>(s, ks, mx, n_vis, t, st, o_scale);
}

// p8 = e4m3(p' * mult[r]) packed 4 bytes per word (mult: inv_n of each row): word 4g + 2h + r holds row r0 + 8r, tokens
// 32g + 16h + 2t + {0, 1, 8, 9}, which is the k order of P^T in the hand-off (exchange.cuh publish_block
// stores each word whole).
__device__ __forceinline__ void pack_p(const float (&s)[32], const float (&mult)[2], uint32_t (&p)[8]) {
  // P fragments: k-step g covers columns 32g .. 32g+31; register 4g + {0, 1, 2, 3} = rows {r0, r0+8, r0, r0+8},
  // columns {32g + 2t + {0,1,8,9}, same, 32g + 16 + 2t + {0,1,8,9}, same}; accumulator chunk i = column / 8.
#pragma unroll
  for (int g = 0; g < 2; ++g) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i0 = 4 * g + 2 * h;  // chunks i0 (columns +0, +1) and i0 + 1 (columns +8, +9)
        const float inv = mult[r];
        p[4 * g + 2 * h + r] = pack_e4m3x4(s[4 * i0 + 2 * r] * inv, s[4 * i0 + 2 * r + 1] * inv,
                                           s[4 * (i0 + 1) + 2 * r] * inv, s[4 * (i0 + 1) + 2 * r + 1] * inv);
      }
    }
  }
}

}  // namespace snapmla::sm90::decode_fp8
