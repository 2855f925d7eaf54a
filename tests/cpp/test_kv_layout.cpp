// Host unit test of the cache byte map (csrc/kv_layout.h): the per-slot byte offsets of content, RoPE and scale
// tile every page exactly once, stay inside their part, keep the alignment TMA and the 16-B loads need, and
// advance by exactly one page per 64 slots. Built by CMakeLists.txt, run by ctest.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "expect.h"
#include "kv_layout.h"

namespace {

namespace L = snapmla::kv_layout;

// Marks the bytes of every token of page `page` and checks that each byte of the page is owned exactly once.
void check_page_tiling(int64_t page) {
  std::vector<int> owners(L::PAGE_BYTES, 0);
  const int64_t base = page * L::PAGE_BYTES;
  for (int t = 0; t < L::PAGE_BLOCK_SIZE; ++t) {
    const int64_t slot = page * L::PAGE_BLOCK_SIZE + t;
    EXPECT(L::page_of(slot) == page && L::offset_in_page(slot) == t, "slot %lld decomposes wrongly", (long long)slot);
    const struct { int64_t begin; int bytes; int64_t part_begin, part_end; } parts[3] = {
        {L::content_byte(slot), L::CONTENT_TOKEN_BYTES, L::CONTENT_OFFSET, L::ROPE_OFFSET},
        {L::rope_byte(slot), L::ROPE_TOKEN_BYTES, L::ROPE_OFFSET, L::SCALE_OFFSET},
        {L::scale_byte(slot), L::SCALE_TOKEN_BYTES, L::SCALE_OFFSET, L::PAGE_BYTES},
    };
    for (const auto& p : parts) {
      const int64_t rel = p.begin - base;
      EXPECT(rel >= p.part_begin && rel + p.bytes <= p.part_end, "slot %lld: bytes [%lld, +%d) leave their part",
             (long long)slot, (long long)rel, p.bytes);
      // 16-B loads of content/RoPE rows and 4-B scale loads must be aligned.
      EXPECT(p.begin % (p.bytes >= 16 ? 16 : p.bytes) == 0, "slot %lld: misaligned part at %lld", (long long)slot,
             (long long)p.begin);
      for (int i = 0; i < p.bytes; ++i) ++owners[rel + i];
    }
  }
  for (int i = 0; i < L::PAGE_BYTES; ++i) EXPECT(owners[i] == 1, "page byte %d owned %d times", i, owners[i]);
}

void check_constants() {
  EXPECT(L::TOKEN_BYTES == 644 && L::PAGE_BYTES == 41216, "byte budget %d / %d", L::TOKEN_BYTES, L::PAGE_BYTES);
  EXPECT(L::D_QK == 576, "d_qk %d", L::D_QK);
  // TMA: every stride it sees (page stride, token strides of content and RoPE) is a multiple of 16 B.
  EXPECT(L::PAGE_BYTES % 16 == 0 && L::CONTENT_TOKEN_BYTES % 16 == 0 && L::ROPE_TOKEN_BYTES % 16 == 0,
         "TMA strides");
  // A 64-token x 128-B Swizzle-128B content tile starts 1024-B aligned within the page.
  EXPECT(L::CONTENT_OFFSET % 1024 == 0 && L::ROPE_OFFSET % 1024 == 0, "swizzle tile alignment");
  EXPECT(L::AMAX_FLOOR > 0.0f && L::P_FLOOR > 0.0f, "floors must be positive");
}

// Offsets are int64: a cache past 2^31 bytes (52k pages) must not wrap.
void check_large_slots() {
  const int64_t page = 3'000'000;  // 123 GB into the cache
  const int64_t slot = page * L::PAGE_BLOCK_SIZE + 63;
  EXPECT(L::content_byte(slot) == page * L::PAGE_BYTES + 63 * 512, "content offset of slot %lld", (long long)slot);
  EXPECT(L::scale_byte(slot) == page * L::PAGE_BYTES + L::SCALE_OFFSET + 63 * 4, "scale offset");
}

}  // namespace

int main() {
  check_constants();
  for (int64_t page : {0, 1, 7, 52'000}) check_page_tiling(page);
  check_large_slots();
  if (g_failures) {
    std::fprintf(stderr, "test_kv_layout: %d failure(s)\n", g_failures);
    return EXIT_FAILURE;
  }
  std::printf("test_kv_layout: ok\n");
  return EXIT_SUCCESS;
}
