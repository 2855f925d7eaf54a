// sm_90a FP8 SnapMLA decode kernel, wide tiles (SPEC sections 4-5; q_rows <= 16 with enough work per CTA runs
// the narrow kernel instead, narrow/kernel.cuh): attention of 64 folded query rows (row = s * h_q + h)
// over the 64-token pages of one schedule row's pieces, with FP8 Q and K content, BF16 pre-scaled RoPE, per-token
// K scales and per-(row, block) FP8 P scales folded into the online-softmax state.
//
// Grid (num_m_tiles, num_sm_parts), 384 threads, one CTA per SM (225 KB of shared memory), persistent over the
// pieces of its schedule row. Warpgroups:
//   WG0, WG1 (math, MATH_REGS = 216 registers): block n belongs to WG(n % 2), which computes its whole 64x64 QK
//     (16 QGMMA k32 over the 512 content dims + 4 HGMMA k16 over the 64 RoPE dims, one fp32 accumulator), the
//     online softmax and P quantised to e4m3 in registers, and hands P and the softmax state to the other
//     warpgroup through the stage's RoPE tile. Both run PV for every block, each for its 256-column half of O
//     (8 chunks of 2 QGMMA m64n32k32, 3 in flight, A from registers, each chunk folded into O~ in fp32), in block
//     order.
//     mainloop.cuh, softmax.cuh, exchange.cuh, epilogue.cuh.
//   WG2 (producer, PRODUCER_REGS = 72): lane 0 of each of the four warps issues the TMA of its content tile
//     (warp 0 also the RoPE tile, the scales and the query tile once per piece; 41216 B per page, kv_full takes
//     4 arrivals), up to two blocks ahead after each transpose, never polling; the four warps transpose V into
//     K-major V^T buffers (ldmatrix / stmatrix) and zero the tail of the last block. producer.cuh.
// Pipeline: 3 KV stages (content, RoPE, scales: kv_full by TMA bytes; xchg_full when the owner's hand-off is in
// the RoPE tile; kv_empty when the hand-off was written and read and the transpose is done) and 2 V^T buffers
// (vt_full / vt_empty per 256-row half: the two transposer warps of a half, the PV of the warpgroup reading
// it); query tile q_full / q_empty once per piece. Barrier phases come from one running block index shared by all roles.
// Shared memory: 40 KB Q + 3 x 40.25 KB KV stages + 2 x 32 KB V^T = 225 KB (traits.h).
// Bytes per block: 41216 (the page, nothing else). FLOPs per block and 64-row tile: 2 x 64 x 64 x 512 FP8 for
// QK + 2 x 64 x 64 x 512 FP8 for PV + 2 x 64 x 64 x 64 BF16 for RoPE, each done once.
#pragma once

#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/decode_fp8/kernel_prologue.cuh"
#include "kernels/sm90/decode_fp8/mainloop.cuh"
#include "kernels/sm90/decode_fp8/producer.cuh"
#include "kernels/sm90/decode_fp8/schedule.cuh"
#include "kernels/sm90/decode_fp8/traits.h"

namespace snapmla::sm90::decode_fp8 {

template <typename KvElem>
__global__ void __launch_bounds__(NUM_THREADS, 1) snapmla_decode_fp8_kernel(const __grid_constant__ KernelParams kp) {
  static_assert(KvTraits<KvElem>::NEEDS_V_TRANSPOSE, "this kernel body is the 8-bit (transposed V) path");
  extern __shared__ uint8_t smem_raw[];
  SharedStorage& ss = aligned_storage<SharedStorage>(smem_raw);

  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < KV_STAGES; ++i) {
      mbarrier_init(&ss.kv_full[i], TMA_ISSUERS);
      mbarrier_init(&ss.kv_empty[i], MATH_THREADS + WG_THREADS);
      mbarrier_init(&ss.xchg_full[i], WG_THREADS);
    }
#pragma unroll
    for (int i = 0; i < VT_STAGES; ++i) {
#pragma unroll
      for (int h = 0; h < NUM_MATH_WG; ++h) {
        mbarrier_init(&ss.vt_full[i][h], VT_HALF_WRITERS);
        mbarrier_init(&ss.vt_empty[i][h], WG_THREADS);
      }
    }
    mbarrier_init(&ss.q_full, 1);
    mbarrier_init(&ss.q_empty, MATH_THREADS);
    fence_barrier_init();
  }
  prefetch_tensor_maps(kp);
  __syncthreads();

  // The schedule row is read after the role split: values live across setmaxnreg would be spilled. A CTA
  // column with no work (BEGIN_REQ > END_REQ) runs both roles through empty loops.
  const int wg = threadIdx.x / WG_THREADS;
  if (wg == PRODUCER_WG) {
    setmaxnreg_dec<PRODUCER_REGS>();
    run_producer(kp, ss, load_sched_row(kp.p));
  } else {
    setmaxnreg_inc<MATH_REGS>();
    run_math(kp, ss, load_sched_row(kp.p), wg);
  }
}

}  // namespace snapmla::sm90::decode_fp8
