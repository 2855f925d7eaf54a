// Host-side creation of TMA tensor maps without linking libcuda: cuTensorMapEncodeTiled is looked up once
// through the runtime's driver entry point, so the extension links (and imports) on a machine with no driver.
#pragma once

#include <cstdint>

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include "common/cuda_check.h"

namespace snapmla::sm90 {

inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status{};
    SNAPMLA_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault,
                                                        &status));
    TORCH_CHECK(status == cudaDriverEntryPointSuccess && ptr != nullptr,
                "cuTensorMapEncodeTiled is not available from the CUDA driver (status ", static_cast<int>(status),
                "): the FP8 decode kernel needs a driver for CUDA 12.0 or newer");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

// A tiled map of rank RANK: dims[0] is the contiguous dimension (elements), strides_bytes[i] the byte stride of
// dims[i + 1]. Out-of-range coordinates read as zeros (TMA zero fill), which the kernel relies on for padding
// query rows. `what` names the map in error messages.
template <int RANK>
CUtensorMap make_tensor_map(const char* what, CUtensorMapDataType dtype, const void* base, const uint64_t (&dims)[RANK],
                            const uint64_t (&strides_bytes)[RANK - 1], const uint32_t (&box)[RANK],
                            CUtensorMapSwizzle swizzle) {
  TORCH_CHECK(reinterpret_cast<uintptr_t>(base) % 16 == 0, what, ": TMA needs a 16-byte aligned base address, got ",
              base);
  for (int i = 0; i < RANK - 1; ++i)
    TORCH_CHECK(strides_bytes[i] % 16 == 0, what, ": TMA needs strides that are multiples of 16 bytes, got ",
                strides_bytes[i], " for dim ", i + 1);
  CUtensorMap map;
  uint32_t elem_strides[RANK];
  for (int i = 0; i < RANK; ++i) elem_strides[i] = 1;
  const CUresult res = tensor_map_encoder()(&map, dtype, RANK, const_cast<void*>(base), dims, strides_bytes, box,
                                            elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TORCH_CHECK(res == CUDA_SUCCESS, what, ": cuTensorMapEncodeTiled failed with CUresult ", static_cast<int>(res));
  return map;
}

}  // namespace snapmla::sm90
