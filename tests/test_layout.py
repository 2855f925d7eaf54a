"""The byte map has one definition (csrc/kv_layout.h); the Python mirror must derive the same numbers."""

import os
import re

import pytest
import torch

from snapmla_ext import layout as L
from snapmla_ext.cache import SnapMLAKVCache, as_cache_tensor

HEADER = os.path.join(os.path.dirname(__file__), "..", "csrc", "kv_layout.h")
NAMES = [
    "PAGE_BLOCK_SIZE", "D_CONTENT", "D_ROPE", "D_QK", "CONTENT_TOKEN_BYTES", "ROPE_TOKEN_BYTES",
    "SCALE_TOKEN_BYTES", "TOKEN_BYTES", "CONTENT_OFFSET", "ROPE_OFFSET", "SCALE_OFFSET", "PAGE_BYTES",
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
    assert header["P_FLOOR"] == L.P_FLOOR


def test_compiled_extension_agrees(requires_ext):
    for name in ["PAGE_BLOCK_SIZE", "D_CONTENT", "D_ROPE", "TOKEN_BYTES", "ROPE_OFFSET", "SCALE_OFFSET", "PAGE_BYTES"]:
        assert requires_ext.layout_constant(name) == getattr(L, name), name
    with pytest.raises(RuntimeError, match="layout_constant: unknown name 'NOPE'"):
        requires_ext.layout_constant("NOPE")


def test_budget_and_alignment_of_the_header():
    header = _header_constants()
    assert header["TOKEN_BYTES"] == 644 and header["PAGE_BYTES"] == 41216  # SPEC section 2
    assert 2 * header["D_QK"] / header["TOKEN_BYTES"] == pytest.approx(1.789, abs=1e-3)  # 1.79x fewer than BF16
    for name in ("ROPE_OFFSET", "SCALE_OFFSET", "PAGE_BYTES"):
        assert header[name] % 128 == 0, name  # TMA strides (16 B) and Swizzle-128B tile alignment


def test_typed_views_alias_the_byte_map():
    cache = SnapMLAKVCache(3)
    page, off = 2, 37
    cache.data.zero_()
    cache.content[page, off, 5] = 1.0  # e4m3 1.0 = 0x38
    cache.rope[page, off, 3] = 2.0  # bf16 2.0 = 0x4000
    cache.scale[page, off] = 1.0  # fp32 1.0 = 0x3f800000
    row = cache.data[page]
    assert row[L.CONTENT_OFFSET + off * L.CONTENT_TOKEN_BYTES + 5].item() == 0x38
    rope_at = L.ROPE_OFFSET + off * L.ROPE_TOKEN_BYTES + 3 * 2
    assert row[rope_at : rope_at + 2].tolist() == [0x00, 0x40]
    scale_at = L.SCALE_OFFSET + off * L.SCALE_TOKEN_BYTES
    assert row[scale_at : scale_at + 4].tolist() == [0x00, 0x00, 0x80, 0x3F]
    assert int((cache.data != 0).sum()) == 1 + 1 + 2  # nothing else was touched


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
        (torch.zeros(2, 644, dtype=torch.uint8), r"k_cache must have shape \(num_blocks, 41216\), got \(2, 644\)"),
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
