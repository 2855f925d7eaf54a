// Entry points of the fused quantization kernels: snapmla::quantize_q, append_kv, fetch_dequant_slots and
// fetch_dequant_paged. The same function is registered for the CPU and the CUDA keys and checks, in order,
// dtype -> shape -> layout -> device, so that on a machine without a GPU every message but the device ones can
// be triggered; a CPU tensor that passes everything else gets "<arg> must be a CUDA tensor".
//
// Out-of-range slots: the kernels never write (append) or read (fetch) a slot outside [0, num_blocks * 64); a
// negative slot is skipped (append) or gives a zero row (fetch). Checking the values before launch would need
// a device-to-host sync on the hot path, so by default nothing is checked; with SNAPMLA_CHECK_SLOTS=1 in the
// environment append_kv and fetch_dequant_slots read max(slots) back (one sync, not CUDA-graph capturable) and
// raise on a slot >= num_blocks * 64.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/all.h>
#include <torch/library.h>


#include "api/checks.h"
#include "api/quant_api.h"
#include "kernels/quant/launch.h"
#include "kv_layout.h"

namespace snapmla {

namespace {

namespace L = kv_layout;
using namespace snapmla::checks;

// 16-B vector loads of a bf16 row need a 16-B aligned start: base pointer and every row stride (in elements)
// a multiple of 8. Strides of size-1 dimensions never move the pointer and are ignored.
// SNAPMLA_CHECK_SLOTS=1 only: one device-to-host sync.
void check_slots_in_range(const at::Tensor& slots, int64_t num_blocks) {
  if (!env_flag("SNAPMLA_CHECK_SLOTS") || slots.numel() == 0) return;
  const int64_t num_slots = num_blocks * L::PAGE_BLOCK_SIZE;
  const int64_t max_slot = slots.max().item<int64_t>();
  TORCH_CHECK(max_slot < num_slots, "slots must be < num_blocks * ", L::PAGE_BLOCK_SIZE, " = ", num_slots,
              " (kv_cache has ", num_blocks, " pages), got a slot ", max_slot, " (SNAPMLA_CHECK_SLOTS=1)");
}

}  // namespace

PreparedQQuant prepare_quantize_q(const at::Tensor& q) {
  check_dtype(q, at::kBFloat16, "q");
  check_dim(q, 4, "q");
  check_size(q, 3, L::D_QK, "q");
  check_fits_int32(q.size(0) * q.size(1) * q.size(2), "q rows (b * s_q * h_q)");
  check_last_dim_contiguous(q, "q");
  check_16b_aligned_rows(q, "q", "16-byte loads");
  check_cuda(q, "q");

  const int64_t b = q.size(0), s_q = q.size(1), h_q = q.size(2);
  const c10::cuda::CUDAGuard guard(q.device());
  PreparedQQuant qq;
  qq.content = at::empty({b, s_q, h_q, L::D_CONTENT}, q.options().dtype(at::kFloat8_e4m3fn));
  qq.rope = at::empty({b, s_q, h_q, L::D_ROPE}, q.options());
  qq.scale = at::empty({b, s_q, h_q}, q.options().dtype(at::kFloat));
  qq.params = quant::QQuantParams{
      .b = static_cast<int>(b),
      .s_q = static_cast<int>(s_q),
      .h_q = static_cast<int>(h_q),
      .q = reinterpret_cast<const __nv_bfloat16*>(q.data_ptr()),
      .q_stride_b = q.stride(0),
      .q_stride_s = q.stride(1),
      .q_stride_h = q.stride(2),
      .content = reinterpret_cast<uint8_t*>(qq.content.data_ptr()),
      .rope = reinterpret_cast<__nv_bfloat16*>(qq.rope.data_ptr()),
      .scale = qq.scale.data_ptr<float>(),
  };
  return qq;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_q(const at::Tensor& q) {
  PreparedQQuant qq = prepare_quantize_q(q);
  const c10::cuda::CUDAGuard guard(q.device());
  quant::launch_q_quant(qq.params, at::cuda::getCurrentCUDAStream());
  return {qq.content, qq.rope, qq.scale};
}

namespace {

// A (n, width) bf16 operand of Fused-K-Append: rows with contiguous elements, 16-B aligned for the kernel's loads.
void check_append_rows(const at::Tensor& t, int64_t width, const char* name) {
  check_dtype(t, at::kBFloat16, name);
  check_dim(t, 2, name);
  check_size(t, 1, width, name);
  check_last_dim_contiguous(t, name);
  check_16b_aligned_rows(t, name, "16-byte loads");
}

// The checks and the launch of both entry points: content rows (n, 512) and RoPE rows (n, 64), which may be the
// two halves of one (n, 576) tensor.
void append_rows(at::Tensor& kv_cache, const at::Tensor& content, const at::Tensor& rope, const at::Tensor& slots,
                 const char* rows_name, const std::vector<const at::Tensor*>& inputs,
                 const std::vector<const char*>& names) {
  check_dim(slots, 1, "slots");
  TORCH_CHECK(slots.size(0) == content.size(0), "slots must have one entry per row of ", rows_name, " (",
              content.size(0), "), got ", slots.size(0));
  check_fits_int32(content.size(0), rows_name);
  check_contiguous(kv_cache, "kv_cache");
  check_contiguous(slots, "slots");
  check_cuda(kv_cache, "kv_cache");
  for (size_t k = 0; k < inputs.size(); ++k) check_cuda(*inputs[k], names[k]);
  check_cuda(slots, "slots");
  for (size_t k = 0; k < inputs.size(); ++k) check_same_device(*inputs[k], kv_cache, names[k], "kv_cache");
  check_same_device(slots, kv_cache, "slots", "kv_cache");

  if (content.size(0) == 0) return;
  const c10::cuda::CUDAGuard guard(kv_cache.device());
  check_slots_in_range(slots, kv_cache.size(0));
  const quant::KAppendParams params{
      .n = content.size(0),
      .num_blocks = kv_cache.size(0),
      .content = reinterpret_cast<const __nv_bfloat16*>(content.data_ptr()),
      .content_stride = content.stride(0),
      .rope = reinterpret_cast<const __nv_bfloat16*>(rope.data_ptr()),
      .rope_stride = rope.stride(0),
      .slots = slots.data_ptr(),
      .slots_int64 = slots.scalar_type() == at::kLong,
      .kv_cache = kv_cache.data_ptr<uint8_t>(),
  };
  quant::launch_k_append(params, at::cuda::getCurrentCUDAStream());
}

}  // namespace

void append_kv(at::Tensor& kv_cache, const at::Tensor& kv, const at::Tensor& slots) {
  check_dtype(kv_cache, at::kByte, "kv_cache");
  check_kv_cache_shape(kv_cache, "kv_cache");
  check_dtype_in(slots, {at::kInt, at::kLong}, "slots");
  check_append_rows(kv, L::D_QK, "kv");
  append_rows(kv_cache, kv, kv.narrow(1, L::D_CONTENT, L::D_ROPE), slots, "kv", {&kv}, {"kv"});
}

// vLLM's concat_and_cache_mla inputs: the latent kv_c (n, 512) and the rotary k_pe (n, 64), bf16, read in place.
void append_kv_parts(at::Tensor& kv_cache, const at::Tensor& kv_c, const at::Tensor& k_pe, const at::Tensor& slots) {
  check_dtype(kv_cache, at::kByte, "kv_cache");
  check_kv_cache_shape(kv_cache, "kv_cache");
  check_dtype_in(slots, {at::kInt, at::kLong}, "slots");
  check_append_rows(kv_c, L::D_CONTENT, "kv_c");
  check_append_rows(k_pe, L::D_ROPE, "k_pe");
  TORCH_CHECK(k_pe.size(0) == kv_c.size(0), "k_pe must have one row per row of kv_c (", kv_c.size(0), "), got ",
              k_pe.size(0));
  append_rows(kv_cache, kv_c, k_pe, slots, "kv_c", {&kv_c, &k_pe}, {"kv_c", "k_pe"});
}

at::Tensor fetch_dequant_slots(const at::Tensor& kv_cache, const at::Tensor& slots) {
  check_dtype(kv_cache, at::kByte, "kv_cache");
  check_kv_cache_shape(kv_cache, "kv_cache");
  check_dtype_in(slots, {at::kInt, at::kLong}, "slots");
  check_dim(slots, 1, "slots");
  check_fits_int32(slots.size(0), "slots.shape[0]");
  check_contiguous(kv_cache, "kv_cache");
  check_contiguous(slots, "slots");
  check_cuda(kv_cache, "kv_cache");
  check_cuda(slots, "slots");
  check_same_device(slots, kv_cache, "slots", "kv_cache");

  const c10::cuda::CUDAGuard guard(kv_cache.device());
  auto out = at::empty({slots.size(0), L::D_QK}, kv_cache.options().dtype(at::kBFloat16));
  check_slots_in_range(slots, kv_cache.size(0));
  const quant::FetchSlotsParams params{
      .n = slots.size(0),
      .num_blocks = kv_cache.size(0),
      .kv_cache = kv_cache.data_ptr<uint8_t>(),
      .slots = slots.data_ptr(),
      .slots_int64 = slots.scalar_type() == at::kLong,
      .out = reinterpret_cast<__nv_bfloat16*>(out.data_ptr()),
  };
  quant::launch_fetch_dequant_slots(params, at::cuda::getCurrentCUDAStream());
  return out;
}

at::Tensor fetch_dequant_paged(const at::Tensor& kv_cache, const at::Tensor& block_table, const at::Tensor& seqlens,
                               int64_t num_tokens) {
  check_dtype(kv_cache, at::kByte, "kv_cache");
  check_kv_cache_shape(kv_cache, "kv_cache");
  check_dtype(block_table, at::kInt, "block_table");
  check_dtype(seqlens, at::kInt, "seqlens");
  check_dim(block_table, 2, "block_table");
  check_dim(seqlens, 1, "seqlens");
  TORCH_CHECK(seqlens.size(0) == block_table.size(0), "seqlens must have one entry per row of block_table (",
              block_table.size(0), "), got ", seqlens.size(0));
  TORCH_CHECK(block_table.size(0) <= quant::FETCH_PAGED_MAX_B, "block_table.shape[0] (requests) must be <= ",
              quant::FETCH_PAGED_MAX_B, ", got ", block_table.size(0));
  TORCH_CHECK(num_tokens >= 0, "num_tokens must be >= 0, got ", num_tokens);
  check_fits_int32(num_tokens, "num_tokens");
  check_contiguous(kv_cache, "kv_cache");
  check_last_dim_contiguous(block_table, "block_table");
  check_contiguous(seqlens, "seqlens");
  check_cuda(kv_cache, "kv_cache");
  check_cuda(block_table, "block_table");
  check_cuda(seqlens, "seqlens");
  check_same_device(block_table, kv_cache, "block_table", "kv_cache");
  check_same_device(seqlens, kv_cache, "seqlens", "kv_cache");

  const c10::cuda::CUDAGuard guard(kv_cache.device());
  auto out = at::empty({num_tokens, L::D_QK}, kv_cache.options().dtype(at::kBFloat16));
  if (block_table.size(0) == 0) return out.zero_();
  const quant::FetchPagedParams params{
      .b = static_cast<int>(block_table.size(0)),
      .block_table_entries = block_table_storage_entries(block_table),
      .num_blocks = kv_cache.size(0),
      .num_tokens = static_cast<int>(num_tokens),
      .kv_cache = kv_cache.data_ptr<uint8_t>(),
      .block_table = block_table.data_ptr<int>(),
      .block_table_stride = block_table.stride(0),
      .seqlens = seqlens.data_ptr<int>(),
      .out = reinterpret_cast<__nv_bfloat16*>(out.data_ptr()),
  };
  quant::launch_fetch_dequant_paged(params, at::cuda::getCurrentCUDAStream());
  return out;
}

}  // namespace snapmla

TORCH_LIBRARY_FRAGMENT(snapmla, m) {
  m.def("quantize_q(Tensor q) -> (Tensor content, Tensor rope, Tensor scale)");
  m.def("append_kv(Tensor(a!) kv_cache, Tensor kv, Tensor slots) -> ()");
  m.def("append_kv_parts(Tensor(a!) kv_cache, Tensor kv_c, Tensor k_pe, Tensor slots) -> ()");
  m.def("fetch_dequant_slots(Tensor kv_cache, Tensor slots) -> Tensor");
  m.def("fetch_dequant_paged(Tensor kv_cache, Tensor block_table, Tensor seqlens, int num_tokens) -> Tensor");
}

// One implementation for both keys: on CPU tensors it runs every check and stops at the device check.
TORCH_LIBRARY_IMPL(snapmla, CPU, m) {
  m.impl("quantize_q", &snapmla::quantize_q);
  m.impl("append_kv", &snapmla::append_kv);
  m.impl("append_kv_parts", &snapmla::append_kv_parts);
  m.impl("fetch_dequant_slots", &snapmla::fetch_dequant_slots);
  m.impl("fetch_dequant_paged", &snapmla::fetch_dequant_paged);
}

TORCH_LIBRARY_IMPL(snapmla, CUDA, m) {
  m.impl("quantize_q", &snapmla::quantize_q);
  m.impl("append_kv", &snapmla::append_kv);
  m.impl("append_kv_parts", &snapmla::append_kv_parts);
  m.impl("fetch_dequant_slots", &snapmla::fetch_dequant_slots);
  m.impl("fetch_dequant_paged", &snapmla::fetch_dequant_paged);
}
