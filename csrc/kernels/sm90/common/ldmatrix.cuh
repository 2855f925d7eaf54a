// Thin inline-PTX wrapper for the warp-wide shared-memory matrix load (ldmatrix, sm_90a) the V transposes use.
// PTX ISA: "Warp-level matrix load instructions: ldmatrix".
// x4: lanes 8k .. 8k + 7 give the row addresses of 8x8 matrix k (16 B per row); result word k of each lane is
// its element pair of matrix k.
#pragma once

#include <cstdint>

namespace snapmla::sm90 {

// .trans at 16-bit granularity: lane (r = lane / 4, q = lane % 4) gets, of each matrix, rows 2q and 2q + 1 of
// 16-bit column r (for 8-bit data: bytes {row 2q: 2r, 2r + 1}, {row 2q + 1: 2r, 2r + 1}, low to high).
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&x)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3])
               : "r"(addr)
               : "memory");
}

}  // namespace snapmla::sm90
