// The PV warpgroups of the warp-specialised wide decode kernel (ws/kernel.cuh): PV warpgroup pv (0 or 1) holds O^T for
// dims 256 pv .. 256 pv + 255 of the tile's 64 rows and, for every block in block order, waits for the softmax
// warpgroup's hand-off (xchg_full), runs the block's PV for its dims (block_pv.cuh pv_block_lean: 4 m-tiles of 2 RS
// QGMMA m64n64k32 into a fresh accumulator, folded into O^T in fp32 with the block's per-row scale) and releases the
// stage (kv_empty, with the other PV warpgroup). At the end of a piece it stores the piece (epilogue.cuh, as a math
// warpgroup of the wide kernel) with the final state read from the last block's hand-off, and only then releases that
// stage. Registers: O^T 128 + one m-tile accumulator 32 + one m-tile's V^T fragments 8 + 8 or 16 fold scales +
// addresses, within WS_PV_REGS = 192 (ws/config.h).
#pragma once

#include "kernels/sm90/common/stage_ring.cuh"
#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/decode_fp8/shared/block_pv.cuh"
#include "kernels/sm90/decode_fp8/shared/epilogue.cuh"
#include "kernels/sm90/decode_fp8/shared/exchange.cuh"
#include "kernels/sm90/decode_fp8/shared/schedule.cuh"
#include "kernels/sm90/decode_fp8/shared/traits.h"
#include "kernels/sm90/decode_fp8/trace/hook.cuh"
#include "kernels/sm90/decode_fp8/ws/config.h"

namespace snapmla::sm90::decode_fp8::ws {

__device__ void run_pv_wg(const KernelParams& kp, SharedStorage& ss, const SchedRow& row, int pv) {
  const DecodeParams& p = kp.p;
  const auto [warp, lane, t, row0] = math_thread();

  // -DSNAPMLA_TRACE_BLOCKS only (trace/block.cuh): per block, when its hand-off arrived and when its PV is done.
  BlockTrace bt(threadIdx.x % WG_THREADS == 0);
  // -DSNAPMLA_TRACE_CTA only (trace/cta.cuh), PV warpgroup 0's first thread: its entry, the first query tile's
  // arrival (the softmax warpgroup's stamp, read at the first hand-off), the first hand-off (for "first QK": the
  // first block's QK and softmax), and per piece the end of its PV loop and of its store.
  CtaTimeline ct(pv);
  int block_idx = 0;  // running index of the piece's first block
  int piece = 0;
  for (int req = row.begin_req; req <= row.end_req; ++req, ++piece) {
    const Piece pc = make_piece(p, row, req);
    const int n_blocks = pc.blk_end - pc.blk_begin;
    if (piece == 0) ct.reserve();  // event 1, filled below
    float o[PV_M_TILES][32];
#pragma unroll
    for (int m = 0; m < PV_M_TILES; ++m) {
#pragma unroll
      for (int k = 0; k < 32; ++k) o[m][k] = 0.f;
    }
#pragma unroll 1
    for (int j = 0; j < n_blocks; ++j) {
      const int n = block_idx + j;
      StageRing<KV_STAGES>::wait_full(ss.xchg_full, n);
      bt.mark();
      // The softmax warpgroup stamped its first query tile before this hand-off, which orders the store.
      if (piece == 0 && j == 0) ct.fill_from(1, ss, [](auto& s) -> uint64_t { return s.cta_q_ready; });
      ct.first_block_mark(piece, j);
      // The piece's last stage stays held: its hand-off has the state the epilogue needs.
      pv_after_handoff<true>(o, ss, n, pv, warp, lane, pc.seqlen - (pc.blk_begin + j) * BLOCK_N, j + 1 < n_blocks);
      bt.mark();
    }
    // The state after the piece's last block, read by the epilogue's quad leads from that block's hand-off (an
    // empty piece stores o = 0, lse = +inf); then the stage, held until here, is released.
    ct.mark();
    const int last = block_idx + n_blocks - 1;
    const uint32_t last_tile = smem_u32(ss.kv_rope[last % KV_STAGES]);
    store_piece_state_of(p, ss, req, piece_split(p, row, req), blockIdx.x, pv, warp, lane, o, [&](int rr) {
      RowState st = {-INFINITY, 1.f, 0.f};
      float o_scale;  // the last block's fold scale, already applied by its PV
      if (n_blocks > 0) st = read_row_state(last_tile, row0 + 8 * rr, o_scale);
      return st;
    });
    if (n_blocks > 0) release_stage(&ss.kv_empty[last % KV_STAGES]);
    ct.mark();
    ct.piece_done(n_blocks);
    block_idx += n_blocks;
  }
  bt.print("ws", pv == 0 ? "pv0" : "pv1");
  ct.fill_producer(ss);  // stored before the first hand-off, which needed the query tile
  ct.print("ws");
}

}  // namespace snapmla::sm90::decode_fp8::ws
