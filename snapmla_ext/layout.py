"""Python mirror of csrc/kv_layout.h: the SnapMLA paged KV-cache byte map.

Every number is derived from the same four facts as the C++ header (page size, content dims, RoPE dims and the
part order content | rope | scale); tests/test_layout.py parses the header and checks that both agree.
See docs/kv_cache_format.md for the picture.
"""

PAGE_BLOCK_SIZE = 64  # tokens per page
D_CONTENT = 512  # latent content dims (= d_v)
D_ROPE = 64  # rotary dims
D_QK = D_CONTENT + D_ROPE  # 576

CONTENT_ELEM_BYTES = 1  # float8_e4m3fn
ROPE_ELEM_BYTES = 2  # bfloat16
SCALE_ELEM_BYTES = 4  # float32

CONTENT_TOKEN_BYTES = D_CONTENT * CONTENT_ELEM_BYTES  # 512
ROPE_TOKEN_BYTES = D_ROPE * ROPE_ELEM_BYTES  # 128
SCALE_TOKEN_BYTES = SCALE_ELEM_BYTES  # 4
TOKEN_BYTES = CONTENT_TOKEN_BYTES + ROPE_TOKEN_BYTES + SCALE_TOKEN_BYTES  # 644

CONTENT_OFFSET = 0
ROPE_OFFSET = CONTENT_OFFSET + PAGE_BLOCK_SIZE * CONTENT_TOKEN_BYTES  # 32768
SCALE_OFFSET = ROPE_OFFSET + PAGE_BLOCK_SIZE * ROPE_TOKEN_BYTES  # 40960
PAGE_BYTES = SCALE_OFFSET + PAGE_BLOCK_SIZE * SCALE_TOKEN_BYTES  # 41216

FP8_E4M3_MAX = 448.0
AMAX_FLOOR = 2.0**-14  # keeps an all-zero token's scale positive; see kv_layout.h
CONTENT_MAX = 2.0**16  # content saturates at +-CONTENT_MAX when quantized (amax capped); see kv_layout.h
ROPE_MAX = 2.0**32  # RoPE saturates at +-ROPE_MAX when quantized; see kv_layout.h
P_FLOOR = 2.0**-60  # floor of the per-row, per-block P scale; see kv_layout.h for why 2^-60

BF16_TOKEN_BYTES = D_QK * 2  # 1152: what FlashMLA's BF16 cache spends per token

# The Swizzle-128B image of the content and RoPE parts (kv_layout.h): content tile c holds bytes 128c .. 128c + 127
# of every token (row t = offset in the page), the RoPE tile the token's 128 B; within a row the 16-B chunk j sits
# at chunk j ^ (t % 8). The decode kernels bulk-copy a page into shared memory as it is.
SWIZZLE_ROW_BYTES = 128
SWIZZLE_CHUNK_BYTES = 16
SWIZZLE_ROWS = 8
TILE_BYTES = PAGE_BLOCK_SIZE * SWIZZLE_ROW_BYTES  # 8192
CONTENT_TILES = CONTENT_TOKEN_BYTES // SWIZZLE_ROW_BYTES  # 4

assert TOKEN_BYTES == 644
assert PAGE_BYTES == PAGE_BLOCK_SIZE * TOKEN_BYTES
assert CONTENT_TILES * TILE_BYTES == ROPE_OFFSET - CONTENT_OFFSET and ROPE_TOKEN_BYTES == SWIZZLE_ROW_BYTES
assert CONTENT_OFFSET % 1024 == 0 and ROPE_OFFSET % 1024 == 0 and SCALE_OFFSET % 16 == 0 and PAGE_BYTES % 16 == 0


def swizzled_row_byte(row: int, b: int) -> int:
    """Byte b (0..127) of row `row` of a Swizzle-128B tile, from the tile's start."""
    chunk = (b // SWIZZLE_CHUNK_BYTES) ^ (row % SWIZZLE_ROWS)
    return row * SWIZZLE_ROW_BYTES + chunk * SWIZZLE_CHUNK_BYTES + b % SWIZZLE_CHUNK_BYTES


def content_byte_in_page(t: int, b: int) -> int:
    """Position within a page of content byte b (0..511) of the token at offset t."""
    return CONTENT_OFFSET + (b // SWIZZLE_ROW_BYTES) * TILE_BYTES + swizzled_row_byte(t, b % SWIZZLE_ROW_BYTES)


def rope_byte_in_page(t: int, b: int) -> int:
    """Position within a page of RoPE byte b (0..127) of the token at offset t."""
    return ROPE_OFFSET + swizzled_row_byte(t, b)


def scale_byte_in_page(t: int) -> int:
    return SCALE_OFFSET + t * SCALE_TOKEN_BYTES
