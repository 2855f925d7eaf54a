// Fused-K-Append: quantize n BF16 latent rows (kv (n, 576), or kv_c (n, 512) and k_pe (n, 64) as an engine
// holds them) and write each into the paged FP8 cache at its slot
// (content e4m3 | pre-scaled RoPE bf16 | fp32 scale, at the byte positions of kv_layout.h: content and RoPE in
// the page's Swizzle-128B image), in one launch.
//
// Thread roles: one warp per token, 8 warps per CTA, no shared memory, no barriers. A warp whose slot is
// negative or >= num_blocks * 64 returns before reading kv, so skipped tokens cost only their slot load.
// Memory traffic per token (either form): 4 or 8 B of slot + 1152 B read; 512 B (content, as 2 coalesced 256-B warp
// stores) + 128 B + 4 B written = 644 B. At n = 1M that is 1.80 GB moved; everything streams once.
#include "kernels/quant/launch.h"
#include "kernels/quant/quant_math.cuh"

#include "common/cuda_check.h"

namespace snapmla::quant {

template <typename SlotT>
__global__ void __launch_bounds__(THREADS_PER_CTA) k_append_kernel(KAppendParams p) {
  const int lane = threadIdx.x % WARP_SIZE;
  const int64_t token = int64_t(blockIdx.x) * WARPS_PER_CTA + threadIdx.x / WARP_SIZE;
  if (token >= p.n) return;
  const int64_t slot = static_cast<const SlotT*>(p.slots)[token];  // same address for all lanes: one load
  if (slot < 0 || slot >= p.num_blocks * L::PAGE_BLOCK_SIZE) return;
  const RowChunks chunks =
      load_row_parts(p.content + token * p.content_stride, p.rope + token * p.rope_stride, lane);
  quantize_and_store_row(chunks, lane, token_bytes(p.kv_cache, slot, lane));
}

void launch_k_append(const KAppendParams& params, cudaStream_t stream) {
  if (params.n == 0) return;
  const int64_t grid = (params.n + WARPS_PER_CTA - 1) / WARPS_PER_CTA;
  if (params.slots_int64)
    k_append_kernel<int64_t><<<dim3(static_cast<unsigned>(grid)), THREADS_PER_CTA, 0, stream>>>(params);
  else
    k_append_kernel<int32_t><<<dim3(static_cast<unsigned>(grid)), THREADS_PER_CTA, 0, stream>>>(params);
  SNAPMLA_CHECK_LAUNCH();
}

}  // namespace snapmla::quant
