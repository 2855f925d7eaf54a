// Host unit test of the bounds of the decode kernels' page guess before the PDL wait
// (csrc/kernels/sm90/decode_fp8/shared/page_guess.h; pdl_point.cuh reads through the same functions). The guess
// reads values that other grids may still be writing, so any int may come back. Checks, over edge values (0, +-1,
// the 64-token page edges, INT_MIN, INT_MAX and INT_MAX - 31 .. - 32, where BEGIN_BLOCK + lane would wrap in 32
// bits) for every field and several table and cache shapes:
//   - a usable row's request indexes the (b,) lengths inside them;
//   - every block-table index a lane reads is inside the table's storage, and only lanes < GUESSED_PAGES read;
//   - every prefetched page id is inside the cache;
// and, on valid schedules, that the guess prefetches exactly the first min(GUESSED_PAGES, blocks left) pages the
// producer loads first (make_piece's bounds: the request's length, and END_BLOCK for the row's last request).
// Built by CMakeLists.txt, run by ctest. Plain checks (not assert) so that -DNDEBUG cannot disable them.
#include <climits>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "expect.h"
#include "kernels/sm90/decode_fp8/shared/page_guess.h"

namespace {

using namespace snapmla::sm90::decode_fp8;

const std::vector<int> kEdges = {INT_MIN, INT_MIN + 1, -65, -64, -1, 0, 1, 2, 3, 4, 5, 63, 64, 65, 127, 128, 1000,
                                 INT_MAX - 32, INT_MAX - 31, INT_MAX - 3, INT_MAX};

struct Shape {
  int b;
  int64_t table_entries, table_stride;
  int num_blocks;
};

void check_garbage(const Shape& s) {
  for (int req : kEdges) {
    for (int end_req : {req, req + (req < INT_MAX ? 1 : 0), INT_MAX, -1, 0}) {
      for (int blk_begin : kEdges) {
        if (!guess_row_usable(req, end_req, blk_begin, s.b)) continue;
        EXPECT(req >= 0 && req < s.b, "b %d: request %d of a usable row outside the lengths", s.b, req);
        for (int lane = 0; lane < 32; ++lane) {
          const int64_t at = guess_table_index(req, blk_begin, lane, s.table_entries, s.table_stride);
          if (at < 0) continue;
          EXPECT(lane < GUESSED_PAGES, "lane %d reads the table", lane);
          EXPECT(at < s.table_entries, "req %d blk_begin %d lane %d: table index %lld of %lld entries", req,
                 blk_begin, lane, static_cast<long long>(at), static_cast<long long>(s.table_entries));
          for (int end_blk : kEdges)
            for (int seqlen : kEdges)
              for (int page : kEdges)
                if (guess_prefetches(req, end_req, end_blk, blk_begin, lane, seqlen, page, s.num_blocks))
                  EXPECT(page >= 0 && page < s.num_blocks, "page %d prefetched from a cache of %d", page,
                         s.num_blocks);
        }
      }
    }
  }
}

// A valid row: request req of length seqlen (blocks n), the piece [blk_begin, blk_end). The guess must prefetch
// blocks blk_begin .. blk_begin + GUESSED_PAGES - 1 that lie in the piece, at index req * stride + block.
void check_valid(int b, int max_pages, int num_blocks) {
  const int64_t stride = max_pages, entries = static_cast<int64_t>(b) * max_pages;
  for (int req = 0; req < b; ++req) {
    for (int seqlen = 0; seqlen <= max_pages * 64; seqlen += 37) {
      const int n = (seqlen + 63) / 64;
      for (int blk_begin = 0; blk_begin <= n; ++blk_begin) {
        for (int end_blk = blk_begin; end_blk <= n; ++end_blk) {
          for (int last : {0, 1}) {  // the request is (1) or is not (0) the row's last
            const int end_req = last ? req : req + 1;
            const int blk_end = last ? end_blk : n;
            EXPECT(guess_row_usable(req, end_req, blk_begin, b), "valid row req %d blk_begin %d refused", req,
                   blk_begin);
            for (int lane = 0; lane < 32; ++lane) {
              const int blk = blk_begin + lane;
              const bool expect = lane < GUESSED_PAGES && blk < blk_end;
              const int64_t at = guess_table_index(req, blk_begin, lane, entries, stride);
              const int page = (req * 7 + blk) % num_blocks;  // any id inside the cache
              const bool got = at >= 0 && guess_prefetches(req, end_req, end_blk, blk_begin, lane, seqlen, page,
                                                           num_blocks);
              EXPECT(got == expect, "req %d seqlen %d piece [%d, %d) last %d lane %d: prefetch %d, want %d", req,
                     seqlen, blk_begin, blk_end, last, lane, got, expect);
              if (expect)
                EXPECT(at == req * stride + blk, "req %d block %d: table index %lld", req, blk,
                       static_cast<long long>(at));
            }
          }
        }
      }
    }
  }
}

}  // namespace

int main() {
  const std::vector<Shape> shapes = {
      {1, 0, 0, 0},        {1, 1, 1, 1},          {3, 15, 5, 1000},           {3, 15, 0, 7},  // stride 0: one shared row
      {64, 64 * 2048, 2048, 1 << 20}, {5, 4, 100, 3},  // a table shorter than its rows (a capped view)
      {128, INT_MAX / 64, INT_MAX / 64 / 128, INT_MAX}};
  for (const Shape& s : shapes) check_garbage(s);
  check_valid(1, 9, 5);
  check_valid(3, 5, 1000);
  if (g_failures) {
    std::fprintf(stderr, "%d failures\n", g_failures);
    return 1;
  }
  std::printf("page guess bounds: ok\n");
  return 0;
}
