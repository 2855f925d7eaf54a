// Fused-Fetch-Dequant: gather tokens from the paged FP8 cache back to BF16 rows (n, 576), content and RoPE
// multiplied by the token's scale and rounded once to bf16 (numerics in quant_math.cuh). Two forms:
//   by slots:       out[i] = token slots[i]; a negative or out-of-range slot gives a zero row.
//   by block table: requests one after another, token p of request i at block_table[i, p / 64] * 64 + p % 64.
//
// Thread roles: one warp per output row, 8 warps per CTA. Memory traffic per row: 644 B read (2 x 8-B content
// loads and one 16-B RoPE load per lane, plus a broadcast 4-B scale), 1152 B written.
//
// Paged form, output offsets without a prefix-sum launch: the grid is persistent (one wave, at most
// blocks-per-SM x SMs CTAs). Each CTA first scans seqlens into the end offset of every request,
// end[i] = min(sum_{j <= i} clamp(seqlens[j], 0, 64 * reach[j]), num_tokens), kept as int32 in shared
// memory (4 B per request; b <= FETCH_PAGED_MAX_B), then its warps walk output rows t = warp, warp + all warps,
// ... and find the request of row t by binary search in end[] (log2 b broadcast shared loads). The scan costs
// each CTA b x 4 B of L2 reads: 4 KB at b = 1024, against ~1.8 MB of rows per CTA at 1M tokens. reach[j] is
// the number of table entries from row j's start to the end of the table's storage (FetchPagedParams): a row
// may run past the view's width, never past the allocation. Block-table entries are read only for pages below
// the request's (clamped) length; a page id outside [0, num_blocks) gives a zero row, as do rows past
// sum(seqlens).
#include "kernels/quant/launch.h"
#include "kernels/quant/quant_math.cuh"

#include <algorithm>

#include "common/cuda_check.h"

namespace snapmla::quant {

template <typename SlotT>
__global__ void __launch_bounds__(THREADS_PER_CTA) fetch_dequant_slots_kernel(FetchSlotsParams p) {
  const int lane = threadIdx.x % WARP_SIZE;
  const int64_t token = int64_t(blockIdx.x) * WARPS_PER_CTA + threadIdx.x / WARP_SIZE;
  if (token >= p.n) return;
  const int64_t slot = static_cast<const SlotT*>(p.slots)[token];  // same address for all lanes: one load
  __nv_bfloat16* out_row = p.out + token * L::D_QK;                // (576,)
  if (slot < 0 || slot >= p.num_blocks * L::PAGE_BLOCK_SIZE)
    store_zero_row(lane, out_row);
  else
    dequant_token(p.kv_cache, slot, lane, out_row);
}

// Inclusive scan of clamped seqlens into s_end (b,) int32, saturated at num_tokens. All threads take part.
__device__ void scan_request_ends(const FetchPagedParams& p, int* s_end) {
  __shared__ int64_t s_warp_sums[WARPS_PER_CTA];
  __shared__ int64_t s_carry;
  const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
  if (threadIdx.x == 0) s_carry = 0;
  __syncthreads();
  for (int base = 0; base < p.b; base += THREADS_PER_CTA) {
    const int i = base + threadIdx.x;
    const int64_t reach = max(p.block_table_entries - int64_t(i) * p.block_table_stride, int64_t(0));
    int64_t len = i < p.b ? min(max(int64_t(p.seqlens[i]), int64_t(0)), reach * L::PAGE_BLOCK_SIZE) : 0;
#pragma unroll
    for (int offset = 1; offset < WARP_SIZE; offset *= 2) {
      const int64_t other = __shfl_up_sync(0xffffffffu, len, offset);
      if (lane >= offset) len += other;
    }
    if (lane == WARP_SIZE - 1) s_warp_sums[warp] = len;
    __syncthreads();
    int64_t prefix = s_carry;
    for (int w = 0; w < warp; ++w) prefix += s_warp_sums[w];
    if (i < p.b) s_end[i] = static_cast<int>(min(prefix + len, int64_t(p.num_tokens)));
    __syncthreads();  // everyone has read s_carry and s_warp_sums before they change
    if (threadIdx.x == THREADS_PER_CTA - 1) s_carry = prefix + len;
    __syncthreads();
  }
}

__global__ void __launch_bounds__(THREADS_PER_CTA) fetch_dequant_paged_kernel(FetchPagedParams p) {
  extern __shared__ int s_end[];  // (b,) int32: end offset of each request's rows in out
  scan_request_ends(p, s_end);
  const int lane = threadIdx.x % WARP_SIZE;
  const int64_t num_warps = int64_t(gridDim.x) * WARPS_PER_CTA;
  for (int64_t t = int64_t(blockIdx.x) * WARPS_PER_CTA + threadIdx.x / WARP_SIZE; t < p.num_tokens;
       t += num_warps) {
    __nv_bfloat16* out_row = p.out + t * L::D_QK;  // (576,)
    // First request whose end is past t; equal to b when t >= sum(seqlens).
    int lo = 0, hi = p.b;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (s_end[mid] > t) hi = mid; else lo = mid + 1;
    }
    if (lo == p.b) {
      store_zero_row(lane, out_row);
      continue;
    }
    const int64_t pos = t - (lo > 0 ? s_end[lo - 1] : 0);  // < 64 * reach[lo] by the clamp
    const int64_t page = p.block_table[lo * p.block_table_stride + pos / L::PAGE_BLOCK_SIZE];
    if (page < 0 || page >= p.num_blocks)
      store_zero_row(lane, out_row);
    else
      dequant_token(p.kv_cache, page * L::PAGE_BLOCK_SIZE + pos % L::PAGE_BLOCK_SIZE, lane, out_row);
  }
}

void launch_fetch_dequant_slots(const FetchSlotsParams& params, cudaStream_t stream) {
  if (params.n == 0) return;
  const int64_t grid = (params.n + WARPS_PER_CTA - 1) / WARPS_PER_CTA;
  if (params.slots_int64)
    fetch_dequant_slots_kernel<int64_t><<<dim3(static_cast<unsigned>(grid)), THREADS_PER_CTA, 0, stream>>>(params);
  else
    fetch_dequant_slots_kernel<int32_t><<<dim3(static_cast<unsigned>(grid)), THREADS_PER_CTA, 0, stream>>>(params);
  SNAPMLA_CHECK_LAUNCH();
}

void launch_fetch_dequant_paged(const FetchPagedParams& params, cudaStream_t stream) {
  if (params.num_tokens == 0) return;
  const size_t smem = sizeof(int) * static_cast<size_t>(params.b);
  // Past the default 48 KB a kernel must opt in to more dynamic shared memory.
  SNAPMLA_CUDA_CHECK(cudaFuncSetAttribute(fetch_dequant_paged_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
  int device = 0, num_sms = 0, blocks_per_sm = 0;
  SNAPMLA_CUDA_CHECK(cudaGetDevice(&device));
  SNAPMLA_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  SNAPMLA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, fetch_dequant_paged_kernel,
                                                                   THREADS_PER_CTA, smem));
  TORCH_CHECK(blocks_per_sm > 0, "fetch_dequant_paged: b = ", params.b, " needs ", smem,
              " B of shared memory per CTA, more than the device allows");
  const int64_t wanted = (int64_t(params.num_tokens) + WARPS_PER_CTA - 1) / WARPS_PER_CTA;
  const int64_t grid = std::min<int64_t>(wanted, int64_t(num_sms) * blocks_per_sm);
  fetch_dequant_paged_kernel<<<dim3(static_cast<unsigned>(grid)), THREADS_PER_CTA, smem, stream>>>(params);
  SNAPMLA_CHECK_LAUNCH();
}

}  // namespace snapmla::quant
