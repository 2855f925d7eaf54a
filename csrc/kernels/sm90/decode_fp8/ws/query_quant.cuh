// Fused-Q-Quant inside the ws kernel (ws/kernel.cuh): when the call's query is BF16 (DecodeParams::q_bf16 set),
// the two PV warpgroups quantize each piece's 64-row query tile from q straight into the Swizzle-128B query tile
// (content e4m3, RoPE bf16 pre-scaled) and its 64 row scales into SharedStorage::q_scale_tile, instead of the
// producer loading the tile that a separate Fused-Q-Quant kernel wrote. Same functions as that kernel
// (quant/quant_math.cuh), so the same bytes: the decode result is bit-identical either way.
//
// Why: at b = 1-16 the separate kernel is a launch and a dependent global round trip ahead of the decode (1.9-2.8
// us of a 23-60 us call, H100, tools/profile/profile_call.py with SNAPMLA_PDL=0, 2026-12-07). Here the PV warpgroups,
// idle until the piece's first hand-off, read q (72 KB per tile, from L2 right after the projection that wrote it)
// while the producer's first pages are in flight.
//
// Work split: warp g = 4 pv + warp (0..7) owns tile rows 8 g .. 8 g + 7: all 24 16-B loads per lane in flight at once
// (96 registers, before O^T is live), then one row at a time. Per row, quant_math.cuh's warp-per-row layout: lane l holds
// content chunks l and l + 32 and RoPE chunk l < 8. A row the TMA path leaves zero (past q_rows) or unwritten (slab
// rows past rows_per_warp, when ws is forced below 64 rows) is quantized from zeros: zero bytes, as TMA's zero
// fill (its scale is never read: tile_rows gives such a row q_mul 0). Stores by 32-bit shared addresses (64-bit
// generic pointers for the 4 rows' 16 destinations spilled 12 B at 192 registers).
// Protocol per piece: wait q_empty (the softmax warpgroup's last QK of the previous piece retired), store, fence
// the generic stores for the WGMMA's async-proxy reads, arrive on q_full (2 x 128 arrivals, no transaction bytes).
#pragma once

#include "kernels/quant/quant_math.cuh"
#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/stage_ring.cuh"
#include "kernels/sm90/decode_fp8/launch.h"
#include "kernels/sm90/decode_fp8/shared/traits.h"
#include "kernels/sm90/decode_fp8/ws/config.h"

namespace snapmla::sm90::decode_fp8::ws {

inline constexpr int QQ_ROWS_PER_WARP = BLOCK_M / (NUM_PV_WG * MATH_WARPS_PER_WG);  // 8
// q_full's arrivals when the PV warpgroups write the query tile (ws/kernel.cuh's init).
inline constexpr int QQ_Q_FULL_ARRIVALS = NUM_PV_WG * WG_THREADS;

// One lane's destinations of tile row tr in the query tile (quant_math.cuh's Dst): the tile is a page's content
// and RoPE image (kv_layout.h) with the row as the token.
struct TileRowBytes {
  uint32_t content_tiles, rope_tile, scale;  // shared addresses: ss.q_content, ss.q_rope, &ss.q_scale_tile[tr]
  int tr, lane;
  __device__ __forceinline__ void store_content(int i, uint2 v) const {
    const uint32_t a = content_tiles + kvl::content_byte_in_page(tr, quant::CHUNK_ELEMS * (lane + i * quant::WARP_SIZE));
    asm volatile("st.shared.v2.u32 [%0], {%1, %2};" ::"r"(a), "r"(v.x), "r"(v.y) : "memory");
  }
  __device__ __forceinline__ void store_rope(uint4 v) const {
    const uint32_t a = rope_tile + kvl::swizzled_row_byte(tr, quant::CHUNK_ELEMS * 2 * lane);  // lane < 8
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
  }
  __device__ __forceinline__ void store_scale(float v) const {
    asm volatile("st.shared.f32 [%0], %1;" ::"r"(scale), "f"(v) : "memory");
  }
};

// Piece `piece` (request req) of the CTA: quantize its query tile into ss (see the header). Called by every
// thread of both PV warpgroups; pv = 0 or 1, warp and lane within the warpgroup.
__device__ __forceinline__ void quantize_query_tile(const DecodeParams& p, SharedStorage& ss, int req, int piece,
                                                    int pv, int warp, int lane) {
  StageRing<1>::wait_empty(ss.q_empty, piece);  // the previous piece's QK no longer reads the tile
  const int rpw = rows_per_warp(p.q_rows);
  const int g = MATH_WARPS_PER_WG * pv + warp;
  const int tr0 = QQ_ROWS_PER_WARP * g;
  // The warp's rows are consecutive folded rows (s * h_q + h) within one 16-row slab: one division, then the row
  // pointer steps by h (and by s at the end of a token's heads).
  const int first = warp_first_q_row(blockIdx.x, tr0 / 16, rpw) + tr0 % 16;
  int h = first % p.h_q;
  const __nv_bfloat16* src = p.q_bf16 + static_cast<int64_t>(req) * p.q_bf16_stride_b +
                             (first / p.h_q) * p.q_bf16_stride_s + h * p.q_bf16_stride_h;  // (576,) bf16
  const int64_t next_token = p.q_bf16_stride_s - (p.h_q - 1) * p.q_bf16_stride_h;
  quant::RowChunks rows[QQ_ROWS_PER_WARP];
#pragma unroll
  for (int i = 0; i < QQ_ROWS_PER_WARP; ++i) {  // all loads first: 24 in flight per lane
    const uint4 zero = make_uint4(0, 0, 0, 0);
    rows[i] = {{zero, zero}, zero};
    if (tr0 % 16 + i < rpw && first + i < p.q_rows) rows[i] = quant::load_row(src, lane);  // else TMA's zero rows
    src += ++h == p.h_q ? next_token : p.q_bf16_stride_h;
    h = h == p.h_q ? 0 : h;
  }
  // One copy of the row's code, rolled: the rows move down the register array instead (rows[i] with a run-time i
  // would go to local memory). Unrolled, the 8 rows' code made the kernel 2600 instructions longer, fetched cold
  // at a piece's start (tests/test_sass.py keeps the kernel's size).
#pragma unroll 1
  for (int i = 0; i < QQ_ROWS_PER_WARP; ++i) {
    const int tr = tr0 + i;
    quant::quantize_and_store_row(
        rows[0], lane, TileRowBytes{smem_u32(ss.q_content), smem_u32(ss.q_rope), smem_u32(&ss.q_scale_tile[tr]), tr, lane});
#pragma unroll
    for (int k = 0; k + 1 < QQ_ROWS_PER_WARP; ++k) rows[k] = rows[k + 1];
  }
  fence_proxy_async_smem();  // the generic stores above, before the softmax warpgroup's WGMMAs read them
  mbarrier_arrive(&ss.q_full[0]);
}

}  // namespace snapmla::sm90::decode_fp8::ws
