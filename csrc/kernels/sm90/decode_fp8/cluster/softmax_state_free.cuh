// The softmax of the cluster decode kernel in the state-free order: everything per element (exponentials, their
// sum and maximum, P8) is computed against the block's own row maximum, before the previous block's state is
// known; only a few scalars per row follow the wait for it. This is what shortens the chain between the owners
// of consecutive blocks, which sit in different CTAs (docs/design.md). Validated on the H200 inside the
// wide kernel as wide_state_free_softmax.patch (git e74919c): far-above errors equal to main's to 4 digits.
//
// Same values as softmax.cuh's order (docs/numerics_contract.md section 4) up to the rounding of one product:
//   with mx = the block's row maximum, m_n = max(m_{n-1}, mx) and c = 2^(mx - m_n), the block's p'_j are
//   c p''_j with p''_j = 2^(x2_j - mx) k_scale_j, so P8_j = e4m3(p''_j 448 / max(p_loc, P_FLOOR)) equals
//   e4m3(p'_j inv_n) whenever c p_loc >= P_FLOOR (p_loc = max_j p''_j).
//   A block with c p_loc < P_FLOOR keeps the contract's inv_n = 448 / P_FLOOR while its P8 carries up to
//   P_FLOOR / (c p_loc) more weight than the contract's (which may be all zero). Since p_loc >= the smallest k scale >=
//   AMAX_FLOOR / 448 ~ 2^-22.8, that starts ~37 binades below the running maximum, and the block then stands
//   for at most 64 P_FLOOR / p'_max of the mass: O~ / L~ move by ~2^-31 relative at most. Where c flushes to 0
//   (> 126 binades below) the block is still counted as seen and moves the state to the P_FLOOR domain (the
//   wide kernel leaves the state as it is there); the values stay finite. tests/test_decode_kernel_gpu.py
//   test_block_far_above_the_others runs such blocks (~144 binades below) on both kernels.
#pragma once

#include "kernels/sm90/decode_fp8/softmax.cuh"

namespace snapmla::sm90::decode_fp8::cluster {

// After softmax_logits (softmax.cuh half 1: s = base-2 logits, -inf where masked; mx = row maxima). Out: s holds
// p''_j (0 where masked), e_loc[r] = sum_j 2^(x2_j - mx) and p_loc[r] = max_j p''_j per row (quad-reduced).
template <bool MASKED>
__device__ __forceinline__ void softmax_block_local(float (&s)[32], const float (&k_scale)[BLOCK_N],
                                                    const float (&mx)[2], const int (&n_vis)[2], int t,
                                                    float (&e_loc)[2], float (&p_loc)[2]) {
  float ks[16];
  load_k_scales(k_scale, t, ks);
  const float m_use[2] = {mx[0] == -INFINITY ? 0.f : mx[0], mx[1] == -INFINITY ? 0.f : mx[1]};
  block_exps<MASKED>(s, ks, m_use, n_vis, t, e_loc, p_loc);
}

// The P8 multiplier: 448 / max(p_loc, P_FLOOR), finite (<= 448 * 2^60).
__device__ __forceinline__ float p8_mult(float p_loc) {
  return kvl::FP8_E4M3_MAX * fast_rcp(fmaxf(p_loc, kvl::P_FLOOR));
}

// Scalars only. In: mx, e_loc, p_loc of the block and st = the state after the previous block (the initial
// state for a piece's first block). Out: st after this block, o_scale[r] the factor O~ takes before this
// block's PV is added. A row with no visible token in the block (p_loc = 0) keeps its state, o_scale = 1.
__device__ __forceinline__ void softmax_state(const float (&mx)[2], const float (&e_loc)[2], const float (&p_loc)[2],
                                              RowState (&st)[2], float (&o_scale)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float m_new = fmaxf(st[r].m, mx[r]);
    const float c = mx[r] == -INFINITY ? 0.f : fast_exp2(mx[r] - m_new);  // 2^(mx - m_n) <= 1
    const float inv_new = kvl::FP8_E4M3_MAX * fast_rcp(fmaxf(c * fmaxf(p_loc[r], kvl::P_FLOOR), kvl::P_FLOOR));
    const float ratio = fast_exp2(st[r].m - m_new) * (inv_new * fast_rcp(st[r].inv));
    const bool seen = p_loc[r] > 0.f;  // c = 0 too: its P8 is in P^T already (see the header)
    const float scale = st[r].m == -INFINITY ? 0.f : ratio;
    o_scale[r] = seen ? scale : 1.f;
    st[r].l = seen ? st[r].l * scale + (c * e_loc[r]) * inv_new : st[r].l;
    st[r].inv = seen ? inv_new : st[r].inv;
    st[r].m = seen ? m_new : st[r].m;
  }
}

}  // namespace snapmla::sm90::decode_fp8::cluster
