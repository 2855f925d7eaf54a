// PV of one page for one math warpgroup's 256 output dims, and the reader side of a block's hand-off, shared by
// the wide kernel (mainloop.cuh: both math warpgroups) and the warp-specialised kernel (ws/pv_wg.cuh: the two PV
// warpgroups). PV runs swapped, O^T = V^T . P^T: A = V^T built in registers by ldmatrix.trans from the stage's
// content tiles (narrow/pv.cuh load_v_frags), B = P^T from the block's hand-off in the stage's RoPE tile
// (exchange.cuh). Each m-tile of 64 dims goes into a fresh accumulator that is folded into O^T in fp32 (an FP8
// WGMMA accumulates with ~14 significant bits, mainloop.cuh header).
#pragma once

#include <cstdint>

#include "kernels/sm90/common/stage_ring.cuh"
#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/wgmma.cuh"
#include "kernels/sm90/decode_fp8/narrow/pv.cuh"
#include "kernels/sm90/decode_fp8/shared/exchange.cuh"
#include "kernels/sm90/decode_fp8/shared/softmax.cuh"
#include "kernels/sm90/decode_fp8/shared/traits.h"

namespace snapmla::sm90::decode_fp8 {

// The A fragments of this warpgroup's first m-tile of block n (m-tile 4 wg), pinned: pv_block_loaded's input.
template <bool MASKED>
__device__ __forceinline__ void pv_first_frags(uint32_t (&a0)[PV_STEPS][4], const SharedStorage& ss, int n, int wg,
                                               int warp, int lane, int n_valid) {
  narrow::load_v_frags<MASKED>(a0, smem_u32(ss.kv_content[n % KV_STAGES]), PV_M_TILES * wg, warp, lane, n_valid);
#pragma unroll
  for (int g = 0; g < PV_STEPS; ++g) wgmma_fence_operands(a0[g]);
}

// PV of block n for this warpgroup's 256 dims (m-tiles 4wg .. 4wg + 3), the first m-tile's fragments already in
// a[0] (pv_first_frags): per m-tile, O^T[mt] (64 dims x 64 tile rows) = O^T[mt] * o_scale[row] + V^T[mt] . P^T,
// with V^T[mt] as the register A operand (ldmatrix.trans from the stage's content tiles, narrow/pv.cuh
// load_v_frags) and P^T from the hand-off. The next m-tile's fragments load while the current one runs; the
// accumulator is fresh per m-tile and folded in fp32 (see the header). Loading a[0] before the hand-off wait
// (the ws PV warpgroups, once kv_full is in) measured 0.96-0.99x (docs/design.md section 5).
// Then the stage's last reads by this warpgroup are done: kv_empty, unless !release (the caller still reads the
// hand-off's state and releases the stage itself).
// LEAN_SCALES: the 16 fold scales are read again for each fold, 8 at a time (4 LDS.64 per half), instead of
// held in 16 registers across the block: the warp-specialised kernel's PV warpgroups have 184 registers, the
// wide kernel's math warpgroups 232.
template <bool MASKED, bool LEAN_SCALES = false>
__device__ __forceinline__ void pv_block_loaded(float (&o)[PV_M_TILES][32], uint32_t (&a)[2][PV_STEPS][4],
                                                SharedStorage& ss, int n, int wg, int warp, int lane, int n_valid,
                                                bool release = true) {
  const int stage = n % KV_STAGES;
  const uint32_t tile = smem_u32(ss.kv_rope[stage]);
  const uint32_t content = smem_u32(ss.kv_content[stage]);
  float col_scale[16];
  if constexpr (!LEAN_SCALES) read_col_scales(tile, lane % 4, col_scale);
  const uint64_t pt_desc = make_smem_desc(tile, 8 * BLOCK_N, SmemSwizzle::B64);  // P^T: 512 B per 8 rows of 64 B
#pragma unroll
  for (int mt = 0; mt < PV_M_TILES; ++mt) {
    float acc[32];
    wgmma_fence_operands(acc);
    cute::warpgroup_arrive();
#pragma unroll
    for (int g = 0; g < PV_STEPS; ++g)
      wgmma_m64n64k32_e4m3_rs(acc, a[mt % 2][g], pt_desc + ((g * K_STEP_BYTES) >> 4), g > 0);
    cute::warpgroup_commit_batch();
    if (mt + 1 < PV_M_TILES) {
      // Other registers than the ones in flight: a[(mt + 1) % 2] belonged to m-tile mt - 1, retired.
      narrow::load_v_frags<MASKED>(a[(mt + 1) % 2], content, PV_M_TILES * wg + mt + 1, warp, lane, n_valid);
#pragma unroll
      for (int g = 0; g < PV_STEPS; ++g) wgmma_fence_operands(a[(mt + 1) % 2][g]);
    }
    cute::warpgroup_wait<0>();
    wgmma_fence_operands(acc);
#pragma unroll
    for (int g = 0; g < PV_STEPS; ++g) wgmma_fence_operands(a[mt % 2][g]);
    // Accumulator index 4i + 2rr + e: dim row rr, column (tile row) 8i + 2t + e.
    if constexpr (LEAN_SCALES) {
      float half_scale[2][8];
      read_col_scales<0, 4>(tile, lane % 4, half_scale[0]);
      read_col_scales<4, 4>(tile, lane % 4, half_scale[1]);
#pragma unroll
      for (int k = 0; k < 32; ++k) o[mt][k] = fmaf(o[mt][k], half_scale[k / 16][2 * ((k / 4) % 4) + k % 2], acc[k]);
    } else {
#pragma unroll
      for (int k = 0; k < 32; ++k) o[mt][k] = fmaf(o[mt][k], col_scale[2 * (k / 4) + k % 2], acc[k]);
    }
  }
  if (release) release_stage(&ss.kv_empty[stage]);  // no proxy fence needed (mbarrier.cuh)
}

// PV of block n: the first m-tile's fragments, then the block.
template <bool MASKED, bool LEAN_SCALES = false>
__device__ __forceinline__ void pv_block(float (&o)[PV_M_TILES][32], SharedStorage& ss, int n, int wg, int warp, int lane,
                                         int n_valid, bool release = true) {
  uint32_t a[2][PV_STEPS][4];
  pv_first_frags<MASKED>(a[0], ss, n, wg, warp, lane, n_valid);
  pv_block_loaded<MASKED, LEAN_SCALES>(o, a, ss, n, wg, warp, lane, n_valid, release);
}

// The other warpgroup's block n: wait for its hand-off and take the state after it (the softmax of the next
// block starts from it).
__device__ __forceinline__ void take_handoff_state(SharedStorage& ss, int n, int row0, RowState (&st)[2],
                                                   float (&o_scale)[2]) {
  const int stage = n % KV_STAGES;
  StageRing<KV_STAGES>::wait_full(ss.xchg_full, n);
  read_block_state(smem_u32(ss.kv_rope[stage]), row0, st, o_scale);
}

// PV of block n once its hand-off is complete: the caller has waited on xchg_full (the owner too, for its own 128
// threads' P^T stores).
template <bool LEAN_SCALES = false>
__device__ __forceinline__ void pv_after_handoff(float (&o)[PV_M_TILES][32], SharedStorage& ss, int n, int wg, int warp,
                                                 int lane, int n_valid, bool release = true) {
  if (n_valid >= BLOCK_N)
    pv_block<false, LEAN_SCALES>(o, ss, n, wg, warp, lane, n_valid, release);
  else
    pv_block<true, LEAN_SCALES>(o, ss, n, wg, warp, lane, n_valid, release);
}

}  // namespace snapmla::sm90::decode_fp8
