// The CTA's walk over its schedule row (sched/sched_meta.h): requests BEGIN_REQ .. END_REQ, one piece each.
// The producer and both math warpgroups walk the same pieces and blocks in the same order and count blocks with
// one running index per CTA, which is what gives every barrier its stage and phase.
#pragma once

#include "common/params.h"
#include "kernels/sched/sched_meta.h"
#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/decode_fp8/shared/config.h"

namespace snapmla::sm90::decode_fp8 {

// The request range of the CTA's schedule row; the block and split bounds stay in global memory (read once per
// piece through L1) so that no role keeps five registers for them.
struct SchedRow {
  int begin_req, end_req;
};

// Rebuilt at each use (opaque) rather than kept as a 64-bit pointer across the math warpgroups' block loop.
__device__ __forceinline__ const int* sched_meta_row(const DecodeParams& p) {
  return p.tile_scheduler_metadata + opaque(static_cast<int>(blockIdx.y)) * sched::SCHED_META_INTS;  // (num_sm_parts, 8)
}

__device__ __forceinline__ SchedRow load_sched_row(const DecodeParams& p) {
  const int* meta = sched_meta_row(p);
  return SchedRow{meta[sched::BEGIN_REQ], meta[sched::END_REQ]};
}

// One request's piece in this CTA: blocks [blk_begin, blk_end) of request `req`.
struct Piece {
  int req;
  int blk_begin, blk_end;
  int seqlen;  // clamped to the block table's capacity, so no page id past it is ever read
};

// Per query row of a piece (both decode kernels): the logit multiplier q_scale * softmax_scale * log2 e (0 for a
// row past q_rows, whose q_scale is not read), and how many of the request's seqlen tokens the row sees: causal
// query token s = q_row / h_q sees 0 .. seqlen - s_q + s (docs/numerics_contract.md section 5), every row sees all of them otherwise.
__device__ __forceinline__ float row_logit_multiplier(const DecodeParams& p, int req, int q_row, bool valid) {
  const float qs = valid ? p.q_scale[static_cast<int64_t>(req) * p.q_scale_batch_stride + q_row] : 0.f;  // (b, q_rows)
  return qs * (p.softmax_scale * LOG2E);
}
__device__ __forceinline__ int row_visible_tokens(const DecodeParams& p, int seqlen, int q_row, bool valid) {
  return p.causal && valid ? seqlen - p.s_q + q_row / p.h_q + 1 : seqlen;
}

// Leading blocks of a request that every query row sees whole: the blocks below the shortest row's visible length
// (causal: query token 0 sees seqlen - s_q + 1 tokens). The same for all threads of a CTA (it reads no row), so a
// loop bound from it is uniform: the ws kernel runs these blocks without the mask's selects.
__device__ __forceinline__ int whole_blocks(const DecodeParams& p, int seqlen) {
  const int shortest = p.causal ? seqlen - p.s_q + 1 : seqlen;
  return shortest > 0 ? shortest / BLOCK_N : 0;
}

// The two rows of a math thread in a 64-row tile (the decode kernels with 64-row tiles, wide and ws): rows
// lane / 4 and lane / 4 + 8 of its warp's slab, which starts at query row warp_q_row0 and holds rpw rows
// (launch.h rows_per_warp). q_mul and limit as above; a padding row gets q_mul 0 and sees every token.
__device__ __forceinline__ void tile_rows(const DecodeParams& p, int req, int seqlen, int warp_q_row0, int rpw, int lane,
                                          float (&q_mul)[2], int (&limit)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int q_row = warp_q_row0 + lane / 4 + 8 * r;
    const bool valid = lane / 4 + 8 * r < rpw && q_row < p.q_rows;
    q_mul[r] = row_logit_multiplier(p, req, q_row, valid);
    limit[r] = row_visible_tokens(p, seqlen, q_row, valid);
  }
}

// A math thread's place in its warpgroup and in the WGMMA accumulator fragment (wgmma.cuh), for the 64-row tile
// kernels (wide, ws): warp 0..3 of the warpgroup, lane, t = lane % 4 (its columns 8i + 2t + e) and
// row0 = 16 warp + lane / 4 (its rows row0 and row0 + 8).
struct MathThread {
  int warp, lane, t, row0;
};
__device__ __forceinline__ MathThread math_thread() {
  const int tid = threadIdx.x % WG_THREADS;
  const int warp = tid / 32, lane = tid % 32;
  return MathThread{warp, lane, lane % 4, 16 * warp + lane / 4};
}

// Index of the request's piece that starts this schedule row (the first request may continue a split one).
__device__ __forceinline__ int piece_split(const DecodeParams& p, const SchedRow& row, int req) {
  return req == row.begin_req ? sched_meta_row(p)[sched::BEGIN_SPLIT] : 0;
}

__device__ __forceinline__ Piece make_piece(const DecodeParams& p, const SchedRow& row, int req) {
  const int* meta = sched_meta_row(p);
  // Pages the table's storage holds for this request (params.h): reading further would leave the allocation.
  // int32 and no clamp of its own (64-bit arithmetic here cost the ws kernel's 104-register softmax warpgroup a
  // spill): the host caps block_table_entries at INT_MAX / 64, so the product cannot overflow, and the max() below
  // turns a negative capacity (a row past the capped entries) into an empty request.
  const int capacity = (p.block_table_entries - req * static_cast<int>(p.block_table_batch_stride)) * BLOCK_N;
  const int seqlen = max(min(p.cache_seqlens[req], capacity), 0);
  const int n_blocks = (seqlen + BLOCK_N - 1) / BLOCK_N;
  int blk_end = req == row.end_req ? meta[sched::END_BLOCK] : n_blocks;
  blk_end = min(blk_end, n_blocks);
  const bool first = req == row.begin_req;
  const int blk_begin = min(first ? meta[sched::BEGIN_BLOCK] : 0, blk_end);
  return Piece{req, blk_begin, blk_end, seqlen};
}

}  // namespace snapmla::sm90::decode_fp8
