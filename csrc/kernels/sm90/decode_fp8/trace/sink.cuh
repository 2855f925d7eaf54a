// Debug builds only (-DSNAPMLA_TRACE_PHASES, -DSNAPMLA_TRACE_CTA, -DSNAPMLA_TRACE_BLOCKS): where the tracers'
// lines go. The decode kernels write each line into a device buffer, and a one-thread kernel that the launchers
// start right after the decode kernel prints them (launch_trace_print). Why not printf in the decode kernels:
// printf is a function call, and a call anywhere in a kernel with WGMMAs makes ptxas serialise every WGMMA of
// that kernel (C7510, "wgmma pipeline crossing function boundary"). The wide kernel's trace builds had a wait
// after each WGMMA (68 WARPGROUP.DEPBAR against 25), so the QK's 20 WGMMAs and each PV m-tile's two ran one by one
// and the phase traces measured that, not the kernel (docs/design.md). tools/tests/test_trace_builds.py compiles
// the trace builds and checks there is no C7510.
// Lines print in the formats the scripts parse (tools/trace/trace_cta.py, tools/trace/trace_blocks.py, the
// `trace cta` lines, tools/trace/trace_cta.py); a line past TRACE_LINES is dropped and counted.
#pragma once

#include <cuda_runtime.h>

#if defined(SNAPMLA_TRACE_PHASES) || defined(SNAPMLA_TRACE_CTA) || defined(SNAPMLA_TRACE_BLOCKS)
#define SNAPMLA_TRACE_SINK 1

#include <cstdint>
#include <cstdio>

#include "kernels/sm90/decode_fp8/trace/clock.cuh"

namespace snapmla::sm90::decode_fp8 {

enum TraceKind : int { TRACE_PHASE_LINE = 0, TRACE_CTA_LINE = 1, TRACE_BLOCK_LINE = 2 };
enum TraceName : int { TRACE_WIDE = 0, TRACE_NARROW = 1, TRACE_ANY = 2, TRACE_PROD = 3, TRACE_MATH0 = 4,
                       TRACE_MATH1 = 5, TRACE_WS = 6, TRACE_SMX = 7, TRACE_PV0 = 8, TRACE_PV1 = 9 };

struct TraceLine {
  int kind;    // TraceKind
  int kernel;  // TraceName of the kernel (wide, narrow, any)
  int role;    // TraceName of the role (block lines), or the warpgroup (phase lines)
  int bx, by;
  unsigned sm;
  int a, b;                // cta lines: pieces, blocks; block lines: first index
  unsigned long long base;  // block lines: the stamps' base (ns)
  unsigned long long v[16];
};

// 264 CTAs (h_q 128: 2 m-tiles x 132 parts) x 24 block-trace lines = 6336; 2.6 MB of device memory.
inline constexpr unsigned TRACE_LINES = 16384;
// static: each instantiation's translation unit has its own buffer, printed by its own launcher.
static __device__ TraceLine g_trace_lines[TRACE_LINES];
static __device__ unsigned g_trace_count;

// A line with its kind, the CTA and its SM filled in, for the caller to fill the rest; nullptr when the buffer is
// full (counted, and reported by the print kernel).
__device__ __forceinline__ TraceLine* trace_line(int kind) {
  const unsigned i = atomicAdd(&g_trace_count, 1u);
  if (i >= TRACE_LINES) return nullptr;
  TraceLine* l = &g_trace_lines[i];
  l->kind = kind;
  l->bx = blockIdx.x;
  l->by = blockIdx.y;
  l->sm = trace_smid();
  return l;
}

// The tracers' call sites name kernels and roles by string ("wide", "narrow", "ws", "any"; "prod", "math0",
// "math1", "smx", "pv0", "pv1").
__device__ __forceinline__ int trace_name_id(const char* s) {
  if (s[0] == 'w') return s[1] == 's' ? TRACE_WS : TRACE_WIDE;
  if (s[0] == 'n') return TRACE_NARROW;
  if (s[0] == 'a') return TRACE_ANY;
  if (s[0] == 's') return TRACE_SMX;
  if (s[0] == 'p') return s[1] == 'r' ? TRACE_PROD : (s[2] == '0' ? TRACE_PV0 : TRACE_PV1);
  return s[4] == '0' ? TRACE_MATH0 : TRACE_MATH1;
}

__device__ __forceinline__ const char* trace_name(int n) {
  switch (n) {
    case TRACE_WIDE: return "wide";
    case TRACE_NARROW: return "narrow";
    case TRACE_ANY: return "any";
    case TRACE_PROD: return "prod";
    case TRACE_MATH0: return "math0";
    case TRACE_WS: return "ws";
    case TRACE_SMX: return "smx";
    case TRACE_PV0: return "pv0";
    case TRACE_PV1: return "pv1";
    default: return "math1";
  }
}

// One thread prints every line of the decode kernel launched before it, then empties the buffer.
static __global__ void snapmla_trace_print_kernel() {
  const unsigned n = g_trace_count < TRACE_LINES ? g_trace_count : TRACE_LINES;
  for (unsigned i = 0; i < n; ++i) {
    const TraceLine& l = g_trace_lines[i];
    const unsigned long long* v = l.v;
    if (l.kind == TRACE_PHASE_LINE) {
      // v: the phase accumulators of trace/phase.cuh (TracePhase order), v[10] the own-block count.
      const unsigned long long blocks = v[10] > 0 ? v[10] : 1;
      printf("trace cta (%d, %d) wg %d: %llu own blocks; cycles per own block: wait_kv %llu qk %llu softmax_logits "
             "%llu wait_handoff %llu softmax_publish %llu pv_prev %llu wait_own %llu pv_own %llu; per kernel: "
             "piece_edges %llu epilogue %llu\n",
             l.bx, l.by, l.role, v[10], v[0] / blocks, v[1] / blocks, v[2] / blocks, v[3] / blocks, v[4] / blocks,
             v[5] / blocks, v[6] / blocks, v[7] / blocks, v[8], v[9]);
    } else if (l.kind == TRACE_CTA_LINE) {
      printf("ctatrace %s %d %d %u %d %d %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu\n",
             trace_name(l.kernel), l.bx, l.by, l.sm, l.a, l.b, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8],
             v[9], v[10], v[11], v[12]);
    } else {
      printf("blocktrace %s %d %d %u %s %llu %d %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u\n",
             trace_name(l.kernel), l.bx, l.by, l.sm, trace_name(l.role), l.base, l.a, unsigned(v[0]), unsigned(v[1]),
             unsigned(v[2]), unsigned(v[3]), unsigned(v[4]), unsigned(v[5]), unsigned(v[6]), unsigned(v[7]),
             unsigned(v[8]), unsigned(v[9]), unsigned(v[10]), unsigned(v[11]), unsigned(v[12]), unsigned(v[13]),
             unsigned(v[14]), unsigned(v[15]));
    }
  }
  if (g_trace_count > TRACE_LINES) printf("trace lines dropped: %u\n", g_trace_count - TRACE_LINES);
  g_trace_count = 0;
}

inline void launch_trace_print(cudaStream_t stream) { snapmla_trace_print_kernel<<<1, 1, 0, stream>>>(); }

}  // namespace snapmla::sm90::decode_fp8

#else

namespace snapmla::sm90::decode_fp8 {
// Release builds: nothing to print.
inline void launch_trace_print(cudaStream_t) {}
}  // namespace snapmla::sm90::decode_fp8

#endif
