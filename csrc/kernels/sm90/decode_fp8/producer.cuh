// Producer warpgroup (WG2) of the decode kernel: TMA loads and the in-kernel V transpose.
//
// TMA (thread 0 of the warpgroup): per piece the query tile (4 content tiles + 1 RoPE tile, 40 KB, zero-filled
// past q_rows) on q_full after q_empty; per block the page's 4 content tiles, its RoPE tile and its 64 scales
// (41216 B = the page) on kv_full[stage] after kv_empty[stage]. It runs up to KV_STAGES blocks ahead of the
// transpose, polling its barriers while it waits for its own (TmaLoader says why it must not block there).
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

#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/decode_fp8/schedule.cuh"
#include "kernels/sm90/decode_fp8/traits.h"

namespace snapmla::sm90::decode_fp8 {

// The TMA issuing thread's cursor: the next block to load and the piece it belongs to.
//
// The issuing thread also transposes, so it must never block on a barrier whose completion needs its own warp's
// later transposes. Blocks below `need` (the block the transposer is about to wait for, and earlier ones) are
// safe to wait for: their stage was released by QK and transposes of blocks the warp already did, and the query
// tile of their piece by the QKs (or, for empty pieces in between, the PVs) of blocks already transposed.
// Blocks from `need` to `want` are prefetch: their barriers are only tested, and the loader returns if one is
// not ready yet (it is polled again while the thread waits for its next stage).
struct TmaLoader {
  int req;          // request of the piece whose query tile was issued last (begin_req - 1 before the first)
  int blk, blk_end;
  int pieces;       // query tiles issued
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

  // Issues loads until `want` blocks are issued or the schedule row is exhausted (then the query tiles of
  // trailing empty pieces are issued too, since the math warpgroups wait for every piece's Q).
  __device__ void run(const KernelParams& kp, SharedStorage& ss, const SchedRow& row, int m_tile, int need,
                      int want) {
    const DecodeParams& p = kp.p;
    while (blocks < want) {
      const bool may_block = blocks < need;
      if (blk == blk_end) {
        if (req >= row.end_req) return;
        if (pieces > 0 && !ready(&ss.q_empty, (pieces - 1) & 1, may_block)) return;
        ++req;
        const Piece pc = make_piece(p, row, req);
        blk = pc.blk_begin;
        blk_end = pc.blk_end;
        load_page(p);
        // Warp slab w of the tile (shared rows 16w ..) gets query rows (4m + w) R .. + R - 1 (launch.h); rows
        // past q_rows are zero-filled, shared rows 16w + R .. 16w + 15 are not written (padding rows: each
        // accumulator row depends on its own query row only, and padding rows are never stored).
        const int rpw = rows_per_warp(p.q_rows);
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
        ++pieces;
        continue;
      }
      const int stage = blocks % KV_STAGES;
      if (blocks >= KV_STAGES && !ready(&ss.kv_empty[stage], ((blocks / KV_STAGES) - 1) & 1, may_block)) return;
      uint64_t* bar = &ss.kv_full[stage];
      mbarrier_arrive_expect_tx(bar, KV_STAGE_TX_BYTES);
#pragma unroll
      for (int t = 0; t < CONTENT_TILES; ++t)
        tma_load_3d(ss.kv_content[stage][t], &kp.tm_kv_content, bar, t * SWIZZLE_ROW_BYTES, 0, page);
      tma_load_3d(ss.kv_rope[stage], &kp.tm_kv_rope, bar, 0, 0, page);
      tma_load_2d(ss.kv_scale[stage], &kp.tm_kv_scale, bar, 0, page);
      ++blk;
      ++blocks;
      load_page(p);
    }
  }
};

// out[i ^ swap] = byte i of each of x0..x3, in that order: a 4x4 byte transpose (8 PRMT), with the output pairs
// (0, 1) and (2, 3) exchanged when swap = 1. The exchange costs nothing: it is in the selectors of the last 4
// PRMTs, which the caller computes once (sel_even = swap ? 0x7632 : 0x5410, sel_odd the other one).
__device__ __forceinline__ void transpose_4x4_bytes(uint32_t x0, uint32_t x1, uint32_t x2, uint32_t x3,
                                                    uint32_t sel_even, uint32_t sel_odd, uint32_t (&out)[4]) {
  const uint32_t t01_lo = __byte_perm(x0, x1, 0x5140);  // x0.b0 x1.b0 x0.b1 x1.b1
  const uint32_t t01_hi = __byte_perm(x0, x1, 0x7362);  // x0.b2 x1.b2 x0.b3 x1.b3
  const uint32_t t23_lo = __byte_perm(x2, x3, 0x5140);
  const uint32_t t23_hi = __byte_perm(x2, x3, 0x7362);
  out[0] = __byte_perm(t01_lo, t23_lo, sel_even);  // bytes 0 (0x5410) or 1 (0x7632) of x0..x3
  out[1] = __byte_perm(t01_lo, t23_lo, sel_odd);
  out[2] = __byte_perm(t01_hi, t23_hi, sel_even);
  out[3] = __byte_perm(t01_hi, t23_hi, sel_odd);
}

__device__ __forceinline__ uint32_t lds_u32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr));
  return v;
}

__device__ __forceinline__ void sts_u128(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

// One warp: content tile `tile` of a stage -> V^T rows 128*tile .. +127. n_valid = tokens of the block inside
// the sequence (64 except in the last block; MASKED = false skips the 64 selects when it is 64).
// src / vt are shared-memory addresses.
template <bool MASKED>
__device__ __forceinline__ void transpose_tile(uint32_t src,  // (64 tokens x 128 B) Swizzle-128B
                                               uint32_t vt,   // (512 dims x 64 B) Swizzle-64B
                                               int tile, int lane, int n_valid) {
  // Opaque so that the 64 load and 16 store addresses are rebuilt per block from a few registers (an immediate
  // offset each) instead of being hoisted out of the block loop into ~80 registers the producer does not have.
  lane = opaque(lane);
  const int s = lane / 4, c = lane % 4;
  const bool swap_pairs = s & 1;
  const uint32_t sel_even = swap_pairs ? 0x7632u : 0x5410u;
  const uint32_t sel_odd = swap_pairs ? 0x5410u : 0x7632u;
  const uint32_t src_lane = src + c * 4;
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int cc = (c + u) & 3;  // the lane's 16-token chunk this round: lanes with different c hit other rows
    const uint32_t src_chunk = src_lane + cc * (16 * SWIZZLE_ROW_BYTES);
    uint32_t y[4][4];  // [dim i][word t]
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      uint32_t x[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int tok_in_chunk = 2 * t + (j & 1) + 8 * (j >> 1);  // 2t + {0, 1, 8, 9}
        // Swizzle-128B: the 16-B chunk index (s) is XORed with the row index mod 8 (= tok_in_chunk % 8).
        const uint32_t off = tok_in_chunk * SWIZZLE_ROW_BYTES + ((s ^ (tok_in_chunk & 7)) << 4);
        const uint32_t v = lds_u32(src_chunk + off);
        x[j] = !MASKED || 16 * cc + tok_in_chunk < n_valid ? v : 0u;
      }
      uint32_t col[4];
      transpose_4x4_bytes(x[0], x[1], x[2], x[3], sel_even, sel_odd, col);  // col[i] = dim i ^ swap_pairs
#pragma unroll
      for (int i = 0; i < 4; ++i) y[i][t] = col[i];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int ii = swap_pairs ? (i ^ 1) : i;
      const int d = 128 * tile + 16 * s + 4 * c + ii;
      // Swizzle-64B: 16-B chunk index XOR (row / 2) % 4.
      const uint32_t off = d * BLOCK_N + ((cc ^ ((d >> 1) & 3)) << 4);
      sts_u128(vt + off, y[i][0], y[i][1], y[i][2], y[i][3]);  // y[i] holds dim ii
    }
  }
}

__device__ void run_producer(const KernelParams& kp, SharedStorage& ss, const SchedRow& row) {
  const DecodeParams& p = kp.p;
  const int warp = (threadIdx.x / 32) % TRANSPOSE_WARPS;
  const int half = warp / VT_HALF_WARPS;  // the V^T half (math warpgroup) this warp writes
  const int lane = threadIdx.x % 32;
  const bool tma_thread = threadIdx.x % WG_THREADS == 0;
  const int m_tile = blockIdx.x;

  TmaLoader loader;
  if (tma_thread) loader.init(row);
  // Warp 0 waits by polling, its lane 0 feeding the loader (prefetch up to KV_STAGES blocks ahead) between
  // tests. The whole warp polls in step: a lane parked in mbarrier.try_wait could hold the warp while lane 0
  // still has to issue the very load it waits for.
  auto wait = [&](uint64_t* bar, uint32_t parity, int block_idx) {
    if (warp != 0) {
      mbarrier_wait(bar, parity);
      return;
    }
    for (;;) {
      if (tma_thread) loader.run(kp, ss, row, m_tile, block_idx + 1, block_idx + KV_STAGES);
      __syncwarp();
      if (__shfl_sync(0xffffffffu, static_cast<int>(mbarrier_test(bar, parity)), 0)) break;
    }
  };

  int block_idx = 0;
  for (int req = row.begin_req; req <= row.end_req; ++req) {
    const Piece pc = make_piece(p, row, req);
    for (int blk = pc.blk_begin; blk < pc.blk_end; ++blk, ++block_idx) {
      const int stage = block_idx % KV_STAGES;
      const int vbuf = block_idx % VT_STAGES;
      wait(&ss.kv_full[stage], (block_idx / KV_STAGES) & 1, block_idx);
      wait(&ss.vt_empty[vbuf][half], ((block_idx / VT_STAGES) & 1) ^ 1, block_idx);
      const int n_valid = pc.seqlen - blk * BLOCK_N;
      if (n_valid >= BLOCK_N)
        transpose_tile<false>(smem_u32(ss.kv_content[stage][warp]), smem_u32(ss.vt[vbuf]), warp, lane, n_valid);
      else
        transpose_tile<true>(smem_u32(ss.kv_content[stage][warp]), smem_u32(ss.vt[vbuf]), warp, lane, n_valid);
      fence_proxy_async_smem();
      mbarrier_arrive(&ss.vt_full[vbuf][half]);
      mbarrier_arrive(&ss.kv_empty[stage]);
      // The stage just transposed is refilled with block block_idx + KV_STAGES once the math warpgroups released it too.
      if (tma_thread) loader.run(kp, ss, row, m_tile, block_idx + 1, block_idx + 1 + KV_STAGES);
      __syncwarp();
    }
  }
  if (tma_thread) loader.run(kp, ss, row, m_tile, INT_MAX, INT_MAX);
}

}  // namespace snapmla::sm90::decode_fp8
