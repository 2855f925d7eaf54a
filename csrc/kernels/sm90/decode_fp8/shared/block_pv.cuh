// PV of one page for one math warpgroup's 256 output dims, and the reader side of a block's hand-off, shared by
// the wide kernel (mainloop.cuh: both math warpgroups) and the warp-specialised kernel (ws/pv_wg.cuh: the two PV
// warpgroups). PV runs swapped, O^T = V^T . P^T: A = V^T built in registers by ldmatrix.trans from the stage's
// content tiles (narrow/pv.cuh load_v_frags), B = P^T from the block's hand-off in the stage's RoPE tile
// (exchange.cuh). Each m-tile of 64 dims goes into a fresh accumulator that is folded into O^T in fp32 (an FP8
// WGMMA accumulates with ~14 significant bits, mainloop.cuh header). Two forms of one block's PV, same bits:
// pv_block (fold scales held in registers, fragments double-buffered; the wide kernel) and pv_block_lean (within
// the ws PV warpgroups' 192 registers).
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

// The A fragments of this warpgroup's first m-tile of block n (m-tile 4 wg), pinned: the input of pv_block_loaded
// and pv_block_lean.
template <bool MASKED>
__device__ __forceinline__ void pv_first_frags(uint32_t (&a0)[PV_STEPS][4], const SharedStorage& ss, int n, int wg,
                                               int warp, int lane, int n_valid) {
  narrow::load_v_frags<MASKED>(a0, smem_u32(ss.kv_content[n % KV_STAGES]), PV_M_TILES * wg, warp, lane, n_valid);
#pragma unroll
  for (int g = 0; g < PV_STEPS; ++g) wgmma_fence_operands(a0[g]);
}

// One m-tile's PV into a fresh accumulator: 2 RS QGMMA m64n64k32 (A = the V^T fragments a, B = P^T at pt_desc, one
// 32-token k-step each), one commit group.
__device__ __forceinline__ void issue_pv_mtile(float (&acc)[32], uint32_t (&a)[PV_STEPS][4], uint64_t pt_desc) {
  wgmma_fence_operands(acc);
  cute::warpgroup_arrive();
#pragma unroll
  for (int g = 0; g < PV_STEPS; ++g) wgmma_m64n64k32_e4m3_rs(acc, a[g], pt_desc + ((g * K_STEP_BYTES) >> 4), g > 0);
  cute::warpgroup_commit_batch();
}

// Its retirement: the accumulator is readable and the fragments may be overwritten.
__device__ __forceinline__ void retire_pv_mtile(float (&acc)[32], uint32_t (&a)[PV_STEPS][4]) {
  cute::warpgroup_wait<0>();
  wgmma_fence_operands(acc);
#pragma unroll
  for (int g = 0; g < PV_STEPS; ++g) wgmma_fence_operands(a[g]);
}

// PV of block n for this warpgroup's 256 dims (m-tiles 4wg .. 4wg + 3), the first m-tile's fragments already in
// a[0] (pv_first_frags): per m-tile, O^T[mt] (64 dims x 64 tile rows) = O^T[mt] * o_scale[row] + V^T[mt] . P^T,
// with V^T[mt] as the register A operand (ldmatrix.trans from the stage's content tiles, narrow/pv.cuh
// load_v_frags) and P^T from the hand-off. The next m-tile's fragments load while the current one runs; the
// accumulator is fresh per m-tile and folded in fp32 (see the header). The 16 fold scales are held in registers
// across the block (the wide kernel's math warpgroups have 232). Loading a[0] before the hand-off wait (the ws PV
// warpgroups, once kv_full is in) measured 0.96-0.99x (docs/design.md section 5).
// Then the stage's last reads by this warpgroup are done: kv_empty, unless !release (the caller still reads the
// hand-off's state and releases the stage itself).
template <bool MASKED>
__device__ __forceinline__ void pv_block_loaded(float (&o)[PV_M_TILES][32], uint32_t (&a)[2][PV_STEPS][4],
                                                SharedStorage& ss, int n, int wg, int warp, int lane, int n_valid,
                                                bool release = true) {
  const int stage = n % KV_STAGES;
  const uint32_t tile = smem_u32(ss.kv_rope[stage]);
  const uint32_t content = smem_u32(ss.kv_content[stage]);
  float col_scale[16];
  read_col_scales(tile, lane % 4, col_scale);
  const uint64_t pt_desc = make_smem_desc(tile, 8 * BLOCK_N, SmemSwizzle::B64);  // P^T: 512 B per 8 rows of 64 B
#pragma unroll
  for (int mt = 0; mt < PV_M_TILES; ++mt) {
    float acc[32];
    issue_pv_mtile(acc, a[mt % 2], pt_desc);
    if (mt + 1 < PV_M_TILES) {
      // Other registers than the ones in flight: a[(mt + 1) % 2] belonged to m-tile mt - 1, retired.
      narrow::load_v_frags<MASKED>(a[(mt + 1) % 2], content, PV_M_TILES * wg + mt + 1, warp, lane, n_valid);
#pragma unroll
      for (int g = 0; g < PV_STEPS; ++g) wgmma_fence_operands(a[(mt + 1) % 2][g]);
    }
    retire_pv_mtile(acc, a[mt % 2]);
    // Accumulator index 4i + 2rr + e: dim row rr, column (tile row) 8i + 2t + e.
#pragma unroll
    for (int k = 0; k < 32; ++k) o[mt][k] = fmaf(o[mt][k], col_scale[2 * (k / 4) + k % 2], acc[k]);
  }
  if (release) release_stage(&ss.kv_empty[stage]);  // no proxy fence needed (mbarrier.cuh)
}

// PV of block n: the first m-tile's fragments, then the block.
template <bool MASKED>
__device__ __forceinline__ void pv_block(float (&o)[PV_M_TILES][32], SharedStorage& ss, int n, int wg, int warp,
                                         int lane, int n_valid, bool release = true) {
  uint32_t a[2][PV_STEPS][4];
  pv_first_frags<MASKED>(a[0], ss, n, wg, warp, lane, n_valid);
  pv_block_loaded<MASKED>(o, a, ss, n, wg, warp, lane, n_valid, release);
}

// The same PV of block n in fewer registers, for the warp-specialised kernel's PV warpgroups (WS_PV_REGS = 192,
// ws/config.h): the same WGMMAs, k-chains and folds, so the same bits as pv_block. Two differences:
// - The 16 fold scales are read again for each m-tile, 8 at a time (4 LDS.64), not held across the block. The
//   first 8 are read between the m-tile's issue and its wait, so their latency hides under the WGMMA; the other
//   8 after the wait. Holding 8 scales across the wait with double-buffered fragments spilled 40 B; reading all
//   16 after the wait left the folds waiting for them (12 % of the PV warps' samples, docs/design.md section 2).
// - The V^T fragments are single-buffered: the next m-tile's load after this m-tile's wait, where its 8 registers
//   are free again. That puts the LDSM -> PRMT latency before each m-tile's issue instead of under the previous
//   WGMMA; measured 0.99-1.04x (1.01-1.02x at h_q 128) over the double-buffered form at b = 1-128, s_q 1-4 (H100,
//   bench/results/bench_variants_20261206T224812Z.json; docs/design.md section 2).
template <bool MASKED>
__device__ __forceinline__ void pv_block_lean(float (&o)[PV_M_TILES][32], SharedStorage& ss, int n, int wg, int warp,
                                              int lane, int n_valid, bool release) {
  const int stage = n % KV_STAGES;
  const uint32_t tile = smem_u32(ss.kv_rope[stage]);
  const uint32_t content = smem_u32(ss.kv_content[stage]);
  const uint64_t pt_desc = make_smem_desc(tile, 8 * BLOCK_N, SmemSwizzle::B64);  // P^T: 512 B per 8 rows of 64 B
  uint32_t a[PV_STEPS][4];  // V^T fragments of the current m-tile: 64 dims x 64 tokens e4m3, 2 k-steps of 4 registers
  pv_first_frags<MASKED>(a, ss, n, wg, warp, lane, n_valid);
#pragma unroll
  for (int mt = 0; mt < PV_M_TILES; ++mt) {
    float acc[32];
    issue_pv_mtile(acc, a, pt_desc);
    float scale[2][8];  // fold scales of column chunks 0-3 and 4-7 (read_col_scales)
    read_col_scales<0, 4>(tile, lane % 4, scale[0]);
    retire_pv_mtile(acc, a);
    read_col_scales<4, 4>(tile, lane % 4, scale[1]);
    // Accumulator index 4i + 2rr + e: dim row rr, column (tile row) 8i + 2t + e; chunk i is in scale[i / 4].
#pragma unroll
    for (int k = 0; k < 32; ++k) o[mt][k] = fmaf(o[mt][k], scale[k / 16][2 * ((k / 4) % 4) + k % 2], acc[k]);
    if (mt + 1 < PV_M_TILES) {
      narrow::load_v_frags<MASKED>(a, content, PV_M_TILES * wg + mt + 1, warp, lane, n_valid);
#pragma unroll
      for (int g = 0; g < PV_STEPS; ++g) wgmma_fence_operands(a[g]);
    }
  }
  if (release) release_stage(&ss.kv_empty[stage]);  // no proxy fence needed (mbarrier.cuh)
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
// threads' P^T stores). LEAN: pv_block_lean (the ws kernel's PV warpgroups), else pv_block.
template <bool LEAN = false>
__device__ __forceinline__ void pv_after_handoff(float (&o)[PV_M_TILES][32], SharedStorage& ss, int n, int wg, int warp,
                                                 int lane, int n_valid, bool release = true) {
  if constexpr (LEAN) {
    if (n_valid >= BLOCK_N)
      pv_block_lean<false>(o, ss, n, wg, warp, lane, n_valid, release);
    else
      pv_block_lean<true>(o, ss, n, wg, warp, lane, n_valid, release);
  } else {
    if (n_valid >= BLOCK_N)
      pv_block<false>(o, ss, n, wg, warp, lane, n_valid, release);
    else
      pv_block<true>(o, ss, n, wg, warp, lane, n_valid, release);
  }
}

}  // namespace snapmla::sm90::decode_fp8
