// Split-KV planning arithmetic, shared by the device scheduler (get_mla_metadata.cu), the CPU path of the
// get_mla_metadata op (sched_api.cpp) and the host unit test (tests/cpp/test_sched_plan.cpp).
//
// The plan is a closed form, so every part and every request is computed independently (one thread each, no
// sequential walk over the batch):
//   - Request r has n_r = ceil(seqlen_r / 64) blocks and costs COST_r = PIECE_OVERHEAD_BLOCKS + n_r.
//     Its requests are laid end to end on a cost line: request r occupies [C_r, C_{r+1}), C_0 = 0,
//     C_{r+1} = C_r + COST_r (int64: garbage seqlens cannot overflow it).
//   - The overhead comes first; block k of request r sits at position C_r + OVERHEAD + k. A zero-length
//     request has one empty item at C_{r+1} - 1 (its empty piece). So every request's items end at
//     C_{r+1} - 1 and start at C_{r+1} - max(n_r, 1).
//   - Parts longer than a piece's fixed cost (P = ceil(C_b / num_sm_parts) > PIECE_OVERHEAD_BLOCKS) share the
//     line evenly: part p owns [part_begin(p), part_begin(p + 1)), part_begin(p) = floor(p * C_b / num_sm_parts),
//     lengths P - 1 or P, none empty. Shorter parts own [p * P, (p + 1) * P): the last ones short or empty
//     (empty parts must come last, or a request would count a piece in an empty part between two of its own).
//     Laid out the second way, b = 16 at 8k would leave 6 of 132 parts empty.
// Each part then runs over whole cost units except for at most one continuation piece whose overhead the
// line did not charge, so every part costs at most P + PIECE_OVERHEAD_BLOCKS blocks (tests/test_sched.py).
// A request's pieces are the parts from part_of(first item) to part_of(last item): every part in between owns
// at least one of its blocks, because blocks are consecutive positions and no part before the last
// non-empty one is empty.
#pragma once

#include <cstdint>

#include "kernels/sched/sched_meta.h"
#include "kv_layout.h"

namespace snapmla::sched {

// Blocks of a request (negative seqlens count as empty; the decode kernel clamps to the block table).
SNAPMLA_HOST_DEVICE inline int64_t request_blocks(int seqlen) {
  return seqlen <= 0 ? 0 : (static_cast<int64_t>(seqlen) + kv_layout::PAGE_BLOCK_SIZE - 1) / kv_layout::PAGE_BLOCK_SIZE;
}

SNAPMLA_HOST_DEVICE inline int64_t request_cost(int seqlen) { return PIECE_OVERHEAD_BLOCKS + request_blocks(seqlen); }

// The longest part: P = ceil(total_cost / num_sm_parts) >= 1 (total_cost >= 5 for b >= 1); the bound of the
// plan's guarantee (sched_meta.h), not its partition (part_begin).
SNAPMLA_HOST_DEVICE inline int64_t part_payload(int64_t total_cost, int num_sm_parts) {
  const int64_t p = (total_cost + num_sm_parts - 1) / num_sm_parts;
  return p < 1 ? 1 : p;
}

// Parts longer than a piece's fixed cost (P > PIECE_OVERHEAD_BLOCKS) share the line evenly over all
// num_sm_parts; shorter ones keep P units each, the last short and the rest empty. Spread over all parts, short
// parts cost more in pieces than one unit less per part saves: b1 8k over 132 parts (P = 2) ran 128 one-block
// pieces instead of 67 and was 0.89-0.91x, b4 h_q 64 8k (P = 5) 0.93x, while b4 h_q 128 8k (P = 9, 66 parts) was
// 1.05-1.09x and b16 h_q 64 8k (P = 17) 1.03-1.06x (bench_variants_20261201T170846Z.json, ..._171402Z.json).
SNAPMLA_HOST_DEVICE inline bool even_parts(int64_t payload) { return payload > PIECE_OVERHEAD_BLOCKS; }

// First position of part p (p = num_sm_parts: the end of the line). Even: floor(p * total / N) without forming
// p * total (the cost line of garbage seqlens reaches ~2^56 at b ~ 2^31, which get_mla_metadata accepts, and
// p * (total % N) < 2^32). Short parts: min(p * P, total), P <= 5.
SNAPMLA_HOST_DEVICE inline int64_t part_begin(int p, int64_t total, int num_sm_parts) {
  const int64_t payload = part_payload(total, num_sm_parts), pp = p;
  if (!even_parts(payload)) return pp * payload < total ? pp * payload : total;
  return pp * (total / num_sm_parts) + pp * (total % num_sm_parts) / num_sm_parts;
}

// The part that owns position pos < total: the largest p with part_begin(p) <= pos. Even: p * total / N < pos + 1,
// p = ceil((pos + 1) * N / total) - 1, in 128 bits ((pos + 1) * N reaches ~2^72 for a garbage cost line).
SNAPMLA_HOST_DEVICE inline int part_of(int64_t pos, int64_t total, int num_sm_parts) {
  const int64_t payload = part_payload(total, num_sm_parts);
  int64_t p;
  if (!even_parts(payload)) {
    p = pos / payload;
  } else {
    using u128 = unsigned __int128;
    const u128 num = static_cast<u128>(pos + 1) * static_cast<u128>(num_sm_parts) + static_cast<u128>(total - 1);
    p = static_cast<int64_t>(num / static_cast<u128>(total)) - 1;
  }
  return p >= num_sm_parts ? num_sm_parts - 1 : static_cast<int>(p);
}

// Pieces of request r, given C_r (= cost_begin), its seqlen and the line's length C_b (= total).
SNAPMLA_HOST_DEVICE inline int request_pieces(int64_t cost_begin, int seqlen, int64_t total, int num_sm_parts) {
  const int64_t cost_end = cost_begin + request_cost(seqlen);
  const int64_t n = request_blocks(seqlen);
  const int64_t first_item = cost_end - (n > 0 ? n : 1);
  return part_of(cost_end - 1, total, num_sm_parts) - part_of(first_item, total, num_sm_parts) + 1;
}

// First index r in [0, b) with cost_prefix[r + 1] > pos (the request whose cost interval holds pos, or b when
// pos >= C_b). cost_prefix has b + 1 entries, non-decreasing (strictly increasing: every cost >= 5).
template <typename Prefix>
SNAPMLA_HOST_DEVICE inline int request_at(const Prefix& cost_prefix, int b, int64_t pos) {
  int lo = 0, hi = b;  // answer in [lo, hi]
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (cost_prefix[mid + 1] > pos) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

// One row of tile_scheduler_metadata (sched_meta.h's fields).
struct PartPlan {
  int begin_req, begin_block, end_req, end_block, begin_split;
};

// The plan of part p. cost_prefix[r] = C_r (b + 1 entries), seqlens[r] the request's seqlen.
template <typename Prefix, typename Seqlens>
SNAPMLA_HOST_DEVICE inline PartPlan plan_part(int p, const Prefix& cost_prefix, const Seqlens& seqlens, int b,
                                              int num_sm_parts) {
  const int64_t total = cost_prefix[b];
  const int64_t lo = part_begin(p, total, num_sm_parts);
  const int64_t hi = part_begin(p + 1, total, num_sm_parts);  // exclusive; total for the last part
  PartPlan plan{1, 0, 0, 0, 0};                                // begin_req > end_req: no work
  if (lo >= hi) return plan;

  // First item at position >= lo: the items of r end at C_{r+1} - 1, so it lies in the first r with C_{r+1} > lo.
  const int br = request_at(cost_prefix, b, lo);
  const int64_t bn = request_blocks(seqlens[br]);
  const int64_t b_first = cost_prefix[br + 1] - (bn > 0 ? bn : 1);
  const int64_t b_block = lo > b_first ? lo - b_first : 0;  // 0 for an empty request (its one item is >= lo)
  // Last item at position < hi: the items of r start at C_{r+1} - max(n_r, 1) and are contiguous, so it lies in
  // the last r whose first item is < hi.
  int er = request_at(cost_prefix, b, hi - 1);  // r whose cost interval holds hi - 1
  int64_t en = request_blocks(seqlens[er]);
  int64_t e_first = cost_prefix[er + 1] - (en > 0 ? en : 1);
  if (e_first > hi - 1) {  // hi - 1 falls in er's overhead: the part ends with the previous request
    --er;
    if (er < br) return plan;  // the range [lo, hi) holds overhead only
    en = request_blocks(seqlens[er]);
    e_first = cost_prefix[er + 1] - (en > 0 ? en : 1);
  }
  const int64_t e_last_excl = cost_prefix[er + 1];  // one past the last item of er
  const int64_t e_block = en > 0 ? (hi < e_last_excl ? hi : e_last_excl) - e_first : 0;

  plan.begin_req = br;
  plan.begin_block = static_cast<int>(b_block);
  plan.end_req = er;
  plan.end_block = static_cast<int>(e_block);
  plan.begin_split = p - part_of(b_first, total, num_sm_parts);
  return plan;
}

}  // namespace snapmla::sched
