// Plain parameter structs shared by the host entry points and the kernels. Shapes use the names of
// docs/numerics_contract.md section 1: b, s_q, h_q, d_qk = 576 (d_c = 512 content + d_r = 64 RoPE), d_v = 512, page_block_size = 64.
// Query rows are folded as row = s * h_q + h (q_rows = s_q * h_q per request), as in FlashMLA.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

namespace snapmla {

// One decode call (flash_mla_with_kvcache). All pointers are device pointers.
struct DecodeParams {
  // ---- shapes ----
  int b;                  // requests
  int s_q;                // query tokens per request
  int h_q;                // query heads (h_k = 1)
  int q_rows;             // s_q * h_q
  int num_blocks;         // pages in the cache
  int max_pages_per_req;  // block_table.size(1) (the view's width; not a bound on what the kernel reads)
  float softmax_scale;    // natural-log scale of the logits
  bool causal;            // query token s sees cache tokens 0 .. seqlen - s_q + s

  // ---- quantized query (Fused-Q-Quant output; row strides in elements) ----
  const uint8_t* q_content;       // (b, s_q, h_q, 512) e4m3, last dim contiguous
  const __nv_bfloat16* q_rope;    // (b, s_q, h_q, 64) bf16, pre-scaled by 1/q_scale, last dim contiguous
  const float* q_scale;           // (b, s_q, h_q) fp32
  int64_t q_content_batch_stride, q_content_row_stride;  // row = folded (s, h); needs (s, h) dims mergeable
  int64_t q_rope_batch_stride, q_rope_row_stride;
  int64_t q_scale_batch_stride;   // row stride is 1

  // ---- paged cache (kv_layout.h) ----
  const uint8_t* kv_cache;   // (num_blocks, PAGE_BYTES) uint8
  // (b, max_pages_per_req) int32 view, read as FlashMLA reads it: request r's page i at
  // block_table[r * block_table_batch_stride + i], for any i its length needs, up to the end of the table's
  // storage. Engines capture CUDA graphs with a view narrower than the lengths they replay (SGLang's
  // cuda_graph_kv_indices[:bs, :n]); a bound at the view's width would silently drop their tokens.
  const int* block_table;
  int64_t block_table_batch_stride;
  int block_table_entries;  // int32 entries from block_table to the end of its storage, capped at INT_MAX / 64
  const int* cache_seqlens;  // (b,) int32; request r is clamped to (block_table_entries - r * stride) * 64 tokens

  // ---- outputs ----
  __nv_bfloat16* out;  // (b, s_q, h_q, 512) bf16, contiguous
  float* lse;          // (b, h_q, s_q) fp32, contiguous; natural log, +inf for a row that sees no token

  // ---- split-KV (sched/sched_meta.h) ----
  const int* tile_scheduler_metadata;  // (num_sm_parts, SCHED_META_INTS) int32
  const int* num_splits;               // (b + 1,) int32: exclusive prefix sum of splits per request
  int num_sm_parts;                    // CTAs along the KV dimension of the grid
  __nv_bfloat16* o_accum;              // (total_splits, q_rows, 512) bf16, each piece's normalised O~ / L~ (combine)
  float* lse_accum;                    // (total_splits, q_rows) fp32, log2-domain partial lse, -inf when empty
  int max_total_splits;                // capacity of o_accum / lse_accum along their first dim
};

}  // namespace snapmla
