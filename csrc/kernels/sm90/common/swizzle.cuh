// Byte offsets of the 16-B chunks of the swizzled shared-memory tiles of the decode kernels, one function per
// layout. They are the layouts of CuTe's GMMA K-major atoms for 8-bit data (cute/atom/mma_traits_sm90_gmma.hpp:
// Layout_K_SW128_Atom = Swizzle<3,4,3> over 8 x 128 B, Layout_K_SW64_Atom = Swizzle<2,4,3> over 8 x 64 B), stacked
// along rows: the layout that the WGMMA descriptors (wgmma.cuh, SmemSwizzle::B128 / B64) name and that TMA writes
// for CU_TENSOR_MAP_SWIZZLE_128B. A byte b of chunk c sits at the chunk's offset + b (the swizzle moves whole 16-B
// chunks). tests/cpp/test_swizzle_layouts.cpp checks both, for every row, chunk and byte of a tile, against the
// CuTe swizzle functors and the atoms' layouts.
//
// Why not call cute::Swizzle in the kernels: it XORs bits of the whole byte offset, so ptxas rebuilds the XOR for
// each unrolled row and keeps more addresses live; on the chunk index the row term (row % 8, or (row / 2) % 4) is
// visibly per-thread constant in the kernels' loops. The functor cost the narrow kernel 56-60 B of spills at its
// 168 registers; these forms compile to the instructions the kernels had before they used the functions.
#pragma once

#include <cstdint>

#include <cute/config.hpp>  // CUTE_HOST_DEVICE: the CPU test compiles this header with a host compiler

namespace snapmla::sm90 {

// Chunk `chunk` (0..7) of row `row` (128 B each) of a Swizzle-128B tile: stored at chunk `chunk ^ (row % 8)`.
CUTE_HOST_DEVICE constexpr uint32_t sw128_chunk_offset(uint32_t row, uint32_t chunk) {
  return row * 128u + ((chunk ^ (row & 7u)) << 4);
}

// Chunk `chunk` (0..3) of row `row` (64 B each) of a Swizzle-64B tile: stored at chunk `chunk ^ ((row / 2) % 4)`.
CUTE_HOST_DEVICE constexpr uint32_t sw64_chunk_offset(uint32_t row, uint32_t chunk) {
  return row * 64u + ((chunk ^ ((row >> 1) & 3u)) << 4);
}

}  // namespace snapmla::sm90
