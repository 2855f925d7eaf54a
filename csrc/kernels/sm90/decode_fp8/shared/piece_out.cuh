// Where a piece's O rows go, for the decode kernels' epilogues: the bf16 out (b, q_rows, 512) of a request that
// has one piece, or the bf16 o_accum (total_splits, q_rows, 512) slab of a split's piece. The slab's base is
// computed once per piece, so each row costs one address and each of its m-tiles' pairs one store at an
// immediate offset from it.
// Why it matters: with a 64-bit address built per store (both branches, 64 stores per thread) the wide kernel's
// stores spanned 41.7 KB of SASS and the narrow one's 34.7 KB (first to last STG), out of 128 / 114 KB. A CTA runs an epilogue once per
// piece, so each SM fetched those instructions cold, mid-launch, while the other SMs kept L2 and DRAM busy: the
// 13-33 us piece epilogues of the traces (docs/design.md).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "common/params.h"
#include "kernels/sm90/decode_fp8/shared/config.h"

namespace snapmla::sm90::decode_fp8 {

struct PieceOut {
  __nv_bfloat16* slab;  // row 0, dim 0 of the piece's (q_rows, 512) bf16 rows: in p.out or in p.o_accum
  float* lse_slab;      // the piece's (q_rows) lse_accum entries (split pieces only)
  bool single;          // one piece in the request: out and lse; else o_accum and lse_accum
  int elem;             // bytes per element: 2, but opaque to the compiler (see store_pair)
};

// split: the piece's index among the request's pieces (schedule.cuh piece_split). Reads num_splits[req] and
// num_splits[req + 1]: call it early in an epilogue, every store address waits for these two loads (mid-launch
// they queue behind the page stream, ~4-5 us; docs/design.md).
__device__ __forceinline__ PieceOut piece_out(const DecodeParams& p, int req, int split) {
  const int split_begin = p.num_splits[req];
  // <= 1, not == 1: hand-built metadata (vLLM's batch-invariant mode) may leave num_splits all zero; such a
  // request is one piece, written straight to out (the combine merges only requests of more than one).
  const bool single = p.num_splits[req + 1] - split_begin <= 1;
  const int64_t slab_row0 = static_cast<int64_t>(split_begin + split) * p.q_rows;  // (total_splits, q_rows)
  // p.out (b, q_rows, 512) for a single piece, else p.o_accum (total_splits, q_rows, 512); both bf16.
  __nv_bfloat16* const slab =
      single ? p.out + static_cast<int64_t>(req) * p.q_rows * D_V : p.o_accum + slab_row0 * D_V;
  return PieceOut{slab, single ? nullptr : p.lse_accum + slab_row0, single, opaque(2)};
}

// The lse of query row `row` (< q_rows) of the piece, from lse2 = m + log2(L / sigma) in the log2 domain:
//   one piece:  lse (b, h_q, s_q) = ln 2 * lse2 (natural log), +inf for a row with no visible token;
//   split:      lse_accum = lse2, -inf for such a row (the combine kernel gives it weight 0).
__device__ __forceinline__ void store_piece_lse(const DecodeParams& p, const PieceOut& po, int req, int row, float lse2,
                                                bool empty) {
  if (po.single) {
    const unsigned s = static_cast<unsigned>(row) / p.h_q, h = row - s * p.h_q;  // unsigned: a shorter division
    p.lse[(static_cast<int64_t>(req) * p.h_q + h) * p.s_q + s] = empty ? INFINITY : lse2 * LN2;
  } else {
    po.lse_slab[row] = empty ? -INFINITY : lse2;
  }
}

// Address of (row, dim) in the slab. row < q_rows <= 262140 (decode_api.cpp MAX_Q_ROWS) and dim < 512, so the
// element offset is < 2^28 and fits 32 bits.
__device__ __forceinline__ __nv_bfloat16* piece_out_row(const PieceOut& po, int row, int dim) {
  return reinterpret_cast<__nv_bfloat16*>(reinterpret_cast<char*>(po.slab) + (row * D_V + dim) * po.elem);
}

// Dims dim0 + dim_off and dim0 + dim_off + 1 of the row at `at` (= piece_out_row(po, row, dim0)). dim_off is a
// constant after unrolling (64 m-tile), so it becomes the store's immediate offset.
// Both destinations take the same 4-B store, yet on two paths (the split one in PTX, which the compiler cannot merge
// with the other), with the element size opaque in the address: the code shape of the fp32 partial outputs that
// these replaced. With one path or a constant element size, ptxas (CUDA 13.0) spilled 4-20 B in the ws kernel (a
// loop bound and predicates, in the PV and softmax warpgroups; tests/test_sass.py allows none).
__device__ __forceinline__ void store_pair(const PieceOut& po, __nv_bfloat16* at, int dim_off, float v0, float v1) {
  if (po.single) {
    *reinterpret_cast<__nv_bfloat162*>(at + dim_off) = __floats2bfloat162_rn(v0, v1);
  } else {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(v0, v1);
    asm volatile("st.global.b32 [%0], %1;" ::"l"(at + dim_off), "r"(*reinterpret_cast<const uint32_t*>(&pair))
                 : "memory");
  }
}

}  // namespace snapmla::sm90::decode_fp8
