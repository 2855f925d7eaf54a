// Host unit test of the combine's work split (csrc/kernels/combine/layout.h): combine.cu walks a row's load
// groups through the same functions (combine_first_group, combine_next_group, combine_group_first_piece) as
// check_walk below. Checks, for every piece count up to 300 and every layout the choice can
// return:
//   - every piece is read by exactly one set, inside one 32-piece chunk of weights;
//   - no set runs more dependent load rounds than ceil(load groups / sets) (the point of the sets);
// and that choose_combine_layout keeps within the kernel's limits (threads per CTA, instantiated set counts),
// uses more sets for more pieces per request and fewer CTAs per row for more rows, and picks the layouts that
// the GPU test cases of tests/test_decode_kernel_gpu.py name.
// Built by CMakeLists.txt, run by ctest. Plain checks (not assert) so that -DNDEBUG cannot disable them.
#include <cstdio>
#include <vector>

#include "expect.h"
#include "kernels/combine/layout.h"

namespace {

using namespace snapmla::combine;

void check_walk(int n, int sets, int group) {
  std::vector<int> reads(n, 0);
  for (int set = 0; set < sets; ++set) {
    int rounds = 0;
    for (int g = combine_first_group(set); combine_group_first_piece(g, group) < n; g = combine_next_group(g, sets)) {
      ++rounds;
      const int j0 = combine_group_first_piece(g, group);
      for (int u = 0; u < group && j0 + u < n; ++u) {
        ++reads[j0 + u];
        EXPECT((j0 + u) / COMBINE_CHUNK_PIECES == j0 / COMBINE_CHUNK_PIECES,
               "n %d sets %d group %d: group %d leaves its chunk", n, sets, group, g);
      }
    }
    const int groups = (n + group - 1) / group;
    EXPECT(rounds <= (groups + sets - 1) / sets, "n %d sets %d group %d: set %d runs %d load rounds", n, sets, group,
           set, rounds);
  }
  for (int i = 0; i < n; ++i)
    EXPECT(reads[i] == 1, "n %d sets %d group %d: piece %d read %d times", n, sets, group, i, reads[i]);
}

void check_walks() {
  EXPECT(combine_group_fits_chunks(COMBINE_FAN_OUT_GROUP) && combine_group_fits_chunks(COMBINE_ROW_CTA_GROUP) &&
             combine_group_fits_chunks(COMBINE_MANY_ROWS_GROUP),
         "load groups divide the 32-piece chunk");
  EXPECT(!combine_group_fits_chunks(12), "a group of 12 straddles chunks and must not pass");
  for (int n = 1; n <= 300 && g_failures == 0; ++n) {
    for (int sets : {1, 2, 4, 8, 16}) check_walk(n, sets, COMBINE_FAN_OUT_GROUP);
    for (int sets : {1, 2, 4}) check_walk(n, sets, COMBINE_ROW_CTA_GROUP);
    check_walk(n, 1, COMBINE_MANY_ROWS_GROUP);
  }
}

void check_choice() {
  for (int parts = 1; parts <= 264; ++parts) {
    for (int q_rows : {1, 3, 16, 32, 64, 128, 256, 1024}) {
      int prev_sets = 1 << 30, prev_group = 0;  // sets do not grow with b within one layout
      for (int b = 1; b <= 512; ++b) {
        const int64_t rows = static_cast<int64_t>(b) * q_rows;
        const CombineLayout lt = choose_combine_layout(rows, b, parts);
        EXPECT(lt.many_rows == (rows > COMBINE_SPLIT_ROWS_MAX), "b %d q_rows %d: many_rows %d", b, q_rows,
               lt.many_rows);
        if (lt.many_rows) continue;
        const int w = lt.warps_per_set;
        EXPECT(w == 1 || w == 2 || w == 4, "b %d q_rows %d: %d warps per set", b, q_rows, w);
        EXPECT(lt.sets >= 1 && (lt.sets & (lt.sets - 1)) == 0 && 32 * w * lt.sets <= COMBINE_MAX_THREADS,
               "b %d q_rows %d parts %d: %d sets of %d warps", b, q_rows, parts, lt.sets, w);
        EXPECT(lt.sets <= prev_sets || lt.group != prev_group, "b %d q_rows %d parts %d: more sets than at b - 1", b,
               q_rows, parts);
        prev_sets = lt.sets;
        prev_group = lt.group;
        const bool fan_out = rows <= COMBINE_FAN_OUT_ROWS_MAX;
        EXPECT(lt.group == (fan_out ? COMBINE_FAN_OUT_GROUP : COMBINE_ROW_CTA_GROUP), "rows %lld: group %d",
               static_cast<long long>(rows), lt.group);
        EXPECT(fan_out || (w == 4 && lt.sets <= 4), "rows %lld: one CTA per row, up to 4 sets",
               static_cast<long long>(rows));
        // Fan-out: enough sets for one load round per set whenever the thread limit allows it.
        const int expected_groups = (parts / b + 1 + lt.group - 1) / lt.group;
        EXPECT(!fan_out || lt.sets >= expected_groups || 32 * w * lt.sets == COMBINE_MAX_THREADS,
               "b %d parts %d: %d sets for %d expected groups", b, parts, lt.sets, expected_groups);
        // One CTA per row: no set without a group of the expected pieces.
        EXPECT(fan_out || lt.sets <= expected_groups || lt.sets == 1, "b %d parts %d: %d sets for %d groups", b,
               parts, lt.sets, expected_groups);
      }
    }
  }
  // Fewer rows, more CTAs per row.
  EXPECT(choose_combine_layout(16, 1, 132).warps_per_set == 1, "16 rows: 4 CTAs per row");
  EXPECT(choose_combine_layout(64, 1, 132).warps_per_set == 2, "64 rows: 2 CTAs per row");
  EXPECT(choose_combine_layout(128, 1, 132).warps_per_set == 4, "128 rows: 1 CTA per row");
  // The cases that name a layout in tests/test_decode_kernel_gpu.py, and the benchmark's small batches.
  const CombineLayout b1_h64 = choose_combine_layout(64, 1, 132);
  EXPECT(b1_h64.sets == 8, "combine_65_pieces_h64: 8 sets of 2 warps (got %d)", b1_h64.sets);
  const CombineLayout b1_h16 = choose_combine_layout(16, 1, 132);
  EXPECT(b1_h16.sets == 16, "combine_65_pieces_h16: 16 sets of 1 warp (got %d)", b1_h16.sets);
  EXPECT(choose_combine_layout(128, 1, 132).sets == 4, "combine_4_sets_few_pieces_h128");
  EXPECT(choose_combine_layout(256, 4, 50).sets == 2, "combine_2_piece_sets_h64: b = 4 at 50 parts, 13 pieces");
  EXPECT(choose_combine_layout(256, 4, 132).sets == 4, "b4 at 132 parts (h_q 64): ~34 pieces");
  EXPECT(choose_combine_layout(512, 8, 132).sets == 2, "b8 at 132 parts (h_q 64): ~17 pieces, the last row-CTA count");
  EXPECT(choose_combine_layout(1024, 16, 132).many_rows, "b16 at 132 parts (h_q 64): ~9 pieces, one warp per row");
  EXPECT(choose_combine_layout(2048, 16, 66).many_rows, "b16 at 66 parts (h_q 128): ~5 pieces, one warp per row");
  const CombineLayout row_cta = choose_combine_layout(256, 2, 132);
  EXPECT(!row_cta.many_rows && row_cta.group == COMBINE_ROW_CTA_GROUP && row_cta.sets == 4,
         "combine_row_cta_4_sets_causal_sq2_h64: one CTA per row, 4 sets (got group %d, %d sets)", row_cta.group,
         row_cta.sets);
  EXPECT(choose_combine_layout(1024, 4, 132).many_rows, "combine_many_rows_44_pieces_causal_sq2_h128");
  EXPECT(choose_combine_layout(8192, 64, 66).many_rows, "b64 h_q 128");
  EXPECT(choose_combine_layout(64, 0, 132).sets >= 1, "b = 0 does not divide by zero");
}

}  // namespace

int main() {
  check_walks();
  check_choice();
  if (g_failures) {
    std::fprintf(stderr, "%d failure(s)\n", g_failures);
    return 1;
  }
  std::printf("combine layout: ok\n");
  return 0;
}
