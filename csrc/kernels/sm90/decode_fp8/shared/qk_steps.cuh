// The WGMMA k-steps of S = Q . K^T for one 64-row query tile and one 64-token page (wide kernel, mainloop.cuh;
// warp-specialised kernel, ws/softmax_wg.cuh): 16 FP8 steps (m64n64k32) over the 512 content dims and 4 BF16
// steps (m64n64k16) over the 64 RoPE dims, all into fp32 accumulators of the same fragment layout. Both operands
// are K-major Swizzle-128B tiles of 64 rows x 128 B (query tile and page stage, traits.h); k-step kk reads bytes
// 32 (kk % 4) of tile kk / 4.
// The callers split the content steps into chains of fresh accumulators summed in fp32: an FP8 WGMMA step keeps
// 13 fraction bits at the accumulator's exponent (mainloop.cuh issue_qk says what that costs).
#pragma once

#include <cstdint>

#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/wgmma.cuh"
#include "kernels/sm90/decode_fp8/shared/traits.h"

namespace snapmla::sm90::decode_fp8 {

inline constexpr uint32_t QK_DESC_SBO = 8 * SWIZZLE_ROW_BYTES;  // 1024 B between 8-row groups

// Descriptors of the query tile's and of stage `stage`'s content and RoPE tiles. The query ones go through an
// opaque move so that the compiler rebuilds the per-step descriptors (2 integer adds each) instead of hoisting 40
// registers across the block loop.
__device__ __forceinline__ uint64_t q_content_desc(const SharedStorage& ss) {
  return opaque(make_smem_desc(smem_u32(ss.q_content), QK_DESC_SBO, SmemSwizzle::B128));
}
__device__ __forceinline__ uint64_t q_rope_desc(const SharedStorage& ss) {
  return opaque(make_smem_desc(smem_u32(ss.q_rope), QK_DESC_SBO, SmemSwizzle::B128));
}
__device__ __forceinline__ uint64_t k_content_desc(const SharedStorage& ss, int stage) {
  return make_smem_desc(smem_u32(ss.kv_content[stage]), QK_DESC_SBO, SmemSwizzle::B128);
}
__device__ __forceinline__ uint64_t k_rope_desc(const SharedStorage& ss, int stage) {
  return make_smem_desc(smem_u32(ss.kv_rope[stage]), QK_DESC_SBO, SmemSwizzle::B128);
}

// Content k-steps FIRST .. FIRST + COUNT - 1 into acc, the first of them overwriting it (scale-d = 0). Addresses
// stay below 256 KB, so adding offset / 16 to the start-address field never carries.
template <int FIRST, int COUNT>
__device__ __forceinline__ void issue_qk_content_steps(float (&acc)[32], uint64_t q_desc, uint64_t k_desc) {
  static_assert(FIRST >= 0 && COUNT > 0 && FIRST + COUNT <= QK_CONTENT_STEPS, "content k-steps 0 .. 15");
#pragma unroll
  for (int kk = FIRST; kk < FIRST + COUNT; ++kk) {
    const uint32_t off16 =
        ((kk / STEPS_PER_SWIZZLE_ROW) * CONTENT_TILE_BYTES + (kk % STEPS_PER_SWIZZLE_ROW) * K_STEP_BYTES) >> 4;
    wgmma_m64n64k32_e4m3_ss(acc, q_desc + off16, k_desc + off16, kk > FIRST);
  }
}

// The 4 RoPE k-steps (BF16), accumulated into acc.
__device__ __forceinline__ void issue_qk_rope_steps(float (&acc)[32], uint64_t qr_desc, uint64_t kr_desc) {
#pragma unroll
  for (int kk = 0; kk < QK_ROPE_STEPS; ++kk) {
    const uint32_t off16 = (kk * K_STEP_BYTES) >> 4;
    wgmma_m64n64k16_bf16_ss(acc, qr_desc + off16, kr_desc + off16, 1);
  }
}

}  // namespace snapmla::sm90::decode_fp8
