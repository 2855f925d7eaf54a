// Thin inline-PTX wrappers for thread-block clusters (sm_90): the CTA's rank, distributed shared memory
// addresses, remote mbarrier arrivals, the shared -> peer shared bulk copy and the multicast TMA tile load.
// PTX ISA: "mapa", "barrier.cluster", "mbarrier.arrive" (.shared::cluster), "cp.async.bulk",
// "cp.async.bulk" (.multicast::cluster). Used by the cluster decode kernel (decode_fp8/cluster/).
#pragma once

#include <cstdint>

#include <cuda.h>

#include "kernels/sm90/common/mbarrier.cuh"

namespace snapmla::sm90 {

__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

__device__ __forceinline__ uint32_t cluster_nctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}

// The shared::cluster address of shared::cta address `cta_addr` in CTA `rank` of the cluster (the same offset).
__device__ __forceinline__ uint32_t map_to_rank(uint32_t cta_addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(cta_addr), "r"(rank));
  return r;
}

// Every thread of every CTA of the cluster: the release / acquire pair orders the barrier initialisation before
// any remote use (kernel start) and the last remote access before a CTA exits (kernel end).
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// One arrival on an mbarrier of another CTA of the cluster (remote_bar from map_to_rank), with the default
// .release.cta semantics: CUTLASS's ClusterBarrier::arrive(cta_id) form. Not a cluster-scope release (that form
// compiles to MEMBAR.GPU): for an "empty" barrier only the read-then-overwrite order is needed, as for
// mbarrier.cuh release_stage, and the arriving warp's reads are complete (retired WGMMAs, consumed loads).
__device__ __forceinline__ void mbarrier_arrive_remote(uint32_t remote_bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote_bar) : "memory");
}

// Copies `bytes` (a multiple of 16, 16-B aligned both sides) of this CTA's shared memory at `src` into another
// CTA's shared memory at `remote_dst`, completing `bytes` of transaction count on the barrier `remote_bar` of
// that CTA (both from map_to_rank). Async proxy on both sides: the source's generic stores need the writers'
// fence.proxy.async and a barrier before this, and the destination's WGMMA readers need no fence after their wait.
__device__ __forceinline__ void bulk_copy_to_peer(uint32_t remote_dst, uint32_t src, uint32_t bytes,
                                                  uint32_t remote_bar) {
  asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   remote_dst),
               "r"(src), "r"(bytes), "r"(remote_bar)
               : "memory");
}

// A 1-D bulk copy from global memory (tma.cuh bulk_load) delivered to the same shared offset `dst` in every CTA
// of cta_mask, each completing its bytes on the barrier at the offset of `bar` in that CTA.
__device__ __forceinline__ void bulk_load_multicast(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                                    uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], "
      "%4;" ::"r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar)), "h"(cta_mask)
      : "memory");
}

}  // namespace snapmla::sm90
