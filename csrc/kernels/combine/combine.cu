// Split-KV combine: merges the per-piece partial results of each split request into out (bf16) and lse (fp32).
//
// For one query row of request r with pieces i = 0 .. n-1 (n = num_splits[r + 1] - num_splits[r] > 1):
//   lse2_i = lse_accum[num_splits[r] + i][row]  (log2 domain, -inf for an empty piece)
//   m = max_i lse2_i;  S = sum_i exp2(lse2_i - m);  lse2 = m + log2(S)
//   o = sum_i exp2(lse2_i - lse2) * o_i         (o_i is already the piece's own normalised output)
//   lse = lse2 * ln 2 (natural log); a row whose pieces are all empty gets o = 0, lse = +inf.
// Empty pieces are skipped by select, never weighted by 0: their o_accum rows are not guaranteed to be finite.
//
// Work split: grid (q_rows, b), one CTA of 4 warps per (row, request); warp q owns columns 128 q .. 128 q + 127,
// lane l the float4 at column 128 q + 4 l, so one warp-wide load moves 512 contiguous bytes. Pieces are read
// PIECES_IN_FLIGHT = 8 at a time (8 independent 16-B loads per lane before the first FMA): the combine is
// latency-bound at small batch, where few rows meet many pieces (b = 1, h_q = 64, 8k tokens: 64 rows x 65
// pieces, 8.5 MB; one warp per row walking the pieces one load group at a time took 20 us there, H200,
// 2026-12-01). The weights of 32 pieces at a time are computed one per lane and broadcast with shuffles. Each
// column is summed in piece order (fixed shuffle trees for m and the sum): the result is bit-reproducible and
// does not depend on the grouping.
#include <cuda_bf16.h>

#include "common/cuda_check.h"
#include "common/griddep.cuh"
#include "common/pdl.h"
#include "kernels/combine/launch.h"
#include "kv_layout.h"

namespace snapmla::combine {

namespace {

constexpr int D_V = kv_layout::D_CONTENT;            // 512
constexpr int WARPS_PER_CTA = COMBINE_WARPS_PER_ROW;  // 4: one 128-column quarter of the row each
constexpr int COLS_PER_WARP = D_V / WARPS_PER_CTA;    // 128 = 32 lanes x one float4
constexpr int PIECES_IN_FLIGHT = 8;
constexpr float LN2 = 0.6931471805599453f;
static_assert(COLS_PER_WARP == 32 * 4, "a warp covers its quarter in one float4 per lane");

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
  const int row = blockIdx.x;
  const int r = blockIdx.y;
  const int split_begin = num_splits[r];
  const int n = num_splits[r + 1] - split_begin;
  if (n <= 1) return;  // written by the decode kernel
  const int lane = threadIdx.x % 32;
  const int col = COLS_PER_WARP * (threadIdx.x / 32) + 4 * lane;

  const float* g_lse = lse_accum + static_cast<int64_t>(split_begin) * q_rows + row;  // stride q_rows per piece
  float m = -INFINITY;
  for (int i = lane; i < n; i += 32) m = fmaxf(m, g_lse[static_cast<int64_t>(i) * q_rows]);
  m = warp_max(m);

  const int s = row / h_q, h = row % h_q;
  float* g_lse_out = lse + (static_cast<int64_t>(r) * h_q + h) * s_q + s;  // (b, h_q, s_q) transpose of rows
  __nv_bfloat16* g_out = out + (static_cast<int64_t>(r) * q_rows + row) * D_V + col;

  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  if (m == -INFINITY) {  // no piece saw a token
    if (threadIdx.x == 0) *g_lse_out = INFINITY;
  } else {
    float sum = 0.f;
    for (int i = lane; i < n; i += 32) {
      const float l = g_lse[static_cast<int64_t>(i) * q_rows];
      sum += l == -INFINITY ? 0.f : exp2f(l - m);
    }
    const float lse2 = m + log2f(warp_sum(sum));
    if (threadIdx.x == 0) *g_lse_out = lse2 * LN2;

    const float* g_o = o_accum + (static_cast<int64_t>(split_begin) * q_rows + row) * D_V + col;
    const int64_t piece_stride = static_cast<int64_t>(q_rows) * D_V;
    for (int base = 0; base < n; base += 32) {
      float my_w = 0.f;
      bool my_live = false;
      if (base + lane < n) {
        const float l = g_lse[static_cast<int64_t>(base + lane) * q_rows];
        my_live = l != -INFINITY;
        my_w = my_live ? exp2f(l - lse2) : 0.f;
      }
      const unsigned live_mask = __ballot_sync(0xffffffffu, my_live);  // bit j: piece base + j is live
      const int count = min(32, n - base);
      for (int j0 = 0; j0 < count; j0 += PIECES_IN_FLIGHT) {
        float4 v[PIECES_IN_FLIGHT];
#pragma unroll
        for (int u = 0; u < PIECES_IN_FLIGHT; ++u) {
          // Warp-uniform: past the group's end or an empty piece, whose o is not read (it may be NaN).
          const bool live = j0 + u < count && ((live_mask >> (j0 + u)) & 1u);
          v[u] = live ? *reinterpret_cast<const float4*>(g_o + (base + j0 + u) * piece_stride)
                      : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int u = 0; u < PIECES_IN_FLIGHT; ++u) {
          const float w = __shfl_sync(0xffffffffu, my_w, (j0 + u) % 32);
          if (!(j0 + u < count && ((live_mask >> (j0 + u)) & 1u))) continue;  // same rule, same order as before
          acc[0] = fmaf(w, v[u].x, acc[0]);
          acc[1] = fmaf(w, v[u].y, acc[1]);
          acc[2] = fmaf(w, v[u].z, acc[2]);
          acc[3] = fmaf(w, v[u].w, acc[3]);
        }
      }
    }
  }

  const __nv_bfloat162 lo = __floats2bfloat162_rn(acc[0], acc[1]);
  const __nv_bfloat162 hi = __floats2bfloat162_rn(acc[2], acc[3]);
  uint2 packed;
  packed.x = *reinterpret_cast<const uint32_t*>(&lo);
  packed.y = *reinterpret_cast<const uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(g_out) = packed;  // 8-B store, 256 B per warp
}

}  // namespace

void launch_combine(const DecodeParams& params, cudaStream_t stream) {
  const dim3 grid(params.q_rows, params.b);
  launch_pdl(snapmla_combine_kernel, grid, dim3(WARPS_PER_CTA * 32), 0, stream, params.num_splits, params.o_accum,
             params.lse_accum, params.out, params.lse, params.s_q, params.h_q, params.q_rows);
}

}  // namespace snapmla::combine
