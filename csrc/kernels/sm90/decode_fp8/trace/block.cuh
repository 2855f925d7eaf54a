// Debug build -DSNAPMLA_TRACE_BLOCKS: per block of a CTA's walk, when the producer issued its page and when the
// owning math warpgroup saw it arrive and finished it, in %globaltimer ns. Question it answers: in a slow CTA
// (measured: one CTA per b64 h_q 16 16k call runs its second piece at half the block
// rate), who waits for whom, block by block: the producer for a free stage (the math is slow), the math for the
// page (memory or the producer's page ids are slow), or neither.
// The printed stamps of a CTA: the producer's lane 0 stamps each block before its TMA (after the kv_empty wait);
// in the wide kernel thread 0 of each math warpgroup stamps each of its own blocks when the kv_full wait returns
// and when the block is done (after its PV); in the ws kernel thread 0 of the softmax warpgroup stamps each block
// seven times, when its QK retired, when its logits are done, when the next page is in (the wait between the
// two), when the next chain A is issued, when the hand-off's stores are issued, when the next chain B is issued
// and when the hand-off is published (role smx), thread 0 of each PV warpgroup when the hand-off arrived and
// when its PV is done (pv0, pv1). The issue stamps say whether issuing a chain's WGMMAs holds the warpgroup up
// (the seven stamps cost the softmax warpgroup 8 B of spills in this build; the default build has none).
// (The other threads of a role stamp too, unprinted: see mark.) Stamps are kept in local memory, up to
// BLOCK_TRACE_STAMPS per thread (a role with k stamps per block covers the first 128 / k blocks of its walk;
// ~24 lines per CTA, so the printf FIFO must exceed its 1 MB default at 264 CTAs: tools/trace/trace_cta.py's
// child raises it to 64 MB), and handed to trace/sink.cuh at the end, which prints
// them after the kernel as lines of 16:
//   blocktrace <kernel> <blockIdx.x> <blockIdx.y> <sm> <role> <base_ns> <first index> <d_0> ... <d_15>
// (<role>: prod, math0, math1, smx, pv0, pv1; d_i = stamp - base_ns, 0xffffffff unused).
// tools/trace/trace_blocks.py reads them.
// The default build compiles the tracer to nothing (tests/test_sass.py checks the kernels read no clock).
#pragma once

#include <cstdint>

#include "kernels/sm90/decode_fp8/trace/clock.cuh"
#include "kernels/sm90/decode_fp8/trace/sink.cuh"

namespace snapmla::sm90::decode_fp8 {

inline constexpr int BLOCK_TRACE_STAMPS = 128;

#ifdef SNAPMLA_TRACE_BLOCKS
struct BlockTrace {
  uint32_t d[BLOCK_TRACE_STAMPS + 1];  // the last slot takes the stamps past the first BLOCK_TRACE_STAMPS
  uint64_t base;
  int n = 0;
  bool on;
  __device__ __forceinline__ explicit BlockTrace(bool on_) : base(trace_globaltimer()), on(on_) {}
  // Every thread that holds a tracer stamps, without a branch: a branch that differs between the threads of a
  // warpgroup with WGMMAs in flight makes ptxas serialise every WGMMA (C7518), and the ws kernel's softmax
  // warpgroup always has QK chains in flight. Only `on` prints.
  __device__ __forceinline__ void mark() {
    d[n < BLOCK_TRACE_STAMPS ? n : BLOCK_TRACE_STAMPS] = static_cast<uint32_t>(trace_globaltimer() - base);
    ++n;
  }
  // Into trace/sink.cuh's buffer (printed after the kernel: a printf here serialised every WGMMA).
  __device__ __forceinline__ void print(const char* kernel, const char* role) const {
    if (!on) return;
    const int stamps = n < BLOCK_TRACE_STAMPS ? n : BLOCK_TRACE_STAMPS;
    for (int i = 0; i < stamps; i += 16) {
      TraceLine* l = trace_line(TRACE_BLOCK_LINE);
      if (l == nullptr) return;
      l->kernel = trace_name_id(kernel);
      l->role = trace_name_id(role);
      l->base = base;
      l->a = i;
      for (int k = 0; k < 16; ++k) l->v[k] = i + k < stamps ? d[i + k] : 0xffffffffu;
    }
  }
};
#else
struct BlockTrace {
  __device__ __forceinline__ explicit BlockTrace(bool) {}
  __device__ __forceinline__ void mark() {}
  __device__ __forceinline__ void print(const char*, const char*) const {}
};
#endif

}  // namespace snapmla::sm90::decode_fp8
