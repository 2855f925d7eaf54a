// The one definition of the SnapMLA paged KV-cache byte map (SPEC section 2).
//
// A layer's cache is one uint8 tensor of shape (num_blocks, PAGE_BYTES). Each 64-token page holds three parts,
// each contiguous, in this order:
//
//   [ content: 64 tokens x 512 e4m3   = 32768 B ]  offset 0       token stride 512 B
//   [ rope:    64 tokens x 64 bf16    =  8192 B ]  offset 32768   token stride 128 B (pre-scaled by 1/s)
//   [ scale:   64 tokens x 1 fp32     =   256 B ]  offset 40960   token stride 4 B   (s = max(amax|c|, floor)/448)
//   page = 41216 B = 64 x 644 B; every part offset and the page stride are multiples of 128 B, so TMA sees
//   16-B aligned strides and 128-B aligned tiles (the flat 644-B token row would not be usable by TMA).
//
// Everything below is derived from PAGE_BLOCK_SIZE, D_CONTENT, D_ROPE and the part order; the Python mirror
// (snapmla_ext/layout.py) derives the same numbers from the same four facts, and tests/test_layout.py parses
// this header to check that the two agree.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SNAPMLA_HOST_DEVICE __host__ __device__
#else
#define SNAPMLA_HOST_DEVICE
#endif

namespace snapmla::kv_layout {

inline constexpr int PAGE_BLOCK_SIZE = 64;  // tokens per page
inline constexpr int D_CONTENT = 512;       // latent content dims (d_c = d_v)
inline constexpr int D_ROPE = 64;           // rotary dims (d_r)
inline constexpr int D_QK = D_CONTENT + D_ROPE;

inline constexpr int CONTENT_ELEM_BYTES = 1;  // float8_e4m3fn
inline constexpr int ROPE_ELEM_BYTES = 2;     // bfloat16
inline constexpr int SCALE_ELEM_BYTES = 4;    // float32

inline constexpr int CONTENT_TOKEN_BYTES = D_CONTENT * CONTENT_ELEM_BYTES;  // 512
inline constexpr int ROPE_TOKEN_BYTES = D_ROPE * ROPE_ELEM_BYTES;           // 128
inline constexpr int SCALE_TOKEN_BYTES = SCALE_ELEM_BYTES;                  // 4
inline constexpr int TOKEN_BYTES = CONTENT_TOKEN_BYTES + ROPE_TOKEN_BYTES + SCALE_TOKEN_BYTES;  // 644

inline constexpr int CONTENT_OFFSET = 0;
inline constexpr int ROPE_OFFSET = CONTENT_OFFSET + PAGE_BLOCK_SIZE * CONTENT_TOKEN_BYTES;  // 32768
inline constexpr int SCALE_OFFSET = ROPE_OFFSET + PAGE_BLOCK_SIZE * ROPE_TOKEN_BYTES;       // 40960
inline constexpr int PAGE_BYTES = SCALE_OFFSET + PAGE_BLOCK_SIZE * SCALE_TOKEN_BYTES;       // 41216

// Quantization constants (SPEC sections 2-4). AMAX_FLOOR keeps the scale of an all-zero token positive and
// bounds the pre-scaled RoPE: |r'| <= |r| * 448 / 2^-14 = |r| * 7.3e6, so RoPE up to ~3e11 stays far from the
// fp32 range in the QK accumulator even for a token whose content is all zero.
inline constexpr float FP8_E4M3_MAX = 448.0f;
inline constexpr float AMAX_FLOOR = 6.103515625e-05f;  // 2^-14
// Floor of the per-row, per-block P scale sigma = max(max_j p'_j, P_FLOOR) / 448. It bounds the forward ratio
// sigma_{n-1} / sigma_n that rescales O~ and L~: with FLT_MIN the ratio after a block of tiny p' (logits ~75
// below the running max) reached ~1e35 and overflowed the state. With 2^-60 the ratio stays below
// p'_max / 2^-60 ~ 1.7e20 for content amax <= 2^16 (p' <= 2^16 / 448), so O~ (<= 64 * 448^2 per block) stays far
// below FLT_MAX, while p' < 2^-60 (e < 1e-11 of the row maximum even at the smallest token scale) is dropped.
// A block in which a row sees no token at all leaves that row's state untouched (kernel and reference alike).
inline constexpr float P_FLOOR = 8.673617379884035e-19f;  // 2^-60

static_assert(TOKEN_BYTES == 644, "SPEC section 2: 644 B per token");
static_assert(PAGE_BYTES == PAGE_BLOCK_SIZE * TOKEN_BYTES, "the page holds exactly its tokens");
static_assert(ROPE_OFFSET % 128 == 0 && SCALE_OFFSET % 128 == 0 && PAGE_BYTES % 128 == 0,
              "TMA needs 16-B strides; 128-B alignment keeps Swizzle-128B tiles aligned");

// Byte offset of token `slot` (= page * PAGE_BLOCK_SIZE + offset) within the cache tensor, per part.
SNAPMLA_HOST_DEVICE constexpr int64_t page_of(int64_t slot) { return slot / PAGE_BLOCK_SIZE; }
SNAPMLA_HOST_DEVICE constexpr int64_t offset_in_page(int64_t slot) { return slot % PAGE_BLOCK_SIZE; }
SNAPMLA_HOST_DEVICE constexpr int64_t content_byte(int64_t slot) {
  return page_of(slot) * PAGE_BYTES + CONTENT_OFFSET + offset_in_page(slot) * CONTENT_TOKEN_BYTES;
}
SNAPMLA_HOST_DEVICE constexpr int64_t rope_byte(int64_t slot) {
  return page_of(slot) * PAGE_BYTES + ROPE_OFFSET + offset_in_page(slot) * ROPE_TOKEN_BYTES;
}
SNAPMLA_HOST_DEVICE constexpr int64_t scale_byte(int64_t slot) {
  return page_of(slot) * PAGE_BYTES + SCALE_OFFSET + offset_in_page(slot) * SCALE_TOKEN_BYTES;
}

}  // namespace snapmla::kv_layout
