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
//
// How the decode kernel walks row p (the plan itself is in plan.h; get_mla_metadata.cu computes it):
//   for r in [BEGIN_REQ, END_REQ]:
//     n_r   = ceil(min(max(seqlen_r, 0), max_pages * 64) / 64)   (the kernel clamps seqlens; the host cannot check)
//     first = r == BEGIN_REQ ? BEGIN_BLOCK : 0
//     last  = min(r == END_REQ ? END_BLOCK : n_r, n_r)            (exclusive; first == last is an empty piece)
//     split = r == BEGIN_REQ ? BEGIN_SPLIT : 0
//     pieces_r = num_splits[r + 1] - num_splits[r]
//     pieces_r == 1: write out[r] / lse[r] (an empty piece: o = 0, lse = +inf)
//     pieces_r  > 1: write o_accum / lse_accum[num_splits[r] + split] (o normalised by the piece's own L~,
//                    lse in log2 units, -inf for an empty piece; see combine/launch.h)
// Guarantees of the plan: pieces of a request cover its blocks in order, exactly once; a non-empty request
// never gets an empty piece (unless clamping to the block table shrank it); every part costs at most
// ceil(total cost / num_sm_parts) + PIECE_OVERHEAD_BLOCKS; total pieces <= b + num_sm_parts - 1, so a
// workspace of b + num_sm_parts pieces always suffices.
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
