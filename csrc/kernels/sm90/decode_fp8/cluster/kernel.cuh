// sm_90a FP8 SnapMLA decode kernel on 2-CTA clusters (SNAPMLA_DECODE_KERNEL=cluster, q_rows > 16; design and
// estimate: docs/design.md). One cluster runs a 64-row query tile over the pages of one schedule row,
// as one CTA of the wide kernel (kernel.cuh) does, with twice the SMs per tile stream: each CTA holds half of
// O^T (256 of 512 dims), so each math warpgroup holds 128 dims (64 fp32 registers instead of 128) and the
// softmax of a block runs in one of the 4 math warpgroups of the pair.
//
// Grid (2 num_m_tiles, num_sm_parts), cluster (2, 1, 1): CTA rank r = blockIdx.x % 2 of tile blockIdx.x / 2;
// num_sm_parts is half the wide kernel's (decode_ops.py default_num_sm_parts). 384 threads per CTA, one CTA per SM.
//   WG0, WG1 (math, MATH_REGS_C = 232): warpgroup (r, w) owns blocks n % 4 == r + 2w (QK over 576 dims,
//     state-free softmax, P8, hand-off to the other three) and runs PV over dims 128 (2r + w) .. + 127 for every
//     block in block order (cluster/mainloop.cuh).
//   WG2 (producer, PRODUCER_REGS_C = 40): one thread; the owner rank of block n loads its page (2 content tiles
//     multicast into both CTAs, the rest unicast), the other CTA arms what will land (cluster/producer.cuh).
// Pipeline: 6 KV stages per CTA, stage s always of owner rank s % 2 (cluster/config.h): kv_full (TMA bytes),
//   xchg_full (the hand-off: 128 local owner arrivals, or the producer's arm + the 5376 pushed bytes), kv_empty
//   (all 16 math warps of the cluster). Query tile per piece and CTA: q_full / q_empty.
// Shared memory: 40 KB query tile + 3 stage pairs x 62 KB = 226 KB + 1 KB alignment slack (cluster/config.h).
// HBM bytes per block: 41216 once per cluster (multicast). FLOPs as the wide kernel's, each done once.
#pragma once

#include "common/griddep.cuh"
#include "kernels/sm90/common/cluster.cuh"
#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/decode_fp8/cluster/config.h"
#include "kernels/sm90/decode_fp8/cluster/mainloop.cuh"
#include "kernels/sm90/decode_fp8/cluster/producer.cuh"
#include "kernels/sm90/decode_fp8/kernel_prologue.cuh"
#include "kernels/sm90/decode_fp8/schedule.cuh"
#include "kernels/sm90/decode_fp8/traits.h"

namespace snapmla::sm90::decode_fp8::cluster {

template <typename KvElem>
__global__ void __launch_bounds__(NUM_THREADS, 1)
    snapmla_decode_fp8_cluster_kernel(const __grid_constant__ KernelParams kp) {
  static_assert(KvTraits<KvElem>::NEEDS_V_TRANSPOSE, "the 8-bit cache path (V transposed by ldmatrix)");
  extern __shared__ uint8_t smem_raw[];
  ClusterStorage& ss = aligned_storage<ClusterStorage>(smem_raw);
  // Launched without the cluster attribute, every mapa below would name a CTA that does not exist.
  if (cluster_nctarank() != CLUSTER_CTAS) __trap();
  const int rank = static_cast<int>(cluster_ctarank());

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < KV_STAGES_C; ++s) {
      StagePair& pr = ss.pair[s / 2];
      mbarrier_init(&pr.kv_full[s % 2], 1);
      mbarrier_init(&pr.kv_empty[s % 2], KV_EMPTY_ARRIVALS_C);
      mbarrier_init(&pr.xchg_full[s % 2], (s % 2) == rank ? WG_THREADS : 1);
    }
    mbarrier_init(&ss.pair[0].q_full, 1);
    mbarrier_init(&ss.pair[0].q_empty, MATH_THREADS);
    fence_barrier_init();
  }
  prefetch_tensor_maps(kp);
  cluster_sync_all();  // the peer's barriers exist before any remote arrival, push or multicast

  griddep_wait();
  griddep_launch_dependents();
  const int wg = threadIdx.x / WG_THREADS;
  if (wg == PRODUCER_WG) {
    setmaxnreg_dec<PRODUCER_REGS_C>();
    if (threadIdx.x < PRODUCER_WG * WG_THREADS + 32)
      run_producer_c(kp, ss, load_sched_row(kp.p), blockIdx.x / CLUSTER_CTAS);
  } else {
    setmaxnreg_inc<MATH_REGS_C>();
    run_math_c(kp, ss, load_sched_row(kp.p), wg);
  }
  cluster_sync_all();  // no CTA exits while the peer may still arrive on its barriers
}

}  // namespace snapmla::sm90::decode_fp8::cluster
