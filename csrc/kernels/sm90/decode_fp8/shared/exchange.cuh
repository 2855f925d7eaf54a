// Hand-off of one block's softmax result between the two math warpgroups of the wide decode kernel.
//
// Each block's QK and softmax are computed by one warpgroup only, its owner (block index parity, mainloop.cuh);
// both warpgroups then need the block's P (the B operand of their PV, O^T = V^T . P^T) and the online-softmax
// state after it (the next block's softmax starts from it, and the O^T fold uses its scale per row). The owner
// writes them into the RoPE tile of the block's KV stage: 8 KB that nothing reads once the owner's QK retired,
// and that the producer refills only after kv_empty, which both warpgroups join once their PV of the block
// retired. So no extra shared memory and no extra barrier on the refill path.
//
// Layout inside the 8192-B RoPE tile (1024-B aligned):
//   [0, 4096)      P^T: 64 tile rows x 64 k positions e4m3, K-major Swizzle-64B (row c at 64 c, 16-B chunk XOR
//                  (c >> 1) & 3), the B operand of the PV WGMMAs. K position 32g + 16h + 4t + j holds token
//                  32g + 16h + 2t + {0, 1, 8, 9}[j] (the order the V^T fragments of narrow/pv.cuh use), which is
//                  exactly the byte order of the owner's packed P words (softmax.cuh pack_p): word 4g + 2h + r
//                  of thread (row0, t) is the 4 bytes at row row0 + 8r, positions 32g + 16h + 4t .. + 3.
//                  8 STS.32 per thread; the 8 rows x 4 lanes of a store phase hit 32 distinct banks.
//   [4096, 5120)   per row (64) a float4 {m, inv, l, o_scale}, written by lane t = 0 of the row's quad: the
//                  state the next block's softmax starts from (row layout).
//   [5120, 5376)   o_scale per row (64 fp32): the fold factor, read by columns (the O^T accumulator's columns are
//                  the tile rows).
//
// Ordering: the owner's stores are made visible to the async proxy (WGMMA reads P^T) by its fence, released by
// its arrival on xchg_full[stage] (128 arrivals) and acquired by every reader's wait, the owner's own PV
// included. The stage's next TMA load overwrites these bytes after the readers' generic reads of the state:
// that write-after-read is ordered by their kv_empty arrivals and the producer's wait (mbarrier.cuh
// release_stage; no proxy fence).
#pragma once

#include <cstdint>

#include "kernels/sm90/common/swizzle.cuh"
#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/decode_fp8/shared/config.h"
#include "kernels/sm90/decode_fp8/shared/softmax.cuh"

namespace snapmla::sm90::decode_fp8 {

inline constexpr int XCHG_PT_BYTES = BLOCK_M * BLOCK_N;                      // 4096
inline constexpr int XCHG_STATE_OFFSET = XCHG_PT_BYTES;                      // 4096
inline constexpr int XCHG_SCALE_OFFSET = XCHG_STATE_OFFSET + BLOCK_M * 16;   // 5120
inline constexpr int XCHG_BYTES = XCHG_SCALE_OFFSET + BLOCK_M * 4;           // 5376
static_assert(XCHG_BYTES <= ROPE_TILE_BYTES, "the hand-off must fit in the RoPE tile it reuses");

// Owner side. tile: shared address of the stage's RoPE tile; p: the packed P words (pack_p); row0: the thread's
// first row (16 warp + lane / 4; the second is row0 + 8); t = lane % 4.
// publish_block stores P^T (publish_pt) and the state (publish_state) and fences them for the readers' WGMMAs.
__device__ __forceinline__ void publish_pt(uint32_t tile, const uint32_t (&p)[8], int row0, int t) {
#pragma unroll
  for (int g = 0; g < 2; ++g) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + 8 * r;
        const uint32_t addr = tile + sw64_chunk_offset(row, 2 * g + h) + 4 * t;
        // Own PTX: a shared-memory access through a 32-bit address (CuTe's copies take pointers: 64-bit registers).
        asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(p[4 * g + 2 * h + r]) : "memory");
      }
    }
  }
}
__device__ __forceinline__ void publish_state(uint32_t tile, const RowState (&st)[2], const float (&o_scale)[2],
                                              int row0, int t) {
  if (t == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 8 * r;
      // Own PTX: a shared-memory access through a 32-bit address (CuTe's copies take pointers: 64-bit registers).
      asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(tile + XCHG_STATE_OFFSET + 16 * row),
                   "f"(st[r].m), "f"(st[r].inv), "f"(st[r].l), "f"(o_scale[r])
                   : "memory");
      asm volatile("st.shared.f32 [%0], %1;" ::"r"(tile + XCHG_SCALE_OFFSET + 4 * row), "f"(o_scale[r]) : "memory");
    }
  }
}
__device__ __forceinline__ void publish_block(uint32_t tile, const uint32_t (&p)[8], const RowState (&st)[2],
                                              const float (&o_scale)[2], int row0, int t) {
  publish_pt(tile, p, row0, t);
  publish_state(tile, st, o_scale, row0, t);
  fence_proxy_async_smem();
}

// Reader side: the state after the block of tile row `row` (its m, inv, L~) and the scale of its fold.
__device__ __forceinline__ RowState read_row_state(uint32_t tile, int row, float& o_scale) {
  RowState st;
  // Own PTX: a shared-memory access through a 32-bit address (CuTe's copies take pointers: 64-bit registers).
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(st.m), "=f"(st.inv), "=f"(st.l), "=f"(o_scale)
               : "r"(tile + XCHG_STATE_OFFSET + 16 * row)
               : "memory");
  return st;
}

// The same for both of a thread's rows, row0 and row0 + 8 (every lane of the quad reads its rows).
__device__ __forceinline__ void read_block_state(uint32_t tile, int row0, RowState (&st)[2], float (&o_scale)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) st[r] = read_row_state(tile, row0 + 8 * r, o_scale[r]);
}

// The fold scales of the thread's O^T columns (tile rows 8i + 2t + e) for i = FIRST .. FIRST + COUNT - 1:
// col_scale[2 (i - FIRST) + e], COUNT LDS.64 (all 16 columns: FIRST = 0, COUNT = 8).
template <int FIRST = 0, int COUNT = 8>
__device__ __forceinline__ void read_col_scales(uint32_t tile, int t, float (&col_scale)[2 * COUNT]) {
  static_assert(FIRST >= 0 && COUNT > 0 && FIRST + COUNT <= 8, "8 column chunks of the 64 tile rows");
  // Own PTX: a shared-memory access through a 32-bit address (CuTe's copies take pointers: 64-bit registers).
#pragma unroll
  for (int i = FIRST; i < FIRST + COUNT; ++i)
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];"
                 : "=f"(col_scale[2 * (i - FIRST)]), "=f"(col_scale[2 * (i - FIRST) + 1])
                 : "r"(tile + XCHG_SCALE_OFFSET + 4 * (8 * i + 2 * t))
                 : "memory");
}

}  // namespace snapmla::sm90::decode_fp8
