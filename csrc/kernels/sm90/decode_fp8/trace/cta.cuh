// Debug build -DSNAPMLA_TRACE_CTA: when each CTA of a decode kernel starts, gets its first block, and ends each
// piece, in global time (%globaltimer, ns). Thread 0 of math warpgroup 0 keeps up to CTA_TRACE_EVENTS stamps (in
// local memory: the array is indexed by the running count) and hands one line per CTA to trace/sink.cuh
// when it is done, printed after the kernel as:
//   ctatrace <kernel> <blockIdx.x> <blockIdx.y> <sm> <pieces> <blocks> <t_0> .. <t_11> <q_issue>
// (<sm>: %smid, the SM the CTA ran on, so that two calls tell whether the slow CTAs sit on the same SMs)
// with the events in program order: math entry (after setmaxnreg and the PDL wait), first query tile ready,
// first block's QK retired, then per piece the end of its block loop and the end of its store (the ws kernel: its
// PV warpgroup 0, whose "first QK" is the first block's hand-off, QK and softmax done; ws/pv_wg.cuh). Question it
// answers: of a decode kernel's time, how much is start-up, per-piece edges and the tail of the slowest CTA,
// rather than blocks (small batch and 16k-token calls; tools/trace/trace_cta.py runs one call and sums it up).
// The last field is the producer's issue of the first query tile (the ws kernel only, through a trace-only shared
// slot; 0 elsewhere): whether a late tile was issued late or queued behind other CTAs' pages. (A stamp of the first
// page's issue spilled 8 B inside the producer's 24-register page loop, so there is none.)
// The default build compiles the tracer to nothing (tests/test_sass.py checks the kernels' SASS).
#pragma once

#include <cstdint>

#include "kernels/sm90/decode_fp8/shared/config.h"
#include "kernels/sm90/decode_fp8/trace/clock.cuh"
#include "kernels/sm90/decode_fp8/trace/sink.cuh"

namespace snapmla::sm90::decode_fp8 {

inline constexpr int CTA_TRACE_EVENTS = 12;

#ifdef SNAPMLA_TRACE_CTA

struct CtaTimeline {
  uint64_t t[CTA_TRACE_EVENTS];
  int n = 0;
  int pieces = 0;
  int blocks = 0;  // blocks of the CTA's walk (both warpgroups' own blocks)
  uint64_t q_issue = 0;  // the producer's first query tile issue (fill_producer)
  bool on;
  __device__ __forceinline__ explicit CtaTimeline(int wg) : on(wg == 0 && threadIdx.x % WG_THREADS == 0) { mark(); }
  __device__ __forceinline__ void mark() {
    if (!on || n >= CTA_TRACE_EVENTS) return;
    t[n++] = trace_globaltimer();
  }
  __device__ __forceinline__ void first_block_mark(int piece, int j_done) {
    if (piece == 0 && j_done == 0) mark();
  }
  // A stamp that another role takes (the ws kernel's first query tile, which its softmax warpgroup waits for):
  // reserve() holds its place in program order (0 until filled: trace_cta.py drops zeros), fill_from() copies it
  // from the shared slot slot_of(ss) names once the other role's store is visible. slot_of is a generic lambda, so
  // release builds, where the slot does not exist, never instantiate it.
  __device__ __forceinline__ void reserve() {
    if (!on || n >= CTA_TRACE_EVENTS) return;
    t[n++] = 0;
  }
  template <typename Storage, typename SlotOf>
  __device__ __forceinline__ void fill_from(int i, Storage& ss, SlotOf&& slot_of) {
    if (on && i < n) t[i] = slot_of(ss);
  }
  // The producer's stamp (the ws kernel's SharedStorage slot), read at the end.
  template <typename Storage>
  __device__ __forceinline__ void fill_producer(Storage& ss) {
    if (!on) return;
    q_issue = ss.cta_q_issue;
  }
  __device__ __forceinline__ void piece_done(int n_blocks) {
    ++pieces;
    blocks += n_blocks;
  }
  // Into trace/sink.cuh's buffer (printed after the kernel: a printf here serialised every WGMMA).
  __device__ __forceinline__ void print(const char* kernel) const {
    if (!on) return;
    TraceLine* l = trace_line(TRACE_CTA_LINE);
    if (l == nullptr) return;
    l->kernel = trace_name_id(kernel);
    l->a = pieces;
    l->b = blocks;
    static_assert(CTA_TRACE_EVENTS + 1 <= 16, "TraceLine::v");
    for (int i = 0; i < CTA_TRACE_EVENTS; ++i) l->v[i] = i < n ? t[i] : 0;  // unused stamps print as 0
    l->v[CTA_TRACE_EVENTS] = q_issue;
  }
};

// The other role's side of reserve() / fill_from(): thread 0 of the calling warpgroup stores the time into the
// slot slot_of(ss) names (a generic lambda, as above).
template <typename Storage, typename SlotOf>
__device__ __forceinline__ void cta_trace_stamp_shared(Storage& ss, SlotOf&& slot_of) {
  if (threadIdx.x % WG_THREADS == 0) slot_of(ss) = trace_globaltimer();
}

#else

template <typename Storage, typename SlotOf>
__device__ __forceinline__ void cta_trace_stamp_shared(Storage&, SlotOf&&) {}

struct CtaTimeline {
  __device__ __forceinline__ explicit CtaTimeline(int) {}
  __device__ __forceinline__ void mark() {}
  __device__ __forceinline__ void first_block_mark(int, int) {}
  __device__ __forceinline__ void reserve() {}
  template <typename Storage, typename SlotOf>
  __device__ __forceinline__ void fill_from(int, Storage&, SlotOf&&) {}
  template <typename Storage>
  __device__ __forceinline__ void fill_producer(Storage&) {}
  __device__ __forceinline__ void piece_done(int) {}
  __device__ __forceinline__ void print(const char*) const {}
};

#endif

}  // namespace snapmla::sm90::decode_fp8
