// Hand-off of one block's P^T and softmax state from its owner warpgroup to the three other math warpgroups of
// the cluster: its sibling reads the owner's stores in place (the owned stage's RoPE tile, as in the wide
// kernel, exchange.cuh layout), and the peer CTA's two get a copy in their stage's peer_handoff slot by two
// bulk shared -> peer-shared copies (async proxy, completing their bytes on the peer's xchg_full): P^T (4096 B)
// as soon as P8 is packed, the state (1280 B) once the previous block's state arrived. The peer's xchg_full
// completes when its producer armed it and both copies landed; the local one when the owner's 128 threads
// arrived after their state stores. The hop of these bulk copies is not measured:
// scripts/microbench/cluster_handoff.cu measured st.async (440-640 cycles for 2-6 KB, H200, 2026-12-02), not
// cp.async.bulk between shared memories.
#pragma once

#include <cstdint>

#include "kernels/sm90/common/cluster.cuh"
#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/decode_fp8/cluster/config.h"
#include "kernels/sm90/decode_fp8/exchange.cuh"

namespace snapmla::sm90::decode_fp8::cluster {

inline constexpr int BAR_OWNER_WG0 = 1;  // named barrier of math warpgroup wg: + wg (0 is __syncthreads)

// After the owner warpgroup's stores of [offset, offset + bytes) of its hand-off tile (owned stage v) and each
// thread's fence.proxy.async: gather the warpgroup, and let one thread copy them to the peer.
__device__ __forceinline__ void push_to_peer(const StageView& v, int wg, int tid, uint32_t offset, uint32_t bytes) {
  named_barrier_sync(BAR_OWNER_WG0 + wg, WG_THREADS);
  if (tid == 0) {
    const uint32_t peer = peer_rank();
    bulk_copy_to_peer(map_to_rank(smem_u32(v.pr.peer_handoff) + offset, peer), smem_u32(v.pr.own_rope) + offset,
                      bytes, map_to_rank(smem_u32(v.xchg_full()), peer));
  }
}

// Owner: P^T of the block (packed P words, softmax.cuh pack_p), locally and to the peer.
__device__ __forceinline__ void publish_pt_c(const StageView& v, int wg, int tid, const uint32_t (&p)[8], int row0,
                                             int t) {
  publish_pt(smem_u32(v.pr.own_rope), p, row0, t);
  fence_proxy_async_smem();
  push_to_peer(v, wg, tid, 0, XCHG_PT_PUSH_BYTES);
}

// Owner: the state after the block and its fold scales, locally (then the local readers may go: xchg_full) and
// to the peer.
__device__ __forceinline__ void publish_state_c(const StageView& v, int wg, int tid, const RowState (&st)[2],
                                                const float (&o_scale)[2], int row0, int t) {
  publish_state(smem_u32(v.pr.own_rope), st, o_scale, row0, t);
  fence_proxy_async_smem();
  mbarrier_arrive(v.xchg_full());
  push_to_peer(v, wg, tid, XCHG_STATE_OFFSET, XCHG_STATE_PUSH_BYTES);
}

// Every math warp, after its last read of block n's stage (its PV, or the epilogue's state read): one arrival
// on the stage's kv_empty in both CTAs (the owner refills its RoPE tile and the multicast tiles of both only
// after all 16 warps of the cluster are done).
__device__ __forceinline__ void release_stage_c(const StageView& v, int lane) {
  __syncwarp();
  if (lane == 0) {
    mbarrier_arrive(v.kv_empty());
    mbarrier_arrive_remote(map_to_rank(smem_u32(v.kv_empty()), peer_rank()));
  }
}

}  // namespace snapmla::sm90::decode_fp8::cluster
