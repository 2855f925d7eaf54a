// Split-KV scheduling metadata: the contract between the device scheduler (get_mla_metadata), the decode
// kernel and the combine kernel.
//
// The KV work of all requests is laid out as one list of 64-token blocks, request after request. The scheduler
// cuts it into num_sm_parts contiguous runs of about equal cost (cost of a request = its blocks + a fixed
// overhead per request), one per CTA column of the decode grid. Row i of tile_scheduler_metadata (int32):
//   [BEGIN_REQ]       first request the CTA touches
//   [BEGIN_BLOCK]     first block (64-token index) within BEGIN_REQ
//   [END_REQ]         last request the CTA touches (inclusive)
//   [END_BLOCK]       one past the last block within END_REQ (exclusive)
//   [BEGIN_SPLIT]     split index within BEGIN_REQ of this CTA's first piece (later requests start at split 0)
// A CTA with no work has BEGIN_REQ > END_REQ. num_splits (b + 1) is the exclusive prefix sum of the number
// of pieces per request; a request with exactly one piece is written straight to out/lse by the decode kernel,
// otherwise each piece writes o_accum/lse_accum[num_splits[r] + split] and the combine kernel merges them.
// A request of length 0 has one piece of zero blocks (so its rows get o = 0, lse = +inf).
#pragma once

namespace snapmla::sched {

enum SchedMetaField : int {
  BEGIN_REQ = 0,
  BEGIN_BLOCK = 1,
  END_REQ = 2,
  END_BLOCK = 3,
  BEGIN_SPLIT = 4,
  SCHED_META_INTS = 8,  // padded to 32 B
};

// Fixed cost (in blocks) charged per request piece when balancing: the prologue/epilogue of one piece.
inline constexpr int PIECE_OVERHEAD_BLOCKS = 5;

}  // namespace snapmla::sched
