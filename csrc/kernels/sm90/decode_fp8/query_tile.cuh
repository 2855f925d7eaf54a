// The wide-tile query tile (64 folded query rows) that the producer loads once per piece, shared by the wide
// kernel (kernel.cuh) and the warp-specialised one (ws/kernel.cuh); tma_producer.cuh's run_producer calls it by
// overload on SharedStorage.
#pragma once

#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/decode_fp8/launch.h"
#include "kernels/sm90/decode_fp8/traits.h"

namespace snapmla::sm90::decode_fp8 {

// The query tile of piece `req` (tma_producer.cuh calls it by overload): 4 warp slabs of rows_per_warp rows
// (launch.h), tile m = blockIdx.x; rows past q_rows are zero-filled, slab rows past rows_per_warp are not
// written (padding rows: each accumulator row depends on its own query row only, and they are never stored).
__device__ __forceinline__ void issue_query_tile(const KernelParams& kp, SharedStorage& ss, int qbuf, int req) {
  const int rpw = rows_per_warp(kp.p.q_rows);
  const int m_tile = blockIdx.x;
  mbarrier_arrive_expect_tx(&ss.q_full[qbuf], q_tx_bytes(rpw));
#pragma unroll
  for (int w = 0; w < MATH_WARPS_PER_WG; ++w) {
    const int q_row = warp_first_q_row(m_tile, w, rpw);
    constexpr int SLAB = 16 * SWIZZLE_ROW_BYTES;  // 16 rows of 128 B
#pragma unroll
    for (int t = 0; t < CONTENT_TILES; ++t)
      tma_load_3d(ss.q_content[t] + w * SLAB, &kp.tm_q_content, &ss.q_full[qbuf], t * SWIZZLE_ROW_BYTES, q_row, req);
    tma_load_3d(ss.q_rope + w * SLAB, &kp.tm_q_rope, &ss.q_full[qbuf], 0, q_row, req);
  }
}

}  // namespace snapmla::sm90::decode_fp8
