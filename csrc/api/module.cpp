// The extension module: defines the `snapmla` operator library. Each entry-point file (quant_api.cpp,
// decode_api.cpp, sched_api.cpp) adds its own schemas and CUDA implementations with TORCH_LIBRARY_FRAGMENT,
// so this file holds registration glue only. Python fake (meta) implementations live in snapmla_ext/_fake_quant.py and _fake_decode.py.
#include <Python.h>
#include <torch/library.h>

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

}  // namespace snapmla

TORCH_LIBRARY(snapmla, m) {
  m.def("layout_constant(str name) -> int");
}

TORCH_LIBRARY_IMPL(snapmla, CompositeExplicitAutograd, m) {
  m.impl("layout_constant", &snapmla::layout_constant);
}

// A plain Python module so `import snapmla_ext._C` loads the library (and runs the registrations above).
static PyModuleDef snapmla_module = {PyModuleDef_HEAD_INIT, "_C", "SnapMLA CUDA kernels (torch.ops.snapmla)", -1,
                                     nullptr};
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&snapmla_module); }
