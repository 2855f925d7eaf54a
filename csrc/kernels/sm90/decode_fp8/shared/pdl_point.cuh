// The decode kernels' PDL point (common/pdl.h), run by every role after its setmaxnreg (split_roles,
// ws/kernel.cuh): an L2 prefetch of the CTA's first pages guessed before the wait, the wait for the grids before
// (Fused-Q-Quant, and through it K-append and the schedule), and the trigger that lets the combine be scheduled.
//
// Why the guess: with PDL the decode grid starts while Fused-Q-Quant still runs (~2 us at b = 1-16), and after
// the wait the producer's first page comes through three dependent global reads (schedule row, the piece's
// length and its block ids) and the page's own HBM read. The guess runs those reads during the wait and asks L2
// for up to GUESSED_PAGES (KV_STAGES) pages, so the producer's copies after the wait find them there: 1.02-1.08x for the whole
// call at b = 1, 0.99-1.02x elsewhere (docs/design.md section 1).
//
// Why it is safe: the values read before the wait may be stale or half-written (the grids before may still be
// writing the schedule, the lengths or the table, and the caching allocator may have handed their memory to
// another tensor). They only choose addresses to prefetch, and every address is kept inside its buffer: the
// schedule row, lengths[req] with req < b, the table row's storage (block_table_entries) and the cache
// (num_blocks). A prefetch returns no data, so a wrong guess costs bandwidth, never a result. The reads are
// relaxed gpu-scope loads (LDG.E.STRONG.GPU), which do not leave a line in L1 that a plain load after the wait
// could hit stale (L2 is where the writers' stores land). tests/test_sass.py checks that nothing else of the
// kernels touches global memory before the wait.
//
// Who guesses: the first warp of math warpgroup 0 (a PV warpgroup in the ws kernel). Its first global access
// comes microseconds later, behind the first page (and, in ws, the first hand-off), so waiting for its guess
// costs nothing; the producer's warp goes straight to its wait. In the producer's warp the guess held the wait
// back (query tile ready 1.6 -> 2.0 us, median over CTAs at b = 1, h_q 64, 8k, H100) and gained only where the
// narrow kernel runs.
#pragma once

#include <cstdint>

#include "common/griddep.cuh"
#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/decode_fp8/shared/config.h"
#include "kernels/sm90/decode_fp8/shared/page_guess.h"
#include "kernels/sm90/decode_fp8/shared/schedule.cuh"
#include "kernels/sm90/decode_fp8/shared/traits.h"
#include "kv_layout.h"

namespace snapmla::sm90::decode_fp8 {

static_assert(GUESSED_PAGES == KV_STAGES, "the guess covers the pages a producer issues before its first wait");

// A relaxed gpu-scope load (CUTLASS has no wrapper for one): coherent at L2, no line left in L1.
__device__ __forceinline__ int ld_relaxed_gpu(const int* ptr) {
  int v;
  asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(ptr));
  return v;
}

// Lane l < GUESSED_PAGES prefetches the page of block BEGIN_BLOCK + l of the CTA's first request, if that block
// is inside the request's length (as make_piece clamps it) and its id inside the cache (bounds: page_guess.h).
__device__ __forceinline__ void prefetch_guessed_first_pages(const DecodeParams& p, int lane) {
  const int* meta = sched_meta_row(p);  // (num_sm_parts, SCHED_META_INTS)
  const int req = ld_relaxed_gpu(meta + sched::BEGIN_REQ), end_req = ld_relaxed_gpu(meta + sched::END_REQ);
  const int blk_begin = ld_relaxed_gpu(meta + sched::BEGIN_BLOCK), end_blk = ld_relaxed_gpu(meta + sched::END_BLOCK);
  if (!guess_row_usable(req, end_req, blk_begin, p.b)) return;
  const int64_t at = guess_table_index(req, blk_begin, lane, p.block_table_entries, p.block_table_batch_stride);
  const int page = at >= 0 ? ld_relaxed_gpu(p.block_table + at) : -1;  // (b, max_pages) int32 view
  const int seqlen = ld_relaxed_gpu(p.cache_seqlens + req);              // (b,); in flight with the page id
  if (at >= 0 && guess_prefetches(req, end_req, end_blk, blk_begin, lane, seqlen, page, p.num_blocks)) {
    const uint8_t* src = p.kv_cache + static_cast<int64_t>(page) * kvl::PAGE_BYTES;  // (PAGE_BYTES,) uint8
    bulk_prefetch_l2(src, kvl::PAGE_BYTES);
  }
}

// kGuess: the branch of math warpgroup 0 (the guess is compiled there only; its first warp runs it).
template <bool kGuess>
__device__ __forceinline__ void wait_for_prior_grids(const KernelParams& kp) {
  if constexpr (kGuess)
    if (threadIdx.x < 32) prefetch_guessed_first_pages(kp.p, threadIdx.x);
  griddep_wait();
  griddep_launch_dependents();
}

}  // namespace snapmla::sm90::decode_fp8
