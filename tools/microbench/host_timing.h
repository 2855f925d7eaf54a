// Host helpers shared by the microbenchmarks (plain nvcc, no torch): a CUDA error check that exits, and the
// fastest of several event-timed launches.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace microbench {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Milliseconds of the fastest of `reps` timed runs of launch() (which enqueues one launch on the default
// stream), after `warmup` untimed ones.
template <typename Launch>
float fastest_ms(Launch&& launch, int reps, int warmup = 0) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  float best = 1e30f;
  for (int rep = 0; rep < warmup + reps; ++rep) {
    check(cudaEventRecord(a), "record");
    launch();
    check(cudaGetLastError(), "launch");
    check(cudaEventRecord(b), "record");
    check(cudaEventSynchronize(b), "sync");
    float ms = 0.f;
    check(cudaEventElapsedTime(&ms, a, b), "elapsed");
    if (rep >= warmup) best = std::min(best, ms);
  }
  check(cudaEventDestroy(a), "event");
  check(cudaEventDestroy(b), "event");
  return best;
}

}  // namespace microbench
