// Host unit test of the split-KV plan (csrc/kernels/sched/plan.h), the arithmetic the device scheduler runs.
// Replays each plan the way the decode kernel walks it and checks, for many batches and part counts:
//   - every block of every request is covered exactly once, by pieces in block order;
//   - a request's pieces are numbered 0 .. pieces-1 in part order and num_splits is their prefix sum;
//   - a zero-length request gets exactly one empty piece;
//   - every part costs at most P + PIECE_OVERHEAD_BLOCKS (P = ceil(total cost / num_sm_parts)).
// Built by CMakeLists.txt, run by ctest. Plain checks (not assert) so that -DNDEBUG cannot disable them.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/sched/plan.h"
#include "expect.h"

namespace {

using namespace snapmla::sched;

struct Piece {
  int part, split, begin_block, end_block;
};

void check_plan(const std::vector<int>& seqlens, int num_sm_parts) {
  const int b = static_cast<int>(seqlens.size());
  std::vector<int64_t> prefix(b + 1, 0);
  for (int r = 0; r < b; ++r) prefix[r + 1] = prefix[r] + request_cost(seqlens[r]);
  const int64_t payload = part_payload(prefix[b], num_sm_parts);

  std::vector<int> num_splits(b + 1, 0);
  for (int r = 0; r < b; ++r)
    num_splits[r + 1] = num_splits[r] + request_pieces(prefix[r], seqlens[r], prefix[b], num_sm_parts);
  EXPECT(num_splits[b] <= b + num_sm_parts - 1, "total pieces %d > b + parts - 1 = %d", num_splits[b],
         b + num_sm_parts - 1);

  std::vector<std::vector<Piece>> pieces(b);
  for (int p = 0; p < num_sm_parts; ++p) {
    const PartPlan plan = plan_part(p, prefix, seqlens, b, num_sm_parts);
    int64_t cost = 0;
    for (int r = plan.begin_req; r <= plan.end_req; ++r) {
      const int n = static_cast<int>(request_blocks(seqlens[r]));
      const int lo = r == plan.begin_req ? plan.begin_block : 0;
      const int hi = r == plan.end_req ? plan.end_block : n;
      EXPECT(0 <= lo && lo <= hi && hi <= n, "part %d request %d: block range [%d, %d) of %d", p, r, lo, hi, n);
      EXPECT(hi > lo || n == 0, "part %d request %d: empty piece of a non-empty request", p, r);
      pieces[r].push_back({p, r == plan.begin_req ? plan.begin_split : 0, lo, hi});
      cost += PIECE_OVERHEAD_BLOCKS + (hi - lo);
    }
    EXPECT(cost <= payload + PIECE_OVERHEAD_BLOCKS, "part %d costs %lld > P + overhead = %lld", p,
           static_cast<long long>(cost), static_cast<long long>(payload + PIECE_OVERHEAD_BLOCKS));
  }
  for (int r = 0; r < b; ++r) {
    const int n = static_cast<int>(request_blocks(seqlens[r]));
    const auto& ps = pieces[r];
    EXPECT(static_cast<int>(ps.size()) == num_splits[r + 1] - num_splits[r], "request %d: %zu pieces, num_splits says %d",
           r, ps.size(), num_splits[r + 1] - num_splits[r]);
    if (n == 0) {
      EXPECT(ps.size() == 1, "zero-length request %d has %zu pieces", r, ps.size());
      continue;
    }
    int next_block = 0;
    for (size_t i = 0; i < ps.size(); ++i) {
      EXPECT(ps[i].split == static_cast<int>(i), "request %d piece %zu has split %d", r, i, ps[i].split);
      EXPECT(i == 0 || ps[i].part > ps[i - 1].part, "request %d pieces not in part order", r);
      EXPECT(ps[i].begin_block == next_block, "request %d piece %zu starts at %d, expected %d", r, i,
             ps[i].begin_block, next_block);
      next_block = ps[i].end_block;
    }
    EXPECT(next_block == n, "request %d covered up to block %d of %d", r, next_block, n);
  }
}

void check_examples() {
  // One request, one part: a single piece over all blocks.
  check_plan({1000}, 1);
  // Short and long requests, more parts than blocks (forced split down to single blocks), zero lengths.
  check_plan({0}, 1);
  check_plan({0}, 132);
  check_plan({0, 0, 0}, 2);
  check_plan({1, 64, 65, 0, 128 * 1024}, 132);
  check_plan({65536}, 1000);
  check_plan({-5, 3, 0}, 4);  // negative seqlens count as empty
  // A request of 2^31 - 1 tokens: the int64 cost line must not overflow.
  check_plan({2147483647, 2147483647, 7}, 132);
}

void check_random() {
  std::mt19937 rng(1234);
  const int batch_sizes[] = {1, 3, 74, 132, 200, 1000};
  const int part_counts[] = {1, 2, 7, 33, 66, 132, 264, 1000};
  for (int b : batch_sizes)
    for (int parts : part_counts)
      for (int trial = 0; trial < 4; ++trial) {
        std::vector<int> seqlens(b);
        const int max_len = trial == 0 ? 64 : trial == 1 ? 4096 : 131072;
        for (int& s : seqlens) {
          s = static_cast<int>(rng() % (max_len + 1));
          if (rng() % 8 == 0) s = 0;
        }
        check_plan(seqlens, parts);
      }
}

// part_begin / part_of on cost lines far longer than decode ever sees (garbage seqlens at b ~ 2^31 reach ~2^56):
// part_of inverts part_begin at each part's first and last position, without 64-bit overflow.
void check_long_lines() {
  const int64_t totals[] = {(int64_t{1} << 56) + 12345, (int64_t{1} << 40) - 1, 1000003};
  const int part_counts[] = {1, 7, 132, 65535};
  for (int64_t total : totals)
    for (int n : part_counts) {
      EXPECT(part_begin(0, total, n) == 0 && part_begin(n, total, n) == total, "part_begin ends, total %lld n %d",
             static_cast<long long>(total), n);
      for (int p = 0; p < n; p += 1 + n / 97) {
        const int64_t lo = part_begin(p, total, n), hi = part_begin(p + 1, total, n);
        EXPECT(lo < hi && hi - lo <= total / n + 1, "part %d of %d: [%lld, %lld)", p, n, static_cast<long long>(lo),
               static_cast<long long>(hi));
        EXPECT(part_of(lo, total, n) == p && part_of(hi - 1, total, n) == p, "part_of at part %d of %d, total %lld",
               p, n, static_cast<long long>(total));
      }
    }
}

}  // namespace

int main() {
  check_examples();
  check_random();
  check_long_lines();
  if (g_failures) {
    std::fprintf(stderr, "test_sched_plan: %d failure(s)\n", g_failures);
    return EXIT_FAILURE;
  }
  std::printf("test_sched_plan: ok\n");
  return EXIT_SUCCESS;
}
