// Prologue pieces every decode kernel (kernel.cuh, narrow/kernel.cuh) runs before its role split: the shared
// storage at a 1024-B aligned address (Swizzle-128B tiles need it) and the tensor-map prefetch.
#pragma once

#include <cstdint>

#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/decode_fp8/shared/config.h"
#include "kernels/sm90/decode_fp8/shared/traits.h"

namespace snapmla::sm90::decode_fp8 {

// The dynamic shared memory rounded up to 1024 B (the launch asks for sizeof(Storage) + 1024). The padding is
// computed on the 32-bit shared address and added to smem_raw itself: rounding the generic pointer through
// uintptr_t loses the address space, and every C++ access to the storage becomes a generic LD.E / ST.E with a
// 64-bit address (34 in the wide kernel's SASS, 62 in the narrow one) instead of LDS / STS.
template <typename Storage>
__device__ __forceinline__ Storage& aligned_storage(uint8_t* smem_raw) {
  const uint32_t base = smem_u32(smem_raw);
  const uint32_t pad = ((base + 1023u) & ~1023u) - base;
  return *reinterpret_cast<Storage*>(smem_raw + pad);
}

// The producer's first thread pulls the two query tensor maps into the TMA unit's descriptor cache (the pages
// come by bulk copies, without maps).
__device__ __forceinline__ void prefetch_tensor_maps(const KernelParams& kp) {
  if (threadIdx.x != PRODUCER_WG * WG_THREADS) return;
  tma_prefetch_map(&kp.tm_q_content);
  tma_prefetch_map(&kp.tm_q_rope);
}

}  // namespace snapmla::sm90::decode_fp8
