// Compile-time configuration of the warp-specialised wide decode kernel (ws/kernel.cuh has the design header):
// its four warpgroup roles and their register split. Tiles, stages, shared memory and barriers are the wide
// kernel's (config.h, traits.h).
#pragma once

#include "kernels/sm90/decode_fp8/shared/config.h"

namespace snapmla::sm90::decode_fp8::ws {

// Warpgroups: PV0 and PV1 hold the two 256-dim halves of O^T and run PV for every block; the producer keeps the
// wide kernel's index (PRODUCER_WG = 2, which kernel_prologue.cuh's map prefetch and run_producer assume); the
// softmax warpgroup runs QK, the online softmax and P8 for every block.
inline constexpr int NUM_PV_WG = 2;
inline constexpr int SOFTMAX_WG = 3;
inline constexpr int WS_THREADS = 4 * WG_THREADS;  // 512
static_assert(PRODUCER_WG == NUM_PV_WG && SOFTMAX_WG == PRODUCER_WG + 1, "warpgroup roles by index");
static_assert(NUM_PV_WG == NUM_MATH_WG, "the PV warpgroups take the wide kernel's math warpgroups' dims and barriers");

// Register split (setmaxnreg; __launch_bounds__(512, 1) gives 128 per thread, a pool of 4 x 128 per thread slot):
//   PV warpgroups: O^T (128 fp32) + one m-tile accumulator (32) + V^T fragments + fold scales + addresses;
//   softmax warpgroup: QK chains A and B of the next block in flight (32 each; B only once S is packed into P)
//     + S of this block (32) + k scales (16) + row state, masks and addresses;
//   producer: one TMA thread.
inline constexpr int WS_LAUNCH_REGS = 128;
// The split is the same in every build: the kernel has no phase timer (trace/phase.cuh times the wide kernel;
// a timer's registers in the softmax warpgroup would spill chain A's in-flight accumulator at 104).
inline constexpr int WS_PV_REGS = 192;
inline constexpr int WS_SOFTMAX_REGS = 104;
inline constexpr int WS_PRODUCER_REGS = 24;
static_assert(NUM_PV_WG * WS_PV_REGS + WS_SOFTMAX_REGS + WS_PRODUCER_REGS <= 4 * WS_LAUNCH_REGS,
              "register pool of the CTA: a setmaxnreg.inc past it waits forever");
static_assert(WS_PV_REGS % 8 == 0 && WS_SOFTMAX_REGS % 8 == 0 && WS_PRODUCER_REGS % 8 == 0,
              "setmaxnreg takes multiples of 8");

// QK of a block in two chains of fresh accumulators, summed in fp32 (qk_steps.cuh): chain A (content k-steps
// 0-7) is issued a block ahead, before the softmax of the current block; chain B (content 8-15 and the RoPE
// k-group) once that softmax's P8 is packed, so both run under it (ws/softmax_wg.cuh). Same chains, so the same
// rounding, as the wide kernel's issue_qk.
inline constexpr int WS_CHAIN_STEPS = QK_CONTENT_STEPS / 2;  // 8

}  // namespace snapmla::sm90::decode_fp8::ws
