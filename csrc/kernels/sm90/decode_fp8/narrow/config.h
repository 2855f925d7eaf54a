// Configuration and shared-memory plan of the narrow decode kernel (q_rows = s_q * h_q <= 16, e.g. h_q = 16 at
// s_q = 1): both GEMMs run with the query rows as the WGMMA N dimension (narrow/kernel.cuh has the design).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/sm90/decode_fp8/shared/config.h"

namespace snapmla::sm90::decode_fp8::narrow {

// Query rows per CTA: the N of every WGMMA (m64n16). Requests with more rows take the wide kernel.
inline constexpr int ROWS = 16;
// Rows per thread of an m64n16 accumulator fragment: columns 8i + 2t + e (i, e in {0, 1}, t = lane % 4).
inline constexpr int COLS_PER_THREAD = 4;
inline constexpr int ACC = 8;  // fp32 registers of one m64n16 accumulator per thread

// O^T (512 dims x 16 rows) as 8 WGMMA m-tiles of 64 dims, all held by each math warpgroup (8 x 8 = 64 fp32).
inline constexpr int M_TILES = D_V / 64;  // 8
// PV issue: m-tiles go out in waves of WAVE_MT (2 x 2 k32 WGMMAs), and wave k + 1 is in flight while wave k is
// folded into O^T. Registers per wave: A fragments 2 x 2 x 4 + accumulators 2 x 8 = 32.
inline constexpr int WAVE_MT = 2;
inline constexpr int WAVES = M_TILES / WAVE_MT;  // 4

// KV stages: a page each (content 4 x 8 KB, RoPE 8 KB, 64 fp32 scales). Without V^T buffers and with a 16-row
// query tile the kernel has room for 4 (the wide kernel: 3).
inline constexpr int STAGES = 4;
// Query tiles: double-buffered per piece, so the next piece's blocks are not held back by the query tile.
inline constexpr int Q_BUFS = 2;
inline constexpr int Q_TILE_BYTES = ROWS * SWIZZLE_ROW_BYTES;                            // 2048
inline constexpr int Q_TX_BYTES = CONTENT_TILES * Q_TILE_BYTES + ROWS * D_ROPE * 2;      // 10240
// P^T of a block: 16 rows x 64 tokens e4m3, K-major Swizzle-64B (row c at 64 c, 16-B chunk XOR (c >> 1) & 3).
inline constexpr int PT_BYTES = ROWS * BLOCK_N;  // 1024

// Registers: math O^T 64 + S^T 8 chains x 8 during the QK (8 after their sum) + two PV waves 64 + per-column
// state; the producer is one TMA thread.
inline constexpr int N_MATH_REGS = 232;
inline constexpr int N_PRODUCER_REGS = 40;
static_assert(NUM_MATH_WG * N_MATH_REGS + N_PRODUCER_REGS <= 3 * LAUNCH_REGS, "register pool of the CTA");

// Named barriers (bar.sync; 0 is __syncthreads): one per math warpgroup (its 128 threads: the column
// reductions and the P^T hand-over to its own WGMMA).
inline constexpr int BAR_WG0 = 1;  // + wg
// The merge at the end of a piece (merge_store.cuh) waits on two mbarriers over both math warpgroups
// (NarrowStorage::merge_bar), indexed by these.
inline constexpr int MERGE_PUBLISHED = 0;  // piece end: both states and O~ halves published
inline constexpr int MERGE_READ = 1;       // ... and read (xfer and col_state may be overwritten)

// Shared memory, 1024-B aligned members first:
//   kv_content  131072  (4 stages x 4 tiles: 64 tokens x 128 B, Swizzle-128B)
//   kv_rope      32768  (4 stages x 64 tokens x 64 bf16, Swizzle-128B)
//   q_content    16384  (2 buffers x 4 tiles: 16 rows x 128 B, Swizzle-128B)
//   q_rope        4096  (2 buffers x 16 rows x 64 bf16, Swizzle-128B)
//   pt            2048  (per math warpgroup: P^T of its block)
//   xfer         32768  (piece end: the half of O^T each warpgroup hands to the other, fp32, 16 KB each)
//   kv_scale      1024  (4 stages x 64 fp32)
//   red           1024  (per warpgroup: column maxima / sums of its 4 warps, two slots)
//   col_state      512  (per warpgroup and row: {m, inv, L~} at the piece end)
//   barriers       112  (kv_full / kv_empty, q_full / q_empty, merge_bar)
struct alignas(1024) NarrowStorage {
  static constexpr int kStages = STAGES, kQBufs = Q_BUFS, kQTxBytes = Q_TX_BYTES;
  uint8_t kv_content[STAGES][CONTENT_TILES][CONTENT_TILE_BYTES];
  uint8_t kv_rope[STAGES][ROPE_TILE_BYTES];
  uint8_t q_content[Q_BUFS][CONTENT_TILES][Q_TILE_BYTES];
  uint8_t q_rope[Q_BUFS][ROWS * D_ROPE * 2];
  uint8_t pt[NUM_MATH_WG][PT_BYTES];
  float4 xfer[NUM_MATH_WG][M_TILES / 2 * ACC / 4][WG_THREADS];  // [from wg][float4 k][thread]
  float kv_scale[STAGES][BLOCK_N];
  float red[NUM_MATH_WG][2][MATH_WARPS_PER_WG][ROWS];
  float4 col_state[NUM_MATH_WG][ROWS];
  uint64_t kv_full[STAGES];   // TMA bytes of a page, one arrival (the producer thread)
  uint64_t kv_empty[STAGES];  // WG_THREADS arrivals: the block's owner after its last read of the stage
  uint64_t q_full[Q_BUFS];    // TMA bytes of the query tile, one arrival
  uint64_t q_empty[Q_BUFS];   // MATH_THREADS arrivals: each math warpgroup after its last QK of the piece
  uint64_t merge_bar[2];      // MATH_THREADS arrivals each, one phase per piece: [MERGE_PUBLISHED], [MERGE_READ]
};

inline constexpr int N_SMEM_BYTES = static_cast<int>(sizeof(NarrowStorage)) + 1024;
static_assert(N_SMEM_BYTES <= 232448, "sm_90 allows 227 KB of dynamic shared memory per CTA");
static_assert(offsetof(NarrowStorage, kv_rope) % 1024 == 0 && offsetof(NarrowStorage, q_content) % 1024 == 0 &&
                  offsetof(NarrowStorage, q_rope) % 1024 == 0 && offsetof(NarrowStorage, pt) % 512 == 0,
              "swizzled tiles must sit on their swizzle atom");
static_assert(STAGES * kvl::PAGE_BYTES == STAGES * (CONTENT_TILES * CONTENT_TILE_BYTES + ROPE_TILE_BYTES + BLOCK_N * 4),
              "a stage is exactly one page");

}  // namespace snapmla::sm90::decode_fp8::narrow
