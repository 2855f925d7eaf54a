// Thin inline-PTX wrappers for shared-memory mbarriers, proxy fences and setmaxnreg (sm_90a).
// PTX ISA: "Parallel Synchronization and Communication Instructions: mbarrier" and "setmaxnreg".
#pragma once

#include <cstdint>

namespace snapmla::sm90 {

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

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
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(arrive_count) : "memory");
}

// Makes the initialised barriers visible to the async proxy (TMA) before any thread uses them.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

// One arrival that also announces `tx_bytes` of TMA traffic completing on this barrier's current phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t tx_bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
               "r"(tx_bytes)
               : "memory");
}

// Blocks until the phase with parity `parity` has completed. A fresh barrier is in phase 0, so waiting for
// parity 1 returns at once: producers wait on "empty" barriers with the flipped parity.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_loop:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_loop;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}

// Ordinary shared-memory stores become visible to the async proxy (WGMMA operand reads, TMA) only after this
// fence in the writing thread, followed by a barrier the reader waits on.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
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

// Named CTA barrier `id` (1..15; 0 is __syncthreads) over `count` threads (a multiple of 32): every thread
// blocks until `count` threads arrived; shared-memory writes before it are visible to the readers after it.
__device__ __forceinline__ void named_barrier_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// Per-warpgroup register budget (needs __launch_bounds__(threads, 1) on the kernel; counts are multiples of 8).
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(REGS % 8 == 0 && REGS >= 24 && REGS <= 256, "setmaxnreg takes a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
}

template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(REGS % 8 == 0 && REGS >= 24 && REGS <= 256, "setmaxnreg takes a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
}

}  // namespace snapmla::sm90
