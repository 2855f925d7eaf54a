// Device split-KV scheduler: computes tile_scheduler_metadata and num_splits (sched_meta.h) from cache_seqlens.
//
// One CTA of 512 threads, three phases separated by __syncthreads (global writes of a CTA are visible to its
// own threads after the barrier):
//   1. cost prefix C_r over the batch (chunks of 512 requests, cub::BlockScan, int64 carry) -> scratch;
//   2. one thread per part: plan_part (two binary searches in C) -> one metadata row;
//   3. one thread per request: request_pieces, then a second chunked scan -> num_splits.
// Work is O(b + num_sm_parts * log b); for b = 4096 that is 8 chunks per scan, a few microseconds, negligible
// next to a decode call, and it runs on the stream so the plan follows the seqlens without a host round trip.
#include <cub/block/block_scan.cuh>

#include "common/cuda_check.h"
#include "kernels/sched/launch.h"
#include "kernels/sched/plan.h"

namespace snapmla::sched {

namespace {

constexpr int SCHED_THREADS = 512;  // one chunk of the batch per scan step; 16 warps hide the global loads

using BlockScan64 = cub::BlockScan<int64_t, SCHED_THREADS>;
using BlockScan32 = cub::BlockScan<int, SCHED_THREADS>;

__global__ void __launch_bounds__(SCHED_THREADS, 1)
    snapmla_get_mla_metadata_kernel(const int* __restrict__ cache_seqlens,  // (b,)
                                    int b, int num_sm_parts,
                                    int64_t* __restrict__ cost_prefix,      // (b + 1,) scratch
                                    int* __restrict__ metadata,             // (num_sm_parts, SCHED_META_INTS)
                                    int* __restrict__ num_splits) {         // (b + 1,)
  __shared__ union {
    typename BlockScan64::TempStorage scan64;
    typename BlockScan32::TempStorage scan32;
  } temp;
  const int tid = threadIdx.x;

  // Phase 1: C_{r+1} = sum_{i <= r} cost_i.
  int64_t carry = 0;
  for (int base = 0; base < b; base += SCHED_THREADS) {
    const int r = base + tid;
    const int64_t cost = r < b ? request_cost(cache_seqlens[r]) : 0;
    int64_t inclusive, chunk_total;
    BlockScan64(temp.scan64).InclusiveSum(cost, inclusive, chunk_total);
    if (r < b) cost_prefix[r + 1] = carry + inclusive;
    carry += chunk_total;
    __syncthreads();  // temp storage is reused by the next chunk
  }
  if (tid == 0) cost_prefix[0] = 0;
  __syncthreads();

  // Phase 2: one metadata row per part.
  const int64_t total = carry;  // the cost line's length C_b
  for (int p = tid; p < num_sm_parts; p += SCHED_THREADS) {
    const PartPlan plan = plan_part(p, cost_prefix, cache_seqlens, b, num_sm_parts);
    int* row = metadata + static_cast<int64_t>(p) * SCHED_META_INTS;
    row[BEGIN_REQ] = plan.begin_req;
    row[BEGIN_BLOCK] = plan.begin_block;
    row[END_REQ] = plan.end_req;
    row[END_BLOCK] = plan.end_block;
    row[BEGIN_SPLIT] = plan.begin_split;
    for (int i = BEGIN_SPLIT + 1; i < SCHED_META_INTS; ++i) row[i] = 0;  // padding, written so it is defined
  }

  // Phase 3: num_splits = exclusive prefix sum of pieces per request.
  int split_carry = 0;
  for (int base = 0; base < b; base += SCHED_THREADS) {
    const int r = base + tid;
    const int pieces = r < b ? request_pieces(cost_prefix[r], cache_seqlens[r], total, num_sm_parts) : 0;
    int inclusive, chunk_total;
    BlockScan32(temp.scan32).InclusiveSum(pieces, inclusive, chunk_total);
    if (r < b) num_splits[r + 1] = split_carry + inclusive;
    split_carry += chunk_total;
    __syncthreads();
  }
  if (tid == 0) num_splits[0] = 0;
}

}  // namespace

void launch_get_mla_metadata(const int* cache_seqlens, int b, int num_sm_parts, int64_t* cost_prefix_scratch,
                             int* tile_scheduler_metadata, int* num_splits, cudaStream_t stream) {
  snapmla_get_mla_metadata_kernel<<<1, SCHED_THREADS, 0, stream>>>(cache_seqlens, b, num_sm_parts,
                                                                   cost_prefix_scratch, tile_scheduler_metadata,
                                                                   num_splits);
  SNAPMLA_CHECK_LAUNCH();
}

}  // namespace snapmla::sched
