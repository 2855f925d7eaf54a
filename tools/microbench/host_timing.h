// Host helpers shared by the microbenchmarks (plain nvcc, no torch): a CUDA error check that exits, the fastest of
// several event-timed launches, a cluster launch configuration, and a cache of pages with a random walk over it.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>
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

// The launch of `ctas` CTAs of `threads` threads with `smem` bytes of dynamic shared memory in clusters of
// `cluster_x` CTAs (1: no cluster). The configuration points at this object's attribute: keep it alive while used.
struct ClusterLaunch {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  ClusterLaunch(int ctas, int threads, int smem, int cluster_x) {
    cfg.gridDim = dim3(ctas);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cluster_x;
    attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;
};

// num_pages pages of page_bytes on the device (every byte 1), and a random permutation of their ids (the walks
// of the streaming microbenchmarks, each a slice of it).
struct PageWalks {
  uint8_t* cache = nullptr;
  int* perm = nullptr;
};
inline PageWalks random_page_walks(int num_pages, size_t page_bytes, unsigned seed) {
  PageWalks w;
  check(cudaMalloc(&w.cache, static_cast<size_t>(num_pages) * page_bytes), "cache");
  check(cudaMemset(w.cache, 1, static_cast<size_t>(num_pages) * page_bytes), "fill");
  std::vector<int> perm(num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
  check(cudaMalloc(&w.perm, sizeof(int) * num_pages), "perm");
  check(cudaMemcpy(w.perm, perm.data(), sizeof(int) * num_pages, cudaMemcpyHostToDevice), "perm copy");
  return w;
}

}  // namespace microbench
