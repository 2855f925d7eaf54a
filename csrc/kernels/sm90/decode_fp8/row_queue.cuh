// Which schedule rows (sched/sched_meta.h) a decode CTA walks, and how its roles agree on them.
//
// The metadata has num_sm_parts rows; the grid has gridDim.y <= num_sm_parts CTAs per m-tile column (launch.h).
// CTA y walks row y first. With more rows than CTAs it then takes rows gridDim.y, gridDim.y + 1, ... in the
// order the CTAs of its column ask for them (one atomicAdd on ROWS_TAKEN of metadata row blockIdx.x per row)
// until none is left, so a CTA that runs slow takes fewer rows. Why: with one static row per CTA the SMs do not
// finish together (ncu sm__cycles_active over the SMs, H200: mean / max 0.82 at b64 h_q 16 16k, 0.69 at b16 h_q 64
// 8k), and the launch lasts as long as the slowest. The results do not depend on which CTA runs a row: a piece
// is written to the same place by the same arithmetic (the determinism tests run with forced splits).
//
// The producer's lane 0 takes each row when it has issued the previous row's last page, so the counter's
// round trip is hidden behind the pages in flight, and hands the index to the math warpgroups through a 2-slot
// ring in shared memory (row_full: its arrival; row_empty: the 256 math threads once they read the slot); -1
// ends the walk. The column's last CTA to finish sets ROWS_TAKEN and CTAS_DONE back to 0 for the next launch.
#pragma once

#include "common/params.h"
#include "kernels/sched/sched_meta.h"
#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/decode_fp8/config.h"

namespace snapmla::sm90::decode_fp8 {

// ROWS_TAKEN / CTAS_DONE of the CTA's m-tile column (metadata row blockIdx.x; launch.h keeps
// num_sm_parts >= m-tiles whenever rows are taken).
__device__ __forceinline__ int* row_counters(const DecodeParams& p) {
  return const_cast<int*>(p.tile_scheduler_metadata) + blockIdx.x * sched::SCHED_META_INTS;
}

__device__ __forceinline__ bool rows_are_taken(const DecodeParams& p) {
  return static_cast<int>(gridDim.y) < p.num_sm_parts;
}

// Producer lane 0: the index of the k-th row this CTA walks, or -1 when none is left.
__device__ __forceinline__ int take_row(const DecodeParams& p, int k) {
  if (k == 0) return static_cast<int>(blockIdx.y);
  if (!rows_are_taken(p)) return -1;
  const int r = static_cast<int>(gridDim.y) + atomicAdd(&row_counters(p)[sched::ROWS_TAKEN], 1);
  return r < p.num_sm_parts ? r : -1;
}

// Producer lane 0, after its last take: counts the CTA done; the column's last CTA resets both counters. The
// fence orders this CTA's takes before its CTAS_DONE increment, so when the last one sees gridDim.y - 1 every
// take of the launch is behind it.
__device__ __forceinline__ void finish_rows(const DecodeParams& p) {
  if (!rows_are_taken(p)) return;
  int* counters = row_counters(p);
  __threadfence();
  if (atomicAdd(&counters[sched::CTAS_DONE], 1) == static_cast<int>(gridDim.y) - 1) {
    __threadfence();
    atomicExch(&counters[sched::ROWS_TAKEN], 0);
    atomicExch(&counters[sched::CTAS_DONE], 0);
  }
}

// Producer lane 0: row index (or -1) of walk step k into the ring, once the math threads read step k - 2.
template <typename Storage>
__device__ __forceinline__ void publish_row(Storage& ss, int k, int index) {
  const int slot = k % ROW_SLOTS;
  if (k >= ROW_SLOTS) mbarrier_wait(&ss.row_empty[slot], ((k / ROW_SLOTS) - 1) & 1);
  ss.row_ring[slot] = index;
  mbarrier_arrive(&ss.row_full[slot]);  // release: the store above is visible to the waiters
}

// Every math thread: waits for walk step k and returns its row index (or -1). The slot stays the step's until
// release_row, so the index is read again from shared memory where it is needed (ring_row) instead of being
// kept in a register over the walk: the wide loop has no register to spare (docs/decode_kernel.md).
template <typename Storage>
__device__ __forceinline__ int wait_row(Storage& ss, int k) {
  mbarrier_wait(&ss.row_full[k % ROW_SLOTS], (k / ROW_SLOTS) & 1);
  return *reinterpret_cast<volatile int*>(&ss.row_ring[k % ROW_SLOTS]);
}
template <typename Storage>
__device__ __forceinline__ int ring_row(Storage& ss, int k) {
  return *reinterpret_cast<volatile int*>(&ss.row_ring[k % ROW_SLOTS]);
}
// ... and once the thread has read step k for the last time (after the row's last piece, or the -1).
template <typename Storage>
__device__ __forceinline__ void release_row(Storage& ss, int k) {
  mbarrier_arrive(&ss.row_empty[k % ROW_SLOTS]);
}

// The math warpgroups' running piece index and walk step in one register (both are live over the whole walk):
// bits 0-15 the piece, of which only the parities matter (query-buffer phases; it wraps harmlessly), bits 16-31
// the step (< 65535: num_sm_parts <= 65535, decode_api.cpp), NO_STEP before the first.
struct WalkCount {
  static constexpr int NO_STEP = 0xffff;
  unsigned v = 0xffff0000u;  // step NO_STEP; next_step wraps it to 0
  __device__ __forceinline__ int piece() const { return static_cast<int>(v & 0xffffu); }
  __device__ __forceinline__ int step() const { return static_cast<int>(v >> 16); }
  __device__ __forceinline__ void next_piece() { v = (v & 0xffff0000u) | ((v + 1) & 0xffffu); }
  __device__ __forceinline__ void next_step() { v += 1u << 16; }
};

}  // namespace snapmla::sm90::decode_fp8
