// Device side of programmatic dependent launch (PDL; host side: common/pdl.h), on CUTLASS's
// (cutlass/arch/grid_dependency_control.h). A kernel launched with PDL may start while the kernel before it in the
// stream is still running, so it must not touch global memory (read or write: the caching allocator may hand it
// memory the previous kernel still uses) before griddep_wait, which returns once every prerequisite grid has
// completed and its writes are visible. Without PDL both are no-ops. The one exception, reads whose values only
// choose L2 prefetch addresses, is the decode kernels' (kernels/sm90/decode_fp8/shared/pdl_point.cuh).
//
// CUTLASS compiles these to nothing unless CUTLASS_ENABLE_GDC_FOR_SM90 is defined (setup.py's nvcc flags): the
// #error below turns a missing flag into a build failure instead of a silent race. Its asm has no memory clobber,
// so a compiler-only fence follows the wait: no global load may be hoisted above it.
#pragma once

#include <cutlass/arch/grid_dependency_control.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL) && !defined(CUTLASS_GDC_ENABLED)
#error "PDL needs CUTLASS_ENABLE_GDC_FOR_SM90 (setup.py nvcc_flags); without it griddep_wait would be a no-op"
#endif

namespace snapmla {

// griddepcontrol.wait: blocks until the prerequisite grids completed (sm_90).
__device__ __forceinline__ void griddep_wait() {
  cutlass::arch::wait_on_dependent_grids();
  asm volatile("" ::: "memory");  // compiler-only fence (see above)
}

// griddepcontrol.launch_dependents: the next PDL-launched grid may be scheduled once every CTA of this one has
// called it or exited. Safe to call early: the dependent still waits (griddep_wait) for this grid's completion.
__device__ __forceinline__ void griddep_launch_dependents() {
  asm volatile("" ::: "memory");
  cutlass::arch::launch_dependent_grids();
}

}  // namespace snapmla
