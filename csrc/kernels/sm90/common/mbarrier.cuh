// Shared-memory mbarriers, proxy fences, named barriers and setmaxnreg (sm_90a), on CUTLASS's
// (cutlass/arch/barrier.h, reg_reconfig.h). What is ours:
// - a compiler-only memory fence after each barrier operation. CUTLASS's barrier asm statements declare no memory
//   clobber, and ours order plain C++ shared-memory loads and stores (the merge's state exchange, the scales)
//   against them; the fence emits no instruction.
// - `opaque`, which hides a value from the optimiser. CUTLASS has nothing like it.
// - release_stage, which names the consumer-side release of a TMA stage and says why it has no proxy fence.
#pragma once

#include <cstdint>

#include <cute/arch/util.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

namespace snapmla::sm90 {

// Compiler-only: memory accesses are not moved across it (no instruction).
__device__ __forceinline__ void compiler_fence() { asm volatile("" ::: "memory"); }

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) { return cute::cast_smem_ptr_to_uint(ptr); }

// A value the compiler cannot see through (no code): keeps it from hoisting what is derived from it out of a
// loop into registers that would spill.
__device__ __forceinline__ uint64_t opaque(uint64_t v) {
  asm volatile("" : "+l"(v));
  return v;
}
__device__ __forceinline__ int opaque(int v) {
  asm volatile("" : "+r"(v));
  return v;
}

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrive_count) {
  cutlass::arch::ClusterBarrier::init(bar, arrive_count);
  compiler_fence();
}

// Makes the initialised barriers visible to the async proxy (TMA) before any thread uses them.
__device__ __forceinline__ void fence_barrier_init() {
  cutlass::arch::fence_barrier_init();
  compiler_fence();
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  compiler_fence();
  cutlass::arch::ClusterBarrier::arrive(bar);
}

// One arrival that also announces `tx_bytes` of TMA traffic completing on this barrier's current phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t tx_bytes) {
  compiler_fence();
  cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(bar, tx_bytes);
}

// Blocks until the phase with parity `parity` has completed. A fresh barrier is in phase 0, so waiting for
// parity 1 returns at once: producers wait on "empty" barriers with the flipped parity.
// A loop over ClusterBarrier::try_wait rather than ClusterBarrier::wait: wait passes a suspend-time hint of 10^7 ns,
// which ptxas turns into a NANOSLEEP and a second phase check on every retry path (4-7 more SYNCS per kernel); the
// hardware's own try_wait time limit is what the kernels were tuned with.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  while (!cutlass::arch::ClusterBarrier::try_wait(bar, parity)) {
  }
  compiler_fence();
}

// Ordinary shared-memory stores become visible to the async proxy (WGMMA operand reads, TMA) only after this
// fence in the writing thread, followed by a barrier the reader waits on.
__device__ __forceinline__ void fence_proxy_async_smem() {
  compiler_fence();
  cutlass::arch::fence_view_async_shared();
  compiler_fence();
}

// Consumer release of a TMA-filled stage (its "empty" barrier), after the consumer's last read of it, generic
// (ldmatrix, ld.shared) or async (WGMMA operands). No fence.proxy.async before the arrival: a generic read
// followed by the next TMA write of the same bytes is a write-after-read that the arrival's release and the
// producer's acquiring wait already order (CUTLASS's TMA pipelines release the same way). The fence
// (MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC.S, waiting for the warp's outstanding memory operations) sat at the end
// of every PV on the warpgroup's chain; removing it together with the softmax's IEEE divisions measured
// 1.01-1.02x at b = 64 (H200, 2026-12-01).
// The fence stays where it is needed: generic stores that a WGMMA or TMA reads next (the P^T hand-off).
__device__ __forceinline__ void release_stage(uint64_t* empty_bar) { mbarrier_arrive(empty_bar); }

// User ids of named barriers: CUTLASS's NamedBarrier::sync adds its 8 reserved ids, so our id k is hardware
// barrier k + 8 (bar.sync 0xb for k = 3 in SASS); hardware id 0 is __syncthreads, and there are 16.
inline constexpr int MAX_NAMED_BARRIER_ID = static_cast<int>(cutlass::arch::NamedBarrier::HardwareMaxNumNamedBarriers -
                                                             cutlass::arch::NamedBarrier::ReservedNamedBarrierCount) - 1;
static_assert(MAX_NAMED_BARRIER_ID == 7, "the kernels' barrier ids (1..4) assume 8 reserved of 16");

// Named CTA barrier `id` (1..MAX_NAMED_BARRIER_ID) over `count` threads (a multiple of 32): every thread blocks
// until `count` threads arrived; shared-memory writes before it are visible to the readers after it.
__device__ __forceinline__ void named_barrier_sync(int id, int count) {
  compiler_fence();
  cutlass::arch::NamedBarrier::sync(count, id);
  compiler_fence();
}

}  // namespace snapmla::sm90
