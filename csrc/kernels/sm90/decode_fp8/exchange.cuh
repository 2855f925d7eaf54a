// Hand-off of one block's softmax result between the two math warpgroups of the decode kernel.
//
// Each block's QK and softmax are computed by one warpgroup only, its owner (block index parity, mainloop.cuh);
// both warpgroups then need the block's P (the A operand of their half of PV) and the online-softmax state after
// it (the next block's softmax starts from it, and the O~ fold uses its scale). The owner writes them into the
// RoPE tile of the block's KV stage: 8 KB that nothing reads once the owner's QK retired, and that the producer
// refills only after kv_empty, which the reader joins once it has copied the hand-off out. So no extra shared
// memory (the kernel has 1 KB left) and no extra barrier on the refill path.
//
// Layout inside the 8192-B RoPE tile:
//   [0, 2048)      P words 0..3 of warpgroup thread i at 16 i   (STS.128 / LDS.128: 8 lanes per 128 B, no bank
//   [2048, 4096)   P words 4..7 of thread i at 2048 + 16 i       conflict; the reader thread i has the same rows)
//   [4096, 5120)   per row (64) a float4 {m, inv, l, o_scale}, written by lane t = 0 of the row's quad
// The P fragment of thread i covers the same rows and k positions in both warpgroups, so the reader gets its
// A registers with two loads and no permutation.
//
// Ordering: the writer's stores are released by its arrival on xchg_full[stage] (128 arrivals) and acquired by
// the reader's wait. Both warpgroups read the P back (the owner its own, mainloop.cuh) and fence the async proxy
// before their kv_empty arrival, because the stage's next TMA load overwrites these bytes.
#pragma once

#include <cstdint>

#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/decode_fp8/config.h"
#include "kernels/sm90/decode_fp8/softmax.cuh"

namespace snapmla::sm90::decode_fp8 {

inline constexpr int XCHG_P_HALF_BYTES = WG_THREADS * 16;          // 2048: 4 P words per thread
inline constexpr int XCHG_STATE_OFFSET = 2 * XCHG_P_HALF_BYTES;   // 4096
inline constexpr int XCHG_BYTES = XCHG_STATE_OFFSET + BLOCK_M * 16;  // 5120
static_assert(XCHG_BYTES <= ROPE_TILE_BYTES, "the hand-off must fit in the RoPE tile it reuses");

// Owner side. tile: shared address of the stage's RoPE tile; tid: thread index in the warpgroup (0..127);
// row0: the thread's first row (16 warp + lane / 4; the second is row0 + 8); quad_lead: lane % 4 == 0.
__device__ __forceinline__ void publish_block(uint32_t tile, const uint32_t (&p)[8], const RowState (&st)[2],
                                              const float (&o_scale)[2], int tid, int row0, bool quad_lead) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(tile + 16 * tid), "r"(p[0]), "r"(p[1]), "r"(p[2]),
               "r"(p[3])
               : "memory");
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(tile + XCHG_P_HALF_BYTES + 16 * tid), "r"(p[4]),
               "r"(p[5]), "r"(p[6]), "r"(p[7])
               : "memory");
  if (quad_lead) {
#pragma unroll
    for (int r = 0; r < 2; ++r)
      asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(tile + XCHG_STATE_OFFSET + 16 * (row0 + 8 * r)),
                   "f"(st[r].m), "f"(st[r].inv), "f"(st[r].l), "f"(o_scale[r])
                   : "memory");
  }
}

// Reader side: the state after the block and the scale of its fold (every lane of the quad reads its rows).
__device__ __forceinline__ void read_block_state(uint32_t tile, int row0, RowState (&st)[2], float (&o_scale)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r)
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(st[r].m), "=f"(st[r].inv), "=f"(st[r].l), "=f"(o_scale[r])
                 : "r"(tile + XCHG_STATE_OFFSET + 16 * (row0 + 8 * r))
                 : "memory");
}

// Reader side: the block's P fragment. Defines A registers of a PV WGMMA, so it runs with no WGMMA in flight
// (mainloop.cuh: ptxas would otherwise serialise every WGMMA of the kernel, C7513).
__device__ __forceinline__ void read_block_p(uint32_t tile, int tid, uint32_t (&p)[8]) {
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(p[0]), "=r"(p[1]), "=r"(p[2]), "=r"(p[3])
               : "r"(tile + 16 * tid)
               : "memory");
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(p[4]), "=r"(p[5]), "=r"(p[6]), "=r"(p[7])
               : "r"(tile + XCHG_P_HALF_BYTES + 16 * tid)
               : "memory");
}

}  // namespace snapmla::sm90::decode_fp8
