// Fused-Q-Quant: q (b, s_q, h_q, 576) bf16 -> content (b, s_q, h_q, 512) e4m3, rope (b, s_q, h_q, 64) bf16
// pre-scaled by 1/scale, scale (b, s_q, h_q) fp32 (docs/numerics_contract.md section 3; numerics in quant_math.cuh).
//
// Thread roles: one warp per query row (b * s_q * h_q rows), 8 warps per CTA, no shared memory, no barriers.
// Memory traffic per row: 1152 B read (3 x 16-B loads per lane, 512 B contiguous per warp instruction),
// 512 + 128 + 4 = 644 B written. At b = 128, s_q = 1, h_q = 128: 16384 rows, 18.9 MB read, 10.6 MB written;
// right after the projection that produced it, q sits in the 50 MB L2 of an H200.
#include "kernels/quant/launch.h"
#include "kernels/quant/quant_math.cuh"

#include "common/cuda_check.h"
#include "common/griddep.cuh"
#include "common/pdl.h"

namespace snapmla::quant {

__global__ void __launch_bounds__(THREADS_PER_CTA) q_quant_kernel(QQuantParams p) {
  // PDL (common/pdl.h): the decode kernel may be scheduled now (it waits for this grid to finish before it
  // reads Q); this grid waits for the kernel before it, whose memory it may reuse.
  griddep_launch_dependents();
  griddep_wait();
  const int lane = threadIdx.x % WARP_SIZE;
  const int64_t row = int64_t(blockIdx.x) * WARPS_PER_CTA + threadIdx.x / WARP_SIZE;
  const int64_t rows = int64_t(p.b) * p.s_q * p.h_q;
  if (row >= rows) return;
  const int64_t h = row % p.h_q;
  const int64_t s = (row / p.h_q) % p.s_q;
  const int64_t bi = row / (int64_t(p.h_q) * p.s_q);
  const __nv_bfloat16* q_row = p.q + bi * p.q_stride_b + s * p.q_stride_s + h * p.q_stride_h;  // (576,)
  const RowChunks chunks = load_row(q_row, lane);
  quantize_and_store_row(chunks, lane,
                         row_bytes(p.content + row * L::D_CONTENT, p.rope + row * L::D_ROPE, p.scale + row, lane));
}

void launch_q_quant(const QQuantParams& params, cudaStream_t stream) {
  const int64_t rows = int64_t(params.b) * params.s_q * params.h_q;
  if (rows == 0) return;
  const int64_t grid = (rows + WARPS_PER_CTA - 1) / WARPS_PER_CTA;
  launch_pdl(q_quant_kernel, dim3(static_cast<unsigned>(grid)), dim3(THREADS_PER_CTA), 0, stream, params);
}

}  // namespace snapmla::quant
