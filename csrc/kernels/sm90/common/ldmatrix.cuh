// The warp-wide shared-memory matrix load the V transposes use, on CuTe's ldmatrix operation
// (cute/arch/copy_sm75.hpp, SM75_U16x8_LDSM_T = ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16).
// x4: lanes 8k .. 8k + 7 give the row addresses of 8x8 matrix k (16 B per row); result word k of each lane is
// its element pair of matrix k.
#pragma once

#include <cstdint>

#include <cute/arch/copy_sm75.hpp>

namespace snapmla::sm90 {

// .trans at 16-bit granularity: lane (r = lane / 4, q = lane % 4) gets, of each matrix, rows 2q and 2q + 1 of
// 16-bit column r (for 8-bit data: bytes {row 2q: 2r, 2r + 1}, {row 2q + 1: 2r, 2r + 1}, low to high).
// addr: this lane's 16-B row, as a 32-bit shared-memory address: the callers' swizzle arithmetic stays in 32 bits.
// CuTe's operation takes a reference, so the address goes through a generic pointer that the compiler folds back
// into the same 32-bit address (the LDSM count and the registers are as with a direct 32-bit operand).
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&x)[4]) {
  const auto* row = static_cast<const cute::uint128_t*>(__cvta_shared_to_generic(addr));
  cute::SM75_U16x8_LDSM_T::copy(*row, x[0], x[1], x[2], x[3]);
}

}  // namespace snapmla::sm90
