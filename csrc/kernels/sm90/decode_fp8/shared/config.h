// Compile-time configuration of the sm_90a FP8 SnapMLA decode kernel: tile sizes, warpgroup roles, pipeline
// depths and register split. Every derived size is checked here; wide/kernel.cuh has the design header.
#pragma once

#include "kernels/sm90/decode_fp8/launch.h"
#include "kv_layout.h"

namespace snapmla::sm90::decode_fp8 {

namespace kvl = snapmla::kv_layout;

// ---- tiles ----
inline constexpr int BLOCK_N = kvl::PAGE_BLOCK_SIZE;  // 64 tokens per KV block = one page
inline constexpr int D_CONTENT = kvl::D_CONTENT;      // 512 (= d_v)
inline constexpr int D_ROPE = kvl::D_ROPE;            // 64
inline constexpr int D_V = kvl::D_CONTENT;            // 512

// TMA / WGMMA tiles are 128-byte swizzle rows: the 512-B fp8 content row of a token or query is 4 such tiles,
// the 64-dim bf16 RoPE row exactly one. The cache stores its pages as these tiles' Swizzle-128B image
// (kv_layout.h), so a stage is filled by plain bulk copies.
inline constexpr int SWIZZLE_ROW_BYTES = kvl::SWIZZLE_ROW_BYTES;           // 128
inline constexpr int CONTENT_TILES = kvl::CONTENT_TILES;                   // 4
inline constexpr int CONTENT_TILE_BYTES = kvl::TILE_BYTES;                 // 8192 (64 rows x 128 B)
inline constexpr int Q_CONTENT_TILE_BYTES = BLOCK_M * SWIZZLE_ROW_BYTES;  // 8192
inline constexpr int ROPE_TILE_BYTES = BLOCK_N * D_ROPE * 2;              // 8192

// ---- WGMMA k-steps ----
inline constexpr int K_STEP_BYTES = 32;                                      // k32 e4m3 and k16 bf16 alike
inline constexpr int QK_CONTENT_STEPS = D_CONTENT / K_STEP_BYTES;            // 16 FP8 WGMMAs (8 k-groups of 64)
inline constexpr int QK_ROPE_STEPS = D_ROPE * 2 / K_STEP_BYTES;              // 4 BF16 WGMMAs (1 k-group of 64)
inline constexpr int STEPS_PER_SWIZZLE_ROW = SWIZZLE_ROW_BYTES / K_STEP_BYTES;  // 4
inline constexpr int PV_STEPS = BLOCK_N / K_STEP_BYTES;                       // 2 (tokens are the PV k dim)
// PV (swap AB, mainloop.cuh): O^T (dims x 64 rows) per m-tile of 64 dims, 2 RS QGMMA m64n64k32 (A = V^T from
// ldmatrix.trans, B = P^T in the hand-off), one m-tile in flight while the previous one is folded in fp32.
inline constexpr int PV_M_TILES = 4;  // per math warpgroup: its 256 dims

// ---- warpgroups ----
inline constexpr int WG_THREADS = 128;
inline constexpr int NUM_MATH_WG = 2;                     // WG0, WG1: one 256-dim half of O each
inline constexpr int PRODUCER_WG = NUM_MATH_WG;           // WG2: TMA issue (one thread)
inline constexpr int NUM_THREADS = (NUM_MATH_WG + 1) * WG_THREADS;  // 384
inline constexpr int D_V_PER_WG = D_V / NUM_MATH_WG;      // 256 output dims per math warpgroup

// Register split (setmaxnreg): O^T (128 fp32) + S (32, dead during PV) or one PV m-tile accumulator (32) + its
// A fragments (8) + 16 column scales + softmax state and addresses per math thread; the producer is one TMA
// thread. The pool is what the launch gave (__launch_bounds__(384, 1): 168 per thread), so
// 2 x MATH_REGS + PRODUCER_REGS <= 3 x 168, else the setmaxnreg.inc of the math warpgroups would wait forever.
inline constexpr int LAUNCH_REGS = 168;
inline constexpr int MATH_REGS = 232;
inline constexpr int PRODUCER_REGS = 40;
static_assert(NUM_MATH_WG * MATH_REGS + PRODUCER_REGS <= 3 * LAUNCH_REGS, "register pool of the CTA");
static_assert(MATH_REGS % 8 == 0 && PRODUCER_REGS % 8 == 0, "setmaxnreg takes multiples of 8");

// ---- pipeline ----
// KV stages hold what TMA brings (content + RoPE + scales, 41216 B); a stage is free once both math warpgroups
// ran their PV of the block (their V^T fragments come from its content tiles, P^T from the hand-off in its RoPE
// tile). V^T lives in registers, not in 64 KB of shared-memory buffers, which leaves room for 4.
inline constexpr int KV_STAGES = 4;
inline constexpr int KV_STAGE_TX_BYTES = CONTENT_TILES * CONTENT_TILE_BYTES + ROPE_TILE_BYTES + BLOCK_N * 4;
// The query tile: 4 warp slabs of rows_per_warp rows (launch.h), content and RoPE (TMA counts whole boxes).
inline constexpr int MATH_WARPS_PER_WG = WG_THREADS / 32;  // 4
__device__ __forceinline__ constexpr int q_tx_bytes(int rows_per_warp) {
  return MATH_WARPS_PER_WG * rows_per_warp * (CONTENT_TILES * SWIZZLE_ROW_BYTES + D_ROPE * 2);
}
static_assert(MATH_WARPS_PER_WG * 16 == BLOCK_M && MATH_WARPS_PER_WG == 4,
              "each warp of a WGMMA owns 16 accumulator rows (launch.h warp_first_q_row assumes 4 warps)");
static_assert(KV_STAGE_TX_BYTES == kvl::PAGE_BYTES, "a stage is exactly one page: the kernel reads 644 B/token");
static_assert(PV_M_TILES * 64 == D_V_PER_WG, "a warpgroup's dims are whole m-tiles");

// ---- shapes the code relies on ----
static_assert(BLOCK_M == 64 && BLOCK_N == 64, "the WGMMA M is 64 and the fragment maths assumes 64-token blocks");
static_assert(D_ROPE * 2 == SWIZZLE_ROW_BYTES, "the RoPE row is one 128-B swizzle row");

// Arrival counts of the barriers (every thread of the role arrives; see traits.h).
inline constexpr int MATH_THREADS = NUM_MATH_WG * WG_THREADS;  // 256

inline constexpr float LOG2E = 1.4426950408889634f;
inline constexpr float LN2 = 0.6931471805599453f;

}  // namespace snapmla::sm90::decode_fp8
