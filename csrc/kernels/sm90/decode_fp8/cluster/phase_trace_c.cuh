// Debug build -DSNAPMLA_TRACE_PHASES: where a cluster-kernel math warpgroup's cycles go, per phase of its loop
// around an own block (cluster/mainloop.cuh). Thread 0 of each math warpgroup adds clock() deltas into registers
// (the cluster kernel has no shared memory to spare) and, at the end, the four warpgroups of the clusters in
// schedule rows 0 and gridDim.y / 2 hand their totals to trace_sink.cuh (printed after the kernel, as
// "ctrace" lines). The default build compiles the timer to nothing.
#pragma once

#include <cstdint>

#include "kernels/sm90/decode_fp8/config.h"
#include "kernels/sm90/decode_fp8/trace_sink.cuh"

namespace snapmla::sm90::decode_fp8::cluster {

enum ClusterPhase : int {
  CP_WAIT_KV = 0,   // the own block's page (kv_full)
  CP_PV_A,          // PV of the blocks up to j - 3, before the QK (their waits apart: CP_PV_WAIT)
  CP_QK_WAIT,       // the QK retired
  CP_SOFTMAX,       // logits, exponentials, P8
  CP_PUB_PT,        // P^T stored, fenced, the warpgroup gathered, pushed
  CP_PV_B,          // PV up to j - 2
  CP_WAIT_STATE,    // the state of block j - 1 (from the other CTA)
  CP_STATE_PUB,     // the state of j, stored, fenced, arrived, pushed
  CP_PV_C,          // PV up to j
  CP_PV_WAIT,       // inside the PVs: the waits for their pages (kv_full) and hand-offs (xchg_full)
  CP_TAIL,          // per piece: the PVs after the last own block, the last block's PV
  CP_EPILOGUE,      // per piece: the epilogue
  CP_OWN_BLOCKS,    // count of own blocks
  CP_COUNT
};
static_assert(CP_COUNT <= 16, "a TraceLine holds 16 values");

#ifdef SNAPMLA_TRACE_PHASES
struct ClusterTimer {
  uint32_t acc[CP_COUNT];  // 32-bit: half the registers of 64-bit totals (a traced call is < 2^32 cycles)
  bool on;
  uint32_t last;
  __device__ __forceinline__ ClusterTimer() {
    on = threadIdx.x % WG_THREADS == 0;
    for (int i = 0; i < CP_COUNT; ++i) acc[i] = 0;
    last = static_cast<uint32_t>(clock());
  }
  __device__ __forceinline__ void mark(int phase) {
    const uint32_t now = static_cast<uint32_t>(clock());
    if (on) acc[phase] += now - last;
    last = now;
  }
  __device__ __forceinline__ void count_block() {
    if (on) acc[CP_OWN_BLOCKS] += 1;
  }
  __device__ __forceinline__ void print(int wg) const {
    const bool traced = blockIdx.x < 2 && (blockIdx.y == 0 || blockIdx.y == gridDim.y / 2);
    if (!on || !traced) return;
    TraceLine* l = trace_line(TRACE_CLUSTER_PHASE_LINE);
    if (l == nullptr) return;
    l->role = wg;
    for (int i = 0; i < CP_COUNT; ++i) l->v[i] = acc[i];
  }
};
#else
struct ClusterTimer {
  __device__ __forceinline__ void mark(int) {}
  __device__ __forceinline__ void count_block() {}
  __device__ __forceinline__ void print(int) const {}
};
#endif

}  // namespace snapmla::sm90::decode_fp8::cluster
