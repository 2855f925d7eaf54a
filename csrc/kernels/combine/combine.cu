// Split-KV combine: merges the per-piece partial results of each split request into out (bf16) and lse (fp32).
//
// For one query row of request r with pieces i = 0 .. n-1 (n = num_splits[r + 1] - num_splits[r] > 1):
//   lse2_i = lse_accum[num_splits[r] + i][row]  (log2 domain, -inf for an empty piece)
//   m = max_i lse2_i;  S = sum_i exp2(lse2_i - m);  lse2 = m + log2(S)
//   o = sum_i exp2(lse2_i - lse2) * o_i         (o_i is already the piece's own normalised output)
//   lse = lse2 * ln 2 (natural log); a row whose pieces are all empty gets o = 0, lse = +inf.
// Empty pieces are skipped by select, never weighted by 0: their o_accum rows are not guaranteed to be finite.
//
// Work split: grid (b, ceil(q_rows / 4)), 4 warps per CTA, one warp per row. Each lane owns 16 of the 512
// columns as 4 float4 at column 4 * lane + 128 * k, so one warp-wide load moves 512 contiguous bytes. The
// weights of 32 pieces at a time are computed one per lane and broadcast with shuffles, so a piece's lse is
// read once. Fixed summation order (piece order, fixed shuffle trees): the result is bit-reproducible.
#include <cuda_bf16.h>

#include "common/cuda_check.h"
#include "common/griddep.cuh"
#include "common/pdl.h"
#include "kernels/combine/launch.h"
#include "kv_layout.h"

namespace snapmla::combine {

namespace {

constexpr int D_V = kv_layout::D_CONTENT;            // 512
constexpr int WARPS_PER_CTA = COMBINE_ROWS_PER_CTA;  // one warp per query row
constexpr int COLS_PER_LANE = D_V / 32;              // 16
constexpr int VEC_PER_LANE = COLS_PER_LANE / 4;      // 4 float4 per lane
constexpr float LN2 = 0.6931471805599453f;
static_assert(D_V % (32 * 4) == 0, "a warp covers the row in whole float4 columns");

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void __launch_bounds__(WARPS_PER_CTA * 32)
    snapmla_combine_kernel(const int* __restrict__ num_splits,   // (b + 1,)
                           const float* __restrict__ o_accum,    // (total_splits, q_rows, 512)
                           const float* __restrict__ lse_accum,  // (total_splits, q_rows)
                           __nv_bfloat16* __restrict__ out,      // (b, s_q, h_q, 512), row = s * h_q + h
                           float* __restrict__ lse,              // (b, h_q, s_q)
                           int s_q, int h_q, int q_rows) {
  griddep_wait();  // PDL (common/pdl.h): the decode kernel's partial results are complete and visible
  const int r = blockIdx.x;
  const int split_begin = num_splits[r];
  const int n = num_splits[r + 1] - split_begin;
  if (n <= 1) return;  // written by the decode kernel
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.y * WARPS_PER_CTA + threadIdx.x / 32;
  if (row >= q_rows) return;

  const float* g_lse = lse_accum + static_cast<int64_t>(split_begin) * q_rows + row;  // stride q_rows per piece
  float m = -INFINITY;
  for (int i = lane; i < n; i += 32) m = fmaxf(m, g_lse[static_cast<int64_t>(i) * q_rows]);
  m = warp_max(m);

  const int s = row / h_q, h = row % h_q;
  float* g_lse_out = lse + (static_cast<int64_t>(r) * h_q + h) * s_q + s;  // (b, h_q, s_q) transpose of rows
  __nv_bfloat16* g_out = out + (static_cast<int64_t>(r) * q_rows + row) * D_V;

  float acc[VEC_PER_LANE][4] = {};
  if (m == -INFINITY) {  // no piece saw a token
    if (lane == 0) *g_lse_out = INFINITY;
  } else {
    float sum = 0.f;
    for (int i = lane; i < n; i += 32) {
      const float l = g_lse[static_cast<int64_t>(i) * q_rows];
      sum += l == -INFINITY ? 0.f : exp2f(l - m);
    }
    const float lse2 = m + log2f(warp_sum(sum));
    if (lane == 0) *g_lse_out = lse2 * LN2;

    const float* g_o = o_accum + (static_cast<int64_t>(split_begin) * q_rows + row) * D_V + 4 * lane;
    const int64_t piece_stride = static_cast<int64_t>(q_rows) * D_V;
    for (int base = 0; base < n; base += 32) {
      float my_w = 0.f;
      bool my_live = false;
      if (base + lane < n) {
        const float l = g_lse[static_cast<int64_t>(base + lane) * q_rows];
        my_live = l != -INFINITY;
        my_w = my_live ? exp2f(l - lse2) : 0.f;
      }
      const unsigned live_mask = __ballot_sync(0xffffffffu, my_live);
      const int count = min(32, n - base);
      for (int j = 0; j < count; ++j) {
        const float w = __shfl_sync(0xffffffffu, my_w, j);
        if (!((live_mask >> j) & 1u)) continue;  // warp-uniform: empty piece, its o is not read
        const float* g_piece = g_o + (base + j) * piece_stride;
#pragma unroll
        for (int k = 0; k < VEC_PER_LANE; ++k) {
          const float4 v = *reinterpret_cast<const float4*>(g_piece + 128 * k);
          acc[k][0] = fmaf(w, v.x, acc[k][0]);
          acc[k][1] = fmaf(w, v.y, acc[k][1]);
          acc[k][2] = fmaf(w, v.z, acc[k][2]);
          acc[k][3] = fmaf(w, v.w, acc[k][3]);
        }
      }
    }
  }

#pragma unroll
  for (int k = 0; k < VEC_PER_LANE; ++k) {
    __nv_bfloat162 lo = __floats2bfloat162_rn(acc[k][0], acc[k][1]);
    __nv_bfloat162 hi = __floats2bfloat162_rn(acc[k][2], acc[k][3]);
    uint2 packed;
    packed.x = *reinterpret_cast<uint32_t*>(&lo);
    packed.y = *reinterpret_cast<uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(g_out + 4 * lane + 128 * k) = packed;  // 8-B store, 256 B per warp per k
  }
}

}  // namespace

void launch_combine(const DecodeParams& params, cudaStream_t stream) {
  const dim3 grid(params.b, (params.q_rows + WARPS_PER_CTA - 1) / WARPS_PER_CTA);
  launch_pdl(snapmla_combine_kernel, grid, dim3(WARPS_PER_CTA * 32), 0, stream, params.num_splits, params.o_accum,
             params.lse_accum, params.out, params.lse, params.s_q, params.h_q, params.q_rows);
}

}  // namespace snapmla::combine
