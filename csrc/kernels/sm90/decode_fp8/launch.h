// Host-side entry of the sm_90a FP8 SnapMLA decode kernel (kernel.cuh has the design header).
#pragma once

#include <cuda_runtime.h>

#include "common/params.h"

namespace snapmla::sm90::decode_fp8 {

// Query rows (row = s * h_q + h) per CTA tile: the WGMMA M of both GEMMs.
inline constexpr int BLOCK_M = 64;

inline int num_m_tiles(int q_rows) { return (q_rows + BLOCK_M - 1) / BLOCK_M; }

// Launches the decode kernel over grid (num_m_tiles(q_rows), num_sm_parts). Writes out/lse for requests done
// in one piece and o_accum/lse_accum for split ones (the combine kernel runs after, see combine/launch.h).
void launch_decode_fp8(const DecodeParams& params, cudaStream_t stream);

}  // namespace snapmla::sm90::decode_fp8
