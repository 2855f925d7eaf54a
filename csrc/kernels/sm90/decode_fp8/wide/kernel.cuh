// sm_90a FP8 SnapMLA decode kernel, wide tiles (docs/numerics_contract.md sections 4-5; q_rows <= 16 with enough work per CTA runs
// the narrow kernel instead, narrow/kernel.cuh): attention of 64 folded query rows (row = s * h_q + h) over the
// 64-token pages of one schedule row's pieces, with FP8 Q and K content, BF16 pre-scaled RoPE, per-token K scales
// and per-(row, block) FP8 P scales folded into the online-softmax state.
// PV runs as O^T = V^T . P^T (swap AB: V^T built in registers, no transposer warpgroup; docs/design.md section 3).
//
// Grid (num_m_tiles, num_sm_parts), 384 threads, one CTA per SM (~203 KB of shared memory), persistent over the
// pieces of its schedule row. Warpgroups:
//   WG0, WG1 (math, MATH_REGS = 232): block n of the CTA's walk belongs to WG(n % 2), which computes its whole
//     64x64 QK (16 QGMMA k32 over the 512 content dims + 4 HGMMA k16 over the 64 RoPE dims, one fp32
//     accumulator), the online softmax and P quantised to e4m3, and hands P^T and the softmax state to the other
//     warpgroup through the stage's RoPE tile. Both run PV for every block in block order, each for its 256 dims:
//     4 m-tiles of 2 RS QGMMA m64n64k32, A = V^T from ldmatrix.trans of the content tiles, B = P^T, each m-tile
//     folded into O^T in fp32. mainloop.cuh, softmax.cuh, exchange.cuh, epilogue.cuh.
//   WG2 (producer, PRODUCER_REGS = 40): one thread issues the TMA loads (tma_producer.cuh): the query tile once
//     per piece (4 warp slabs, tensor-map tile loads) and the page of each block (41216 B, 3 bulk copies: the
//     cache holds the stage's Swizzle-128B image, kv_layout.h).
// Pipeline: 4 KV stages (kv_full: TMA bytes; xchg_full when the owner's hand-off is in the RoPE tile; kv_empty
// when both warpgroups' PV of the block retired), query tile q_full / q_empty once per piece. Barrier phases
// come from one running block index shared by all roles.
// Shared memory: 40 KB Q + 4 x 40.25 KB KV stages + 2 KB row states = ~203 KB (traits.h).
// Bytes per block: 41216 (the page, nothing else). FLOPs per block and 64-row tile: 2 x 64 x 64 x 512 FP8 for
// QK + 2 x 64 x 64 x 512 FP8 for PV + 2 x 64 x 64 x 64 BF16 for RoPE, each done once.
#pragma once

#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/decode_fp8/shared/kernel_prologue.cuh"
#include "kernels/sm90/decode_fp8/shared/query_tile.cuh"
#include "kernels/sm90/decode_fp8/shared/schedule.cuh"
#include "kernels/sm90/decode_fp8/shared/tma_producer.cuh"
#include "kernels/sm90/decode_fp8/shared/traits.h"
#include "kernels/sm90/decode_fp8/wide/mainloop.cuh"

namespace snapmla::sm90::decode_fp8 {

template <typename KvElem>
__global__ void __launch_bounds__(NUM_THREADS, 1) snapmla_decode_fp8_kernel(const __grid_constant__ KernelParams kp) {
  static_assert(KvTraits<KvElem>::NEEDS_V_TRANSPOSE, "the 8-bit cache path (V transposed by ldmatrix)");
  extern __shared__ uint8_t smem_raw[];
  SharedStorage& ss = aligned_storage<SharedStorage>(smem_raw);

  // kv_empty: both math warpgroups, after their PV of the block; q_empty: both, after their last QK of a piece.
  init_wide_pipeline(kp, ss, MATH_THREADS, MATH_THREADS);

  split_roles<PRODUCER_REGS, MATH_REGS>(kp, ss, [&](const SchedRow& row, int wg) { run_math(kp, ss, row, wg); });
}

}  // namespace snapmla::sm90::decode_fp8
