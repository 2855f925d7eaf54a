// Narrow decode kernel, math warpgroup, second half of a block: O^T (512 dims x 16 rows) += V^T . P^T with V^T
// as the register A operand, transposed on the way from the page's content tiles (ldmatrix), and P^T from
// shared memory (qk_softmax.cuh). No V^T buffer in shared memory and no transposer warps: each math warp turns
// 16 LDSM.x4.trans + 64 PRMT per block into the A fragments of its rows.
//
// A fragment of m-tile mt (dims 64 mt ..), k-step g (tokens 32 g ..), warp w, lane (r = lane / 4, q = lane % 4)
// (8-bit A layout, wgmma.cuh): a[0] = row 16w + r at k positions 4q .. 4q + 3, a[1] = row + 8, a[2] / a[3] the
// same rows at k + 16. Both the row -> dim and the k -> token maps are ours to choose, as long as P^T uses the same
// k order and the epilogue the same dims:
//   - rows: accumulator row 16w + r is dim 64 mt + 16w + 2r, row 16w + r + 8 is dim 64 mt + 16w + 2r + 1;
//   - k: position 16h + 4q + j of k-step g is token 32g + 16h + 2q + {0, 1, 8, 9}[j].
// Then one ldmatrix.x4.trans (16-bit granularity) over the 16-B column chunk of dims 64 mt + 16w .. +15 and
// tokens 32g + 8k + 0..7 (matrix k) gives lane (r, q) the bytes {token 2q: dims 2r, 2r + 1; token 2q + 1: same}
// of each matrix, and PRMT 0x6420 / 0x7531 of matrices (0, 1) select dim 2r / 2r + 1 of tokens
// {2q, 2q + 1, 2q + 8, 2q + 9}: a[0] / a[1]; matrices (2, 3) give a[2] / a[3]. The rows of a matrix are 8
// consecutive tokens, which Swizzle-128B puts in 8 distinct 16-B bank groups: no bank conflict.
//
// Each block's product goes into fresh accumulators (the FP8 WGMMA accumulates with ~14 significant bits,
// decode_fp8/wide/mainloop.cuh) and is folded into O^T in fp32 with the block's rescale: O^T = O^T * o_scale + acc.
// All 64 A registers of a block are loaded while its QK runs (the stage is then free once the QK retired); the
// 8 m-tiles go out in 4 waves of 2 (4 WGMMA m64n16k32 each), wave k + 1 issued before wave k is folded.
// Tokens past the sequence (last block) are zeroed in the A fragments: unused cache slots may hold NaN, and
// 0 (P) * NaN = NaN.
#pragma once

#include <cstdint>

#include "kernels/sm90/common/ldmatrix.cuh"
#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/swizzle.cuh"
#include "kernels/sm90/common/wgmma.cuh"
#include "kernels/sm90/decode_fp8/narrow/config.h"

namespace snapmla::sm90::decode_fp8::narrow {

// The thread's A fragments of m-tile mt, k-steps 0 and 1. content: the stage's 4 content tiles (64 tokens x
// 128 B each, Swizzle-128B); n_valid: tokens of the block inside the sequence (MASKED only).
template <bool MASKED>
__device__ __forceinline__ void load_v_frags(uint32_t (&a)[PV_STEPS][4], uint32_t content, int mt, int warp, int lane,
                                             int n_valid) {
  const int k = lane / 8, i = lane % 8;  // address role: row i of matrix k
  const int chunk = (mt % 2) * 4 + warp;  // 16-B chunk of the 128-B token row of tile mt / 2
  const uint32_t base = content + (mt / 2) * CONTENT_TILE_BYTES + sw128_chunk_offset(8 * k + i, chunk);
  const int q = lane % 4;
#pragma unroll
  for (int g = 0; g < PV_STEPS; ++g) {
    uint32_t x[4];
    ldsm_x4_trans(base + 32 * g * SWIZZLE_ROW_BYTES, x);  // rows 32 apart: the same chunk XOR (row % 8)
    uint32_t keep_lo = 0xffffffffu, keep_hi = 0xffffffffu;  // bytes of tokens 32g + 16h + 2q + {0, 1, 8, 9}
    if (MASKED) {
      const int lim_lo = n_valid - 32 * g - 2 * q, lim_hi = lim_lo - 16;
      keep_lo = (lim_lo > 0 ? 0x000000ffu : 0u) | (lim_lo > 1 ? 0x0000ff00u : 0u) | (lim_lo > 8 ? 0x00ff0000u : 0u) |
                (lim_lo > 9 ? 0xff000000u : 0u);
      keep_hi = (lim_hi > 0 ? 0x000000ffu : 0u) | (lim_hi > 1 ? 0x0000ff00u : 0u) | (lim_hi > 8 ? 0x00ff0000u : 0u) |
                (lim_hi > 9 ? 0xff000000u : 0u);
    }
    a[g][0] = __byte_perm(x[0], x[1], 0x6420) & keep_lo;
    a[g][1] = __byte_perm(x[0], x[1], 0x7531) & keep_lo;
    a[g][2] = __byte_perm(x[2], x[3], 0x6420) & keep_hi;
    a[g][3] = __byte_perm(x[2], x[3], 0x7531) & keep_hi;
  }
}

template <int N, int WMT>
__device__ __forceinline__ void issue_pv_wave(float (&acc)[WMT][N / 2], const uint32_t (&a)[WMT][PV_STEPS][4],
                                              uint64_t pt_desc) {
#pragma unroll
  for (int m = 0; m < WMT; ++m) wgmma_fence_operands(acc[m]);
  cute::warpgroup_arrive();
#pragma unroll
  for (int m = 0; m < WMT; ++m) {
#pragma unroll
    for (int g = 0; g < PV_STEPS; ++g)
      wgmma_m64n16k32_e4m3_rs(acc[m], a[m][g], pt_desc + ((g * K_STEP_BYTES) >> 4), g > 0);
  }
  cute::warpgroup_commit_batch();
}

// O^T[mt] = O^T[mt] * o_scale[column] + acc; accumulator index 4i + 2rr + e is column (row of the query)
// 8i + 2t + e, i.e. o_scale[2i + e].
template <int N>
__device__ __forceinline__ void fold_tile(float (&o)[N / 2], const float (&acc)[N / 2], const float (&o_scale)[N / 4]) {
#pragma unroll
  for (int k = 0; k < N / 2; ++k) o[k] = fmaf(o[k], o_scale[2 * (k / 4) + k % 2], acc[k]);
}

// The A fragments of MT m-tiles from mt0 on (MT x 2 k-steps x 4 words; the whole block, 64 registers, for the
// narrow kernel), loaded right after the QK is issued so that the stage can go back to the producer as soon as
// the QK retired (kernel.cuh).
template <bool MASKED, int MT>
__device__ __forceinline__ void load_v_block(uint32_t (&a)[MT][PV_STEPS][4], uint32_t content, int mt0, int warp,
                                             int lane, int n_valid) {
#pragma unroll
  for (int m = 0; m < MT; ++m) load_v_frags<MASKED>(a[m], content, mt0 + m, warp, lane, n_valid);
  // Pin the permuted words here: left to itself the compiler sinks the PRMTs down to each WGMMA, and ptxas then
  // injects a warpgroup.arrive before every PV WGMMA (C7519) to order those register writes.
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int g = 0; g < PV_STEPS; ++g) wgmma_fence_operands(a[m][g]);
  }
}

// PV of one block into O^T (MT m-tiles, N query rows), A from registers (load_v_block), B = P^T at pt (written
// and fenced by store_pt). Waves of WMT m-tiles (the narrow kernel: WAVE_MT = 2); wave k + 1 is issued before wave k is folded.
template <int N, int MT, int WMT>
__device__ __forceinline__ void pv_block(float (&o)[MT][N / 2], const float (&o_scale)[N / 4],
                                         const uint32_t (&a)[MT][PV_STEPS][4], uint32_t pt) {
  constexpr int WAVES_ = MT / WMT;
  static_assert(MT % WMT == 0, "whole waves");
  using WaveA = const uint32_t(*)[WMT][PV_STEPS][4];
  const uint64_t pt_desc = make_smem_desc(pt, 8 * BLOCK_N, SmemSwizzle::B64);  // 512 B per 8 rows of 64 B
  float acc[2][WMT][N / 2];
  issue_pv_wave<N, WMT>(acc[0], *reinterpret_cast<WaveA>(&a[0]), pt_desc);
#pragma unroll
  for (int wv = 0; wv < WAVES_; ++wv) {
    if (wv + 1 < WAVES_) {
      issue_pv_wave<N, WMT>(acc[(wv + 1) % 2], *reinterpret_cast<WaveA>(&a[(wv + 1) * WMT]), pt_desc);
      cute::warpgroup_wait<1>();
    } else {
      cute::warpgroup_wait<0>();
    }
#pragma unroll
    for (int m = 0; m < WMT; ++m) {
      wgmma_fence_operands(acc[wv % 2][m]);
      fold_tile<N>(o[wv * WMT + m], acc[wv % 2][m], o_scale);
    }
  }
}

}  // namespace snapmla::sm90::decode_fp8::narrow
