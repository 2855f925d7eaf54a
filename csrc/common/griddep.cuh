// Device side of programmatic dependent launch (PDL; host side: common/pdl.h). A kernel launched with PDL may
// start while the kernel before it in the stream is still running, so it must not touch global memory (read or
// write: the caching allocator may hand it memory the previous kernel still uses) before griddep_wait, which
// returns once every prerequisite grid has completed and its writes are visible. Without PDL both are no-ops.
#pragma once

namespace snapmla {

// griddepcontrol.wait: blocks until the prerequisite grids completed (sm_90).
__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// griddepcontrol.launch_dependents: the next PDL-launched grid may be scheduled once every CTA of this one has
// called it or exited. Safe to call early: the dependent still waits (griddep_wait) for this grid's completion.
__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace snapmla
