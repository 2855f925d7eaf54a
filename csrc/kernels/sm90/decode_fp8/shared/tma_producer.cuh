// TMA producer of the decode kernels and their role split (wide: kernel.cuh; narrow: narrow/kernel.cuh): the
// query tile per piece (tensor-map tile loads) and every page (three bulk copies), in the order the math
// warpgroups consume them, issued by one thread that blocks on each barrier it needs (nothing else runs there).
// Storage: SharedStorage (traits.h) or NarrowStorage (narrow/config.h), each with kStages and kQBufs, and an
// issue_query_tile overload.
#pragma once

#include "kernels/sm90/common/stage_ring.cuh"
#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/decode_fp8/shared/kernel_prologue.cuh"
#include "kernels/sm90/decode_fp8/shared/pdl_point.cuh"
#include "kernels/sm90/decode_fp8/shared/schedule.cuh"
#include "kernels/sm90/decode_fp8/shared/traits.h"
#include "kernels/sm90/decode_fp8/trace/hook.cuh"

namespace snapmla::sm90::decode_fp8 {

// Kernel prologue of both decode kernels, before their __syncthreads: thread 0 initialises the barriers
// (kv_full / q_full: one arrival plus the TMA bytes; q_empty: q_empty_arrivals, the threads that read the query
// tile, by default both math warpgroups; kv_empty: kv_empty_arrivals, the threads that read a stage), the
// producer's first thread prefetches the two query tensor maps.
template <typename Storage>
__device__ __forceinline__ void init_pipeline(const KernelParams& kp, Storage& ss, int kv_empty_arrivals,
                                              int q_empty_arrivals = MATH_THREADS) {
  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < Storage::kStages; ++i) {
      mbarrier_init(&ss.kv_full[i], 1);
      mbarrier_init(&ss.kv_empty[i], kv_empty_arrivals);
    }
#pragma unroll
    for (int i = 0; i < Storage::kQBufs; ++i) {
      mbarrier_init(&ss.q_full[i], 1);
      mbarrier_init(&ss.q_empty[i], q_empty_arrivals);
    }
    fence_barrier_init();
  }
  prefetch_tensor_maps(kp);
}

// The wide-tile kernels' prologue (kernel.cuh, ws/kernel.cuh): the hand-off barriers xchg_full (WG_THREADS
// arrivals: the warpgroup that wrote the block's hand-off, exchange.cuh), init_pipeline's, and the CTA barrier
// that makes them visible to every role.
__device__ __forceinline__ void init_wide_pipeline(const KernelParams& kp, SharedStorage& ss, int kv_empty_arrivals,
                                                   int q_empty_arrivals) {
  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < KV_STAGES; ++i) mbarrier_init(&ss.xchg_full[i], WG_THREADS);  // fenced by init_pipeline
  }
  init_pipeline(kp, ss, kv_empty_arrivals, q_empty_arrivals);
  __syncthreads();
}

// The query tile of piece `req` into buffer qbuf, on q_full[qbuf]: rows 0 .. N - 1 of the request (rows past
// q_rows read as zeros), 4 content tiles and the RoPE tile.
template <typename Storage>
__device__ __forceinline__ void issue_query_tile(const KernelParams& kp, Storage& ss, int qbuf, int req) {
  mbarrier_arrive_expect_tx(&ss.q_full[qbuf], Storage::kQTxBytes);  // NarrowStorage: a fixed 16-row tile
#pragma unroll
  for (int t = 0; t < CONTENT_TILES; ++t)
    tma_load_3d(ss.q_content[qbuf][t], &kp.tm_q_content, &ss.q_full[qbuf], t * SWIZZLE_ROW_BYTES, 0, req);
  tma_load_3d(ss.q_rope[qbuf], &kp.tm_q_rope, &ss.q_full[qbuf], 0, 0, req);
}

// Page `page` of the cache: (PAGE_BYTES,) uint8, the Swizzle-128B image of a stage (kv_layout.h), read by three
// 1-D bulk copies (4.51 against 4.18-4.25 TB/s for the six tensor-map tile loads of an unswizzled page,
// tools/microbench/page_stream.cu). A bulk copy has no bounds check (the tensor maps zero-filled coordinates
// past num_blocks): an id outside [0, num_blocks) inside a request's pages, a caller's error that no host check
// can see without a sync, reads page 0 instead of memory past the cache. Ids past a request's pages are never
// read (walk_piece_pages).
__device__ __forceinline__ const uint8_t* page_bytes(const DecodeParams& p, int page) {
  const int in_cache = static_cast<uint32_t>(page) < static_cast<uint32_t>(p.num_blocks) ? page : 0;
  return p.kv_cache + static_cast<int64_t>(in_cache) * kvl::PAGE_BYTES;
}

// The pages of one piece, for the producer of every decode kernel (run_producer here):
// the page ids come 32 at a time, one coalesced load per 32 blocks by the whole warp, issued a chunk ahead and
// handed to lane 0 by shuffles (read one by one, each id's global-load latency sat between two TMA issues:
// small batches, ~16 blocks per CTA, 10 us of 60, H200). start() runs once the first chunk's load is issued
// (the query tile goes there); then lane 0 runs issue(n, page) for each block, n the running block index.
// Past blk_end no id is read (the table may hold garbage or sentinels there, and its row may end).
template <typename Start, typename Issue>
__device__ __forceinline__ void walk_piece_pages(const DecodeParams& p, const Piece& pc, int req, int lane, int& n,
                                                 Start&& start, Issue&& issue) {
  const int* bt = p.block_table + static_cast<int64_t>(req) * p.block_table_batch_stride;  // (b, max_pages)
  auto chunk_ids = [&](int c) {  // ids of blocks blk_begin + 32 c + lane
    const int blk = pc.blk_begin + 32 * c + lane;
    return blk < pc.blk_end ? bt[blk] : 0;
  };
  int ids = chunk_ids(0);
  start();
  for (int c = 0; 32 * c < pc.blk_end - pc.blk_begin; ++c) {
    const int next_ids = chunk_ids(c + 1);
    const int in_chunk = min(32, pc.blk_end - pc.blk_begin - 32 * c);
    // Kept rolled (1.02-1.05x, H200, 2026-12-01). Unrolled, this loop was ~15 KB of the
    // kernel's SASS (7-8 copies of the page's six TMA issues), fetched by the SM sub-partition that also runs
    // two math warps; one page per iteration is issue-bound by kv_empty anyway.
#pragma unroll 1
    for (int k = 0; k < in_chunk; ++k, ++n) {
      const int page = __shfl_sync(0xffffffffu, ids, k);
      if (lane == 0) issue(n, page);
      __syncwarp();
    }
    ids = next_ids;
  }
}

// Warp 0 of the producer warpgroup: lane 0 issues the query tile of each piece, then its pages, in the order
// the math warpgroups consume them, blocking on each barrier it needs (it has nothing else to do).
template <typename Storage>
__device__ void run_producer(const KernelParams& kp, Storage& ss, const SchedRow& row) {
  constexpr int STAGES_ = Storage::kStages, Q_BUFS_ = Storage::kQBufs;
  static_assert(offsetof(Storage, kv_content) % 16 == 0 && offsetof(Storage, kv_rope) % 16 == 0 &&
                    offsetof(Storage, kv_scale) % 16 == 0,
                "bulk copies need 16-B aligned destinations");
  const DecodeParams& p = kp.p;
  const int lane = threadIdx.x % 32;
  int n = 0;  // running block index
  int piece = 0;
  BlockTrace btrace(lane == 0);  // -DSNAPMLA_TRACE_BLOCKS only (trace/block.cuh): each page's issue
  for (int req = row.begin_req; req <= row.end_req; ++req, ++piece) {
    const Piece pc = make_piece(p, row, req);
    const int qbuf = StageRing<Q_BUFS_>::stage(piece);
    auto query_tile = [&] {
      if (lane != 0) return;
      // The buffer of piece - Q_BUFS is free once both math warpgroups did their last QK of that piece.
      StageRing<Q_BUFS_>::wait_empty(ss.q_empty, piece);
      issue_query_tile(kp, ss, qbuf, req);  // overloaded per Storage
      // -DSNAPMLA_TRACE_CTA only, storages with the slot (the wide tiles'): for the ws CTA timeline (pv_wg.cuh).
      if constexpr (requires { ss.cta_q_issue; })
        if (piece == 0) cta_trace_stamp_shared(ss, [](auto& s) -> unsigned long long& { return s.cta_q_issue; });
    };
    walk_piece_pages(p, pc, req, lane, n, query_tile, [&](int blk_n, int page) {
      const int stage = StageRing<STAGES_>::stage(blk_n);
      StageRing<STAGES_>::wait_empty(ss.kv_empty, blk_n);
      btrace.mark();
      uint64_t* bar = &ss.kv_full[stage];
      mbarrier_arrive_expect_tx(bar, kvl::PAGE_BYTES);
      const uint8_t* src = page_bytes(p, page);
      bulk_load(ss.kv_content[stage], src + kvl::CONTENT_OFFSET, CONTENT_TILES * CONTENT_TILE_BYTES, bar);
      bulk_load(ss.kv_rope[stage], src + kvl::ROPE_OFFSET, ROPE_TILE_BYTES, bar);
      bulk_load(ss.kv_scale[stage], src + kvl::SCALE_OFFSET, BLOCK_N * kvl::SCALE_TOKEN_BYTES, bar);
    });
  }
  btrace.print("any", "prod");
}

// The role split of both decode kernels, after their prologue's __syncthreads: the producer warpgroup gives
// registers back and its first warp runs run_producer; the math warpgroups take PRODUCER's share and run
// run_math(wg) (a callable). The schedule row is read after the split: values live across setmaxnreg would be
// spilled. A CTA with no work (BEGIN_REQ > END_REQ) runs both roles through empty loops.
// PDL (common/pdl.h): nothing before each role's wait_for_prior_grids (pdl_point.cuh) touches global memory but
// its L2 prefetch of the guessed first pages (the barrier init and the tensor-map prefetch read shared memory and
// kernel parameters), so that prologue overlaps the previous kernel's tail; the combine kernel may be scheduled
// from there on (it waits for this grid to complete before it reads).
template <int PRODUCER_REGS_, int MATH_REGS_, typename Storage, typename RunMath>
__device__ __forceinline__ void split_roles(const KernelParams& kp, Storage& ss, RunMath&& run_math) {
  const int wg = threadIdx.x / WG_THREADS;
  if (wg == PRODUCER_WG) {
    cutlass::arch::warpgroup_reg_dealloc<PRODUCER_REGS_>();
    wait_for_prior_grids<false>(kp);
    if (threadIdx.x < PRODUCER_WG * WG_THREADS + 32) run_producer<Storage>(kp, ss, load_sched_row(kp.p));
  } else {
    cutlass::arch::warpgroup_reg_alloc<MATH_REGS_>();
    wait_for_prior_grids<true>(kp);
    run_math(load_sched_row(kp.p), wg);
  }
}

}  // namespace snapmla::sm90::decode_fp8
