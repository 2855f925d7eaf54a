// Bounds of the decode kernels' guess of their first pages before the PDL wait (pdl_point.cuh), as plain host and
// device functions, so that tests/cpp/test_page_guess.cpp checks on the CPU that no input, however stale or
// garbled, leads the guess outside its buffers. The guess reads the schedule row's BEGIN_REQ, END_REQ,
// BEGIN_BLOCK and END_BLOCK, then for lanes 0 .. GUESSED_PAGES - 1 one block-table entry and the request's length,
// then prefetches a page; each of those values may be anything.
#pragma once

#include <cstdint>

#include "kv_layout.h"  // SNAPMLA_HOST_DEVICE, PAGE_BLOCK_SIZE

namespace snapmla::sm90::decode_fp8 {

inline constexpr int GUESSED_PAGES = 4;  // the stages a producer fills before its first wait (KV_STAGES)

// Whether the guess reads anything: the row's first request is one of this call's (its length lengths[req] is then
// inside the (b,) tensor) and its first block is not negative.
SNAPMLA_HOST_DEVICE constexpr bool guess_row_usable(int req, int end_req, int blk_begin, int b) {
  return req >= 0 && req < b && req <= end_req && blk_begin >= 0;
}

// Index into the block table (an int32 storage of table_entries entries from its start; request r's row starts at
// r * table_stride) of lane's block, BEGIN_BLOCK + lane, or -1 where the lane reads nothing. In 64 bits: a
// BEGIN_BLOCK near INT_MAX must not wrap to a negative block. Needs guess_row_usable and table_stride >= 0.
SNAPMLA_HOST_DEVICE constexpr int64_t guess_table_index(int req, int blk_begin, int lane, int64_t table_entries,
                                                        int64_t table_stride) {
  const int64_t row = static_cast<int64_t>(req) * table_stride;
  const int64_t blk = static_cast<int64_t>(blk_begin) + lane;
  return lane < GUESSED_PAGES && blk < table_entries - row ? row + blk : -1;
}

// Whether lane's page is prefetched: its block lies inside the request's length (and before END_BLOCK when the
// request is the row's last, as make_piece bounds a piece) and its id inside the cache.
SNAPMLA_HOST_DEVICE constexpr bool guess_prefetches(int req, int end_req, int end_blk, int blk_begin, int lane,
                                                    int seqlen, int page, int num_blocks) {
  const int64_t blk = static_cast<int64_t>(blk_begin) + lane;
  const int64_t n_blocks = ((seqlen > 0 ? static_cast<int64_t>(seqlen) : 0) + kv_layout::PAGE_BLOCK_SIZE - 1) /
                           kv_layout::PAGE_BLOCK_SIZE;
  const int64_t blk_end = req == end_req && end_blk < n_blocks ? end_blk : n_blocks;
  return blk < blk_end && page >= 0 && page < num_blocks;
}

}  // namespace snapmla::sm90::decode_fp8
