// Debug build -DSNAPMLA_TRACE_PHASES: where a wide-kernel math warpgroup's cycles go, per phase of its block loop
// (mainloop.cuh run_math). Thread 0 of each math warpgroup adds clock() deltas into SharedStorage::trace (traits.h)
// and, at the end of the kernel, CTAs (0, 0) and (0, gridDim.y / 2) hand their totals to trace/sink.cuh, which
// prints them with the per-own-block means after the kernel. The default build compiles the timer to nothing
// (SASS unchanged, tests/test_sass.py).
// Run: a variant with this flag in tools/device/bench_variants.sh (each variant builds from scratch in its own copy),
// which runs bench/bench_decode.py; the v8 trace of docs/design.md is the model.
#pragma once

#include <cstdint>

#include "kernels/sm90/decode_fp8/shared/config.h"
#include "kernels/sm90/decode_fp8/shared/traits.h"
#include "kernels/sm90/decode_fp8/trace/sink.cuh"

namespace snapmla::sm90::decode_fp8 {

// Phases of one own block n (in loop order), then two that are counted once per piece, and the block count.
enum TracePhase : int {
  TP_WAIT_KV = 0,       // mbarrier wait for the block's page (kv_full)
  TP_QK,                // 20 WGMMAs issued and retired
  TP_SOFTMAX_LOGITS,    // softmax half 1
  TP_WAIT_HANDOFF,      // the previous block's hand-off (the other warpgroup's softmax)
  TP_SOFTMAX_PUBLISH,   // softmax half 2, P to e4m3, the hand-off of n
  TP_PV_PREV,           // PV(n - 1)
  TP_WAIT_OWN,          // all 128 owner threads' hand-off stores (xchg_full of n)
  TP_PV_OWN,            // PV(n)
  TP_PIECE_EDGES,       // per piece: the query-tile wait, and the other warpgroup's last block (hand-off + PV)
  TP_EPILOGUE,          // per piece: store_piece
  TP_OWN_BLOCKS,        // count of own blocks
  TP_COUNT
};
static_assert(TP_COUNT <= TRACE_SLOTS, "SharedStorage::trace (traits.h) has TRACE_SLOTS entries per warpgroup");

#ifdef SNAPMLA_TRACE_PHASES

struct PhaseTimer {
  unsigned long long* acc;  // SharedStorage::trace[wg], TP_COUNT entries, written by one thread only
  bool on;
  uint32_t last;
  __device__ __forceinline__ explicit PhaseTimer(unsigned long long* trace) : acc(trace) {
    on = threadIdx.x % WG_THREADS == 0;
    if (on) {
      for (int i = 0; i < TP_COUNT; ++i) acc[i] = 0;
    }
    last = static_cast<uint32_t>(clock());
  }
  // Adds the cycles since the previous mark to `phase`.
  __device__ __forceinline__ void mark(int phase) {
    const uint32_t now = static_cast<uint32_t>(clock());
    if (on) acc[phase] += now - last;
    last = now;
  }
  __device__ __forceinline__ void count_block() {
    if (on) acc[TP_OWN_BLOCKS] += 1;
  }
  // Into trace/sink.cuh's buffer (printed after the kernel: a printf here serialised every WGMMA).
  __device__ __forceinline__ void print(int wg) const {
    const bool traced_cta = blockIdx.x == 0 && (blockIdx.y == 0 || blockIdx.y == gridDim.y / 2);
    if (!on || !traced_cta) return;
    TraceLine* l = trace_line(TRACE_PHASE_LINE);
    if (l == nullptr) return;
    l->role = wg;
    static_assert(TP_COUNT <= 16 && TP_OWN_BLOCKS == 10, "trace/sink.cuh prints v[0..10] in this order");
    for (int i = 0; i < TP_COUNT; ++i) l->v[i] = acc[i];
  }
};
#define SNAPMLA_TRACE_BUFFER(ss, wg) ((ss).trace[wg])
#else
#define SNAPMLA_TRACE_BUFFER(ss, wg) nullptr

struct PhaseTimer {
  __device__ __forceinline__ explicit PhaseTimer(unsigned long long*) {}
  __device__ __forceinline__ void mark(int) {}
  __device__ __forceinline__ void count_block() {}
  __device__ __forceinline__ void print(int) const {}
};
#endif

}  // namespace snapmla::sm90::decode_fp8
