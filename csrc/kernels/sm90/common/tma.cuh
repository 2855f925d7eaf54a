// Thin inline-PTX wrappers for TMA tile loads (cp.async.bulk.tensor) and 1-D bulk copies (cp.async.bulk)
// completing on an mbarrier (sm_90).
// The tensor map lives in kernel parameter space (__grid_constant__); its generic address is passed as is.
// PTX ISA: "Data Movement and Conversion Instructions: cp.async.bulk.tensor".
#pragma once

#include <cstdint>

#include <cuda.h>

#include "kernels/sm90/common/mbarrier.cuh"

namespace snapmla::sm90 {

__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
      ::"r"(smem_u32(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1)
      : "memory");
}

__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                            int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// A 1-D bulk copy of `bytes` (a multiple of 16; both addresses 16-B aligned) from global to shared memory,
// completing on an mbarrier. No tensor map, no swizzle, no bounds: the decode kernels' pages are stored as their
// shared-memory image (kv_layout.h). PTX ISA: "cp.async.bulk".
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

}  // namespace snapmla::sm90
