// Split-KV combine: merges the per-piece partial results of each split request into out (bf16) and lse (fp32).
//
// For one query row of request r with pieces i = 0 .. n-1 (n = num_splits[r + 1] - num_splits[r] > 1):
//   lse2_i = lse_accum[num_splits[r] + i][row]  (log2 domain, -inf for an empty piece)
//   m = max_i lse2_i;  S = sum_i exp2(lse2_i - m);  lse2 = m + log2(S)
//   o = sum_i (exp2(lse2_i - m) / S) * o_i      (o_i is the piece's own normalised output, bf16 in o_accum)
// The weights are normalised by S, not taken as exp2(lse2_i - lse2): at logits of ~1e18 (the input range's
// far end, docs/numerics_contract.md section 2) m + log2(S) rounds back to m in fp32, and weights of 1 for each
// of k equal pieces gave |o| = k |v|.
//   lse = lse2 * ln 2 (natural log); a row whose pieces are all empty gets o = 0, lse = +inf.
// Empty pieces are skipped by select, never weighted by 0: their o_accum rows are not guaranteed to be finite.
//
// Work split (layout.h): up to 128 rows (b = 1 at h_q 128, b <= 2 at 64) spread each row over 1, 2 or 4 CTAs and
// up to 16 sets of warps that take the row's load groups of 16 pieces round robin, so that a request of up to
// ~128 pieces is one round of loads per lane; up to 512 rows one CTA per row with up to 4 sets and groups of 8
// pieces; many rows one warp per row, 4 rows per CTA, groups of 2 pieces.
// Why the layouts differ (H200, 2026-12-01): at b1 h64 one warp per row walking the pieces one load group at a
// time took 20.1 us, one CTA of 4 warps per row 7.1 us, and with 4 sets 5.9 us; at b64 h128 32k 4 warps per row
// took 28.6 us (8192 CTAs, each a chain of dependent global loads) against one warp per row's 10.5 us. Spreading
// a row over CTAs (the fan-out) gave 1.05-1.08x more for the whole call at b = 1 (H100, 2026-12-07,
// docs/design.md section 1).
// Latency per CTA: num_splits -> the o loads of the set's first group (issued before anything else is known;
// every piece of the row has an o_accum row, an empty piece's is loaded and never used) and the row's lse
// values -> max, sum, the chunk's weights -> FMAs -> the sets' partial sums in shared memory -> store.
// Each set sums its columns in piece order and the sets are added in set order: the result is bit-reproducible
// for a given layout (layouts differ only in fp32 summation order).
#include <cuda_bf16.h>

#include "common/cuda_check.h"
#include "common/griddep.cuh"
#include "common/pdl.h"
#include "kernels/combine/launch.h"
#include "kv_layout.h"

namespace snapmla::combine {

namespace {

constexpr int D_V = kv_layout::D_CONTENT;  // 512
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

// CTA geometry of a layout (layout.h): SETS sets of WARPS_PER_SET x ROWS_PER_CTA warps; a warp covers 128 VEC
// columns of one row, a CTA 512 / COL_SPLIT columns of ROWS_PER_CTA rows.
template <int WARPS_PER_SET_, int SETS_, int ROWS_PER_CTA_, int VEC_, int GROUP_>
struct Layout {
  static constexpr int WARPS_PER_SET = WARPS_PER_SET_, SETS = SETS_, ROWS_PER_CTA = ROWS_PER_CTA_, VEC = VEC_;
  static constexpr int GROUP = GROUP_;  // pieces per load group: VEC x GROUP loads in flight per lane
  static constexpr int COL_SPLIT = D_V / (WARPS_PER_SET * 128 * VEC);
  static constexpr int SET_THREADS = 32 * WARPS_PER_SET * ROWS_PER_CTA;
  static constexpr int THREADS = SET_THREADS * SETS;
  // __launch_bounds__' minimum CTAs per SM: one CTA per row at 512 threads keeps two per SM (at most 64
  // registers; the fan-out's ~116 allow one). 0 leaves ptxas its default, as without the argument: smaller CTAs
  // of this layout get 64 registers that way, and 72-80 with a minimum of 2.
  static constexpr int MIN_CTAS =
      GROUP == COMBINE_ROW_CTA_GROUP && THREADS == COMBINE_MAX_THREADS ? COMBINE_ROW_CTA_MIN_CTAS : 0;
  static_assert(COL_SPLIT * WARPS_PER_SET * 128 * VEC == D_V, "whole quads of columns");
  static_assert(combine_group_fits_chunks(GROUP), "a load group lies inside one 32-piece chunk of weights");
  static_assert(SETS == 1 || ROWS_PER_CTA == 1, "sets only with one row per CTA (a CTA-uniform row and piece count)");
  static_assert(ROWS_PER_CTA == 1 || COL_SPLIT == 1, "a row's columns split over CTAs only with one row per CTA");
};
using ManyRows = Layout<1, 1, 4, 4, COMBINE_MANY_ROWS_GROUP>;
template <int WARPS_PER_SET, int SETS, int GROUP>
using FewRows = Layout<WARPS_PER_SET, SETS, 1, 1, GROUP>;

// A quad: four bf16 of o_accum (one 8-B load) as floats.
__device__ __forceinline__ float4 load_quad(const __nv_bfloat16* at) {
  const uint2 u = *reinterpret_cast<const uint2*>(at);
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

// The o loads of pieces j0 .. j0 + GROUP - 1 that exist (j < n; zeros past n). An empty piece's row is loaded
// too: it is allocated, and its value is never used (the FMAs skip it by the live mask).
template <class Lt>
__device__ __forceinline__ void load_group(float4 (&v)[Lt::GROUP][Lt::VEC], const __nv_bfloat16* g_o,
                                           int64_t piece_stride, int j0, int n) {
#pragma unroll
  for (int u = 0; u < Lt::GROUP; ++u) {
#pragma unroll
    for (int k = 0; k < Lt::VEC; ++k)
      v[u][k] = j0 + u < n ? load_quad(g_o + (j0 + u) * piece_stride + 128 * k) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

template <class Lt>
__global__ void __launch_bounds__(Lt::THREADS, Lt::MIN_CTAS)
    snapmla_combine_kernel(const int* __restrict__ num_splits,   // (b + 1,)
                           const __nv_bfloat16* __restrict__ o_accum,  // (total_splits, q_rows, 512)
                           const float* __restrict__ lse_accum,  // (total_splits, q_rows)
                           __nv_bfloat16* __restrict__ out,      // (b, s_q, h_q, 512), row = s * h_q + h
                           float* __restrict__ lse,              // (b, h_q, s_q)
                           int s_q, int h_q, int q_rows) {
  constexpr int GROUP = Lt::GROUP, VEC = Lt::VEC, SETS = Lt::SETS;
  // Partial sums of sets 1 .. SETS - 1: per set, thread, float4 column (at most 15 x 32 x 16 B = 7.5 KB).
  __shared__ float4 partial[SETS > 1 ? SETS - 1 : 1][Lt::SET_THREADS][VEC];
  griddep_wait();  // PDL (common/pdl.h): the decode kernel's partial results are complete and visible
  const int r = blockIdx.y;
  const int set = SETS > 1 ? static_cast<int>(threadIdx.x) / Lt::SET_THREADS : 0;
  const int set_tid = SETS > 1 ? static_cast<int>(threadIdx.x) % Lt::SET_THREADS : static_cast<int>(threadIdx.x);
  const int warp = set_tid / 32, lane = threadIdx.x % 32;
  const int slice = static_cast<int>(blockIdx.x) % Lt::COL_SPLIT;  // the CTA's column slice of the row
  const int row = static_cast<int>(blockIdx.x) / Lt::COL_SPLIT * Lt::ROWS_PER_CTA + warp / Lt::WARPS_PER_SET;
  const int split_begin = num_splits[r];
  const int n = num_splits[r + 1] - split_begin;
  // CTA-uniform when SETS > 1 (one row per CTA), so no thread leaves before the __syncthreads below.
  if (n <= 1 || row >= q_rows) return;  // n <= 1: written by the decode kernel
  const int col = slice * (D_V / Lt::COL_SPLIT) + 128 * VEC * (warp % Lt::WARPS_PER_SET) + 4 * lane;

  const __nv_bfloat16* g_o = o_accum + (static_cast<int64_t>(split_begin) * q_rows + row) * D_V + col;
  const int64_t piece_stride = static_cast<int64_t>(q_rows) * D_V;
  float4 v[GROUP][VEC];
  // The set's first group, in flight while the lse values are read and the weights computed.
  const int g_first = combine_first_group(set);
  load_group<Lt>(v, g_o, piece_stride, combine_group_first_piece(g_first, GROUP), n);

  // Every warp reads all of the row's lse values and computes the weights for itself: 4 B per piece and lane
  // against the 256 B of o it loads per piece, cheaper than a shared-memory round trip and a barrier.
  const float* g_lse = lse_accum + static_cast<int64_t>(split_begin) * q_rows + row;  // stride q_rows per piece
  auto lse_of = [&](int i) { return g_lse[static_cast<int64_t>(i) * q_rows]; };
  float m = -INFINITY;
  for (int i = lane; i < n; i += 32) m = fmaxf(m, lse_of(i));
  m = warp_max(m);

  const int s = row / h_q, h = row % h_q;
  float* g_lse_out = lse + (static_cast<int64_t>(r) * h_q + h) * s_q + s;  // (b, h_q, s_q) transpose of rows
  __nv_bfloat16* g_out = out + (static_cast<int64_t>(r) * q_rows + row) * D_V + col;

  float acc[VEC][4] = {};
  const bool writer = set == 0 && slice == 0 && warp % Lt::WARPS_PER_SET == 0 && lane == 0;
  if (m == -INFINITY) {  // no piece saw a token
    if (writer) *g_lse_out = INFINITY;
  } else {
    float sum = 0.f;
    for (int i = lane; i < n; i += 32) {
      const float l = lse_of(i);
      sum += l == -INFINITY ? 0.f : exp2f(l - m);
    }
    const float total = warp_sum(sum);  // >= 1: the largest piece contributes exp2(0)
    const float inv_total = 1.f / total;
    const float lse2 = m + log2f(total);
    if (writer) *g_lse_out = lse2 * LN2;

    int chunk = -1;  // the 32-piece chunk whose weights the lanes hold
    float my_w = 0.f;
    unsigned live_mask = 0u;  // bit j: piece chunk * 32 + j is live
    for (int g = g_first; combine_group_first_piece(g, GROUP) < n; g = combine_next_group(g, SETS)) {
      const int j0 = combine_group_first_piece(g, GROUP);
      if (g != g_first) load_group<Lt>(v, g_o, piece_stride, j0, n);
      if (j0 / COMBINE_CHUNK_PIECES != chunk) {
        chunk = j0 / COMBINE_CHUNK_PIECES;
        const int i = chunk * COMBINE_CHUNK_PIECES + lane;
        const float l = i < n ? lse_of(i) : -INFINITY;
        const bool my_live = l != -INFINITY;
        my_w = my_live ? exp2f(l - m) * inv_total : 0.f;
        live_mask = __ballot_sync(0xffffffffu, my_live);
      }
#pragma unroll
      for (int u = 0; u < GROUP; ++u) {
        const int j = (j0 + u) % COMBINE_CHUNK_PIECES;
        const float w = __shfl_sync(0xffffffffu, my_w, j);
        if (j0 + u >= n || !((live_mask >> j) & 1u)) continue;  // warp-uniform, piece order
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          acc[k][0] = fmaf(w, v[u][k].x, acc[k][0]);
          acc[k][1] = fmaf(w, v[u][k].y, acc[k][1]);
          acc[k][2] = fmaf(w, v[u][k].z, acc[k][2]);
          acc[k][3] = fmaf(w, v[u][k].w, acc[k][3]);
        }
      }
    }
  }

  if constexpr (SETS > 1) {
    if (set > 0) {
#pragma unroll
      for (int k = 0; k < VEC; ++k)
        partial[set - 1][set_tid][k] = make_float4(acc[k][0], acc[k][1], acc[k][2], acc[k][3]);
    }
    __syncthreads();
    if (set > 0) return;
#pragma unroll
    for (int g = 0; g < SETS - 1; ++g) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float4 q = partial[g][set_tid][k];
        acc[k][0] += q.x;
        acc[k][1] += q.y;
        acc[k][2] += q.z;
        acc[k][3] += q.w;
      }
    }
  }
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(acc[k][0], acc[k][1]);
    const __nv_bfloat162 hi = __floats2bfloat162_rn(acc[k][2], acc[k][3]);
    uint2 packed;
    packed.x = *reinterpret_cast<const uint32_t*>(&lo);
    packed.y = *reinterpret_cast<const uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(g_out + 128 * k) = packed;  // 8-B store, 256 B per warp per k
  }
}

template <class Lt>
void launch_layout(const DecodeParams& params, unsigned row_ctas, cudaStream_t stream) {
  launch_pdl(snapmla_combine_kernel<Lt>, dim3(row_ctas * Lt::COL_SPLIT, params.b), dim3(Lt::THREADS), 0, stream,
             params.num_splits, params.o_accum, params.lse_accum, params.out, params.lse, params.s_q, params.h_q,
             params.q_rows);
}

// Fan-out and one CTA per row: the smallest instantiated set count S >= sets (powers of two up to
// COMBINE_MAX_THREADS / 32 W).
template <int WARPS_PER_SET, int GROUP, int S = 1>
void launch_few_rows(const DecodeParams& params, int sets, cudaStream_t stream) {
  if constexpr (32 * WARPS_PER_SET * S * 2 > COMBINE_MAX_THREADS) {
    launch_layout<FewRows<WARPS_PER_SET, S, GROUP>>(params, params.q_rows, stream);
  } else {
    if (sets <= S) launch_layout<FewRows<WARPS_PER_SET, S, GROUP>>(params, params.q_rows, stream);
    else launch_few_rows<WARPS_PER_SET, GROUP, 2 * S>(params, sets, stream);
  }
}

}  // namespace

void launch_combine(const DecodeParams& params, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(params.b) * params.q_rows;
  const CombineLayout lt = choose_combine_layout(rows, params.b, params.num_sm_parts);
  if (lt.many_rows) {
    launch_layout<ManyRows>(params, (params.q_rows + 3) / 4, stream);
    return;
  }
  if (lt.group == COMBINE_ROW_CTA_GROUP) {
    launch_few_rows<4, COMBINE_ROW_CTA_GROUP>(params, lt.sets, stream);
    return;
  }
  switch (lt.warps_per_set) {
    case 4: launch_few_rows<4, COMBINE_FAN_OUT_GROUP>(params, lt.sets, stream); break;
    case 2: launch_few_rows<2, COMBINE_FAN_OUT_GROUP>(params, lt.sets, stream); break;
    default: launch_few_rows<1, COMBINE_FAN_OUT_GROUP>(params, lt.sets, stream); break;
  }
}

}  // namespace snapmla::combine
