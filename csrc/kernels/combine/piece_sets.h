// How the combine's few-rows layout deals a row's pieces out to its sets of 4 warps (combine.cu), in one place
// for the kernel, its host-side launch choice (launch.h) and the host unit test (tests/cpp/test_combine_sets.cpp).
//
// A row's pieces are read in chunks of 32 (one lse per lane), each chunk in load groups of `group` consecutive
// pieces (8 in this layout: one float4 per lane and piece, 8 loads in flight). With `sets` sets, set s takes the
// load groups s, s + sets, s + 2 sets, ... of every chunk: the group of pieces j0 .. j0 + group - 1 (clipped to
// the chunk) for j0 = piece_set_first_j0(s, group), advancing by piece_set_j0_step(sets, group). Because
// 32 / group is a multiple of sets (1, 2 or 4), every chunk starts with set 0, so this is also the round robin
// over the row's whole list of load groups.
#pragma once

#include "kv_layout.h"  // SNAPMLA_HOST_DEVICE

namespace snapmla::combine {

inline constexpr int COMBINE_CHUNK_PIECES = 32;  // lse values a warp holds at a time (one per lane)

SNAPMLA_HOST_DEVICE constexpr int piece_set_first_j0(int set, int group) { return set * group; }
SNAPMLA_HOST_DEVICE constexpr int piece_set_j0_step(int sets, int group) { return sets * group; }
SNAPMLA_HOST_DEVICE constexpr bool piece_sets_align_to_chunks(int sets, int group) {
  return group > 0 && COMBINE_CHUNK_PIECES % group == 0 && (COMBINE_CHUNK_PIECES / group) % sets == 0;
}

// Sets of 4 warps that share one row's pieces (1, 2 or 4). The plan lives on the device, so this is an
// estimate: a request holds about num_sm_parts / b + 1 pieces (sched/plan.h spreads the cost evenly over the
// parts), and each set takes load groups of 8 pieces. One set per expected 8-piece group, at most 4: b1 at 132
// parts (~133 pieces) gets 4, b4 (~34) 4, b16 at 132 (~9: a full group and a single piece) 2, b16 at 66 parts
// (h_q = 128: ~5 pieces) 1. Any value is correct for any plan.
inline int combine_piece_groups(int b, int num_sm_parts) {
  const int expected_pieces = num_sm_parts / (b > 0 ? b : 1) + 1;
  const int load_groups = (expected_pieces + 7) / 8;
  return load_groups >= 4 ? 4 : load_groups >= 2 ? 2 : 1;
}

}  // namespace snapmla::combine
