// Host unit test of the decode kernels' swizzled shared-memory offsets (csrc/kernels/sm90/common/swizzle.cuh)
// against CuTe: for every row of a 64-row tile (8 swizzle atoms stacked along rows), every 16-B chunk and every
// byte in it, sw128_chunk_offset / sw64_chunk_offset plus the byte must equal
//   - the CuTe swizzle functor applied to the row-major offset (Swizzle<3,4,3> over 128-B rows, Swizzle<2,4,3>
//     over 64-B rows), and
//   - the GMMA K-major 8-bit atom layout (Layout_K_SW128_Atom / Layout_K_SW64_Atom<uint8_t>) at (row % 8, byte)
//     plus the atom's size for each 8 rows before it: the layout the WGMMA descriptors name.
// Also checks that each tile's offsets are a permutation of the tile's bytes. Built by CMakeLists.txt (which finds
// CUTLASS as setup.py does), run by ctest.
#include <cstdint>
#include <cstdio>
#include <vector>

#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/swizzle.hpp>

#include "expect.h"
#include "kernels/sm90/common/swizzle.cuh"

namespace {

namespace sm90 = snapmla::sm90;

constexpr int TILE_ROWS = 64;  // a page's content and RoPE tiles, and the 64-row P^T tiles

template <int ROW_BYTES, typename Swz, typename Atom, typename ChunkOffset>
void check_layout(const char* name, Swz swz, Atom atom, ChunkOffset chunk_offset) {
  std::vector<int> hits(TILE_ROWS * ROW_BYTES, 0);
  for (int row = 0; row < TILE_ROWS; ++row) {
    for (int byte = 0; byte < ROW_BYTES; ++byte) {
      const uint32_t ours = chunk_offset(row, byte / 16) + byte % 16;
      const uint32_t functor = swz(static_cast<uint32_t>(row * ROW_BYTES + byte));
      const uint32_t atom_off = static_cast<uint32_t>(atom(row % 8, byte)) + (row / 8) * 8 * ROW_BYTES;
      EXPECT(ours == functor, "%s row %d byte %d: ours %u, CuTe swizzle %u", name, row, byte, ours, functor);
      EXPECT(ours == atom_off, "%s row %d byte %d: ours %u, CuTe GMMA atom %u", name, row, byte, ours, atom_off);
      EXPECT(ours < hits.size(), "%s row %d byte %d: offset %u outside the tile", name, row, byte, ours);
      ++hits[ours];
    }
  }
  for (size_t i = 0; i < hits.size(); ++i) EXPECT(hits[i] == 1, "%s: byte %zu of the tile hit %d times", name, i, hits[i]);
}

}  // namespace

int main() {
  check_layout<128>("Swizzle-128B", cute::Swizzle<3, 4, 3>{}, cute::GMMA::Layout_K_SW128_Atom<uint8_t>{},
                    [](int row, int chunk) { return sm90::sw128_chunk_offset(row, chunk); });
  check_layout<64>("Swizzle-64B", cute::Swizzle<2, 4, 3>{}, cute::GMMA::Layout_K_SW64_Atom<uint8_t>{},
                   [](int row, int chunk) { return sm90::sw64_chunk_offset(row, chunk); });
  if (g_failures) {
    std::fprintf(stderr, "%d failure(s)\n", g_failures);
    return 1;
  }
  std::printf("swizzle layouts: ok\n");
  return 0;
}
