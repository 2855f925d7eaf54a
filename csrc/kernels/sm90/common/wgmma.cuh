// The warpgroup MMA shapes the decode kernels use (sm_90a), on CuTe's GMMA atoms and shared-memory matrix
// descriptor (cute/arch/mma_sm90_gmma.hpp, mma_sm90_desc.hpp). What is ours: typed adapters that pass a fragment
// array to an atom's fma (the atoms take every accumulator register as its own argument) and the descriptor
// fields our K-major tiles need. Fence / arrive / commit / wait are CuTe's warpgroup_* functions, called directly.
//
// Accumulator fragment (every shape here): thread t of the warpgroup, warp w = t / 32, lane l = t % 32, holds
// for each 8-column chunk i: d[4i + 0, 1] = (row 16w + l/4, cols 8i + 2(l%4) + {0, 1}) and d[4i + 2, 3] = the
// same columns of row 16w + l/4 + 8.
// 8-bit A fragment from registers (.m64nNk32): a[0] = row 16w + l/4, k = 4(l%4) + {0..3} (byte j = k + j);
// a[1] = row + 8, same k; a[2] = row, k + 16; a[3] = row + 8, k + 16.
//
// The atoms' accumulators are "+f" operands: the compiler sees them written when the MMA issues, so callers fence
// them (wgmma_fence_operands) after cute::warpgroup_wait to keep every read after the wait.
#pragma once

#include <cstdint>
#include <utility>

#include <cute/arch/mma_sm90_desc.hpp>
#include <cute/arch/mma_sm90_gmma.hpp>

namespace snapmla::sm90 {

namespace gmma = cute::SM90::GMMA;
using SmemSwizzle = gmma::LayoutType;  // B128 / B64 / B32 / INTERLEAVE (no swizzle)

// K-major operand descriptor (cute::GmmaDescriptor). For the swizzled K-major layouts used here the whole K extent
// of one WGMMA (32 bytes) sits inside one swizzle row, so the leading byte offset is unused (1, as the ISA allows);
// `stride_bytes` is the distance between 8-row groups (8 x row bytes). Advancing the start address by the K offset
// inside the swizzle row is legal because the hardware applies the XOR swizzle to the final address bits; the
// buffers are aligned to the swizzle atom (1024 B for 128B, 512 B for 64B) so the base offset field stays 0.
__device__ __forceinline__ uint64_t make_smem_desc(uint32_t smem_addr, uint32_t stride_bytes, SmemSwizzle swizzle) {
  cute::GmmaDescriptor desc;
  desc.bitfield.start_address_ = static_cast<uint16_t>((smem_addr & 0x3FFFF) >> 4);
  desc.bitfield.leading_byte_offset_ = 1;
  desc.bitfield.stride_byte_offset_ = static_cast<uint16_t>((stride_bytes >> 4) & 0x3FFF);
  desc.bitfield.layout_type_ = static_cast<uint8_t>(swizzle);
  return desc.desc_;
}

// Pins register values at this point of the program (no code is emitted): reads and writes of `r` cannot move
// across it, so an accumulator or an A operand in flight in an async WGMMA is not touched before the wait.
template <int N>
__device__ __forceinline__ void wgmma_fence_operands(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) cute::warpgroup_fence_operand(r[i]);
}
template <int N>
__device__ __forceinline__ void wgmma_fence_operands(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) cute::warpgroup_fence_operand(r[i]);
}

namespace detail {
// accumulate = 0 overwrites D (scale-d predicate false), non-zero adds to it.
__device__ __forceinline__ gmma::ScaleOut scale_d(int accumulate) {
  return static_cast<gmma::ScaleOut>(accumulate);
}
template <class Atom, int N, std::size_t... I>
__device__ __forceinline__ void fma_ss(float (&d)[N], uint64_t desc_a, uint64_t desc_b, int accumulate,
                                       std::index_sequence<I...>) {
  Atom::fma(desc_a, desc_b, d[I]..., scale_d(accumulate));
}
template <class Atom, int N, std::size_t... I>
__device__ __forceinline__ void fma_rs(float (&d)[N], const uint32_t (&a)[4], uint64_t desc_b, int accumulate,
                                       std::index_sequence<I...>) {
  Atom::fma(a[0], a[1], a[2], a[3], desc_b, d[I]..., scale_d(accumulate));
}
}  // namespace detail

// D(64x64, fp32) (+)= A(64x32, e4m3, smem K-major) * B(64x32, e4m3, smem K-major)^T. accumulate = 0 overwrites D.
__device__ __forceinline__ void wgmma_m64n64k32_e4m3_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                        int accumulate) {
  detail::fma_ss<gmma::MMA_64x64x32_F32E4M3E4M3_SS_TN<>>(d, desc_a, desc_b, accumulate,
                                                         std::make_index_sequence<32>{});
}

// D(64x64, fp32) (+)= A(64x16, bf16, smem K-major) * B(64x16, bf16, smem K-major)^T.
__device__ __forceinline__ void wgmma_m64n64k16_bf16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                        int accumulate) {
  detail::fma_ss<gmma::MMA_64x64x16_F32BF16BF16_SS<gmma::Major::K, gmma::Major::K>>(
      d, desc_a, desc_b, accumulate, std::make_index_sequence<32>{});
}

// ---- N = 16 shapes (the narrow kernel, decode_fp8/narrow/: S^T = K . Q^T and O^T = V^T . P^T) ----

// D(64x16, fp32) (+)= A(64x32, e4m3, smem K-major) * B(16x32, e4m3, smem K-major)^T.
__device__ __forceinline__ void wgmma_m64n16k32_e4m3_ss(float (&d)[8], uint64_t desc_a, uint64_t desc_b,
                                                        int accumulate) {
  detail::fma_ss<gmma::MMA_64x16x32_F32E4M3E4M3_SS_TN<>>(d, desc_a, desc_b, accumulate,
                                                         std::make_index_sequence<8>{});
}

// D(64x16, fp32) += A(64x16, bf16, smem K-major) * B(16x16, bf16, smem K-major)^T.
__device__ __forceinline__ void wgmma_m64n16k16_bf16_ss(float (&d)[8], uint64_t desc_a, uint64_t desc_b) {
  detail::fma_ss<gmma::MMA_64x16x16_F32BF16BF16_SS<gmma::Major::K, gmma::Major::K>>(
      d, desc_a, desc_b, 1, std::make_index_sequence<8>{});
}

// D(64x16, fp32) (+)= A(64x32, e4m3, registers) * B(16x32, e4m3, smem K-major)^T.
__device__ __forceinline__ void wgmma_m64n16k32_e4m3_rs(float (&d)[8], const uint32_t (&a)[4], uint64_t desc_b,
                                                        int accumulate) {
  detail::fma_rs<gmma::MMA_64x16x32_F32E4M3E4M3_RS_TN<>>(d, a, desc_b, accumulate, std::make_index_sequence<8>{});
}

// D(64x64, fp32) (+)= A(64x32, e4m3, registers) * B(64x32, e4m3, smem K-major)^T (the wide kernel's PV:
// O^T = V^T . P^T, A = V^T from ldmatrix.trans, B = P^T).
__device__ __forceinline__ void wgmma_m64n64k32_e4m3_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b,
                                                        int accumulate) {
  detail::fma_rs<gmma::MMA_64x64x32_F32E4M3E4M3_RS_TN<>>(d, a, desc_b, accumulate, std::make_index_sequence<32>{});
}

}  // namespace snapmla::sm90
