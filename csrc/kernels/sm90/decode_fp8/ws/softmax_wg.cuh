// The softmax warpgroup of the warp-specialised wide decode kernel (ws/kernel.cuh): for every block of the CTA's
// walk, in order, S = Q . K^T over 576 dims, the online softmax of docs/numerics_contract.md section 4 (softmax.cuh) and P quantised to
// e4m3, handed to the two PV warpgroups with the fold scales and the state after the block (exchange.cuh
// publish_block, in the stage's RoPE tile; xchg_full). It alone holds the running state (m, inv, L~) of the tile's
// 64 rows, so no state travels between warpgroups except through that hand-off.
//
// QK of a block is two chains of fresh accumulators summed in fp32 (ws/config.h): chain A (content k-steps 0-7)
// and chain B (content 8-15 and RoPE), each its own commit group, so that both run under the softmax:
//   [A(n) and B(n) in flight since iteration n - 1]
//   wait both -> S = A(n) + B(n) (fp32) -> logits and row maxima of n
//   -> wait kv_full(n + 1), issue A(n + 1), not waited -> exponentials, state and P8 of n
//   -> store the hand-off of n (P^T, state, fold scales) -> issue B(n + 1), not waited -> fence, arrive.
// B(n + 1) goes out once P of block n is packed (S dead): that is what lets its accumulator fit. S (32) + A in
// flight (32) + B in flight (32) at once needs 136 registers without spills (ptxas), against WS_SOFTMAX_REGS = 104.
// The page wait after the logits lets a late page n + 1 delay only what follows them; the stores before B's issue
// let their latency pass under it before the fence (ncu: the wait for page n + 1 and the fence were 7 % each of
// the softmax warpgroup's samples, docs/design.md, the ws kernel).
// Blocks that every query row sees whole run in a loop without the mask's selects (whole_blocks, schedule.cuh),
// the rest in a second, masked loop: a loop bound is the same for all threads, a branch inside the loop could not
// be (C7518, below), and the mask cost ~120 of 698 instructions per block (581 without it).
// The piece's first block issues both chains before the loops; its last block issues none (the next piece has
// another query tile) and releases the query tile instead (q_empty). The sum S = A + B is the same fp32 addition
// as the wide kernel's, and the unmasked softmax the same arithmetic, so the output is bit-identical to it.
// Registers: chains A and B (32 each, in flight) + S (32, dead while B is issued) + k scales (16) + state, row
// limits and addresses, within WS_SOFTMAX_REGS = 104 (ws/config.h), 0 spills.
#pragma once

#include <cstdint>

#include "kernels/sm90/common/stage_ring.cuh"
#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/wgmma.cuh"
#include "kernels/sm90/decode_fp8/launch.h"
#include "kernels/sm90/decode_fp8/shared/exchange.cuh"
#include "kernels/sm90/decode_fp8/shared/qk_steps.cuh"
#include "kernels/sm90/decode_fp8/shared/schedule.cuh"
#include "kernels/sm90/decode_fp8/shared/softmax.cuh"
#include "kernels/sm90/decode_fp8/shared/traits.h"
#include "kernels/sm90/decode_fp8/trace/hook.cuh"
#include "kernels/sm90/decode_fp8/ws/config.h"

namespace snapmla::sm90::decode_fp8::ws {

// Chain A of the block in stage `stage`: content k-steps 0-7 into acc_a, committed as one group, not waited.
__device__ __forceinline__ void issue_chain_a(float (&acc_a)[32], const SharedStorage& ss, int stage) {
  wgmma_fence_operands(acc_a);
  cute::warpgroup_arrive();
  issue_qk_content_steps<0, WS_CHAIN_STEPS>(acc_a, q_content_desc(ss), k_content_desc(ss, stage));
  cute::warpgroup_commit_batch();
}

// Chain B of the block in stage `stage` (content k-steps 8-15 and the RoPE k-group) issued as its own commit
// group, not waited.
__device__ __forceinline__ void issue_chain_b(float (&acc_b)[32], const SharedStorage& ss, int stage) {
  wgmma_fence_operands(acc_b);
  cute::warpgroup_arrive();
  issue_qk_content_steps<WS_CHAIN_STEPS, WS_CHAIN_STEPS>(acc_b, q_content_desc(ss), k_content_desc(ss, stage));
  issue_qk_rope_steps(acc_b, q_rope_desc(ss), k_rope_desc(ss, stage));
  cute::warpgroup_commit_batch();
}

// Both chains retired and summed: s = acc_a + acc_b.
__device__ __forceinline__ void retire_chains(float (&s)[32], float (&acc_a)[32], float (&acc_b)[32]) {
  cute::warpgroup_wait<0>();
  wgmma_fence_operands(acc_a);
  wgmma_fence_operands(acc_b);
#pragma unroll
  for (int k = 0; k < 32; ++k) s[k] = acc_a[k] + acc_b[k];
}

// Softmax, P8 and hand-off of block n (local index j of the piece, stage `stage`): s holds its retired QK, st the
// state after block n - 1. after_logits runs once the block's row maxima are known (the next block's page wait and
// chain A go out there), after_stores once P^T and the state are stored, before their fence (the next block's
// chain B: S is dead once P is packed, so its accumulator fits, and its issue hides the stores' latency).
// MASKED = false for blocks every row sees whole (no selects).
// Runs while chains of block n + 1 are in flight, so it has no branch that differs between the warpgroup's
// threads (ptxas would serialise the WGMMAs, C7518): every warp runs both rows even when they are padding (q_mul
// 0; whatever they hold stays in their own P^T row and O^T column and is never stored, softmax.cuh).
// ks: the block's k scales of the thread's columns, read before chain A of n + 1 went out (its operand reads take
// the shared-memory bandwidth while it runs).
template <bool MASKED, typename AfterLogits, typename AfterStores>
__device__ __forceinline__ void softmax_and_publish(float (&s)[32], const float (&ks)[16], SharedStorage& ss,
                                                    int stage, int blk, const float (&q_mul)[2],
                                                    const int (&limit)[2], int row0, int t, RowState (&st)[2],
                                                    AfterLogits&& after_logits, AfterStores&& after_stores) {
  const int n_vis[2] = {limit[0] - blk * BLOCK_N, limit[1] - blk * BLOCK_N};
  float mx[2];
  float o_scale[2];
  softmax_logits_ks<MASKED>(s, ks, q_mul, n_vis, t, mx);
  after_logits();
  softmax_probs_ks<MASKED>(s, ks, mx, n_vis, t, st, o_scale);
  uint32_t p_blk[8];
  const float inv[2] = {st[0].inv, st[1].inv};
  pack_p(s, inv, p_blk);
  const uint32_t tile = smem_u32(ss.kv_rope[stage]);
  publish_pt(tile, p_blk, row0, t);
  publish_state(tile, st, o_scale, row0, t);
  after_stores();
  fence_proxy_async_smem();
  mbarrier_arrive(&ss.xchg_full[stage]);
}

// Blocks n in [first, end) of the piece that starts at block index n0 (piece block pc.blk_begin), none of them
// the piece's last: each issues the next block's chains (header). acc_a / acc_b hold chains of block `first` in
// flight on entry and of block `end` on return.
template <bool MASKED>
__device__ __forceinline__ void softmax_blocks(float (&acc_a)[32], float (&acc_b)[32], SharedStorage& ss, int first,
                                               int end, int n0, const Piece& pc, const float (&q_mul)[2],
                                               const int (&limit)[2], int row0, int t, RowState (&st)[2],
                                               BlockTrace& bt) {
#pragma unroll 1
  for (int n = first; n < end; ++n) {
    const int stage = n % KV_STAGES;
    float s[32];
    // Both chains of n retired before chain A of n + 1 goes out. Issuing A(n + 1) between the waits of A(n)
    // and B(n) made ptxas serialise every WGMMA of the kernel (C7514: accumulator registers read while a group
    // was outstanding), 0.81-0.86x (docs/design.md section 5).
    retire_chains(s, acc_a, acc_b);
    bt.mark();
    float ks[16];
    load_k_scales(ss.kv_scale[stage], t, ks);
    auto issue_a = [&] {
      bt.mark();  // logits and row maxima of n done
      StageRing<KV_STAGES>::wait_full(ss.kv_full, n + 1);
      bt.mark();  // page n + 1 in
      issue_chain_a(acc_a, ss, (n + 1) % KV_STAGES);
      bt.mark();  // chain A of n + 1 issued
    };
    auto issue_b = [&] {
      bt.mark();  // the hand-off's stores issued
      issue_chain_b(acc_b, ss, (n + 1) % KV_STAGES);
      bt.mark();  // chain B of n + 1 issued
    };
    wgmma_fence_operands(s);
    wgmma_fence_operands(ks);
    softmax_and_publish<MASKED>(s, ks, ss, stage, pc.blk_begin + (n - n0), q_mul, limit, row0, t, st, issue_a,
                                issue_b);
    bt.mark();
  }
}

__device__ void run_softmax_wg(const KernelParams& kp, SharedStorage& ss, const SchedRow& row) {
  const DecodeParams& p = kp.p;
  const auto [warp, lane, t, row0] = math_thread();
  const int rpw = rows_per_warp(p.q_rows);  // launch.h
  const int warp_q_row0 = warp_first_q_row(blockIdx.x, warp, rpw);

  // -DSNAPMLA_TRACE_BLOCKS only (trace/block.cuh): per block, when its QK retired and when its hand-off is out.
  BlockTrace bt(threadIdx.x % WG_THREADS == 0);
  int block_idx = 0;  // running index of the piece's first block (all roles count the same blocks)
  int piece = 0;
  for (int req = row.begin_req; req <= row.end_req; ++req, ++piece) {
    const Piece pc = make_piece(p, row, req);
    const int n_blocks = pc.blk_end - pc.blk_begin;
    StageRing<1>::wait_full(ss.q_full, piece);  // one query tile per piece, also for an empty one
    // -DSNAPMLA_TRACE_CTA only: the first query tile's arrival, for PV warpgroup 0's CTA timeline (pv_wg.cuh).
    if (piece == 0) cta_trace_stamp_shared(ss, [](auto& s) -> unsigned long long& { return s.cta_q_ready; });
    if (n_blocks == 0) {
      mbarrier_arrive(&ss.q_empty[0]);
      continue;
    }
    float q_mul[2];
    int limit[2];  // visible tokens of the row (causal: query token s sees 0 .. seqlen - s_q + s)
    tile_rows(p, req, pc.seqlen, warp_q_row0, rpw, lane, q_mul, limit);
    RowState st[2] = {{-INFINITY, 1.f, 0.f}, {-INFINITY, 1.f, 0.f}};

    // Both chains of the piece's first block go out before the loops; every block but the last issues the next
    // block's chain A after its logits and chain B after its hand-off's stores (header). The piece's blocks below
    // whole_blocks run without the mask's selects, the others (the request's last one or two when s_q <= 65) with
    // them; the last block is always masked and runs after the loops.
    float acc_a[32], acc_b[32];
    StageRing<KV_STAGES>::wait_full(ss.kv_full, block_idx);
    issue_chain_a(acc_a, ss, block_idx % KV_STAGES);
    issue_chain_b(acc_b, ss, block_idx % KV_STAGES);
    const int last = block_idx + n_blocks - 1;
    const int whole_end = block_idx + min(max(whole_blocks(p, pc.seqlen) - pc.blk_begin, 0), n_blocks - 1);
    softmax_blocks<false>(acc_a, acc_b, ss, block_idx, whole_end, block_idx, pc, q_mul, limit, row0, t, st, bt);
    softmax_blocks<true>(acc_a, acc_b, ss, whole_end, last, block_idx, pc, q_mul, limit, row0, t, st, bt);
    {
      float s[32];
      retire_chains(s, acc_a, acc_b);
      bt.mark();
      mbarrier_arrive(&ss.q_empty[0]);  // the piece's last QK retired: the producer may load the next tile
      float ks[16];
      load_k_scales(ss.kv_scale[last % KV_STAGES], t, ks);
      // No next page to wait for and no chains to issue: their stamps mark the same moments (the trace's page
      // wait and issue times are 0).
      softmax_and_publish<true>(s, ks, ss, last % KV_STAGES, pc.blk_end - 1, q_mul, limit, row0, t, st,
                                [&] { bt.mark(); bt.mark(); bt.mark(); }, [&] { bt.mark(); bt.mark(); });
      bt.mark();
    }
    block_idx += n_blocks;
  }
  bt.print("ws", "smx");
}

}  // namespace snapmla::sm90::decode_fp8::ws
