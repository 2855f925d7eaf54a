// Host side of the decode kernels (wide/, narrow/, ws/): the KernelParams
// block with the query's TMA tensor maps, built from pointers and shapes only (no sync, CUDA-graph capturable), and the one-time
// shared-memory opt-in per device.
#pragma once

#include <mutex>

#include "common/cuda_check.h"
#include "kernels/sm90/common/tensor_map.h"
#include "kernels/sm90/decode_fp8/shared/traits.h"

namespace snapmla::sm90::decode_fp8 {

// q_box_rows: query rows per TMA box (the wide kernel: rows_per_warp, one box per warp slab; the narrow one:
// its 16-row tile). Rows past q_rows read as zeros.
inline KernelParams make_kernel_params(const DecodeParams& p, int q_box_rows) {
  KernelParams kp{};
  kp.p = p;
  const uint64_t rows = static_cast<uint64_t>(p.q_rows);
  const uint64_t b = static_cast<uint64_t>(p.b);
  const uint32_t box_rows = static_cast<uint32_t>(q_box_rows);
  // The pages need no map: the cache stores them as the stages' Swizzle-128B image (kv_layout.h) and the
  // producers bulk-copy them (tma_producer.cuh).
  kp.tm_q_content = make_tensor_map<3>(
      "q content", CU_TENSOR_MAP_DATA_TYPE_UINT8, p.q_content, {static_cast<uint64_t>(D_CONTENT), rows, b},
      {static_cast<uint64_t>(p.q_content_row_stride), static_cast<uint64_t>(p.q_content_batch_stride)},
      {SWIZZLE_ROW_BYTES, box_rows, 1}, CU_TENSOR_MAP_SWIZZLE_128B);
  kp.tm_q_rope = make_tensor_map<3>(
      "q rope", CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, p.q_rope, {static_cast<uint64_t>(D_ROPE), rows, b},
      {static_cast<uint64_t>(p.q_rope_row_stride) * 2, static_cast<uint64_t>(p.q_rope_batch_stride) * 2},
      {D_ROPE, box_rows, 1}, CU_TENSOR_MAP_SWIZZLE_128B);
  return kp;
}

// cudaFuncAttributeMaxDynamicSharedMemorySize is a per-device attribute: set once on each device this process
// launches `kernel` on (one static flag set per kernel: the caller passes its own).
inline constexpr int MAX_DEVICES = 64;
template <typename Kernel>
void opt_in_smem(Kernel kernel, int smem_bytes, std::once_flag (&flags)[MAX_DEVICES]) {
  int device = 0;
  SNAPMLA_CUDA_CHECK(cudaGetDevice(&device));
  TORCH_CHECK(device >= 0 && device < MAX_DEVICES, "decode_fp8: device index ", device, " >= ", MAX_DEVICES);
  std::call_once(flags[device], [&] {
    SNAPMLA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  });
}

}  // namespace snapmla::sm90::decode_fp8
