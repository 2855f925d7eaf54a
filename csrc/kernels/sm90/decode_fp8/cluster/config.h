// Compile-time configuration and shared-memory plan of the 2-CTA cluster decode kernel (cluster/kernel.cuh has
// the design header, docs/design.md the reasoning).
#pragma once

#include <cstdint>

#include "kernels/sm90/common/cluster.cuh"
#include "kernels/sm90/decode_fp8/config.h"
#include "kernels/sm90/decode_fp8/exchange.cuh"

namespace snapmla::sm90::decode_fp8::cluster {

// Names here carry a _C suffix where the wide kernel (decode_fp8/config.h) has the same quantity with another
// value (KV_STAGES 4 vs KV_STAGES_C 6, ...): the cluster namespace would otherwise shadow them silently.
inline constexpr int CLUSTER_CTAS = 2;
static_assert(CLUSTER_CTAS == 2, "the peer is rank ^ 1 (peer_rank) and stage ownership is s % 2");
inline constexpr uint16_t MC_CTA_MASK = (1u << CLUSTER_CTAS) - 1;  // multicast into both CTAs
inline constexpr int TILES_PER_RANK = CONTENT_TILES / CLUSTER_CTAS;  // 2 content tiles of each rank's dims
// Block n of the walk is owned by CTA rank n % 2 and, in it, by math warpgroup (n / 2) % 2: warpgroup
// (rank, wg) owns the blocks with n % 4 == rank + 2 wg.
inline constexpr int OWNER_CYCLE = CLUSTER_CTAS * NUM_MATH_WG;  // 4
// Each math warpgroup holds 128 of O^T's 512 dims: CTA rank r, warpgroup w has dims 128 (2r + w) .. + 127, i.e.
// exactly content tile 2r + w of a page, as 2 m-tiles of 64 dims.
inline constexpr int D_V_PER_WG_C = D_V / OWNER_CYCLE;  // 128
inline constexpr int PV_M_TILES_C = D_V_PER_WG_C / 64;   // 2
static_assert(D_V_PER_WG_C == SWIZZLE_ROW_BYTES, "a warpgroup's dims are one 128-B content tile");

// 6 KV stages. Stage s = n % 6 holds blocks of one owner rank only (s % 2), so each CTA keeps the full page for
// its 3 owned stages (4 content tiles + RoPE + scales) and for the 3 others only the 2 content tiles of its own
// dims plus the hand-off the peer pushes. The content tiles both CTAs need (the non-owner's dims) arrive by one
// multicast bulk copy (8 KB each, contiguous in the cache's Swizzle-128B page image) into the same offset in both;
// the owner's dims, the RoPE tile and the scales by unicast bulk copies into the owner. HBM bytes per block:
// 41216, once per cluster.
inline constexpr int KV_STAGES_C = 6;
static_assert(KV_STAGES_C % CLUSTER_CTAS == 0 && KV_STAGES_C % 2 == 0, "a stage's blocks have one owner rank");
inline constexpr int MC_TILE_BYTES = 2 * CONTENT_TILE_BYTES;                 // 16384 multicast per block
inline constexpr int OWNER_TX_BYTES = kvl::PAGE_BYTES;                       // 41216 land in the owner
inline constexpr int PEER_TX_BYTES = MC_TILE_BYTES;                          // 16384 land in the other CTA
inline constexpr int XCHG_PT_PUSH_BYTES = XCHG_PT_BYTES;                     // 4096, pushed once P8 is packed
inline constexpr int XCHG_STATE_PUSH_BYTES = XCHG_BYTES - XCHG_PT_BYTES;     // 1280, pushed with the state
static_assert(XCHG_PT_PUSH_BYTES % 16 == 0 && XCHG_STATE_PUSH_BYTES % 16 == 0, "bulk copies move 16-B units");
static_assert(XCHG_STATE_OFFSET == XCHG_PT_PUSH_BYTES, "the state push starts where P^T's ends: together XCHG_BYTES");

// QK in 2 fp32-promoted chains of 8 FP8 k-steps, the RoPE k-group into the second (as the wide kernel's issue_qk,
// mainloop.cuh, which says why).
inline constexpr int QK_CHAINS_C = 2;

// Register split: O^T 64 + QK 2 x 32 (not live across a PV), or during a PV 2 m-tile accumulators 2 x 32, A
// fragments 2 x 8 and column scales 16, per math thread; one TMA thread.
inline constexpr int MATH_REGS_C = 232;
inline constexpr int PRODUCER_REGS_C = 40;
static_assert(NUM_MATH_WG * MATH_REGS_C + PRODUCER_REGS_C <= 3 * LAUNCH_REGS, "register pool of the CTA");

// Arrivals on a stage's kv_empty: one per math warp of the cluster (each warp arrives in both CTAs).
inline constexpr int KV_EMPTY_ARRIVALS_C = CLUSTER_CTAS * NUM_MATH_WG * MATH_WARPS_PER_WG;  // 16

// Two stages, one owned by rank 0 (stage 2k) and one by rank 1 (stage 2k + 1), laid out the same in both CTAs
// so that the multicast tiles and every barrier sit at the same offset in both:
//   mc[0]        16384  stage 2k's content tiles 2, 3 (rank 1's dims; multicast by rank 0)
//   mc[1]        16384  stage 2k + 1's content tiles 0, 1 (rank 0's dims; multicast by rank 1)
//   own_tiles    16384  the owned stage's tiles of this CTA's dims (rank 0: stage 2k tiles 0, 1; rank 1:
//                       stage 2k + 1 tiles 2, 3; unicast)
//   own_rope      8192  the owned stage's RoPE tile, then its hand-off (exchange.cuh layout)
//   peer_handoff  5376  the other stage's hand-off, pushed by the peer's owner (exchange.cuh layout)
//   own_scale      256  the owned stage's 64 k scales
//   barriers        64  kv_full, kv_empty, xchg_full of both stages, q_full, q_empty (used in pair 0)
//   (padding       448  to the pair's 1024-B alignment)
// 63488 B per pair (1024-aligned), 3 pairs.
struct alignas(1024) StagePair {
  uint8_t mc[2][2][CONTENT_TILE_BYTES];
  uint8_t own_tiles[2][CONTENT_TILE_BYTES];
  uint8_t own_rope[ROPE_TILE_BYTES];
  uint8_t peer_handoff[XCHG_BYTES];
  float own_scale[BLOCK_N];
  uint64_t kv_full[2];    // the local producer's arm (1 arrival) + the bytes that land here
  uint64_t kv_empty[2];   // KV_EMPTY_ARRIVALS_C: every math warp of the cluster, after its PV of the block
  uint64_t xchg_full[2];  // owned stage: the owner warpgroup's 128 threads; other: the producer's arm + 5376 B
  uint64_t q_full, q_empty;  // used in pair 0 only (the query tile)
};
static_assert(sizeof(StagePair) == 63488, "the pair's budget above");
static_assert(offsetof(StagePair, peer_handoff) % 512 == 0, "P^T is Swizzle-64B: on its 512-B atom");
static_assert(offsetof(StagePair, own_scale) % 16 == 0, "the scales' bulk copy needs a 16-B aligned destination");

// Shared memory: the query tile 40960 + 3 pairs 190464 = 231424 B (+ 1024 of alignment slack = 232448, the
// sm_90 maximum).
struct alignas(1024) ClusterStorage {
  static constexpr int kStages = KV_STAGES_C;
  uint8_t q_content[CONTENT_TILES][Q_CONTENT_TILE_BYTES];
  uint8_t q_rope[BLOCK_M * D_ROPE * 2];
  StagePair pair[KV_STAGES_C / 2];
};
inline constexpr int SMEM_BYTES_C = static_cast<int>(sizeof(ClusterStorage)) + 1024;
static_assert(SMEM_BYTES_C <= 232448, "sm_90 allows 227 KB of dynamic shared memory per CTA");
static_assert(offsetof(ClusterStorage, pair) % 1024 == 0, "swizzled tiles must sit on their swizzle atom");

// Where stage s's pieces are in this CTA (rank): `owned` = the rank owns the stage's blocks.
struct StageView {
  StagePair& pr;
  int parity;  // s % 2: the owner rank, and the index into the pair's barriers
  bool owned;

  // The content tile with this CTA's dims for math warpgroup wg (tile 2 rank + wg of the page).
  __device__ __forceinline__ uint8_t* my_dims_tile(int wg) const {
    return owned ? pr.own_tiles[wg] : pr.mc[parity][wg];
  }
  // Owner only: content tile t (0..3) of the page, for its QK.
  __device__ __forceinline__ uint8_t* owner_tile(int t) const {
    const bool mine = (t / 2) == parity;  // the owner's own dims are tiles 2 parity, 2 parity + 1
    return mine ? pr.own_tiles[t % 2] : pr.mc[parity][t % 2];
  }
  __device__ __forceinline__ uint8_t* handoff() const { return owned ? pr.own_rope : pr.peer_handoff; }
  __device__ __forceinline__ uint64_t* kv_full() const { return &pr.kv_full[parity]; }
  __device__ __forceinline__ uint64_t* kv_empty() const { return &pr.kv_empty[parity]; }
  __device__ __forceinline__ uint64_t* xchg_full() const { return &pr.xchg_full[parity]; }
};

// The rank is read from %cluster_ctarank at each use (asm volatile: one S2R) rather than kept in a register
// across the math loop, where it was the one value ptxas spilled.
__device__ __forceinline__ uint32_t peer_rank() { return cluster_ctarank() ^ 1; }
__device__ __forceinline__ StageView stage_view(ClusterStorage& ss, int n) {
  const int s = n % KV_STAGES_C;
  return StageView{ss.pair[s / 2], s % 2, (s % 2) == static_cast<int>(cluster_ctarank())};
}
// Phase parity of block n's use of its stage.
__device__ __forceinline__ uint32_t stage_phase(int n) { return (n / KV_STAGES_C) & 1; }

}  // namespace snapmla::sm90::decode_fp8::cluster
