// Explicit instantiation of the decode kernel for the FP8 (e4m3) SnapMLA cache, and its launcher: the TMA
// tensor maps are built here on the host from pointers and shapes only (no sync, CUDA-graph capturable).
#include <cuda_fp8.h>

#include <mutex>

#include "common/cuda_check.h"
#include "kernels/sm90/common/tensor_map.h"
#include "kernels/sm90/decode_fp8/kernel.cuh"
#include "kernels/sm90/decode_fp8/launch.h"

namespace snapmla::sm90::decode_fp8 {

template __global__ void snapmla_decode_fp8_kernel<__nv_fp8_e4m3>(const __grid_constant__ KernelParams kp);

namespace {

KernelParams make_kernel_params(const DecodeParams& p) {
  using KT = KvTraits<__nv_fp8_e4m3>;
  KernelParams kp{};
  kp.p = p;
  const uint64_t page = kvl::PAGE_BYTES;
  const uint64_t nb = static_cast<uint64_t>(p.num_blocks);
  const uint64_t rows = static_cast<uint64_t>(p.q_rows);
  const uint64_t b = static_cast<uint64_t>(p.b);
  const uint8_t* kv = p.kv_cache;
  kp.tm_kv_content = make_tensor_map<3>("k_cache content", KT::TMA_DTYPE, kv + kvl::CONTENT_OFFSET,
                                        {static_cast<uint64_t>(D_CONTENT), BLOCK_N, nb},
                                        {static_cast<uint64_t>(kvl::CONTENT_TOKEN_BYTES), page},
                                        {SWIZZLE_ROW_BYTES, BLOCK_N, 1}, CU_TENSOR_MAP_SWIZZLE_128B);
  kp.tm_kv_rope = make_tensor_map<3>("k_cache rope", CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, kv + kvl::ROPE_OFFSET,
                                     {static_cast<uint64_t>(D_ROPE), BLOCK_N, nb},
                                     {static_cast<uint64_t>(kvl::ROPE_TOKEN_BYTES), page}, {D_ROPE, BLOCK_N, 1},
                                     CU_TENSOR_MAP_SWIZZLE_128B);
  kp.tm_kv_scale = make_tensor_map<2>("k_cache scale", CU_TENSOR_MAP_DATA_TYPE_FLOAT32, kv + kvl::SCALE_OFFSET,
                                      {static_cast<uint64_t>(BLOCK_N), nb}, {page}, {BLOCK_N, 1},
                                      CU_TENSOR_MAP_SWIZZLE_NONE);
  kp.tm_q_content = make_tensor_map<3>(
      "q content", CU_TENSOR_MAP_DATA_TYPE_UINT8, p.q_content, {static_cast<uint64_t>(D_CONTENT), rows, b},
      {static_cast<uint64_t>(p.q_content_row_stride), static_cast<uint64_t>(p.q_content_batch_stride)},
      {SWIZZLE_ROW_BYTES, static_cast<uint32_t>(rows_per_warp(p.q_rows)), 1}, CU_TENSOR_MAP_SWIZZLE_128B);
  kp.tm_q_rope = make_tensor_map<3>(
      "q rope", CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, p.q_rope, {static_cast<uint64_t>(D_ROPE), rows, b},
      {static_cast<uint64_t>(p.q_rope_row_stride) * 2, static_cast<uint64_t>(p.q_rope_batch_stride) * 2},
      {D_ROPE, static_cast<uint32_t>(rows_per_warp(p.q_rows)), 1}, CU_TENSOR_MAP_SWIZZLE_128B);
  return kp;
}

}  // namespace

void launch_decode_fp8(const DecodeParams& params, cudaStream_t stream) {
  TORCH_CHECK(params.q_rows > 0 && params.b > 0 && params.num_sm_parts > 0 && params.num_blocks > 0,
              "launch_decode_fp8: empty problem (b = ", params.b, ", q_rows = ", params.q_rows,
              ", num_sm_parts = ", params.num_sm_parts, ", num_blocks = ", params.num_blocks, ")");
  const KernelParams kp = make_kernel_params(params);
  auto kernel = snapmla_decode_fp8_kernel<__nv_fp8_e4m3>;
  // The shared-memory opt-in is a per-device attribute: set it once on each device this process launches on.
  constexpr int MAX_DEVICES = 64;
  static std::once_flag smem_configured[MAX_DEVICES];
  int device = 0;
  SNAPMLA_CUDA_CHECK(cudaGetDevice(&device));
  TORCH_CHECK(device >= 0 && device < MAX_DEVICES, "decode_fp8: device index ", device, " >= ", MAX_DEVICES);
  std::call_once(smem_configured[device], [&] {
    SNAPMLA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES));
  });
  const dim3 grid(num_m_tiles(params.q_rows), params.num_sm_parts);
  kernel<<<grid, NUM_THREADS, SMEM_BYTES, stream>>>(kp);
  SNAPMLA_CHECK_LAUNCH();
}

}  // namespace snapmla::sm90::decode_fp8
