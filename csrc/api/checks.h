// Tensor-check helpers shared by every entry point: each message names the argument and prints the expected
// and the actual value. Grouped as device, dtype, layout, shape (STYLE.md).
#pragma once

#include <torch/all.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kv_layout.h"

namespace snapmla::checks {

inline void check_cuda(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor, got a tensor on ", t.device());
}

inline void check_same_device(const at::Tensor& t, const at::Tensor& ref, const char* name, const char* ref_name) {
  TORCH_CHECK(t.device() == ref.device(), name, " must be on the same device as ", ref_name, " (", ref.device(),
              "), got ", t.device());
}

inline void check_dtype(const at::Tensor& t, at::ScalarType expected, const char* name) {
  TORCH_CHECK(t.scalar_type() == expected, name, " must have dtype ", expected, ", got ", t.scalar_type());
}

inline void check_dtype_in(const at::Tensor& t, std::initializer_list<at::ScalarType> allowed, const char* name) {
  for (auto s : allowed)
    if (t.scalar_type() == s) return;
  std::string list;
  for (auto s : allowed) list += (list.empty() ? "" : " or ") + std::string(c10::toString(s));
  TORCH_CHECK(false, name, " must have dtype ", list, ", got ", t.scalar_type());
}

inline void check_dim(const at::Tensor& t, int64_t dim, const char* name) {
  TORCH_CHECK(t.dim() == dim, name, " must have ", dim, " dimensions, got ", t.dim(), " (shape ", t.sizes(), ")");
}

inline void check_size(const at::Tensor& t, int64_t dim, int64_t expected, const char* name) {
  TORCH_CHECK(t.size(dim) == expected, name, ".shape[", dim, "] must be ", expected, ", got ", t.size(dim),
              " (shape ", t.sizes(), ")");
}

inline void check_shape(const at::Tensor& t, at::IntArrayRef expected, const char* name) {
  TORCH_CHECK(t.sizes() == expected, name, " must have shape ", expected, ", got ", t.sizes());
}

inline void check_last_dim_contiguous(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.dim() == 0 || t.stride(-1) == 1, name, " must be contiguous in its last dimension (stride 1), got ",
              "strides ", t.strides());
}

inline void check_contiguous(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous, got shape ", t.sizes(), " with strides ", t.strides());
}

// Offsets are computed in int64 in the kernels, but grids and some strides are int32: refuse sizes past that.
inline void check_fits_int32(int64_t value, const char* what) {
  TORCH_CHECK(value >= 0 && value <= INT32_MAX, what, " must fit in int32 (<= ", INT32_MAX, "), got ", value);
}

// Rows read with 16-byte vector loads or by TMA: the data pointer and every stride but the last must be multiples
// of 16 bytes. `why` names the reader ("16-byte loads", "TMA") in the message.
inline void check_16b_aligned_rows(const at::Tensor& t, const char* name, const char* why) {
  constexpr int64_t ALIGN = 16;
  TORCH_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % ALIGN == 0, name, ": data pointer must be ", ALIGN,
              "-byte aligned (", why, "), got address ", t.data_ptr());
  const int64_t elem = t.element_size();
  for (int64_t d = 0; d + 1 < t.dim(); ++d)
    TORCH_CHECK(t.size(d) <= 1 || (t.stride(d) * elem) % ALIGN == 0, name, ": stride(", d, ") = ", t.stride(d),
                " elements must be a multiple of ", ALIGN, " bytes (", why, "), got strides ", t.strides());
}

// The SnapMLA cache byte map (kv_layout.h): (num_blocks, PAGE_BYTES) uint8. Dtype is checked with the dtypes.
inline void check_kv_cache_shape(const at::Tensor& kv_cache, const char* name) {
  check_dim(kv_cache, 2, name);
  check_size(kv_cache, 1, kv_layout::PAGE_BYTES, name);
}

// int32 entries from a block table view's first one to the end of its storage: how far a request's row may be
// read through its stride (FlashMLA's semantics; engines capture CUDA graphs with views narrower than the table).
inline int64_t block_table_storage_entries(const at::Tensor& block_table) {
  return static_cast<int64_t>(block_table.storage().nbytes() / sizeof(int32_t)) - block_table.storage_offset();
}

// CUDA's limit on gridDim.y (and z): num_sm_parts is the decode grid's y, q_rows / 4 the combine's.
inline constexpr int64_t MAX_GRID_Y = 65535;

// A SNAPMLA_* switch: set to "1" means on. Read on every call (~100 ns) so tests can flip it per case.
inline bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace snapmla::checks
