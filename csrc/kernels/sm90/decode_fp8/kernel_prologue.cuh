// Prologue pieces every decode kernel (kernel.cuh, narrow/kernel.cuh) runs before its role split: the shared
// storage at a 1024-B aligned address (Swizzle-128B tiles need it) and the tensor-map prefetch.
#pragma once

#include <cstdint>

#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/decode_fp8/config.h"
#include "kernels/sm90/decode_fp8/traits.h"

namespace snapmla::sm90::decode_fp8 {

// The dynamic shared memory rounded up to 1024 B (the launch asks for sizeof(Storage) + 1024).
template <typename Storage>
__device__ __forceinline__ Storage& aligned_storage(uint8_t* smem_raw) {
  return *reinterpret_cast<Storage*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
}

// The producer's first thread pulls the five tensor maps into the TMA unit's descriptor cache.
__device__ __forceinline__ void prefetch_tensor_maps(const KernelParams& kp) {
  if (threadIdx.x != PRODUCER_WG * WG_THREADS) return;
  tma_prefetch_map(&kp.tm_q_content);
  tma_prefetch_map(&kp.tm_q_rope);
  tma_prefetch_map(&kp.tm_kv_content);
  tma_prefetch_map(&kp.tm_kv_rope);
  tma_prefetch_map(&kp.tm_kv_scale);
}

}  // namespace snapmla::sm90::decode_fp8
