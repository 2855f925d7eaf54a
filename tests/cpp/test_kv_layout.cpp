// Host unit test of the cache byte map (csrc/kv_layout.h): the per-slot byte positions of content, RoPE and
// scale tile every page exactly once and stay inside their part; content and RoPE form the Swizzle-128B image
// of 64-row x 128-B tiles (the 16-B chunk j of row t at chunk j ^ (t % 8)), which the decode kernels bulk-copy
// into shared memory as is; 16-B aligned runs stay contiguous (the quant kernels' 8-B and 16-B accesses); and
// the offsets advance by exactly one page per 64 slots. Built by CMakeLists.txt, run by ctest.
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
    for (int b = 0; b < L::CONTENT_TOKEN_BYTES; ++b) {
      const int64_t rel = L::content_byte(slot, b) - base;
      EXPECT(rel >= L::CONTENT_OFFSET && rel < L::ROPE_OFFSET, "slot %lld content byte %d at %lld", (long long)slot, b,
             (long long)rel);
      ++owners[rel];
    }
    for (int b = 0; b < L::ROPE_TOKEN_BYTES; ++b) {
      const int64_t rel = L::rope_byte(slot, b) - base;
      EXPECT(rel >= L::ROPE_OFFSET && rel < L::SCALE_OFFSET, "slot %lld rope byte %d at %lld", (long long)slot, b,
             (long long)rel);
      ++owners[rel];
    }
    const int64_t rel = L::scale_byte(slot) - base;
    EXPECT(rel >= L::SCALE_OFFSET && rel + 4 <= L::PAGE_BYTES && rel % 4 == 0, "slot %lld scale at %lld",
           (long long)slot, (long long)rel);
    for (int i = 0; i < 4; ++i) ++owners[rel + i];
  }
  for (int i = 0; i < L::PAGE_BYTES; ++i) EXPECT(owners[i] == 1, "page byte %d owned %d times", i, owners[i]);
}

// The Swizzle-128B image, stated independently: content byte b of token t lives in tile b / 128, row t, chunk
// ((b % 128) / 16) ^ (t % 8); RoPE byte b in the RoPE tile, same rule. Every 16-B aligned run is contiguous
// and 16-B aligned in the cache (cache bases are 16-B aligned: api/checks.h).
void check_swizzle_image() {
  for (int t = 0; t < L::PAGE_BLOCK_SIZE; ++t) {
    for (int b = 0; b < L::CONTENT_TOKEN_BYTES; ++b) {
      const int want = (b / 128) * 8192 + t * 128 + ((((b % 128) / 16) ^ (t % 8)) * 16) + b % 16;
      EXPECT(L::content_byte_in_page(t, b) == L::CONTENT_OFFSET + want, "content t %d byte %d", t, b);
      if (b % 16 != 0)
        EXPECT(L::content_byte_in_page(t, b) == L::content_byte_in_page(t, b - 1) + 1, "run t %d b %d", t, b);
      else
        EXPECT(L::content_byte_in_page(t, b) % 16 == 0, "chunk alignment t %d b %d", t, b);
    }
    for (int b = 0; b < L::ROPE_TOKEN_BYTES; ++b) {
      const int want = t * 128 + ((((b % 128) / 16) ^ (t % 8)) * 16) + b % 16;
      EXPECT(L::rope_byte_in_page(t, b) == L::ROPE_OFFSET + want, "rope t %d byte %d", t, b);
    }
  }
}

void check_constants() {
  EXPECT(L::TOKEN_BYTES == 644 && L::PAGE_BYTES == 41216, "byte budget %d / %d", L::TOKEN_BYTES, L::PAGE_BYTES);
  EXPECT(L::D_QK == 576, "d_qk %d", L::D_QK);
  EXPECT(L::CONTENT_TILES == 4 && L::TILE_BYTES == 8192, "tiles %d x %d", L::CONTENT_TILES, L::TILE_BYTES);
  // The bulk copies: 16-B aligned parts and page stride; the tiles on their 1024-B swizzle atom in the page.
  EXPECT(L::PAGE_BYTES % 16 == 0 && L::SCALE_OFFSET % 16 == 0, "bulk copy alignment");
  EXPECT(L::CONTENT_OFFSET % 1024 == 0 && L::ROPE_OFFSET % 1024 == 0, "swizzle tile alignment");
  EXPECT(L::AMAX_FLOOR > 0.0f && L::P_FLOOR > 0.0f, "floors must be positive");
}

// Offsets are int64: a cache past 2^31 bytes (52k pages) must not wrap.
void check_large_slots() {
  const int64_t page = 3'000'000;  // 123 GB into the cache
  const int64_t slot = page * L::PAGE_BLOCK_SIZE + 63;
  EXPECT(L::content_byte(slot, 0) == page * L::PAGE_BYTES + 63 * 128 + ((0 ^ 7) * 16), "content offset of slot %lld",
         (long long)slot);
  EXPECT(L::scale_byte(slot) == page * L::PAGE_BYTES + L::SCALE_OFFSET + 63 * 4, "scale offset");
}

}  // namespace

int main() {
  check_constants();
  check_swizzle_image();
  for (int64_t page : {0, 1, 7, 52'000}) check_page_tiling(page);
  check_large_slots();
  if (g_failures) {
    std::fprintf(stderr, "test_kv_layout: %d failure(s)\n", g_failures);
    return EXIT_FAILURE;
  }
  std::printf("test_kv_layout: ok\n");
  return EXIT_SUCCESS;
}
