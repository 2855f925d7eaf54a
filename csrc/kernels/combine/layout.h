// The combine's work split (combine.cu), in one place for the kernel, its host-side choice (launch_combine) and
// the host unit test (tests/cpp/test_combine_layout.cpp).
//
// A lane reads quads: 4 consecutive columns of a piece's bf16 row (one 8-B load), 256 contiguous bytes per warp.
// Three layouts:
//   - many rows (b * q_rows > COMBINE_SPLIT_ROWS_MAX; b = 16, h_q = 64: 1024 rows x ~9 pieces; b = 64, h_q = 128:
//     8192 rows x ~2 pieces): 4 rows per CTA, one warp per row, lane l the quads at columns 4 l + 128 k (k < 4);
//     load groups of 2 pieces (8 loads in flight per lane).
//   - fan-out (b * q_rows <= COMBINE_FAN_OUT_ROWS_MAX; b = 1, h_q = 64, 8k tokens is 64 rows x 65 pieces, 4.3 MB
//     of partial outputs): each row's 512 columns over 1, 2 or 4 CTAs (col_split), each CTA `sets` sets of
//     4 / col_split warps (warps_per_set), lane l of warp w one quad at column slice * 512 / col_split + 128 w
//     + 4 l; load groups of 16 pieces (16 loads in flight per lane, ~116 registers).
//   - one CTA per row (the rows between, 129-512: b = 4, h_q = 64 is 256 rows): 1, 2 or 4 sets of 4 warps, load
//     groups of 8 pieces (64 registers: two 512-thread CTAs per SM, where the fan-out's 116 allow one; the fan-out's
//     groups measured 0.90x at b = 4, h_q 64 on an H100).
// A row's load groups are dealt round robin to its sets: set s takes groups s, s + sets, s + 2 sets, ... Its
// latency is one load round per group it owns, so the choice below aims for one group per set, and, for few
// rows, for at least ~128 CTAs on the 132-SM H200 (col_split), since a row's CTA streams up to 67 KB of partial
// outputs.
#pragma once

#include <cstdint>

#include "kv_layout.h"  // SNAPMLA_HOST_DEVICE

namespace snapmla::combine {

// Above: the many-rows layout. From 513 rows rather than 4097: 1.01-1.03x for the whole call at b = 16, h_q 64-128,
// 8k (H100, bench/results/bench_variants_20261207T232321Z.json, variant many512); b = 64 at h_q 16-64 (1024 and
// 4096 rows, ~3 pieces each) 1.00-1.02x (bench/results/bench_variants_20261208T010232Z.json, variant rows4096).
inline constexpr int64_t COMBINE_SPLIT_ROWS_MAX = 512;
inline constexpr int COMBINE_CHUNK_PIECES = 32;          // lse values a warp holds at a time (one per lane)
inline constexpr int64_t COMBINE_FAN_OUT_ROWS_MAX = 128;  // up to: the fan-out layout (col_split below assumes 128)
inline constexpr int COMBINE_FAN_OUT_GROUP = 16;         // pieces per load group, fan-out (one quad each)
inline constexpr int COMBINE_ROW_CTA_GROUP = 8;          // pieces per load group, one CTA per row (one quad each)
inline constexpr int COMBINE_MANY_ROWS_GROUP = 2;        // pieces per load group, many rows (four quads each)
inline constexpr int COMBINE_MAX_THREADS = 512;          // per CTA (fan-out: ~116 registers per thread)
inline constexpr int COMBINE_ROW_CTA_MIN_CTAS = 2;       // per SM, one CTA per row: at most 64 registers

struct CombineLayout {
  bool many_rows;
  int warps_per_set;  // 1, 2 or 4 (col_split = 4 / warps_per_set CTAs per row); 4 with one CTA per row
  int sets;           // 1, 2, 4, 8 or 16, with 32 * warps_per_set * sets <= COMBINE_MAX_THREADS; many rows: 1
  int group;          // pieces per load group (COMBINE_FAN_OUT_GROUP, COMBINE_ROW_CTA_GROUP, COMBINE_MANY_ROWS_GROUP)
};

// Set `set`'s load groups: g = set + k * sets (combine_first_group, combine_next_group), the pieces
// [g * group, g * group + group) clipped to n. Every group lies inside one 32-piece chunk of weights (group
// divides 32). The kernel and the host test walk them through these functions.
SNAPMLA_HOST_DEVICE constexpr int combine_first_group(int set) { return set; }
SNAPMLA_HOST_DEVICE constexpr int combine_next_group(int g, int sets) { return g + sets; }
SNAPMLA_HOST_DEVICE constexpr int combine_group_first_piece(int g, int group) { return g * group; }
SNAPMLA_HOST_DEVICE constexpr bool combine_group_fits_chunks(int group) {
  return group > 0 && COMBINE_CHUNK_PIECES % group == 0;
}

// The plan lives on the device, so the piece count is an estimate: a request holds at most about
// num_sm_parts / b + 1 pieces (sched/plan.h spreads the cost evenly over the parts; short requests get fewer).
// Any layout is correct for any plan; a request with more groups than sets runs more load rounds.
inline CombineLayout choose_combine_layout(int64_t rows, int b, int num_sm_parts) {
  if (rows > COMBINE_SPLIT_ROWS_MAX) return {true, 1, 1, COMBINE_MANY_ROWS_GROUP};
  const int expected_pieces = num_sm_parts / (b > 0 ? b : 1) + 1;
  // CTAs per row, fan-out: so that ~128 or more CTAs share the partial outputs (64 rows -> 2, 16 rows -> 4).
  const int col_split = rows >= 128 ? 1 : rows >= 64 ? 2 : 4;  // 1 for every row count past the fan-out
  const int warps_per_set = 4 / col_split;
  const int group = rows > COMBINE_FAN_OUT_ROWS_MAX ? COMBINE_ROW_CTA_GROUP : COMBINE_FAN_OUT_GROUP;
  const int max_sets = COMBINE_MAX_THREADS / (32 * warps_per_set);
  const int groups = (expected_pieces + group - 1) / group;
  int sets = 1;
  if (group == COMBINE_FAN_OUT_GROUP) {
    while (sets < groups && sets < max_sets) sets *= 2;  // one round per set where the threads allow it
  } else {
    while (2 * sets <= groups && 2 * sets <= max_sets) sets *= 2;  // no idle set: 3 groups take 2 (as measured)
  }
  return {false, warps_per_set, sets, group};
}

}  // namespace snapmla::combine
