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
P_FLOOR = 2.0**-60  # floor of the per-row, per-block P scale; see kv_layout.h for why 2^-60

BF16_TOKEN_BYTES = D_QK * 2  # 1152: what FlashMLA's BF16 cache spends per token

assert TOKEN_BYTES == 644
assert PAGE_BYTES == PAGE_BLOCK_SIZE * TOKEN_BYTES
assert ROPE_OFFSET % 128 == 0 and SCALE_OFFSET % 128 == 0 and PAGE_BYTES % 128 == 0
