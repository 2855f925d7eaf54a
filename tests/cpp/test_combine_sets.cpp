// Host unit test of the combine's piece sets (csrc/kernels/combine/piece_sets.h): the few-rows layout deals a
// row's load groups out to 1, 2 or 4 sets of warps; combine.cu walks them exactly as below. Checks, for every
// piece count up to 300 and every aligned (sets, group):
//   - every piece is read by exactly one set;
//   - no set runs more dependent load rounds than ceil(load groups / sets) (the point of the sets);
// and that combine_piece_groups stays in {1, 2, 4}, does not grow with b, and picks the set counts that the GPU
// test cases of tests/test_decode_kernel_gpu.py name.
// Built by CMakeLists.txt, run by ctest. Plain checks (not assert) so that -DNDEBUG cannot disable them.
#include <cstdio>
#include <vector>

#include "expect.h"
#include "kernels/combine/piece_sets.h"

namespace {

using namespace snapmla::combine;

void check_walk(int n, int sets, int group) {
  std::vector<int> reads(n, 0);
  std::vector<int> rounds(sets, 0);
  for (int base = 0; base < n; base += COMBINE_CHUNK_PIECES) {
    const int count = n - base < COMBINE_CHUNK_PIECES ? n - base : COMBINE_CHUNK_PIECES;
    for (int set = 0; set < sets; ++set) {
      for (int j0 = piece_set_first_j0(set, group); j0 < count; j0 += piece_set_j0_step(sets, group)) {
        ++rounds[set];
        for (int u = 0; u < group; ++u)
          if (j0 + u < count) ++reads[base + j0 + u];
      }
    }
  }
  for (int i = 0; i < n; ++i) EXPECT(reads[i] == 1, "n %d sets %d group %d: piece %d read %d times", n, sets, group, i, reads[i]);
  const int groups = (n + group - 1) / group;
  const int bound = (groups + sets - 1) / sets;
  for (int set = 0; set < sets; ++set)
    EXPECT(rounds[set] <= bound, "n %d sets %d group %d: set %d runs %d load rounds > %d", n, sets, group, set,
           rounds[set], bound);
}

void check_choice() {
  for (int parts = 1; parts <= 264; ++parts) {
    int prev = 4;
    for (int b = 1; b <= 512; ++b) {
      const int g = combine_piece_groups(b, parts);
      EXPECT(g == 1 || g == 2 || g == 4, "b %d parts %d: %d sets", b, parts, g);
      EXPECT(g <= prev, "b %d parts %d: %d sets, more than at b - 1 (%d)", b, parts, g, prev);
      prev = g;
    }
  }
  // The cases that name a set count in tests/test_decode_kernel_gpu.py, and the benchmark's small batches.
  EXPECT(combine_piece_groups(4, 50) == 2, "combine_2_piece_sets_h64");
  EXPECT(combine_piece_groups(1, 132) == 4, "combine_4_sets_few_pieces_h128, combine_65_pieces_h64");
  EXPECT(combine_piece_groups(2, 132) == 4, "combine_4_sets_causal_sq2_h32");
  EXPECT(combine_piece_groups(4, 132) == 4, "b4 at 132 parts");
  EXPECT(combine_piece_groups(16, 132) == 2, "b16 at 132 parts (h_q 16 / 64)");
  EXPECT(combine_piece_groups(16, 66) == 1, "b16 at 66 parts (h_q 128)");
  EXPECT(combine_piece_groups(64, 132) == 1, "b64");
  EXPECT(combine_piece_groups(0, 132) >= 1, "b = 0 does not divide by zero");
}

void check_walks() {
  for (int sets : {1, 2, 4}) {
    for (int group : {8, 2}) {
      EXPECT(piece_sets_align_to_chunks(sets, group), "sets %d group %d do not align to 32-piece chunks", sets, group);
      for (int n = 1; n <= 300 && g_failures == 0; ++n) check_walk(n, sets, group);
    }
  }
  EXPECT(!piece_sets_align_to_chunks(3, 8), "3 sets over 4 load groups per chunk must not pass");
}

}  // namespace

int main() {
  check_walks();
  check_choice();
  if (g_failures) {
    std::fprintf(stderr, "%d failure(s)\n", g_failures);
    return 1;
  }
  std::printf("combine piece sets: ok\n");
  return 0;
}
