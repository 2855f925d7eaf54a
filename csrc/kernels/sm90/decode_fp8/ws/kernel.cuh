// sm_90a FP8 SnapMLA decode kernel, wide tiles, warp-specialised (SNAPMLA_DECODE_KERNEL=ws, q_rows > 16): the
// wide kernel's tiles, pages, numerics and outputs (kernel.cuh), with the per-block chain split between
// warpgroups. In the wide kernel each math warpgroup runs QK -> softmax -> hand-off -> PV for its own blocks and
// PV for the other's, one block in flight, so its chain is the time (~5700 cycles per two blocks, H200,
// docs/design.md section 2, wide kernel). Here the QK and softmax of every block run in one warpgroup, the PV
// in two others, so the three chains overlap: the softmax warpgroup's QK + softmax per block against the PV
// warpgroups' PV per block.
//
// Grid (num_m_tiles, num_sm_parts), 512 threads, one CTA per SM, persistent over the pieces of its schedule row.
// Warpgroups (ws/config.h):
//   WG0, WG1 (PV, WS_PV_REGS = 192): O^T for dims 256 wg .. + 255; per block: wait the hand-off, 4 m-tiles of
//     2 RS QGMMA m64n64k32 (A = V^T by ldmatrix.trans, B = P^T), fold in fp32, release the stage (ws/pv_wg.cuh).
//   WG2 (producer, WS_PRODUCER_REGS = 24): one thread issues the query tile per piece and 3 bulk copies per page
//     (tma_producer.cuh, as the wide kernel).
//   WG3 (softmax, WS_SOFTMAX_REGS = 104): per block 16 QGMMA m64n64k32 + 4 HGMMA m64n64k16 in two fp32-summed
//     chains (both chains of block n + 1 in flight during the softmax of block n), the online softmax, P8, the
//     hand-off (ws/softmax_wg.cuh).
// Pipeline: 4 KV stages of one page each (kv_full: TMA bytes; xchg_full: the softmax warpgroup's 128 arrivals
// once P^T, the fold scales and the state are in the stage's RoPE tile; kv_empty: both PV warpgroups' 256
// arrivals), the query tile once per piece (q_full; q_empty: the softmax warpgroup). Barrier phases from one
// running block index shared by all roles.
// Shared memory: the wide kernel's SharedStorage, 40 KB query tile + 4 x 40.25 KB stages + 2 KB row states
// (~203 KB, traits.h). Bytes per block: 41216. FLOPs per block and tile as the wide kernel's.
#pragma once

#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/decode_fp8/shared/kernel_prologue.cuh"
#include "kernels/sm90/decode_fp8/shared/query_tile.cuh"
#include "kernels/sm90/decode_fp8/shared/schedule.cuh"
#include "kernels/sm90/decode_fp8/shared/tma_producer.cuh"
#include "kernels/sm90/decode_fp8/shared/traits.h"
#include "kernels/sm90/decode_fp8/ws/config.h"
#include "kernels/sm90/decode_fp8/ws/pv_wg.cuh"
#include "kernels/sm90/decode_fp8/ws/softmax_wg.cuh"

namespace snapmla::sm90::decode_fp8::ws {

template <typename KvElem>
__global__ void __launch_bounds__(WS_THREADS, 1) snapmla_decode_fp8_ws_kernel(const __grid_constant__ KernelParams kp) {
  static_assert(KvTraits<KvElem>::NEEDS_V_TRANSPOSE, "the 8-bit cache path (V transposed by ldmatrix)");
  extern __shared__ uint8_t smem_raw[];
  SharedStorage& ss = aligned_storage<SharedStorage>(smem_raw);

  // kv_empty: both PV warpgroups after their PV of the block; q_empty: the softmax warpgroup's last QK of a piece.
  init_wide_pipeline(kp, ss, NUM_PV_WG * WG_THREADS, WG_THREADS);

  // PDL (common/pdl.h): nothing above touched global memory; each role waits after its setmaxnreg
  // (pdl_point.cuh: the first PV warp's L2 prefetch of the guessed first pages, then the wait), and the schedule
  // row is read after it (values live across setmaxnreg would be spilled).
  const int wg = threadIdx.x / WG_THREADS;
  if (wg == PRODUCER_WG) {
    cutlass::arch::warpgroup_reg_dealloc<WS_PRODUCER_REGS>();
    wait_for_prior_grids<false>(kp);
    if (threadIdx.x < PRODUCER_WG * WG_THREADS + 32) run_producer<SharedStorage>(kp, ss, load_sched_row(kp.p));
  } else if (wg == SOFTMAX_WG) {
    cutlass::arch::warpgroup_reg_dealloc<WS_SOFTMAX_REGS>();
    wait_for_prior_grids<false>(kp);
    run_softmax_wg(kp, ss, load_sched_row(kp.p));
  } else {
    cutlass::arch::warpgroup_reg_alloc<WS_PV_REGS>();
    wait_for_prior_grids<true>(kp);
    run_pv_wg(kp, ss, load_sched_row(kp.p), wg);
  }
}

}  // namespace snapmla::sm90::decode_fp8::ws
