// Entry points of the FP8 SnapMLA decode: snapmla::decode_fp8 (pre-quantized q) and decode_fp8_bf16q (BF16 q,
// Fused-Q-Quant launched in the same call): validation, allocation, decode kernel, combine.
//
// One C++ function serves the CPU and the CUDA keys. Checks run in the order dtype -> shape -> layout ->
// device, so CPU tests can trigger every message except the device ones (a CPU tensor that passes everything
// else is told it must be a CUDA tensor). Nothing here syncs with the device, so the call can be captured in a
// CUDA graph. What the host cannot check without a sync: cache_seqlens within the block table's capacity
// (the pages a request's row can reach), the page ids inside each request's pages, and the values of the metadata.
// Block-table rows are read through their stride, past the view's width if a length needs it (as FlashMLA
// does; engines capture graphs with narrow views), and the kernel clamps request r's length to the entries
// from row r to the end of the table's storage, so it never reads outside that allocation; it reads page
// 0 for an id outside [0, num_blocks) (its pages are bulk copies, which have no bounds: tma_producer.cuh
// page_bytes); SNAPMLA_DEBUG_CHECKS=1 adds synchronous checks of all three and pre-fills outputs and split
// workspaces with NaN (not capturable; for debugging and tests).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/all.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "api/checks.h"
#include "api/quant_api.h"
#include "common/params.h"
#include "kernels/combine/launch.h"
#include "kernels/sched/sched_meta.h"
#include "kernels/sm90/decode_fp8/launch.h"
#include "kv_layout.h"

namespace snapmla {

namespace {

namespace L = kv_layout;

constexpr int64_t MAX_H_Q = 128;           // two 64-row M tiles per query token; docs/numerics_contract.md section 1
// Query rows s_q * h_q of one call: the bound the kernels' index arithmetic was written and tested for (s_q up
// to 2048 at h_q = 128), not a grid limit (the combine grid is (q_rows, b)).
constexpr int64_t MAX_Q_ROWS = 262140;
using checks::MAX_GRID_Y;

// The (s, h) dims of a (b, s_q, h_q, ...) tensor fold into one row index with a single stride.
void check_rows_foldable(const at::Tensor& t, int64_t h_q, const char* name) {
  TORCH_CHECK(t.size(1) == 1 || t.stride(1) == h_q * t.stride(2), name,
              ": dims 1 and 2 (s_q, h_q) must fold into one row dimension, i.e. stride(1) == h_q * stride(2) = ",
              h_q * t.stride(2), ", got strides ", t.strides());
}


// SNAPMLA_DEBUG_CHECKS=1: synchronous value checks the fast path cannot afford.
void debug_check_values(const at::Tensor& cache_seqlens, const at::Tensor& block_table, const at::Tensor& num_splits,
                        int64_t table_entries, int64_t num_blocks, int64_t max_total_splits) {
  const at::Tensor seqlens = cache_seqlens.cpu();
  // Everything the kernel may read: from the view's first entry to the end of its storage.
  const at::Tensor table = block_table.as_strided({table_entries}, {1}).cpu();
  const int* ids = table.data_ptr<int>();
  const int64_t stride = block_table.stride(0);
  const int* s = seqlens.data_ptr<int>();
  for (int64_t r = 0; r < seqlens.size(0); ++r) {
    const int64_t row_tokens = (table_entries - r * stride) * L::PAGE_BLOCK_SIZE;
    TORCH_CHECK(s[r] >= 0 && s[r] <= row_tokens, "cache_seqlens[", r, "] must be in [0, ", row_tokens,
                "] (the block_table entries from row ", r, " to the end of its storage, times 64), got ", s[r]);
    const int64_t pages = (s[r] + L::PAGE_BLOCK_SIZE - 1) / L::PAGE_BLOCK_SIZE;
    for (int64_t pg = 0; pg < pages; ++pg) {
      const int id = ids[r * stride + pg];
      TORCH_CHECK(id >= 0 && id < num_blocks, "block_table[", r, ", ", pg, "] = ", id,
                  " is not a page of the cache (num_blocks = ", num_blocks, "), but request ", r, " has cache_seqlens[",
                  r, "] = ", s[r]);
    }
  }
  const int total = num_splits[-1].item<int>();
  TORCH_CHECK(total >= 0 && total <= max_total_splits, "num_splits[-1] (total pieces) must be in [0, ",
              max_total_splits, "] (b + num_sm_parts), got ", total,
              ": the metadata was computed for other cache_seqlens or another batch");
}

// The largest scale the quantizers write: CONTENT_MAX / 448 (kv_layout.h), correctly rounded as they compute it.
float max_scale() { return static_cast<float>(static_cast<double>(L::CONTENT_MAX) / L::FP8_E4M3_MAX); }

// SNAPMLA_DEBUG_CHECKS=1: scales (any shape, fp32) must lie in (0, CONTENT_MAX / 448], the input range of
// docs/numerics_contract.md section 2 that keeps results finite. name: the argument, what: which values.
void debug_check_scale_range(const at::Tensor& scales, const char* name, const char* what) {
  if (scales.numel() == 0) return;
  const at::Tensor flat = scales.reshape({-1}).cpu();
  const float* v = flat.data_ptr<float>();
  const float hi = max_scale();
  for (int64_t i = 0; i < flat.numel(); ++i) {
    TORCH_CHECK(v[i] > 0.f && v[i] <= hi, name, ": ", what, " must lie in (0, ", hi,
                "] (content saturates at +-2^16 when quantized, docs/numerics_contract.md section 2), got ",
                v[i], " at flat index ", i);
  }
}

// The scales of every token the call reads (each request's first cache_seqlens slots through the block table),
// gathered on the device in one pass: kv_cache (num_blocks, PAGE_BYTES) uint8; ids and lengths already checked.
void debug_check_cache_scales(const at::Tensor& kv_cache, const at::Tensor& block_table, const at::Tensor& cache_seqlens,
                              int64_t table_entries) {
  const at::Tensor seqlens = cache_seqlens.cpu();
  const at::Tensor table = block_table.as_strided({table_entries}, {1}).cpu();
  const int* ids = table.data_ptr<int>();
  const int* s = seqlens.data_ptr<int>();
  std::vector<int64_t> pages, owner, first;  // per read page: its id, its request, the request's first page
  std::vector<uint8_t> valid;                // per read page and slot: slot < seqlen
  for (int64_t r = 0; r < seqlens.size(0); ++r) {
    const int64_t n = (s[r] + L::PAGE_BLOCK_SIZE - 1) / L::PAGE_BLOCK_SIZE;
    for (int64_t pg = 0; pg < n; ++pg) {
      pages.push_back(ids[r * block_table.stride(0) + pg]);
      owner.push_back(r);
      first.push_back(static_cast<int64_t>(pages.size()) - 1 - pg);
      for (int t = 0; t < L::PAGE_BLOCK_SIZE; ++t) valid.push_back(pg * L::PAGE_BLOCK_SIZE + t < s[r]);
    }
  }
  if (pages.empty()) return;
  const int64_t np = static_cast<int64_t>(pages.size());
  const auto dev = kv_cache.device();
  const at::Tensor page_ids = at::tensor(pages, at::kLong).to(dev);
  const at::Tensor mask = at::tensor(at::ArrayRef<uint8_t>(valid)).to(at::kBool).reshape({np, L::PAGE_BLOCK_SIZE}).to(dev);
  const at::Tensor scales = kv_cache.narrow(1, L::SCALE_OFFSET, L::PAGE_BLOCK_SIZE * 4).view(at::kFloat);  // (nb, 64)
  const at::Tensor read = scales.index_select(0, page_ids);                                               // (np, 64)
  const float hi = max_scale();
  const at::Tensor bad = mask & ~((read > 0.f) & (read <= hi));  // NaN compares false: bad
  if (!bad.any().item<bool>()) return;
  const int64_t flat = bad.reshape({-1}).nonzero()[0][0].item<int64_t>();
  const int64_t p = flat / L::PAGE_BLOCK_SIZE, t = flat % L::PAGE_BLOCK_SIZE;
  const float v = read.reshape({-1})[flat].item<float>();
  TORCH_CHECK(false, "k_cache: the scale of token ", (p - first[p]) * L::PAGE_BLOCK_SIZE + t, " of request ", owner[p],
              " (page ", pages[p], ", slot ", t, ") must lie in (0, ", hi,
              "] (content saturates at +-2^16 when quantized, docs/numerics_contract.md section 2), got ", v,
              ": the cache was written other than by append_kv");
}

// Shapes: q_content (b, s_q, h_q, 512) e4m3, q_rope (b, s_q, h_q, 64) bf16, q_scale (b, s_q, h_q) fp32,
// kv_cache (num_blocks, 41216) uint8, block_table (b, max_pages) int32, cache_seqlens (b,) int32,
// tile_scheduler_metadata (num_sm_parts, 8) int32, num_splits (b + 1,) int32.
// Returns out (b, s_q, h_q, 512) bf16 and lse (b, h_q, s_q) fp32 (natural log, +inf where nothing is visible).
// launch_first: launched on the stream right before the decode kernel, after every check, allocation and
// tensor-map encoding of the call (decode_fp8_bf16q: Fused-Q-Quant of q into q_content / q_rope / q_scale).
std::tuple<at::Tensor, at::Tensor> decode_impl(const at::Tensor& q_content, const at::Tensor& q_rope,
                                               const at::Tensor& q_scale, const at::Tensor& kv_cache,
                                               const at::Tensor& block_table, const at::Tensor& cache_seqlens,
                                               const at::Tensor& tile_scheduler_metadata, const at::Tensor& num_splits,
                                               double softmax_scale, bool causal,
                                               const sm90::decode_fp8::LaunchFirst& launch_first) {
  // ---- dtype ----
  checks::check_dtype(q_content, at::kFloat8_e4m3fn, "q_content");
  checks::check_dtype(q_rope, at::kBFloat16, "q_rope");
  checks::check_dtype(q_scale, at::kFloat, "q_scale");
  checks::check_dtype(kv_cache, at::kByte, "kv_cache");
  checks::check_dtype(block_table, at::kInt, "block_table");
  checks::check_dtype(cache_seqlens, at::kInt, "cache_seqlens");
  checks::check_dtype(tile_scheduler_metadata, at::kInt, "tile_scheduler_metadata");
  checks::check_dtype(num_splits, at::kInt, "num_splits");

  // ---- shape ----
  checks::check_dim(q_content, 4, "q_content");
  checks::check_size(q_content, 3, L::D_CONTENT, "q_content");
  const int64_t b = q_content.size(0), s_q = q_content.size(1), h_q = q_content.size(2);
  TORCH_CHECK(b >= 1 && b <= MAX_GRID_Y, "q_content.shape[0] (b) must be in [1, ", MAX_GRID_Y, "] (combine grid.y), got ",
              b);
  TORCH_CHECK(s_q >= 1, "q_content.shape[1] (s_q) must be >= 1, got ", s_q);
  TORCH_CHECK(h_q >= 1 && h_q <= MAX_H_Q, "q_content.shape[2] (h_q) must be in [1, ", MAX_H_Q, "], got ", h_q);
  const int64_t q_rows = s_q * h_q;
  TORCH_CHECK(q_rows <= MAX_Q_ROWS, "s_q * h_q must be <= ", MAX_Q_ROWS, ", got ", q_rows);
  checks::check_shape(q_rope, {b, s_q, h_q, L::D_ROPE}, "q_rope");
  checks::check_shape(q_scale, {b, s_q, h_q}, "q_scale");
  checks::check_kv_cache_shape(kv_cache, "kv_cache");
  const int64_t num_blocks = kv_cache.size(0);
  TORCH_CHECK(num_blocks >= 1, "kv_cache.shape[0] (num_blocks) must be >= 1, got ", num_blocks);
  checks::check_fits_int32(num_blocks, "kv_cache.shape[0] (num_blocks)");
  checks::check_dim(block_table, 2, "block_table");
  checks::check_size(block_table, 0, b, "block_table");
  const int64_t max_pages = block_table.size(1);
  TORCH_CHECK(max_pages >= 1, "block_table.shape[1] (max_pages) must be >= 1, got ", max_pages);
  checks::check_fits_int32(max_pages * L::PAGE_BLOCK_SIZE, "block_table.shape[1] * 64 (token capacity)");
  const int64_t block_table_entries = checks::block_table_storage_entries(block_table);
  checks::check_shape(cache_seqlens, {b}, "cache_seqlens");
  checks::check_dim(tile_scheduler_metadata, 2, "tile_scheduler_metadata");
  checks::check_size(tile_scheduler_metadata, 1, sched::SCHED_META_INTS, "tile_scheduler_metadata");
  const int64_t num_sm_parts = tile_scheduler_metadata.size(0);
  TORCH_CHECK(num_sm_parts >= 1 && num_sm_parts <= MAX_GRID_Y, "tile_scheduler_metadata.shape[0] (num_sm_parts) ",
              "must be in [1, ", MAX_GRID_Y, "], got ", num_sm_parts);
  TORCH_CHECK(num_splits.dim() == 1 && num_splits.size(0) == b + 1, "num_splits must have shape (b + 1,) = (",
              b + 1, ",) for b = q_content.shape[0]; got ", num_splits.sizes(),
              " (metadata computed for another batch?)");

  // ---- layout ----
  checks::check_last_dim_contiguous(q_content, "q_content");
  checks::check_last_dim_contiguous(q_rope, "q_rope");
  checks::check_last_dim_contiguous(q_scale, "q_scale");
  check_rows_foldable(q_content, h_q, "q_content");
  check_rows_foldable(q_rope, h_q, "q_rope");
  check_rows_foldable(q_scale, h_q, "q_scale");
  checks::check_16b_aligned_rows(q_content, "q_content", "TMA");
  checks::check_16b_aligned_rows(q_rope, "q_rope", "TMA");
  checks::check_contiguous(kv_cache, "kv_cache");
  checks::check_16b_aligned_rows(kv_cache, "kv_cache", "TMA");
  checks::check_last_dim_contiguous(block_table, "block_table");
  checks::check_contiguous(cache_seqlens, "cache_seqlens");
  checks::check_contiguous(tile_scheduler_metadata, "tile_scheduler_metadata");
  checks::check_contiguous(num_splits, "num_splits");

  // ---- device ----
  checks::check_cuda(q_content, "q_content");
  const std::pair<const at::Tensor*, const char*> others[] = {
      {&q_rope, "q_rope"},           {&q_scale, "q_scale"},
      {&kv_cache, "kv_cache"},       {&block_table, "block_table"},
      {&cache_seqlens, "cache_seqlens"}, {&tile_scheduler_metadata, "tile_scheduler_metadata"},
      {&num_splits, "num_splits"}};
  for (const auto& [t, name] : others) {
    checks::check_cuda(*t, name);
    checks::check_same_device(*t, q_content, name, "q_content");
  }

  const c10::cuda::CUDAGuard guard(q_content.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  // A request is split into at most num_sm_parts pieces and each part boundary adds at most one piece:
  // total pieces <= b + num_sm_parts - 1 (plan.h).
  const int64_t max_total_splits = b + num_sm_parts;
  checks::check_fits_int32(max_total_splits, "b + num_sm_parts");

  const auto f32 = q_content.options().dtype(at::kFloat);
  const auto bf16 = q_content.options().dtype(at::kBFloat16);
  at::Tensor out = at::empty({b, s_q, h_q, L::D_CONTENT}, bf16);
  at::Tensor lse = at::empty({b, h_q, s_q}, f32);
  // bf16: half the bytes that split pieces write and the combine reads back (docs/numerics_contract.md section 4).
  at::Tensor o_accum = at::empty({max_total_splits, q_rows, L::D_CONTENT}, bf16);
  at::Tensor lse_accum = at::empty({max_total_splits, q_rows}, f32);
  if (checks::env_flag("SNAPMLA_DEBUG_CHECKS")) {
    debug_check_values(cache_seqlens, block_table, num_splits, block_table_entries, num_blocks, max_total_splits);
    debug_check_cache_scales(kv_cache, block_table, cache_seqlens, block_table_entries);
    // A bf16 q is quantized by launch_first (in range by construction, and not yet written here).
    if (!launch_first) debug_check_scale_range(q_scale, "q_scale", "the query scales (QuantizedQ.scale)");
    const double nan = std::numeric_limits<double>::quiet_NaN();
    out.fill_(nan);
    lse.fill_(nan);
    o_accum.fill_(nan);
    lse_accum.fill_(nan);
  }

  const DecodeParams params{
      .b = static_cast<int>(b),
      .s_q = static_cast<int>(s_q),
      .h_q = static_cast<int>(h_q),
      .q_rows = static_cast<int>(q_rows),
      .num_blocks = static_cast<int>(num_blocks),
      .max_pages_per_req = static_cast<int>(max_pages),
      .softmax_scale = static_cast<float>(softmax_scale),
      .causal = causal,
      .q_content = reinterpret_cast<const uint8_t*>(q_content.data_ptr()),
      .q_rope = reinterpret_cast<const __nv_bfloat16*>(q_rope.data_ptr()),
      .q_scale = q_scale.data_ptr<float>(),
      .q_content_batch_stride = q_content.stride(0),
      .q_content_row_stride = q_content.stride(2),
      .q_rope_batch_stride = q_rope.stride(0),
      .q_rope_row_stride = q_rope.stride(2),
      .q_scale_batch_stride = q_scale.stride(0),
      .kv_cache = kv_cache.data_ptr<uint8_t>(),
      .block_table = block_table.data_ptr<int>(),
      .block_table_batch_stride = block_table.stride(0),
      // Capped so that entries * 64 fits an int in the kernel (schedule.cuh make_piece); a table past 33M entries
      // only loses reach beyond that point.
      .block_table_entries = static_cast<int>(std::min<int64_t>(block_table_entries, INT32_MAX / L::PAGE_BLOCK_SIZE)),
      .cache_seqlens = cache_seqlens.data_ptr<int>(),
      .out = reinterpret_cast<__nv_bfloat16*>(out.data_ptr()),
      .lse = lse.data_ptr<float>(),
      .tile_scheduler_metadata = tile_scheduler_metadata.data_ptr<int>(),
      .num_splits = num_splits.data_ptr<int>(),
      .num_sm_parts = static_cast<int>(num_sm_parts),
      .o_accum = reinterpret_cast<__nv_bfloat16*>(o_accum.data_ptr()),
      .lse_accum = lse_accum.data_ptr<float>(),
      .max_total_splits = static_cast<int>(max_total_splits),
  };
  sm90::decode_fp8::launch_decode_fp8(params, stream, launch_first);
  combine::launch_combine(params, stream);
  return {out, lse};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> decode_fp8(const at::Tensor& q_content, const at::Tensor& q_rope,
                                              const at::Tensor& q_scale, const at::Tensor& kv_cache,
                                              const at::Tensor& block_table, const at::Tensor& cache_seqlens,
                                              const at::Tensor& tile_scheduler_metadata, const at::Tensor& num_splits,
                                              double softmax_scale, bool causal) {
  return decode_impl(q_content, q_rope, q_scale, kv_cache, block_table, cache_seqlens, tile_scheduler_metadata,
                     num_splits, softmax_scale, causal, {});
}

// The same call from a BF16 q ((b, s_q, h_q, 576), checked as Fused-Q-Quant checks it): Fused-Q-Quant, decode and
// combine are launched back to back once everything is allocated. Quantizing q in a call of its own left the GPU
// idle for the host work of this one between the two kernels (~9 us of a 44 us call at b = 1, h_q = 64, 8k
// tokens, H200, 2026-12-01).
std::tuple<at::Tensor, at::Tensor> decode_fp8_bf16q(const at::Tensor& q, const at::Tensor& kv_cache,
                                                    const at::Tensor& block_table, const at::Tensor& cache_seqlens,
                                                    const at::Tensor& tile_scheduler_metadata,
                                                    const at::Tensor& num_splits, double softmax_scale, bool causal) {
  const PreparedQQuant qq = prepare_quantize_q(q);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(q.device().index());
  return decode_impl(qq.content, qq.rope, qq.scale, kv_cache, block_table, cache_seqlens, tile_scheduler_metadata,
                     num_splits, softmax_scale, causal, [&] { quant::launch_q_quant(qq.params, stream); });
}

// The kernel a call with q_rows query rows (s_q * h_q) runs now, and the override that decides it
// (kernel_choice.h): for tests, benchmarks and the Python wrapper, which never mirrors the choice.
std::string decode_kernel(int64_t q_rows) {
  TORCH_CHECK(q_rows >= 1 && q_rows <= MAX_Q_ROWS, "decode_kernel: q_rows must be in [1, ", MAX_Q_ROWS, "], got ",
              q_rows);
  namespace D = sm90::decode_fp8;
  return D::decode_kernel_name(D::choose_decode_kernel(static_cast<int>(q_rows), D::decode_kernel_override()));
}

std::string set_decode_kernel(const std::string& choice) { return sm90::decode_fp8::set_decode_kernel_override(choice); }

}  // namespace snapmla

TORCH_LIBRARY_FRAGMENT(snapmla, m) {
  m.def("decode_kernel(int q_rows) -> str");
  m.def("set_decode_kernel(str choice) -> str");
  m.def(
      "decode_fp8(Tensor q_content, Tensor q_rope, Tensor q_scale, Tensor kv_cache, Tensor block_table, "
      "Tensor cache_seqlens, Tensor tile_scheduler_metadata, Tensor num_splits, float softmax_scale, bool causal) "
      "-> (Tensor, Tensor)");
  m.def(
      "decode_fp8_bf16q(Tensor q, Tensor kv_cache, Tensor block_table, Tensor cache_seqlens, "
      "Tensor tile_scheduler_metadata, Tensor num_splits, float softmax_scale, bool causal) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(snapmla, CompositeExplicitAutograd, m) {
  m.impl("decode_kernel", &snapmla::decode_kernel);
  m.impl("set_decode_kernel", &snapmla::set_decode_kernel);
}
TORCH_LIBRARY_IMPL(snapmla, CPU, m) {
  m.impl("decode_fp8", &snapmla::decode_fp8);
  m.impl("decode_fp8_bf16q", &snapmla::decode_fp8_bf16q);
}
TORCH_LIBRARY_IMPL(snapmla, CUDA, m) {
  m.impl("decode_fp8", &snapmla::decode_fp8);
  m.impl("decode_fp8_bf16q", &snapmla::decode_fp8_bf16q);
}
