// The decode kernel choice (csrc/kernels/sm90/decode_fp8/kernel_choice.h) for every row count the API accepts
// and every override: the thresholds, the fallbacks of a forced kernel that cannot run the rows, the names.
#include <cstdio>

#include "expect.h"
#include "kernels/sm90/decode_fp8/kernel_choice.h"

using namespace snapmla::sm90::decode_fp8;

namespace {

constexpr DecodeKernel kAll[] = {DecodeKernel::kAuto, DecodeKernel::kNarrow, DecodeKernel::kWide, DecodeKernel::kWs};

// Names round-trip; nothing else parses (case, whitespace, the removed "cluster").
void check_names() {
  for (DecodeKernel k : kAll) {
    EXPECT(parse_decode_kernel(decode_kernel_name(k)) == k, "%s does not round-trip", decode_kernel_name(k));
  }
  for (const char* bad : {"", "Auto", "wide ", "cluster", "fast", "narrow\n"}) {
    EXPECT(!parse_decode_kernel(bad).has_value(), "'%s' parsed", bad);
  }
}

void check_rows(int q_rows) {
  const bool small = q_rows <= NARROW_MAX_Q_ROWS;
  // auto: narrow up to 16 rows, wide from 17 to 63, ws from 64.
  const DecodeKernel want_auto =
      small ? DecodeKernel::kNarrow : (q_rows < WS_MIN_Q_ROWS ? DecodeKernel::kWide : DecodeKernel::kWs);
  EXPECT(choose_decode_kernel(q_rows, DecodeKernel::kAuto) == want_auto, "auto, q_rows %d", q_rows);
  // wide runs every row count; narrow only up to 16 rows (else wide); ws only above 16 (else narrow).
  EXPECT(choose_decode_kernel(q_rows, DecodeKernel::kWide) == DecodeKernel::kWide, "wide, q_rows %d", q_rows);
  EXPECT(choose_decode_kernel(q_rows, DecodeKernel::kNarrow) == (small ? DecodeKernel::kNarrow : DecodeKernel::kWide),
         "narrow, q_rows %d", q_rows);
  EXPECT(choose_decode_kernel(q_rows, DecodeKernel::kWs) == (small ? DecodeKernel::kNarrow : DecodeKernel::kWs),
         "ws, q_rows %d", q_rows);
}

}  // namespace

int main() {
  check_names();
  for (int q_rows = 1; q_rows <= 262140; q_rows += (q_rows < 300 ? 1 : 997)) check_rows(q_rows);
  for (int q_rows : {16, 17, 63, 64, 65, 262140}) check_rows(q_rows);  // the edges themselves
  static_assert(choose_decode_kernel(16, DecodeKernel::kAuto) == DecodeKernel::kNarrow);
  static_assert(choose_decode_kernel(17, DecodeKernel::kAuto) == DecodeKernel::kWide);
  static_assert(choose_decode_kernel(64, DecodeKernel::kAuto) == DecodeKernel::kWs);
  if (g_failures) {
    std::fprintf(stderr, "%d failure(s)\n", g_failures);
    return 1;
  }
  std::printf("kernel_choice: all checks passed\n");
  return 0;
}
