// Host-side entry points of the three fused quantization kernels (Fused-Q-Quant, Fused-K-Append,
// Fused-Fetch-Dequant). Plain parameter structs; quant_math.cuh has the numerics, each .cu its kernel header.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace snapmla::quant {

// Warps (= rows) per CTA for all three kernels: 256 threads, 8 CTAs per SM at full occupancy.
inline constexpr int WARPS_PER_CTA = 8;
inline constexpr int THREADS_PER_CTA = WARPS_PER_CTA * 32;

// Fused-Q-Quant: rows = b * s_q * h_q, one warp each.
struct QQuantParams {
  int b, s_q, h_q;
  const __nv_bfloat16* q;               // (b, s_q, h_q, 576) bf16, last dim contiguous, rows 16-B aligned
  int64_t q_stride_b, q_stride_s, q_stride_h;  // in elements
  uint8_t* content;                     // (b, s_q, h_q, 512) e4m3, contiguous
  __nv_bfloat16* rope;                  // (b, s_q, h_q, 64) bf16, contiguous
  float* scale;                         // (b, s_q, h_q) fp32, contiguous
};
void launch_q_quant(const QQuantParams& params, cudaStream_t stream);

// Fused-K-Append: n tokens, one warp each; slots outside [0, num_blocks * 64) are skipped. The content and the
// RoPE part of a row come through two pointers: one (n, 576) tensor (rope = kv + 512, the same stride) or an
// engine's kv_c (n, 512) and k_pe (n, 64), read where they are (no concatenation pass).
struct KAppendParams {
  int64_t n;
  int64_t num_blocks;
  const __nv_bfloat16* content;  // (n, 512) bf16 rows, 16-B aligned
  int64_t content_stride;        // in elements
  const __nv_bfloat16* rope;     // (n, 64) bf16 rows, 16-B aligned
  int64_t rope_stride;           // in elements
  const void* slots;        // (n,) int32 or int64
  bool slots_int64;
  uint8_t* kv_cache;        // (num_blocks, PAGE_BYTES) uint8
};
void launch_k_append(const KAppendParams& params, cudaStream_t stream);

// Fused-Fetch-Dequant by slots: out[i] = dequant(cache[slots[i]]), a zero row for an invalid slot.
struct FetchSlotsParams {
  int64_t n;
  int64_t num_blocks;
  const uint8_t* kv_cache;  // (num_blocks, PAGE_BYTES) uint8
  const void* slots;        // (n,) int32 or int64
  bool slots_int64;
  __nv_bfloat16* out;       // (n, 576) bf16, contiguous
};
void launch_fetch_dequant_slots(const FetchSlotsParams& params, cudaStream_t stream);

// Fused-Fetch-Dequant by block table: request after request, token p of request i at
// block_table[i, p / 64] * 64 + p % 64. Output rows past sum(seqlens) are zero; rows past num_tokens are dropped.
struct FetchPagedParams {
  int b;
  // int32 entries from block_table's first one to the end of its storage: request i's row may reach
  // block_table_entries - i * block_table_stride of them (past the view's width, as in the decode: engines pass
  // narrow views of a wider table), so its length is clamped to 64 times that.
  int64_t block_table_entries;
  int64_t num_blocks;
  int num_tokens;
  const uint8_t* kv_cache;   // (num_blocks, PAGE_BYTES) uint8
  const int* block_table;    // (b, max_pages) int32 view, last dim contiguous, rows read through their stride
  int64_t block_table_stride;
  const int* seqlens;        // (b,) int32; negative counts as 0, past the row's reach (above) is clamped
  __nv_bfloat16* out;        // (num_tokens, 576) bf16, contiguous
};
// Largest b the paged kernel takes: each CTA keeps the b request end offsets (int32) in shared memory.
inline constexpr int FETCH_PAGED_MAX_B = 48 * 1024;
void launch_fetch_dequant_paged(const FetchPagedParams& params, cudaStream_t stream);

}  // namespace snapmla::quant
