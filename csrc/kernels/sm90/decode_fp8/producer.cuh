// Producer warpgroup (WG2) of the decode kernel: TMA loads and the in-kernel V transpose.
//
// TMA (lane 0 of each of the 4 warps, TmaLoader): warp w loads content tile w of every block (8192 B); warp 0
// also the block's RoPE tile and 64 scales (8448 B) and, per piece, the query tile (4 content tiles + 1 RoPE
// tile, 40 KB, zero-filled past q_rows) on q_full after q_empty. kv_full[stage] takes one expect_tx arrival per
// warp (TMA_ISSUERS = 4) with that warp's bytes; the page (41216 B) is complete when all four landed. After each
// transpose a warp issues up to 2 blocks ahead (blocking) and tries a third (TmaLoader says why that is safe);
// it never polls. Spreading the issue over the warps took it off the one transposing warp 0 whose loop set the
// block time (docs/decode_kernel.md, clock trace: ~1100 of ~4700 cycles per block were its issue).
//
// Transpose (all 128 threads): 8-bit WGMMA reads B K-major only, so PV needs V^T with the 64 tokens of a block
// contiguous per output dim. Warp w turns content tile w (tokens x dims 128w .. 128w+127, Swizzle-128B) into
// rows 128w .. 128w+127 of the V^T buffer (512 rows x 64 B, K-major Swizzle-64B). Lane (s = lane/4, c = lane%4)
// owns the 4 dims 128w + 16s + 4c + {0..3} for all 64 tokens: 64 LDS.32 (one per token; the lanes of a warp hit
// 32 distinct banks), 4x4 byte transposes with PRMT, 16 STS.128 (odd-s lanes store their dim pairs swapped so
// the 8 lanes of each store phase cover all 32 banks).
//
// Token order inside a V^T row matches the register layout of P (mainloop.cuh): WGMMA k position
// kk = 32g + 16h + 4t + j (j = 0..3) of the A fragment holds QK accumulator column
// 32g + 16h + 2t + {0, 1, 8, 9}[j], i.e. the columns a thread already owns, so P needs no shuffles. Hence word
// q = 4cc + t of a V^T row (16-B chunk cc = 2g + h) holds tokens 16cc + 2t + {0, 1, 8, 9}.
//
// Tokens past the sequence (last block) are written as zeros: unused cache slots may hold NaN and 0 * NaN = NaN.
#pragma once

#include <climits>

#include "kernels/sm90/common/ldmatrix.cuh"
#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/decode_fp8/schedule.cuh"
#include "kernels/sm90/decode_fp8/traits.h"

namespace snapmla::sm90::decode_fp8 {

// The cursor of one warp's TMA issuing lane: the next block to load and the piece it belongs to.
//
// The issuing lane also transposes, so it must never block on a barrier whose completion needs its own warp's
// later transposes. After transposing block n the warp may block on kv_empty for blocks below `need` = n + 3:
// block n + 2 reuses the stage of n - 1, released by the transposes of n - 1 (every warp issues its part of a
// block before it waits for that block, so the warp furthest behind never waits for another) and by the math
// warpgroups' reads of n - 1's hand-off, which need the QK of n (its page was issued two transposes earlier) and
// nothing this warp still has to transpose. It may block on q_empty (warp 0, entering a new piece) only for
// blocks below `need_q` = n + 2: a math warpgroup releases a piece's query tile after its last QK of the piece,
// or, when it owns no block of the piece (always for an empty piece), only once it finished the previous piece,
// i.e. after the PVs of that piece's blocks; entering the piece of block n + 2 past an empty piece would wait
// for the PV of n + 1, which needs this warp's next transpose (a deadlock the full test sweep caught,
// 2026-11-29). Blocks from the need bounds to `want` are prefetch: their barriers are only tested, and the
// loader returns if one is not ready yet (it tries again after the next transpose).
struct TmaLoader {
  int req;          // request of the piece whose blocks are being issued (begin_req - 1 before the first)
  int blk, blk_end;
  int pieces;       // pieces entered (warp 0: query tiles issued)
  int blocks;       // KV blocks issued
  int page;         // page id of (req, blk), loaded one issue ahead so its latency is off the issue path

  __device__ void init(const SchedRow& row) {
    req = row.begin_req - 1;
    blk = blk_end = 0;
    pieces = blocks = 0;
    page = 0;
  }

  __device__ void load_page(const DecodeParams& p) {
    if (blk < blk_end) page = p.block_table[static_cast<int64_t>(req) * p.block_table_batch_stride + blk];
  }

  __device__ static bool ready(uint64_t* bar, uint32_t parity, bool may_block) {
    if (may_block) {
      mbarrier_wait(bar, parity);
      return true;
    }
    return mbarrier_test(bar, parity);
  }

  // Issues warp `warp`'s loads until `want` blocks are issued or the schedule row is exhausted (warp 0 then
  // also issues the query tiles of trailing empty pieces, since the math warpgroups wait for every piece's Q).
  __device__ void run(const KernelParams& kp, SharedStorage& ss, const SchedRow& row, int m_tile, int warp,
                      int need_q, int need, int want) {
    const DecodeParams& p = kp.p;
    while (blocks < want) {
      const bool may_block = blocks < need;
      if (blk == blk_end) {
        if (req >= row.end_req) return;
        if (warp == 0 && pieces > 0 && !ready(&ss.q_empty, (pieces - 1) & 1, blocks < need_q)) return;
        ++req;
        const Piece pc = make_piece(p, row, req);
        blk = pc.blk_begin;
        blk_end = pc.blk_end;
        load_page(p);
        ++pieces;
        if (warp == 0) issue_query(kp, ss, m_tile);
        continue;
      }
      const int stage = blocks % KV_STAGES;
      if (blocks >= KV_STAGES && !ready(&ss.kv_empty[stage], ((blocks / KV_STAGES) - 1) & 1, may_block)) return;
      uint64_t* bar = &ss.kv_full[stage];
      mbarrier_arrive_expect_tx(bar, warp == 0 ? CONTENT_TILE_BYTES + KV_STAGE_EXTRA_TX_BYTES : CONTENT_TILE_BYTES);
      tma_load_3d(ss.kv_content[stage][warp], &kp.tm_kv_content, bar, warp * SWIZZLE_ROW_BYTES, 0, page);
      if (warp == 0) {
        tma_load_3d(ss.kv_rope[stage], &kp.tm_kv_rope, bar, 0, 0, page);
        tma_load_2d(ss.kv_scale[stage], &kp.tm_kv_scale, bar, 0, page);
      }
      ++blk;
      ++blocks;
      load_page(p);
    }
  }

  // The query tile of piece `req`, on q_full. Warp slab w of the tile (shared rows 16w ..) gets query rows
  // (4m + w) R .. + R - 1 (launch.h); rows past q_rows are zero-filled, shared rows 16w + R .. 16w + 15 are not
  // written (padding rows: each accumulator row depends on its own query row only, and padding rows are never
  // stored).
  __device__ void issue_query(const KernelParams& kp, SharedStorage& ss, int m_tile) const {
    const int rpw = rows_per_warp(kp.p.q_rows);
    mbarrier_arrive_expect_tx(&ss.q_full, q_tx_bytes(rpw));
#pragma unroll
    for (int w = 0; w < MATH_WARPS_PER_WG; ++w) {
      const int q_row = warp_first_q_row(m_tile, w, rpw);
      constexpr int SLAB = 16 * SWIZZLE_ROW_BYTES;  // 16 rows of 128 B
#pragma unroll
      for (int t = 0; t < CONTENT_TILES; ++t)
        tma_load_3d(ss.q_content[t] + w * SLAB, &kp.tm_q_content, &ss.q_full, t * SWIZZLE_ROW_BYTES, q_row, req);
      tma_load_3d(ss.q_rope + w * SLAB, &kp.tm_q_rope, &ss.q_full, 0, q_row, req);
    }
  }
};

// One warp: content tile `tile` of a stage -> V^T rows 128*tile .. +127. n_valid = tokens of the block inside
// the sequence (64 except in the last block; MASKED = false skips the masking when it is 64).
//
// Per 16-token chunk cc and pair of 16-dim column chunks (C = 2pp, C + 1), one LDSM.x4.trans, 4 PRMT and one
// STSM.x4 (16 + 64 + 16 instructions per tile instead of 64 LDS.32 + 128 PRMT + 16 STS.128):
//  - ldmatrix .trans at 16-bit granularity: matrix k (rows = tokens 16cc + 8(k&1) + 0..7, 16 B of column chunk
//    C + (k>>1)) gives lane (r = lane/4, q = lane%4) tokens 2q, 2q+1 (+8 for odd k) x dims 2r, 2r+1 of the
//    column chunk, one byte each. Rows of a matrix are 8 consecutive tokens: Swizzle-128B puts them in 8
//    distinct 16-B bank groups.
//  - PRMT of matrices (0, 1): the word of tokens 2q + {0, 1, 8, 9} for dim 2r (bytes 0, 2 of each: 0x6420)
//    and for dim 2r + 1 (bytes 1, 3: 0x7531) = word q of 16-B chunk cc of that V^T row (the P order above).
//  - stmatrix (no trans): lane (r, q) supplies word q of row r of each matrix, so matrix 0 / 1 rows are the dims
//    2r + e / 2r + 1 - e of column chunk C (matrices 2 / 3: C + 1), with e = (r >> 2) & 1: rows r < 4 at even
//    dims and r >= 4 at odd ones put the 8 rows of a store phase (64-B V^T rows, Swizzle-64B: chunk cc ^ (r & 3))
//    into 8 distinct bank groups. The choice of e is in the per-lane PRMT selectors.
template <bool MASKED>
__device__ __forceinline__ void transpose_tile(uint32_t src,  // (64 tokens x 128 B) Swizzle-128B
                                               uint32_t vt,   // (512 dims x 64 B) Swizzle-64B
                                               int tile, int lane, int n_valid) {
  // Opaque so the addresses are rebuilt per block from a few registers (immediate offsets) instead of being
  // hoisted out of the block loop into registers the producer does not have.
  lane = opaque(lane);
  // Address role: lane = 8k + i gives row i of matrix k.
  const int k = lane / 8, i = lane % 8;
  // Load: token 16cc + 8(k&1) + i, 16-B chunk (2pp + (k>>1)) ^ i (Swizzle-128B: chunk XOR token % 8).
  const uint32_t ld_row = src + (8 * (k & 1) + i) * SWIZZLE_ROW_BYTES;
  // Store: V^T row d = 128 tile + 16 (2pp + (k>>1)) + 2i + (e(i) ^ (k&1)); chunk cc ^ ((d >> 1) & 3) = cc ^ (i & 3).
  const int d0 = 128 * tile + 16 * (k >> 1) + 2 * i + (((i >> 2) & 1) ^ (k & 1));
  const uint32_t st_row = vt + d0 * BLOCK_N;
  // Data role: lane = 4r + q. e = (r >> 2) & 1 = bit 4 of the lane.
  const bool e = (lane >> 4) & 1;
  const uint32_t sel_a = e ? 0x7531u : 0x6420u;  // matrix 0 / 2 rows: dim 2r + e
  const uint32_t sel_b = e ? 0x6420u : 0x7531u;  // matrix 1 / 3 rows: dim 2r + 1 - e
  const int q = lane % 4;
#pragma unroll
  for (int cc = 0; cc < BLOCK_N / 16; ++cc) {
    uint32_t keep = 0xffffffffu;  // bytes of tokens 16cc + 2q + {0, 1, 8, 9} inside the sequence
    if (MASKED) {
      const int lim = n_valid - 16 * cc - 2 * q;
      keep = (lim > 0 ? 0x000000ffu : 0u) | (lim > 1 ? 0x0000ff00u : 0u) | (lim > 8 ? 0x00ff0000u : 0u) |
             (lim > 9 ? 0xff000000u : 0u);
    }
    const uint32_t st_chunk = st_row + ((cc ^ (i & 3)) << 4);
#pragma unroll
    for (int pp = 0; pp < 4; ++pp) {
      uint32_t x[4];
      ldsm_x4_trans(ld_row + cc * 16 * SWIZZLE_ROW_BYTES + (((2 * pp + (k >> 1)) ^ i) << 4), x);
      const uint32_t y0 = __byte_perm(x[0], x[1], sel_a) & keep;
      const uint32_t y1 = __byte_perm(x[0], x[1], sel_b) & keep;
      const uint32_t y2 = __byte_perm(x[2], x[3], sel_a) & keep;
      const uint32_t y3 = __byte_perm(x[2], x[3], sel_b) & keep;
      stsm_x4(st_chunk + pp * 32 * BLOCK_N, y0, y1, y2, y3);  // column chunks 2pp, 2pp + 1 = dims + 32 pp
    }
  }
}

__device__ void run_producer(const KernelParams& kp, SharedStorage& ss, const SchedRow& row) {
  const DecodeParams& p = kp.p;
  const int warp = (threadIdx.x / 32) % TRANSPOSE_WARPS;
  const int half = warp / VT_HALF_WARPS;  // the V^T half (math warpgroup) this warp writes
  const int lane = threadIdx.x % 32;
  const bool tma_thread = lane == 0;  // each warp's issuing lane
  const int m_tile = blockIdx.x;

  TmaLoader loader;
  if (tma_thread) loader.init(row);
  // Prologue: block 0 (and its query tile) for sure, blocks 1 .. KV_STAGES - 1 if their barriers allow.
  if (tma_thread) loader.run(kp, ss, row, m_tile, warp, 1, 1, KV_STAGES);
  __syncwarp();

  int block_idx = 0;
  for (int req = row.begin_req; req <= row.end_req; ++req) {
    const Piece pc = make_piece(p, row, req);
    for (int blk = pc.blk_begin; blk < pc.blk_end; ++blk, ++block_idx) {
      const int stage = block_idx % KV_STAGES;
      const int vbuf = block_idx % VT_STAGES;
      mbarrier_wait(&ss.kv_full[stage], (block_idx / KV_STAGES) & 1);
      mbarrier_wait(&ss.vt_empty[vbuf][half], ((block_idx / VT_STAGES) & 1) ^ 1);
      const int n_valid = pc.seqlen - blk * BLOCK_N;
      if (n_valid >= BLOCK_N)
        transpose_tile<false>(smem_u32(ss.kv_content[stage][warp]), smem_u32(ss.vt[vbuf]), warp, lane, n_valid);
      else
        transpose_tile<true>(smem_u32(ss.kv_content[stage][warp]), smem_u32(ss.vt[vbuf]), warp, lane, n_valid);
      fence_proxy_async_smem();
      mbarrier_arrive(&ss.vt_full[vbuf][half]);
      mbarrier_arrive(&ss.kv_empty[stage]);
      // Block block_idx + 2 goes into the stage of block_idx - 1, free once that block's hand-off was read by
      // both math warpgroups (kv_empty): about when the other warpgroup finished the softmax of block_idx, which is
      // also about when this warp's next V^T half frees up (vt_empty), so waiting for it here costs the next
      // transpose nothing. Block block_idx + 3 is only tested. No polling anywhere: a spinning warp takes issue
      // slots from the two math warps of its SM sub-partition (v9 spent ~300 of ~450 producer instructions per
      // warp and block in polling loops).
      if (tma_thread) loader.run(kp, ss, row, m_tile, warp, block_idx + 2, block_idx + 3, block_idx + 4);
      __syncwarp();
    }
  }
  if (tma_thread) loader.run(kp, ss, row, m_tile, warp, INT_MAX, INT_MAX, INT_MAX);
}

}  // namespace snapmla::sm90::decode_fp8
