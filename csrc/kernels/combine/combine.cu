// Split-KV combine: merges the per-piece partial results of each split request into out (bf16) and lse (fp32).
//
// For one query row of request r with pieces i = 0 .. n-1 (n = num_splits[r + 1] - num_splits[r] > 1):
//   lse2_i = lse_accum[num_splits[r] + i][row]  (log2 domain, -inf for an empty piece)
//   m = max_i lse2_i;  S = sum_i exp2(lse2_i - m);  lse2 = m + log2(S)
//   o = sum_i (exp2(lse2_i - m) / S) * o_i      (o_i is already the piece's own normalised output)
// The weights are normalised by S, not taken as exp2(lse2_i - lse2): at logits of ~1e18 (the input range's
// far end, docs/numerics_contract.md section 2) m + log2(S) rounds back to m in fp32, and weights of 1 for each
// of k equal pieces gave |o| = k |v|.
//   lse = lse2 * ln 2 (natural log); a row whose pieces are all empty gets o = 0, lse = +inf.
// Empty pieces are skipped by select, never weighted by 0: their o_accum rows are not guaranteed to be finite.
//
// Work split, one template (WARPS_PER_ROW, PIECE_GROUPS), the layout chosen on the host (launch.h):
//   - WARPS_PER_ROW = 4, few rows (b * q_rows <= COMBINE_SPLIT_ROWS_MAX; small batch, where each request has
//     many pieces: b = 1, h_q = 64, 8k tokens is 64 rows x 65 pieces, 8.5 MB): one CTA per row, 4 warps per
//     column set (warp q owns columns 128 q .., lane l one float4), 8 pieces' loads in flight per lane.
//     PIECE_GROUPS = 1, 2 or 4 such sets of 4 warps split the row's load groups (8 pieces each) round robin, so
//     a row with 65 pieces waits for 3 dependent load rounds instead of 9; the sets' partial sums meet in
//     shared memory and set 0 adds them in set order (piece_sets.h combine_piece_groups: from the expected number
//     of pieces per request, since the host never reads the device-side plan).
//   - WARPS_PER_ROW = 1, many rows (b = 64, h_q = 128: 8192 rows x ~2 pieces): 4 rows per CTA, one warp per row,
//     lane l the float4s at columns 4 l + 128 k (k < 4); 2 pieces (8 loads) in flight per lane.
// H200, 2026-12-01: one warp per row walking pieces one load group at a time took 20.1 us at b1 h64 (4 warps
// per row: 7.1 us); 4 warps per row for every shape took 28.6 us at b64 h128 32k (8192 CTAs, each a chain of
// dependent global loads; one warp per row had taken 10.5 us).
// Latency per CTA: num_splits -> the first 32 pieces' lse (kept in a register for the max, the sum and the
// weights) -> the o loads of the first group, issued before the weights are computed -> FMAs -> store.
// Each piece set sums its columns in piece order and the sets are added in a fixed order: the result is
// bit-reproducible for a given layout (layouts differ only in fp32 summation order).
#include <cuda_bf16.h>

#include "common/cuda_check.h"
#include "common/griddep.cuh"
#include "common/pdl.h"
#include "kernels/combine/launch.h"
#include "kv_layout.h"

namespace snapmla::combine {

namespace {

constexpr int D_V = kv_layout::D_CONTENT;  // 512
constexpr int LOADS_IN_FLIGHT = 8;         // 16-B loads per lane before the first FMA of a group
constexpr float LN2 = 0.6931471805599453f;

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

template <int WARPS_PER_ROW>
struct Layout {
  static constexpr int ROWS_PER_CTA = COMBINE_WARPS_PER_CTA / WARPS_PER_ROW;  // 1 or 4 (per piece set)
  static constexpr int VEC = D_V / WARPS_PER_ROW / (32 * 4);                 // float4 per lane: 1 or 4
  static constexpr int GROUP = LOADS_IN_FLIGHT / VEC;                        // pieces per load group: 8 or 2
  static_assert(VEC * WARPS_PER_ROW * 32 * 4 == D_V && GROUP * VEC == LOADS_IN_FLIGHT, "whole float4 columns");
};

// The o loads of pieces j0 .. j0 + GROUP - 1 of the current 32-piece chunk (zeros for dead or missing pieces:
// warp-uniform predicates, an empty piece's o is never read).
template <int WARPS_PER_ROW>
__device__ __forceinline__ void load_group(float4 (&v)[Layout<WARPS_PER_ROW>::GROUP][Layout<WARPS_PER_ROW>::VEC],
                                           const float* g_chunk, int64_t piece_stride, int j0, int count,
                                           unsigned live_mask) {
  using Lt = Layout<WARPS_PER_ROW>;
#pragma unroll
  for (int u = 0; u < Lt::GROUP; ++u) {
    const bool live = j0 + u < count && ((live_mask >> (j0 + u)) & 1u);
#pragma unroll
    for (int k = 0; k < Lt::VEC; ++k)
      v[u][k] = live ? *reinterpret_cast<const float4*>(g_chunk + (j0 + u) * piece_stride + 128 * k)
                     : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

template <int WARPS_PER_ROW, int PIECE_GROUPS>
__global__ void __launch_bounds__(COMBINE_WARPS_PER_CTA * 32 * PIECE_GROUPS)
    snapmla_combine_kernel(const int* __restrict__ num_splits,   // (b + 1,)
                           const float* __restrict__ o_accum,    // (total_splits, q_rows, 512)
                           const float* __restrict__ lse_accum,  // (total_splits, q_rows)
                           __nv_bfloat16* __restrict__ out,      // (b, s_q, h_q, 512), row = s * h_q + h
                           float* __restrict__ lse,              // (b, h_q, s_q)
                           int s_q, int h_q, int q_rows) {
  using Lt = Layout<WARPS_PER_ROW>;
  static_assert(PIECE_GROUPS == 1 || (WARPS_PER_ROW == 4 && (PIECE_GROUPS == 2 || PIECE_GROUPS == 4)),
                "piece sets only in the one-row-per-CTA layout (a CTA-uniform row and piece count)");
  static_assert(piece_sets_align_to_chunks(PIECE_GROUPS, Lt::GROUP), "every 32-piece chunk starts with set 0");
  // Partial sums of sets 1 .. PIECE_GROUPS - 1: per set, thread, float4 column (4 KB per set x 128 threads).
  __shared__ float4 partial[PIECE_GROUPS > 1 ? PIECE_GROUPS - 1 : 1][COMBINE_WARPS_PER_CTA * 32][Lt::VEC];
  griddep_wait();  // PDL (common/pdl.h): the decode kernel's partial results are complete and visible
  const int r = blockIdx.y;
  // Piece set: load groups set, set + PIECE_GROUPS, ... of each chunk (a constant 0 for one set).
  const int set = PIECE_GROUPS > 1 ? static_cast<int>(threadIdx.x) / (COMBINE_WARPS_PER_CTA * 32) : 0;
  const int set_tid = PIECE_GROUPS > 1 ? static_cast<int>(threadIdx.x) % (COMBINE_WARPS_PER_CTA * 32)
                                       : static_cast<int>(threadIdx.x);
  const int warp = set_tid / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * Lt::ROWS_PER_CTA + warp / WARPS_PER_ROW;
  const int split_begin = num_splits[r];
  const int n = num_splits[r + 1] - split_begin;
  // CTA-uniform when PIECE_GROUPS > 1 (one row per CTA), so no thread leaves before the __syncthreads below.
  if (n <= 1 || row >= q_rows) return;  // n <= 1: written by the decode kernel
  const int col = (D_V / WARPS_PER_ROW) * (warp % WARPS_PER_ROW) + 4 * lane;  // first column of the lane
  const int first_j0 = piece_set_first_j0(set, Lt::GROUP);  // piece_sets.h: the set's load groups in a chunk
  constexpr int J0_STEP = piece_set_j0_step(PIECE_GROUPS, Lt::GROUP);

  // Every set reads all of the row's lse values and computes the weights for itself: 4 B per piece and lane
  // against the 2 KB of o it loads per piece, cheaper than a shared-memory round trip and a barrier.
  const float* g_lse = lse_accum + static_cast<int64_t>(split_begin) * q_rows + row;  // stride q_rows per piece
  auto lse_of = [&](int i) { return g_lse[static_cast<int64_t>(i) * q_rows]; };
  const float l_first = lane < n ? lse_of(lane) : -INFINITY;  // pieces 0 .. 31, one per lane
  const unsigned live_first = __ballot_sync(0xffffffffu, l_first != -INFINITY);
  const float* g_o = o_accum + (static_cast<int64_t>(split_begin) * q_rows + row) * D_V + col;
  const int64_t piece_stride = static_cast<int64_t>(q_rows) * D_V;
  float4 v[Lt::GROUP][Lt::VEC];
  // In flight during the weights.
  load_group<WARPS_PER_ROW>(v, g_o, piece_stride, first_j0, min(32, n), live_first);

  float m = l_first;
  for (int i = 32 + lane; i < n; i += 32) m = fmaxf(m, lse_of(i));
  m = warp_max(m);

  const int s = row / h_q, h = row % h_q;
  float* g_lse_out = lse + (static_cast<int64_t>(r) * h_q + h) * s_q + s;  // (b, h_q, s_q) transpose of rows
  __nv_bfloat16* g_out = out + (static_cast<int64_t>(r) * q_rows + row) * D_V + col;

  float acc[Lt::VEC][4] = {};
  const bool writer = set == 0 && warp % WARPS_PER_ROW == 0 && lane == 0;
  if (m == -INFINITY) {  // no piece saw a token
    if (writer) *g_lse_out = INFINITY;
  } else {
    float sum = l_first == -INFINITY ? 0.f : exp2f(l_first - m);
    for (int i = 32 + lane; i < n; i += 32) {
      const float l = lse_of(i);
      sum += l == -INFINITY ? 0.f : exp2f(l - m);
    }
    const float total = warp_sum(sum);  // >= 1: the largest piece contributes exp2(0)
    const float inv_total = 1.f / total;
    const float lse2 = m + log2f(total);
    if (writer) *g_lse_out = lse2 * LN2;

    for (int base = 0; base < n; base += 32) {
      const float l = base == 0 ? l_first : (base + lane < n ? lse_of(base + lane) : -INFINITY);
      const bool my_live = l != -INFINITY;
      const float my_w = my_live ? exp2f(l - m) * inv_total : 0.f;
      const unsigned live_mask = __ballot_sync(0xffffffffu, my_live);  // bit j: piece base + j is live
      const int count = min(32, n - base);
      const float* g_chunk = g_o + base * piece_stride;
      for (int j0 = first_j0; j0 < count; j0 += J0_STEP) {
        if (base > 0 || j0 > first_j0) load_group<WARPS_PER_ROW>(v, g_chunk, piece_stride, j0, count, live_mask);
#pragma unroll
        for (int u = 0; u < Lt::GROUP; ++u) {
          const float w = __shfl_sync(0xffffffffu, my_w, (j0 + u) & 31);
          if (!(j0 + u < count && ((live_mask >> (j0 + u)) & 1u))) continue;  // warp-uniform, piece order
#pragma unroll
          for (int k = 0; k < Lt::VEC; ++k) {
            acc[k][0] = fmaf(w, v[u][k].x, acc[k][0]);
            acc[k][1] = fmaf(w, v[u][k].y, acc[k][1]);
            acc[k][2] = fmaf(w, v[u][k].z, acc[k][2]);
            acc[k][3] = fmaf(w, v[u][k].w, acc[k][3]);
          }
        }
      }
    }
  }

  if constexpr (PIECE_GROUPS > 1) {
    if (set > 0) {
#pragma unroll
      for (int k = 0; k < Lt::VEC; ++k)
        partial[set - 1][set_tid][k] = make_float4(acc[k][0], acc[k][1], acc[k][2], acc[k][3]);
    }
    __syncthreads();
    if (set > 0) return;
#pragma unroll
    for (int g = 0; g < PIECE_GROUPS - 1; ++g) {
#pragma unroll
      for (int k = 0; k < Lt::VEC; ++k) {
        const float4 q = partial[g][set_tid][k];
        acc[k][0] += q.x;
        acc[k][1] += q.y;
        acc[k][2] += q.z;
        acc[k][3] += q.w;
      }
    }
  }
#pragma unroll
  for (int k = 0; k < Lt::VEC; ++k) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(acc[k][0], acc[k][1]);
    const __nv_bfloat162 hi = __floats2bfloat162_rn(acc[k][2], acc[k][3]);
    uint2 packed;
    packed.x = *reinterpret_cast<const uint32_t*>(&lo);
    packed.y = *reinterpret_cast<const uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(g_out + 128 * k) = packed;  // 8-B store, 256 B per warp per k
  }
}

template <int WARPS_PER_ROW, int PIECE_GROUPS>
void launch_layout(const DecodeParams& params, unsigned row_ctas, cudaStream_t stream) {
  launch_pdl(snapmla_combine_kernel<WARPS_PER_ROW, PIECE_GROUPS>, dim3(row_ctas, params.b),
             dim3(COMBINE_WARPS_PER_CTA * 32 * PIECE_GROUPS), 0, stream, params.num_splits, params.o_accum,
             params.lse_accum, params.out, params.lse, params.s_q, params.h_q, params.q_rows);
}

}  // namespace

void launch_combine(const DecodeParams& params, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(params.b) * params.q_rows;
  if (rows <= COMBINE_SPLIT_ROWS_MAX) {
    switch (combine_piece_groups(params.b, params.num_sm_parts)) {
      case 4: launch_layout<4, 4>(params, params.q_rows, stream); break;
      case 2: launch_layout<4, 2>(params, params.q_rows, stream); break;
      default: launch_layout<4, 1>(params, params.q_rows, stream); break;
    }
  } else {
    launch_layout<1, 1>(params, (params.q_rows + COMBINE_WARPS_PER_CTA - 1) / COMBINE_WARPS_PER_CTA, stream);
  }
}

}  // namespace snapmla::combine
