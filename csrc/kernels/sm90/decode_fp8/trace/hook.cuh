// The decode kernels' one tracing hook: the only trace header a kernel includes. It provides three tracers, each
// switched on by its own compile-time flag and otherwise an empty struct whose calls compile to nothing:
//   PhaseTimer   (-DSNAPMLA_TRACE_PHASES, phase.cuh): clock() cycles per phase of the wide kernel's block loop;
//   CtaTimeline  (-DSNAPMLA_TRACE_CTA, cta.cuh): %globaltimer stamps of each CTA's start, first block, pieces;
//   BlockTrace   (-DSNAPMLA_TRACE_BLOCKS, block.cuh): per-block issue / arrival / end stamps of every role;
// and launch_trace_print (sink.cuh), which the launcher (launch_kernel.h) calls after every decode kernel: in a
// trace build it prints the lines the tracers wrote, in a release build it is empty.
// Release builds (no flag) must compile to the same SASS as kernels without these calls: tests/test_sass.py
// checks that no decode kernel reads a clock, and no register split depends on a flag (ws/config.h).
// The printers that read the lines are tools/trace/trace_cta.py and tools/trace/trace_blocks.py.
#pragma once

#include "kernels/sm90/decode_fp8/trace/block.cuh"
#include "kernels/sm90/decode_fp8/trace/cta.cuh"
#include "kernels/sm90/decode_fp8/trace/phase.cuh"
#include "kernels/sm90/decode_fp8/trace/sink.cuh"
