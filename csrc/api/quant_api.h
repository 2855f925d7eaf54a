// Fused-Q-Quant's checks and allocations as a step of its own, so that the decode entry point that takes a
// BF16 q (decode_api.cpp decode_fp8_bf16q) can allocate everything first and then launch Fused-Q-Quant, decode
// and combine back to back (host work between two launches leaves the GPU idle at small batch).
#pragma once

#include <torch/all.h>

#include "kernels/quant/launch.h"

namespace snapmla {

struct PreparedQQuant {
  at::Tensor content;  // (b, s_q, h_q, 512) e4m3
  at::Tensor rope;     // (b, s_q, h_q, 64) bf16, pre-scaled by 1 / scale
  at::Tensor scale;    // (b, s_q, h_q) fp32
  quant::QQuantParams params;
};

// Checks q ((b, s_q, h_q, 576) bf16, CUDA; messages name "q") and allocates the outputs on q's device;
// launches nothing (the caller launches quant::launch_q_quant(params) on q's device).
PreparedQQuant prepare_quantize_q(const at::Tensor& q);

}  // namespace snapmla
