// The wide-tile query tile (64 folded query rows) that the producer loads once per piece, shared by the wide
// kernel (wide/kernel.cuh) and the warp-specialised one (ws/kernel.cuh); tma_producer.cuh's run_producer calls
// issue_query_tile by overload on SharedStorage (the narrow kernel has its own, narrow/kernel.cuh).
#pragma once

#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/decode_fp8/launch.h"
#include "kernels/sm90/decode_fp8/shared/traits.h"

namespace snapmla::sm90::decode_fp8 {

// The query tile of piece `req` for 64-row tile m_tile, on barrier `bar` (its expected bytes armed here): 4 warp
// slabs of rows_per_warp rows (launch.h); rows past q_rows are zero-filled, slab rows past rows_per_warp are
// not written (padding rows: each accumulator row depends on its own query row only, and they are never
// stored).
__device__ __forceinline__ void issue_query_slabs(const KernelParams& kp, SharedStorage& ss, uint64_t* bar, int m_tile,
                                                  int req) {
  const int rpw = rows_per_warp(kp.p.q_rows);
  mbarrier_arrive_expect_tx(bar, q_tx_bytes(rpw));
#pragma unroll
  for (int w = 0; w < MATH_WARPS_PER_WG; ++w) {
    const int q_row = warp_first_q_row(m_tile, w, rpw);
    constexpr int SLAB = 16 * SWIZZLE_ROW_BYTES;  // 16 rows of 128 B
#pragma unroll
    for (int t = 0; t < CONTENT_TILES; ++t)
      tma_load_3d(ss.q_content[t] + w * SLAB, &kp.tm_q_content, bar, t * SWIZZLE_ROW_BYTES, q_row, req);
    tma_load_3d(ss.q_rope + w * SLAB, &kp.tm_q_rope, bar, 0, q_row, req);
  }
}

// The wide and ws kernels' form (tma_producer.cuh run_producer calls it by overload): tile m = blockIdx.x.
__device__ __forceinline__ void issue_query_tile(const KernelParams& kp, SharedStorage& ss, int qbuf, int req) {
  issue_query_slabs(kp, ss, &ss.q_full[qbuf], blockIdx.x, req);
}

}  // namespace snapmla::sm90::decode_fp8
