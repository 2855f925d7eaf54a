// Tensor-check helpers shared by every entry point: each message names the argument and prints the expected
// and the actual value. Grouped as device, dtype, layout, shape (STYLE.md).
#pragma once

#include <torch/all.h>

#include <string>
#include <vector>

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

}  // namespace snapmla::checks
