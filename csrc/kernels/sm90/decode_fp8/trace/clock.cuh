// Debug tracers' readings (trace/cta.cuh, trace/block.cuh, trace/sink.cuh; compiled in only with a trace flag):
// the global timer, in ns and comparable across SMs, and the SM a CTA runs on.
#pragma once

#include <cstdint>

namespace snapmla::sm90::decode_fp8 {

__device__ __forceinline__ uint64_t trace_globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned trace_smid() {
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  return sm;
}

}  // namespace snapmla::sm90::decode_fp8
