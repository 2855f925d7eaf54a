// TMA producer of the cluster decode kernel (one thread per CTA, cluster/kernel.cuh): the query tile of each
// piece into its own CTA, and per block n either the page (the owner rank n % 2: 2 content tiles multicast into
// both CTAs, its own 2 content tiles, the RoPE tile and the scales unicast) or, in the other CTA, only the
// arming of the bytes that will land there (the multicast tiles on kv_full, the peer's hand-off push on
// xchg_full).
//
// Arming rule (the protocol model, tests/utils/cluster_protocol.py, found it): a CTA arms stage s for block n only after its own
// kv_empty[s] phase of block n - 6 completed, even where it issues no load. An earlier arm would count in the
// previous phase. The cluster-wide release (16 warps) also orders the owner's multicast after the other CTA's
// last reads of the stage, and the owner's RoPE refill after the push that read its hand-off.
// Early pushes and multicast bytes may land before the arm (the transaction count goes below zero for a while;
// the phase cannot complete before the arm's arrival).
#pragma once

#include "kernels/sm90/common/cluster.cuh"
#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/decode_fp8/cluster/config.h"
#include "kernels/sm90/decode_fp8/query_tile.cuh"
#include "kernels/sm90/decode_fp8/schedule.cuh"
#include "kernels/sm90/decode_fp8/tma_producer.cuh"
#include "kernels/sm90/decode_fp8/traits.h"

namespace snapmla::sm90::decode_fp8::cluster {

// The query tile of piece `req`: 4 warp slabs of rows_per_warp rows (launch.h), tile m_tile, as the wide kernel.
__device__ __forceinline__ void issue_query_tile_c(const KernelParams& kp, ClusterStorage& ss, int m_tile, int req) {
  issue_query_slabs(kp, ss, &ss.pair[0].q_full, m_tile, req);
}

// Block n's page `page` at stage view v of this CTA (rank). Called after the stage's kv_empty wait.
__device__ __forceinline__ void issue_block(const KernelParams& kp, const StageView& v, int page) {
  if (!v.owned) {
    mbarrier_arrive_expect_tx(v.kv_full(), PEER_TX_BYTES);
    mbarrier_arrive_expect_tx(v.xchg_full(), XCHG_BYTES);
    return;
  }
  uint64_t* bar = v.kv_full();
  mbarrier_arrive_expect_tx(bar, OWNER_TX_BYTES);
  // First content tile of the owner's dims and of the other rank's.
  const int own0 = TILES_PER_RANK * v.parity, other0 = TILES_PER_RANK * (1 - v.parity);
  const uint8_t* src = page_bytes(kp.p, page);  // tma_producer.cuh: the page as its stage image
  const uint8_t* tiles = src + kvl::CONTENT_OFFSET;
#pragma unroll
  for (int i = 0; i < TILES_PER_RANK; ++i) {
    bulk_load(v.pr.own_tiles[i], tiles + (own0 + i) * CONTENT_TILE_BYTES, CONTENT_TILE_BYTES, bar);
    bulk_load_multicast(v.pr.mc[v.parity][i], tiles + (other0 + i) * CONTENT_TILE_BYTES, CONTENT_TILE_BYTES, bar,
                        MC_CTA_MASK);
  }
  bulk_load(v.pr.own_rope, src + kvl::ROPE_OFFSET, ROPE_TILE_BYTES, bar);
  bulk_load(v.pr.own_scale, src + kvl::SCALE_OFFSET, BLOCK_N * kvl::SCALE_TOKEN_BYTES, bar);
}

// Warp 0 of the producer warpgroup; lane 0 issues (tma_producer.cuh walk_piece_pages: the page ids).
__device__ void run_producer_c(const KernelParams& kp, ClusterStorage& ss, const SchedRow& row, int m_tile) {
  const DecodeParams& p = kp.p;
  const int lane = threadIdx.x % 32;
  int n = 0;  // running block index
  int piece = 0;
  for (int req = row.begin_req; req <= row.end_req; ++req, ++piece) {
    const Piece pc = make_piece(p, row, req);
    auto query_tile = [&] {
      if (lane != 0) return;
      if (piece > 0) mbarrier_wait(&ss.pair[0].q_empty, (piece - 1) & 1);
      issue_query_tile_c(kp, ss, m_tile, req);
    };
    walk_piece_pages(p, pc, req, lane, n, query_tile, [&](int blk_n, int page) {
      const StageView v = stage_view(ss, blk_n);
      if (blk_n >= KV_STAGES_C) mbarrier_wait(v.kv_empty(), stage_phase(blk_n) ^ 1);
      issue_block(kp, v, page);
    });
  }
}

}  // namespace snapmla::sm90::decode_fp8::cluster
