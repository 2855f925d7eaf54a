// The one definition of the SnapMLA paged KV-cache byte map (docs/numerics_contract.md section 2).
//
// A layer's cache is one uint8 tensor of shape (num_blocks, PAGE_BYTES). Each 64-token page holds three parts,
// each contiguous, in this order:
//
//   [ content: 64 tokens x 512 e4m3   = 32768 B ]  offset 0       4 tiles of 64 rows x 128 B, Swizzle-128B image
//   [ rope:    64 tokens x 64 bf16    =  8192 B ]  offset 32768   1 tile  of 64 rows x 128 B, Swizzle-128B image
//   [ scale:   64 tokens x 1 fp32     =   256 B ]  offset 40960   token stride 4 B   (s = max(amax|c|, floor)/448)
//   page = 41216 B = 64 x 644 B.
//
// The content and RoPE parts are stored as the decode kernels' shared memory holds them: content tile c holds
// bytes 128c .. 128c + 127 of every token (row t = the token's offset in its page), the RoPE tile the token's
// 64 bf16 (pre-scaled by 1/s), and within each 128-B row the 16-B chunk j sits at chunk j ^ (t % 8), the
// Swizzle-128B pattern of TMA and WGMMA for a 1024-B aligned tile. A page is then read by three 1-D bulk copies
// (content, RoPE, scales) instead of six tensor-map tile loads: 4.51 against 4.18-4.25 TB/s of random pages on the
// H200 (tools/microbench/page_stream.cu), 1.06x for the whole decode call at b64 h_q 16 128k
// (docs/kv_cache_format.md). Every 16-B aligned run of 16 bytes of a token's content or RoPE stays contiguous.
//
// Everything below is derived from PAGE_BLOCK_SIZE, D_CONTENT, D_ROPE, the part order and the swizzle; the
// Python mirror (snapmla_ext/layout.py) derives the same numbers and byte positions from the same facts, and
// tests/test_layout.py parses this header to check that the two agree.
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

// Quantization constants (docs/numerics_contract.md sections 2-4). AMAX_FLOOR keeps the scale of an all-zero token positive and
// bounds the pre-scaled RoPE: |r'| <= |r| * 448 / 2^-14 = |r| * 7.3e6, so RoPE up to ~3e11 stays far from the
// fp32 range in the QK accumulator even for a token whose content is all zero.
inline constexpr float FP8_E4M3_MAX = 448.0f;
inline constexpr float AMAX_FLOOR = 6.103515625e-05f;  // 2^-14
// The input range (docs/numerics_contract.md section 2): Fused-K-Append and Fused-Q-Quant saturate content at
// +-CONTENT_MAX (amax is capped at it) and RoPE at +-ROPE_MAX (NaN stays NaN), so every scale the decode kernels
// see is <= 2^16 / 448 ~ 146. That is what keeps every finite input's result finite: the P_FLOOR bound below
// needs p' <= 2^16 / 448; the pre-scaled RoPE stays below 2^32 * 448 / 2^-14 ~ 3.2e16 (bf16), the fp32 QK
// accumulator below 64 * 3.2e16^2 + 512 * 448^2 ~ 6.3e34 (fp32 max 3.4e38) and the logits below ~1e20 nats.
// Real activations are orders of magnitude smaller (the numerics study's RoPE reaches 1e6).
inline constexpr float CONTENT_MAX = 65536.0f;   // 2^16
inline constexpr float ROPE_MAX = 4294967296.0f;  // 2^32
// Floor of the per-row, per-block P scale sigma = max(max_j p'_j, P_FLOOR) / 448. It bounds the forward ratio
// sigma_{n-1} / sigma_n that rescales O~ and L~: with FLT_MIN the ratio after a block of tiny p' (logits ~75
// below the running max) reached ~1e35 and overflowed the state. With 2^-60 the ratio stays below
// p'_max / 2^-60 ~ 1.7e20 for content amax <= CONTENT_MAX (p' <= 2^16 / 448), so O~ (<= 64 * 448^2 per block) stays far
// below FLT_MAX, while p' < 2^-60 (e < 1e-11 of the row maximum even at the smallest token scale) is dropped.
// A block in which a row sees no token at all leaves that row's state untouched (kernel and reference alike).
inline constexpr float P_FLOOR = 8.673617379884035e-19f;  // 2^-60

static_assert(TOKEN_BYTES == 644, "docs/numerics_contract.md section 2: 644 B per token");
static_assert(PAGE_BYTES == PAGE_BLOCK_SIZE * TOKEN_BYTES, "the page holds exactly its tokens");

// The Swizzle-128B image of the content and RoPE parts (see the top of this file).
inline constexpr int SWIZZLE_ROW_BYTES = 128;   // one tile row: 128 B of one token
inline constexpr int SWIZZLE_CHUNK_BYTES = 16;  // the unit the swizzle permutes
inline constexpr int SWIZZLE_ROWS = 8;          // rows per swizzle atom (1024 B)
inline constexpr int TILE_BYTES = PAGE_BLOCK_SIZE * SWIZZLE_ROW_BYTES;          // 8192
inline constexpr int CONTENT_TILES = CONTENT_TOKEN_BYTES / SWIZZLE_ROW_BYTES;   // 4
static_assert(CONTENT_TILES * TILE_BYTES == ROPE_OFFSET - CONTENT_OFFSET && ROPE_TOKEN_BYTES == SWIZZLE_ROW_BYTES,
              "content = 4 tiles, RoPE = 1 tile");
static_assert(CONTENT_OFFSET % 1024 == 0 && ROPE_OFFSET % 1024 == 0 && SCALE_OFFSET % 16 == 0 && PAGE_BYTES % 16 == 0,
              "tiles on their 1024-B swizzle atom within the page; 16-B aligned bulk copies of every part");

// Byte `b` (0 .. 127) of row `row` of a Swizzle-128B tile, from the tile's start.
SNAPMLA_HOST_DEVICE constexpr int swizzled_row_byte(int row, int b) {
  return row * SWIZZLE_ROW_BYTES +
         ((b / SWIZZLE_CHUNK_BYTES) ^ (row % SWIZZLE_ROWS)) * SWIZZLE_CHUNK_BYTES + b % SWIZZLE_CHUNK_BYTES;
}
// Positions within a page of byte `b` of the content (0 .. 511) / RoPE (0 .. 127) of the token at offset `t`,
// and of its scale.
SNAPMLA_HOST_DEVICE constexpr int content_byte_in_page(int t, int b) {
  return CONTENT_OFFSET + (b / SWIZZLE_ROW_BYTES) * TILE_BYTES + swizzled_row_byte(t, b % SWIZZLE_ROW_BYTES);
}
SNAPMLA_HOST_DEVICE constexpr int rope_byte_in_page(int t, int b) { return ROPE_OFFSET + swizzled_row_byte(t, b); }
SNAPMLA_HOST_DEVICE constexpr int scale_byte_in_page(int t) { return SCALE_OFFSET + t * SCALE_TOKEN_BYTES; }

// The same within the cache tensor, for token `slot` (= page * PAGE_BLOCK_SIZE + offset); int64 for caches
// past 2^31 bytes.
SNAPMLA_HOST_DEVICE constexpr int64_t page_of(int64_t slot) { return slot / PAGE_BLOCK_SIZE; }
SNAPMLA_HOST_DEVICE constexpr int offset_in_page(int64_t slot) { return static_cast<int>(slot % PAGE_BLOCK_SIZE); }
SNAPMLA_HOST_DEVICE constexpr int64_t content_byte(int64_t slot, int b) {
  return page_of(slot) * PAGE_BYTES + content_byte_in_page(offset_in_page(slot), b);
}
SNAPMLA_HOST_DEVICE constexpr int64_t rope_byte(int64_t slot, int b) {
  return page_of(slot) * PAGE_BYTES + rope_byte_in_page(offset_in_page(slot), b);
}
SNAPMLA_HOST_DEVICE constexpr int64_t scale_byte(int64_t slot) {
  return page_of(slot) * PAGE_BYTES + scale_byte_in_page(offset_in_page(slot));
}

}  // namespace snapmla::kv_layout
