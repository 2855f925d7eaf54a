// Host-side entry of the device split-KV scheduler (get_mla_metadata.cu; the plan is in plan.h, the metadata
// contract in sched_meta.h).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace snapmla::sched {

// One CTA computes the whole plan on the device, so the call needs no host sync and can be captured in a CUDA
// graph (replaying it re-plans for the seqlens then in memory).
//   cache_seqlens            (b,) int32, device
//   cost_prefix_scratch      (b + 1,) int64, device scratch (contents on entry do not matter)
//   tile_scheduler_metadata  (num_sm_parts, SCHED_META_INTS) int32, device, fully written
//   num_splits               (b + 1,) int32, device, fully written
void launch_get_mla_metadata(const int* cache_seqlens, int b, int num_sm_parts, int64_t* cost_prefix_scratch,
                             int* tile_scheduler_metadata, int* num_splits, cudaStream_t stream);

}  // namespace snapmla::sched
