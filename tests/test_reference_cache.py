"""snapmla_ext.reference append_kv / fetch_dequant over the paged byte map (docs/numerics_contract.md section 2)."""

import pytest
import torch

from snapmla_ext import layout as L
from snapmla_ext.cache import SnapMLAKVCache
from snapmla_ext.reference import append_kv, fetch_dequant, quantize_rows
from utils.compare import assert_bitwise_equal
from utils.data import SENTINEL_PAGE, make_kv_rows, make_paged_inputs


def _expected_bytes(num_blocks: int, kv: torch.Tensor, slots: list[int]) -> torch.Tensor:
    """The cache bytes after writing rows kv at slots, built byte by byte from layout.py's positions (not from
    cache.py's write_tokens)."""
    data = torch.full((num_blocks * L.PAGE_BYTES,), 0xFF, dtype=torch.uint8)
    c8, rope, scale = quantize_rows(kv)
    for i, slot in enumerate(slots):
        page, off = divmod(slot, L.PAGE_BLOCK_SIZE)
        base = page * L.PAGE_BYTES
        for pos, part in (
            (L.content_byte_in_page, c8[i]),
            (L.rope_byte_in_page, rope[i]),
            (lambda t, b: L.scale_byte_in_page(t) + b, scale[i : i + 1]),
        ):
            for b, byte in enumerate(part.contiguous().view(torch.uint8).tolist()):
                data[base + pos(off, b)] = byte
    return data.view(num_blocks, L.PAGE_BYTES)


def _dequant(kv: torch.Tensor) -> torch.Tensor:
    c8, rope, scale = quantize_rows(kv)
    s = scale[:, None]
    return torch.cat([c8.float() * s, rope.float() * s], dim=-1).to(torch.bfloat16)


def test_append_writes_exactly_the_byte_map_and_keeps_nan_elsewhere():
    cache = SnapMLAKVCache(3)
    kv = make_kv_rows(7, seed=10)
    slots = [0, 63, 64, 130, 191, 5, 100]
    append_kv(cache.data, kv, torch.tensor(slots, dtype=torch.int32))
    assert_bitwise_equal(cache.data, _expected_bytes(3, kv, slots), "cache bytes", nan_equal=False)


def test_fetch_by_slots_round_trip():
    cache = SnapMLAKVCache(4)
    kv = make_kv_rows(77, seed=11)
    slots = torch.randperm(4 * 64, generator=torch.Generator().manual_seed(11))[:77]
    append_kv(cache, kv, slots)
    got = fetch_dequant(cache, slots)
    assert got.dtype == torch.bfloat16 and got.shape == (77, 576)
    assert_bitwise_equal(got, _dequant(kv), "fetched rows")
    err = ((got.float() - kv.float()).norm() / kv.float().norm()).item()
    assert err < 0.03, f"round-trip rel L2 {err:.3e}"  # e4m3 content: ~2.5e-2 on gaussian rows


def test_fetch_paged_form_equals_slot_form():
    p = make_paged_inputs(3, 1, 1, [70, 0, 129], seed=12)
    got = fetch_dequant(p.cache.data, block_table=p.block_table, seqlens=p.cache_seqlens, num_tokens=199)
    want = torch.cat([p.kv[i, :n] for i, n in enumerate(p.seqlens)])
    assert_bitwise_equal(got, _dequant(want), "paged fetch")
    slots = torch.cat([p.slots[i, :n] for i, n in enumerate(p.seqlens)])
    assert_bitwise_equal(fetch_dequant(p.cache.data, slots), got, "slot fetch")


def test_negative_slots_skip_on_append_and_give_zero_rows_on_fetch():
    cache = SnapMLAKVCache(2)
    kv = make_kv_rows(5, seed=13)
    slots = torch.tensor([3, -1, 70, -5, 0])
    append_kv(cache.data, kv, slots)
    assert_bitwise_equal(cache.data, _expected_bytes(2, kv[[0, 2, 4]], [3, 70, 0]), "cache bytes", nan_equal=False)
    got = fetch_dequant(cache.data, slots)
    assert (got[[1, 3]].float() == 0).all()
    assert_bitwise_equal(got[[0, 2, 4]], _dequant(kv[[0, 2, 4]]), "fetched rows")


def test_repeated_slot_keeps_the_last_row():
    cache = SnapMLAKVCache(1)
    kv = make_kv_rows(5, seed=14)
    append_kv(cache.data, kv, torch.tensor([9, 2, 9, 9, 2]))
    assert_bitwise_equal(cache.data, _expected_bytes(1, kv[[3, 4]], [9, 2]), "cache bytes", nan_equal=False)


def test_empty_append_and_fetch():
    cache = SnapMLAKVCache(1)
    append_kv(cache.data, torch.zeros(0, 576, dtype=torch.bfloat16), torch.zeros(0, dtype=torch.int64))
    assert (cache.data == 0xFF).all()
    assert fetch_dequant(cache.data, torch.zeros(0, dtype=torch.int32)).shape == (0, 576)


def test_paged_fetch_never_reads_sentinel_pages():
    p = make_paged_inputs(2, 1, 1, [64, 1], seed=15)
    assert (p.block_table[:, -1] == SENTINEL_PAGE).all()
    assert fetch_dequant(p.cache.data, block_table=p.block_table, seqlens=p.cache_seqlens).isfinite().all()


# ---- one test per error message ----


def test_append_rejects_out_of_range_slot():
    msg = r"slots\[1\] = 128 is out of range: the cache holds 128 slots \(2 pages x 64\)"
    with pytest.raises(ValueError, match=msg):
        append_kv(SnapMLAKVCache(2).data, make_kv_rows(2, seed=0), torch.tensor([0, 128]))


def test_append_rejects_kv_shape():
    with pytest.raises(ValueError, match=r"kv must have shape \(n, 576\)"):
        append_kv(SnapMLAKVCache(1).data, torch.zeros(2, 512, dtype=torch.bfloat16), torch.tensor([0, 1]))


def test_append_rejects_integer_kv():
    with pytest.raises(ValueError, match=r"kv must be a floating-point tensor"):
        append_kv(SnapMLAKVCache(1).data, torch.zeros(2, 576, dtype=torch.int16), torch.tensor([0, 1]))


def test_append_rejects_slot_count():
    with pytest.raises(ValueError, match=r"slots must have one entry per kv row: kv has 2 rows, slots has 3"):
        append_kv(SnapMLAKVCache(1).data, make_kv_rows(2, seed=0), torch.tensor([0, 1, 2]))


def test_append_rejects_slot_dtype():
    with pytest.raises(ValueError, match=r"slots must have dtype torch.int32 or torch.int64, got torch.float32"):
        append_kv(SnapMLAKVCache(1).data, make_kv_rows(2, seed=0), torch.tensor([0.0, 1.0]))


def test_append_rejects_slot_rank():
    with pytest.raises(ValueError, match=r"slots must be 1-D, got shape \(2, 1\)"):
        append_kv(SnapMLAKVCache(1).data, make_kv_rows(2, seed=0), torch.tensor([[0], [1]]))


def test_append_rejects_cache_dtype():
    with pytest.raises(ValueError, match=r"cache_data must have dtype torch.uint8"):
        append_kv(torch.zeros(1, L.PAGE_BYTES), make_kv_rows(1, seed=0), torch.tensor([0]))


def test_fetch_rejects_both_forms():
    p = make_paged_inputs(1, 1, 1, [3], seed=0)
    with pytest.raises(ValueError, match=r"give either slots, or block_table and seqlens"):
        fetch_dequant(p.cache.data, torch.tensor([0]), block_table=p.block_table, seqlens=p.cache_seqlens)


def test_fetch_rejects_neither_form():
    with pytest.raises(ValueError, match=r"give either slots, or block_table and seqlens"):
        fetch_dequant(SnapMLAKVCache(1).data)


def test_fetch_rejects_half_of_the_paged_form():
    p = make_paged_inputs(1, 1, 1, [3], seed=0)
    with pytest.raises(ValueError, match=r"the paged form needs both block_table and seqlens"):
        fetch_dequant(p.cache.data, block_table=p.block_table)


def test_fetch_rejects_out_of_range_slot():
    with pytest.raises(ValueError, match=r"slots\[0\] = 64 is out of range"):
        fetch_dequant(SnapMLAKVCache(1).data, torch.tensor([64]))


def test_fetch_rejects_block_table_dtype():
    with pytest.raises(ValueError, match=r"block_table must have dtype torch.int32, got torch.int64"):
        fetch_dequant(SnapMLAKVCache(1).data, block_table=torch.zeros(1, 1, dtype=torch.int64),
                      seqlens=torch.tensor([1], dtype=torch.int32))


def test_fetch_rejects_seqlens_count():
    msg = r"seqlens must have one entry per block_table row: block_table has 2 rows, seqlens has 1"
    with pytest.raises(ValueError, match=msg):
        fetch_dequant(SnapMLAKVCache(1).data, block_table=torch.zeros(2, 1, dtype=torch.int32),
                      seqlens=torch.tensor([1], dtype=torch.int32))


def test_fetch_rejects_seqlen_past_block_table_capacity():
    with pytest.raises(ValueError, match=r"seqlens\[0\] = 129 is outside \[0, 128\] \(block_table holds 2 pages"):
        fetch_dequant(SnapMLAKVCache(2).data, block_table=torch.zeros(1, 2, dtype=torch.int32),
                      seqlens=torch.tensor([129], dtype=torch.int32))


def test_fetch_rejects_bad_page_within_seqlen():
    table = torch.tensor([[0, SENTINEL_PAGE]], dtype=torch.int32)
    msg = r"block_table\[0, 1\] = 2147480000 is not a page of the cache \(num_blocks = 1\)"
    with pytest.raises(ValueError, match=msg):
        fetch_dequant(SnapMLAKVCache(1).data, block_table=table, seqlens=torch.tensor([65], dtype=torch.int32))


def test_fetch_rejects_num_tokens_mismatch():
    p = make_paged_inputs(2, 1, 1, [3, 4], seed=0)
    with pytest.raises(ValueError, match=r"num_tokens = 8 does not match the 7 rows requested"):
        fetch_dequant(p.cache.data, block_table=p.block_table, seqlens=p.cache_seqlens, num_tokens=8)


def test_append_rejects_kv_on_another_device():
    with pytest.raises(ValueError, match=r"kv must be on the cache's device cpu, got meta"):
        append_kv(SnapMLAKVCache(1).data, torch.zeros(1, 576, dtype=torch.bfloat16, device="meta"), torch.tensor([0]))
