// Where a piece's O rows go, for both decode kernels' epilogues: the bf16 out (b, q_rows, 512) of a request that
// has one piece, or the fp32 o_accum (total_splits, q_rows, 512) slab of a split's piece. The slab's base and
// the element size are computed once per piece, so each row costs one address and each of its m-tiles' pairs one
// store at an immediate offset from it.
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
  char* slab;       // row 0, dim 0 of the piece's (q_rows, 512) rows: bf16 in p.out or fp32 in p.o_accum
  float* lse_slab;  // the piece's (q_rows) lse_accum entries (split pieces only)
  bool single;      // one piece in the request: bf16 out, 2 B per element, lse into p.lse; else fp32, 4 B
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
  // p.out (b, q_rows, 512) bf16 for a single piece, else p.o_accum (total_splits, q_rows, 512) fp32.
  char* const slab = single ? reinterpret_cast<char*>(p.out + static_cast<int64_t>(req) * p.q_rows * D_V)
                            : reinterpret_cast<char*>(p.o_accum + slab_row0 * D_V);
  return PieceOut{slab, single ? nullptr : p.lse_accum + slab_row0, single};
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
// byte offset is < 2^29 and fits 32 bits.
__device__ __forceinline__ char* piece_out_row(const PieceOut& po, int row, int dim) {
  const int elem = po.single ? 2 : 4;
  return po.slab + (row * D_V + dim) * elem;
}

// Dims dim0 + dim_off and dim0 + dim_off + 1 of the row at `at` (= piece_out_row(po, row, dim0)). dim_off is a
// constant after unrolling (64 m-tile), so it becomes the store's immediate offset.
__device__ __forceinline__ void store_pair(const PieceOut& po, char* at, int dim_off, float v0, float v1) {
  if (po.single)
    *reinterpret_cast<__nv_bfloat162*>(at + 2 * dim_off) = __floats2bfloat162_rn(v0, v1);
  else
    *reinterpret_cast<float2*>(at + 4 * dim_off) = make_float2(v0, v1);
}

}  // namespace snapmla::sm90::decode_fp8
