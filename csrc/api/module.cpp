// The extension module: defines the `snapmla` operator library. Each entry-point file (quant_api.cpp,
// decode_api.cpp, sched_api.cpp) adds its own schemas and CUDA implementations with TORCH_LIBRARY_FRAGMENT,
// so this file holds registration glue only. Python fake (meta) implementations live in snapmla_ext/_fake_quant.py and _fake_decode.py.
#include <Python.h>
#include <torch/library.h>

#include <vector>

#include "kv_layout.h"

namespace snapmla {

// Layout constants, exposed so Python can check that its mirror (snapmla_ext/layout.py) matches the build.
int64_t layout_constant(const std::string& name) {
  namespace L = kv_layout;
  if (name == "PAGE_BLOCK_SIZE") return L::PAGE_BLOCK_SIZE;
  if (name == "D_CONTENT") return L::D_CONTENT;
  if (name == "D_ROPE") return L::D_ROPE;
  if (name == "TOKEN_BYTES") return L::TOKEN_BYTES;
  if (name == "CONTENT_OFFSET") return L::CONTENT_OFFSET;
  if (name == "ROPE_OFFSET") return L::ROPE_OFFSET;
  if (name == "SCALE_OFFSET") return L::SCALE_OFFSET;
  if (name == "PAGE_BYTES") return L::PAGE_BYTES;
  TORCH_CHECK(false, "layout_constant: unknown name '", name, "'");
}

// Where the 644 bytes of the token at offset t of its page lie in the page (content 512, RoPE 128, scale 4, in
// that order), from kv_layout.h's functions: Python checks them against its mirror's (layout.py).
std::vector<int64_t> layout_token_bytes(int64_t t) {
  namespace L = kv_layout;
  TORCH_CHECK(t >= 0 && t < L::PAGE_BLOCK_SIZE, "layout_token_bytes: t must be in [0, ", L::PAGE_BLOCK_SIZE,
              "), got ", t);
  std::vector<int64_t> pos;
  pos.reserve(L::TOKEN_BYTES);
  const int ti = static_cast<int>(t);
  for (int b = 0; b < L::CONTENT_TOKEN_BYTES; ++b) pos.push_back(L::content_byte_in_page(ti, b));
  for (int b = 0; b < L::ROPE_TOKEN_BYTES; ++b) pos.push_back(L::rope_byte_in_page(ti, b));
  for (int b = 0; b < L::SCALE_TOKEN_BYTES; ++b) pos.push_back(L::scale_byte_in_page(ti) + b);
  return pos;
}

}  // namespace snapmla

TORCH_LIBRARY(snapmla, m) {
  m.def("layout_constant(str name) -> int");
  m.def("layout_token_bytes(int t) -> int[]");
}

TORCH_LIBRARY_IMPL(snapmla, CompositeExplicitAutograd, m) {
  m.impl("layout_constant", &snapmla::layout_constant);
  m.impl("layout_token_bytes", &snapmla::layout_token_bytes);
}

// A plain Python module so `import snapmla_ext._C` loads the library (and runs the registrations above).
static PyModuleDef snapmla_module = {PyModuleDef_HEAD_INIT, "_C", "SnapMLA CUDA kernels (torch.ops.snapmla)", -1,
                                     nullptr};
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&snapmla_module); }
