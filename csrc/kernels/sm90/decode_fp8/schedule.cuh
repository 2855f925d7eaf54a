// The CTA's walk over its schedule row (sched/sched_meta.h): requests BEGIN_REQ .. END_REQ, one piece each.
// The producer and both math warpgroups walk the same pieces and blocks in the same order and count blocks with
// one running index per CTA, which is what gives every barrier its stage and phase.
#pragma once

#include "common/params.h"
#include "kernels/sched/sched_meta.h"
#include "kernels/sm90/decode_fp8/config.h"

namespace snapmla::sm90::decode_fp8 {

struct SchedRow {
  int begin_req, begin_block, end_req, end_block, begin_split;
};

__device__ __forceinline__ SchedRow load_sched_row(const DecodeParams& p, int part) {
  const int* meta = p.tile_scheduler_metadata + part * sched::SCHED_META_INTS;  // (num_sm_parts, 8)
  return SchedRow{meta[sched::BEGIN_REQ], meta[sched::BEGIN_BLOCK], meta[sched::END_REQ], meta[sched::END_BLOCK],
                  meta[sched::BEGIN_SPLIT]};
}

// One request's piece in this CTA: blocks [blk_begin, blk_end) of request `req`.
struct Piece {
  int req;
  int blk_begin, blk_end;
  int split;   // piece index within the request
  int seqlen;  // clamped to the block table's capacity, so no page id past it is ever read
};

__device__ __forceinline__ Piece make_piece(const DecodeParams& p, const SchedRow& row, int req) {
  const int capacity = p.max_pages_per_req * BLOCK_N;
  const int seqlen = min(max(p.cache_seqlens[req], 0), capacity);
  const int n_blocks = (seqlen + BLOCK_N - 1) / BLOCK_N;
  int blk_end = req == row.end_req ? row.end_block : n_blocks;
  blk_end = min(blk_end, n_blocks);
  const int blk_begin = min(req == row.begin_req ? row.begin_block : 0, blk_end);
  return Piece{req, blk_begin, blk_end, req == row.begin_req ? row.begin_split : 0, seqlen};
}

}  // namespace snapmla::sm90::decode_fp8
