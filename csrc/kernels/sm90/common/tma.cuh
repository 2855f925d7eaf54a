// TMA tile loads (cp.async.bulk.tensor) and 1-D bulk copies (cp.async.bulk) completing on an mbarrier (sm_90), on
// CuTe's copy operations (cute/arch/copy_sm90_tma.hpp, copy_sm90_desc.hpp). The tensor map lives in kernel
// parameter space (__grid_constant__); its generic address is passed as is. Tensor-map creation stays on the
// driver entry point (tensor_map.h).
#pragma once

#include <cstdint>

#include <cuda.h>

#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>

namespace snapmla::sm90 {

// The query tile is read once per piece: the default L2 policy (EVICT_NORMAL, as an unhinted load).
inline constexpr uint64_t TMA_CACHE_HINT = static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_NORMAL);

__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) { cute::prefetch_tma_descriptor(map); }

// 2-D tile load (tools/microbench/page_stream.cu times the pages by tile loads against bulk copies).
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  cute::SM90_TMA_LOAD_2D::copy(map, bar, TMA_CACHE_HINT, dst, c0, c1);
}

__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                            int c2) {
  cute::SM90_TMA_LOAD_3D::copy(map, bar, TMA_CACHE_HINT, dst, c0, c1, c2);
}

// A 1-D bulk copy of `bytes` (a multiple of 16; both addresses 16-B aligned) from global to shared memory,
// completing on an mbarrier. No tensor map, no swizzle, no bounds: the decode kernels' pages are stored as their
// shared-memory image (kv_layout.h).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  cute::SM90_BULK_COPY_G2S::copy(src, bar, dst, static_cast<int32_t>(bytes));
}

// A hint that the `bytes` (a multiple of 16; 16-B aligned) at src be brought into L2: no data comes back, nothing
// waits for it (the decode kernels' guessed first pages, decode_fp8/shared/pdl_point.cuh).
__device__ __forceinline__ void bulk_prefetch_l2(const void* src, uint32_t bytes) {
  cute::SM90_BULK_COPY_G2S::PREFETCH::copy(src, static_cast<int32_t>(bytes));
}

}  // namespace snapmla::sm90
