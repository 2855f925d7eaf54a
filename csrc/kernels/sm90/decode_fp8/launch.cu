// The decode launcher: checks the problem is not empty, takes the kernel from choose_decode_kernel
// (kernel_choice.h) under the process-wide override, and launches it (instantiations/*.cu).
// The override comes from SNAPMLA_DECODE_KERNEL, read once on the first call, and can be changed later through
// set_decode_kernel_override (torch.ops.snapmla.set_decode_kernel), which tests and benchmarks use to compare
// kernels in one process.
#include <atomic>
#include <cstdlib>
#include <string>

#include "common/cuda_check.h"
#include "kernels/sm90/decode_fp8/kernel_choice.h"
#include "kernels/sm90/decode_fp8/launch.h"

namespace snapmla::sm90::decode_fp8 {

namespace {

DecodeKernel parse_or_raise(const std::string& s, const char* what) {
  const auto k = parse_decode_kernel(s);
  TORCH_CHECK(k.has_value(), what, " must be auto, narrow, wide or ws, got '", s, "'");
  return *k;
}

// The override, initialised from the environment on first use (an invalid value raises on every call until
// the variable is fixed or an override is set).
std::atomic<int>& override_slot() {
  static std::atomic<int> slot([] {
    const char* v = std::getenv("SNAPMLA_DECODE_KERNEL");
    return static_cast<int>(v == nullptr ? DecodeKernel::kAuto : parse_or_raise(v, "SNAPMLA_DECODE_KERNEL"));
  }());
  return slot;
}

}  // namespace

DecodeKernel decode_kernel_override() { return static_cast<DecodeKernel>(override_slot().load()); }

std::string set_decode_kernel_override(const std::string& choice) {
  const DecodeKernel k = parse_or_raise(choice, "set_decode_kernel: choice");
  return decode_kernel_name(static_cast<DecodeKernel>(override_slot().exchange(static_cast<int>(k))));
}

void launch_decode_fp8(const DecodeParams& params, cudaStream_t stream, const LaunchFirst& launch_first) {
  TORCH_CHECK(params.q_rows > 0 && params.b > 0 && params.num_sm_parts > 0 && params.num_blocks > 0,
              "launch_decode_fp8: empty problem (b = ", params.b, ", q_rows = ", params.q_rows,
              ", num_sm_parts = ", params.num_sm_parts, ", num_blocks = ", params.num_blocks, ")");
  switch (choose_decode_kernel(params.q_rows, decode_kernel_override())) {
    case DecodeKernel::kNarrow: launch_decode_fp8_narrow(params, stream, launch_first); return;
    case DecodeKernel::kWs: launch_decode_fp8_ws(params, stream, launch_first); return;
    default: launch_decode_fp8_wide(params, stream, launch_first); return;
  }
}

}  // namespace snapmla::sm90::decode_fp8
