// The stage and phase arithmetic of a ring of S buffers, each with a full and an empty mbarrier, used in order by a
// running count n (blocks, pieces): item n uses stage n % S in round n / S. A full barrier completes once per
// round, so the consumer waits for parity (n / S) & 1. The producer reuses a stage once its consumers released
// the previous round; a fresh barrier's "previous" phase counts as complete, so round 0 needs no wait.
#pragma once

#include <cstdint>

#include "kernels/sm90/common/mbarrier.cuh"

namespace snapmla::sm90 {

template <int S>
struct StageRing {
  static_assert(S >= 1, "a ring has at least one stage");
  __device__ __forceinline__ static int stage(int n) { return n % S; }
  __device__ __forceinline__ static uint32_t phase(int n) { return (n / S) & 1; }
  // Consumer: item n's data landed in stage(n). full: the ring's S full barriers.
  __device__ __forceinline__ static void wait_full(uint64_t* full, int n) { mbarrier_wait(&full[stage(n)], phase(n)); }
  // Producer: stage(n) is free for item n (its consumers released item n - S). empty: the ring's S empty barriers.
  __device__ __forceinline__ static void wait_empty(uint64_t* empty, int n) {
    if (n >= S) mbarrier_wait(&empty[stage(n)], phase(n) ^ 1);
  }
};

}  // namespace snapmla::sm90
