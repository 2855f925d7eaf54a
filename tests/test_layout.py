"""The byte map has one definition (csrc/kv_layout.h); the Python mirror must derive the same numbers."""

import os
import re

import pytest
import torch

from snapmla_ext import layout as L
from snapmla_ext.cache import SnapMLAKVCache, as_cache_tensor, read_tokens, write_tokens

HEADER = os.path.join(os.path.dirname(__file__), "..", "csrc", "kv_layout.h")
NAMES = [
    "PAGE_BLOCK_SIZE", "D_CONTENT", "D_ROPE", "D_QK", "CONTENT_TOKEN_BYTES", "ROPE_TOKEN_BYTES",
    "SCALE_TOKEN_BYTES", "TOKEN_BYTES", "CONTENT_OFFSET", "ROPE_OFFSET", "SCALE_OFFSET", "PAGE_BYTES",
    "SWIZZLE_ROW_BYTES", "SWIZZLE_CHUNK_BYTES", "SWIZZLE_ROWS", "TILE_BYTES", "CONTENT_TILES",
]


def _header_constants():
    """Evaluate the header's `inline constexpr int NAME = expr;` lines in order (they only use earlier names)."""
    text = open(HEADER).read()
    values = {}
    for ctype, name, expr in re.findall(r"inline constexpr (int|float) (\w+) = ([^;]+);", text):
        expr = re.sub(r"//.*", "", expr).strip()
        if ctype == "int":
            values[name] = eval(expr, {}, dict(values))
        else:
            values[name] = float(expr.rstrip("f"))
    return values


def test_header_and_python_mirror_agree():
    header = _header_constants()
    for name in NAMES:
        assert header[name] == getattr(L, name), name
    assert header["FP8_E4M3_MAX"] == L.FP8_E4M3_MAX
    assert header["AMAX_FLOOR"] == L.AMAX_FLOOR
    assert header["CONTENT_MAX"] == L.CONTENT_MAX
    assert header["ROPE_MAX"] == L.ROPE_MAX
    assert header["P_FLOOR"] == L.P_FLOOR


def test_compiled_extension_agrees(requires_ext):
    for name in ["PAGE_BLOCK_SIZE", "D_CONTENT", "D_ROPE", "TOKEN_BYTES", "ROPE_OFFSET", "SCALE_OFFSET", "PAGE_BYTES"]:
        assert requires_ext.layout_constant(name) == getattr(L, name), name
    with pytest.raises(RuntimeError, match="layout_constant: unknown name 'NOPE'"):
        requires_ext.layout_constant("NOPE")


def test_compiled_byte_map_agrees(requires_ext):
    """The swizzled byte positions of every token, from kv_layout.h's functions in the build and layout.py's."""
    for t in range(L.PAGE_BLOCK_SIZE):
        want = ([L.content_byte_in_page(t, b) for b in range(L.CONTENT_TOKEN_BYTES)]
                + [L.rope_byte_in_page(t, b) for b in range(L.ROPE_TOKEN_BYTES)]
                + [L.scale_byte_in_page(t) + b for b in range(L.SCALE_TOKEN_BYTES)])
        assert requires_ext.layout_token_bytes(t) == want, t
    with pytest.raises(RuntimeError, match=r"layout_token_bytes: t must be in \[0, 64\), got 64"):
        requires_ext.layout_token_bytes(64)


def test_budget_and_alignment_of_the_header():
    header = _header_constants()
    assert header["TOKEN_BYTES"] == 644 and header["PAGE_BYTES"] == 41216  # docs/numerics_contract.md section 2
    assert 2 * header["D_QK"] / header["TOKEN_BYTES"] == pytest.approx(1.789, abs=1e-3)  # 1.79x fewer than BF16
    for name in ("ROPE_OFFSET", "SCALE_OFFSET", "PAGE_BYTES"):
        assert header[name] % 128 == 0, name  # TMA strides (16 B) and Swizzle-128B tile alignment


def test_write_tokens_lands_on_the_swizzled_byte_map():
    cache = SnapMLAKVCache(3)
    page, off = 2, 37  # row 37: swizzle row 37 % 8 = 5
    cache.data.zero_()
    c8 = torch.zeros(1, L.D_CONTENT)
    c8[0, 133] = 1.0  # e4m3 1.0 = 0x38; content byte 133: tile 1, chunk 0 -> stored at chunk 0 ^ 5, byte 5
    rope = torch.zeros(1, L.D_ROPE)
    rope[0, 3] = 2.0  # bf16 2.0 = 0x4000 at RoPE bytes 6, 7: chunk 0 -> chunk 5
    idx = torch.tensor([page]), torch.tensor([off])
    write_tokens(cache.data, *idx, c8=c8, rope=rope, scale=torch.tensor([1.0]))  # fp32 1.0 = 0x3f800000
    row = cache.data[page]
    assert row[L.CONTENT_OFFSET + 1 * 8192 + off * 128 + (0 ^ 5) * 16 + 5].item() == 0x38
    rope_at = L.ROPE_OFFSET + off * 128 + (0 ^ 5) * 16 + 6
    assert row[rope_at : rope_at + 2].tolist() == [0x00, 0x40]
    scale_at = L.SCALE_OFFSET + off * L.SCALE_TOKEN_BYTES
    assert row[scale_at : scale_at + 4].tolist() == [0x00, 0x00, 0x80, 0x3F]
    assert int((cache.data != 0).sum()) == 1 + 1 + 2  # nothing else was touched
    assert cache.content[page, off, 133].float() == 1.0 and cache.rope[page, off, 3].float() == 2.0
    got = read_tokens(cache.data, *idx)
    assert got[0][0, 133].float() == 1.0 and got[1][0, 3].float() == 2.0 and got[2][0] == 1.0


def test_byte_map_is_a_permutation_of_each_page():
    """Every byte of a page belongs to exactly one (token, part, byte); 16-B runs of content / RoPE stay
    contiguous and 16-B aligned (the quant kernels' loads and stores), as csrc/kv_layout.h states."""
    seen = torch.zeros(L.PAGE_BYTES, dtype=torch.int32)
    for t in range(L.PAGE_BLOCK_SIZE):
        for part, n, pos in (("content", L.CONTENT_TOKEN_BYTES, L.content_byte_in_page),
                             ("rope", L.ROPE_TOKEN_BYTES, L.rope_byte_in_page)):
            at = [pos(t, b) for b in range(n)]
            for b in range(0, n, 16):
                assert at[b] % 16 == 0 and at[b : b + 16] == list(range(at[b], at[b] + 16)), (part, t, b)
            seen[at] += 1
        seen[L.scale_byte_in_page(t) : L.scale_byte_in_page(t) + 4] += 1
    assert (seen == 1).all()


def test_new_cache_is_nan_poisoned():
    cache = SnapMLAKVCache(2)
    assert torch.isnan(cache.content.float()).all()
    assert torch.isnan(cache.rope.float()).all()
    assert torch.isnan(cache.scale).all()
    assert cache.num_slots == 128 and SnapMLAKVCache.bytes_for(2) == cache.data.numel()


@pytest.mark.parametrize(
    "bad, message",
    [
        (torch.zeros(2, L.PAGE_BYTES, dtype=torch.int8), "k_cache must have dtype torch.uint8"),
        (torch.zeros(2, 644, dtype=torch.uint8), r"k_cache must have shape \(num_blocks, 41216\) or be a contiguous view .*; got \(2, 644\)"),
        (torch.zeros(2, 2 * L.PAGE_BYTES, dtype=torch.uint8)[:, ::2], "k_cache must be contiguous"),
        ([1, 2], "k_cache must be a SnapMLAKVCache or a torch.Tensor, got list"),
    ],
)
def test_cache_tensor_checks(bad, message):
    with pytest.raises((ValueError, TypeError), match=message):
        as_cache_tensor(bad)


def test_num_blocks_check():
    with pytest.raises(ValueError, match="num_blocks must be a positive int, got 0"):
        SnapMLAKVCache(0)


def test_decode_constants_match_the_kernel_headers():
    """Python's copies of the decode tile height and the metadata row width (snapmla_ext.decode_ops)."""
    from snapmla_ext import decode_ops

    root = os.path.join(os.path.dirname(__file__), "..", "csrc", "kernels")
    launch = open(os.path.join(root, "sm90", "decode_fp8", "launch.h")).read()
    sched = open(os.path.join(root, "sched", "sched_meta.h")).read()
    assert re.search(r"BLOCK_M = (\d+);", launch).group(1) == str(decode_ops.BLOCK_M)
    assert re.search(r"SCHED_META_INTS = (\d+),", sched).group(1) == str(decode_ops.SCHED_META_INTS)
    overhead = re.search(r"PIECE_OVERHEAD_BLOCKS = (\d+);", sched).group(1)
    assert overhead == "5"  # tests/test_sched.py's OVERHEAD mirrors it


@pytest.mark.parametrize("page_shape", [(L.PAGE_BYTES,), (64, 644), (64, 1, 644), (1, L.PAGE_BYTES)])
def test_allocate_kv_cache_views_are_accepted(page_shape):
    """The engine-facing allocation: every documented page view is a cache the ops accept (as_cache_tensor)."""
    from snapmla_ext.cache import CACHE_DTYPE, PAGE_BYTES, TOKEN_BYTES, allocate_kv_cache, as_cache_tensor

    assert (TOKEN_BYTES, PAGE_BYTES, CACHE_DTYPE) == (644, 64 * 644, torch.uint8)
    cache = allocate_kv_cache(3, "cpu", page_shape)
    assert cache.shape == (3, *page_shape) and cache.dtype == torch.uint8 and not cache.any()
    assert as_cache_tensor(cache).shape == (3, PAGE_BYTES)


@pytest.mark.parametrize("num_blocks,page_shape,match", [(0, (41216,), "num_blocks must be a positive int, got 0"),
                                                         (2, (64, 643), r"product is 41216 \(bytes per page\), got \(64, 643\)")])
def test_allocate_kv_cache_rejects(num_blocks, page_shape, match):
    from snapmla_ext.cache import allocate_kv_cache

    with pytest.raises(ValueError, match=match):
        allocate_kv_cache(num_blocks, "cpu", page_shape)
