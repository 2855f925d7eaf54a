"""Reference cache operations: Fused-K-Append and Fused-Fetch-Dequant over the paged byte map of docs/numerics_contract.md section 2.

Slots are `page * 64 + offset` (vLLM's slot_mapping). Parts are read and written through the typed views of
snapmla_ext.cache, so this file holds no byte offsets of its own.
"""

from __future__ import annotations

from typing import Optional

import torch

from snapmla_ext import layout as L
from snapmla_ext.cache import as_cache_tensor, read_tokens, write_tokens
from snapmla_ext.reference.quant import quantize_rows

_INDEX_DTYPES = (torch.int32, torch.int64)


def _check_index_tensor(t, name: str, dim: int, dtypes, device: torch.device) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        names = " or ".join(str(d) for d in dtypes)
        raise ValueError(f"{name} must have dtype {names}, got {t.dtype}")
    if t.dim() != dim:
        raise ValueError(f"{name} must be {dim}-D, got shape {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} must be on the cache's device {device}, got {t.device}")


def _check_slot_range(slots: torch.Tensor, num_blocks: int) -> None:
    capacity = num_blocks * L.PAGE_BLOCK_SIZE
    bad = (slots >= capacity).nonzero()
    if bad.numel():
        i = int(bad[0, 0])
        raise ValueError(
            f"slots[{i}] = {int(slots[i])} is out of range: the cache holds {capacity} slots "
            f"({num_blocks} pages x {L.PAGE_BLOCK_SIZE})"
        )


def _split_slots(slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-negative slots (n,) int64 -> (page, offset) index tensors for the (num_blocks, 64, ...) views."""
    return slots // L.PAGE_BLOCK_SIZE, slots % L.PAGE_BLOCK_SIZE


def append_kv(cache_data: torch.Tensor, kv: torch.Tensor, slots: torch.Tensor) -> None:
    """Quantize latent rows (quantize_rows) and write them into the paged cache, in place.

    cache_data: (num_blocks, 41216) uint8 (or a SnapMLAKVCache), modified in place.
    kv:         (n, 576) floating point (bf16 in practice), same device.
    slots:      (n,) int32 or int64, page * 64 + offset. A negative slot skips its row (padding). A slot that
                appears more than once gets the LAST of its rows, as if the rows were written in order.
    n = 0 is a no-op. Raises ValueError for a slot >= num_blocks * 64.
    """
    data = as_cache_tensor(cache_data, "cache_data")
    if not isinstance(kv, torch.Tensor):
        raise TypeError(f"kv must be a torch.Tensor, got {type(kv).__name__}")
    if kv.dim() != 2 or kv.shape[1] != L.D_QK:
        raise ValueError(f"kv must have shape (n, {L.D_QK}), got {tuple(kv.shape)}")
    if not kv.is_floating_point():
        raise ValueError(f"kv must be a floating-point tensor (bf16 expected), got {kv.dtype}")
    if kv.device != data.device:
        raise ValueError(f"kv must be on the cache's device {data.device}, got {kv.device}")
    _check_index_tensor(slots, "slots", 1, _INDEX_DTYPES, data.device)
    if slots.shape[0] != kv.shape[0]:
        raise ValueError(f"slots must have one entry per kv row: kv has {kv.shape[0]} rows, slots has {slots.shape[0]}")
    slots = slots.long()
    _check_slot_range(slots, data.shape[0])

    rows = (slots >= 0).nonzero().flatten()
    if rows.numel() == 0:
        return
    # Keep the last row of each repeated slot: index_put_ leaves the winner of duplicate indices unspecified.
    unique, inverse = torch.unique(slots[rows], return_inverse=True)
    last = torch.full((unique.numel(),), -1, dtype=torch.long, device=data.device)
    last.scatter_reduce_(0, inverse, rows, reduce="amax")

    c8, rope, scale = quantize_rows(kv[last])
    page, offset = _split_slots(unique)
    write_tokens(data, page, offset, c8, rope, scale)


def paged_slots(
    cache_data: torch.Tensor, block_table: torch.Tensor, seqlens: torch.Tensor, seqlens_name: str = "seqlens"
) -> torch.Tensor:
    """Slots of every cached token, request 0's tokens first: (sum(seqlens),) int64.

    block_table: (b, max_pages) int32; only the first ceil(seqlens[i] / 64) entries of row i are read (the rest
                 may hold sentinels). seqlens: (b,) int32, each in [0, max_pages * 64]; errors call it seqlens_name.
    """
    data = as_cache_tensor(cache_data, "cache_data")
    _check_index_tensor(block_table, "block_table", 2, (torch.int32,), data.device)
    _check_index_tensor(seqlens, seqlens_name, 1, (torch.int32,), data.device)
    b, max_pages = block_table.shape
    if seqlens.shape[0] != b:
        raise ValueError(
            f"{seqlens_name} must have one entry per block_table row: block_table has {b} rows, "
            f"{seqlens_name} has {seqlens.shape[0]}"
        )
    lengths = seqlens.long()
    capacity = max_pages * L.PAGE_BLOCK_SIZE
    bad = ((lengths < 0) | (lengths > capacity)).nonzero()
    if bad.numel():
        i = int(bad[0, 0])
        raise ValueError(
            f"{seqlens_name}[{i}] = {int(lengths[i])} is outside [0, {capacity}] (block_table holds {max_pages} pages "
            f"x {L.PAGE_BLOCK_SIZE} tokens per request)"
        )
    req = torch.repeat_interleave(torch.arange(b, device=data.device), lengths)
    starts = torch.cumsum(lengths, 0) - lengths
    token = torch.arange(req.numel(), device=data.device) - starts[req]
    page = block_table[req, token // L.PAGE_BLOCK_SIZE].long()
    bad = ((page < 0) | (page >= data.shape[0])).nonzero()
    if bad.numel():
        k = int(bad[0, 0])
        r, p = int(req[k]), int(token[k]) // L.PAGE_BLOCK_SIZE
        raise ValueError(
            f"block_table[{r}, {p}] = {int(page[k])} is not a page of the cache (num_blocks = {data.shape[0]}), "
            f"but request {r} has seqlen {int(lengths[r])}"
        )
    return page * L.PAGE_BLOCK_SIZE + token % L.PAGE_BLOCK_SIZE


def read_slots(cache_data: torch.Tensor, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Raw parts at non-negative in-range slots (n,) int64: c8 (n, 512) e4m3, rope (n, 64) bf16, scale (n,) fp32."""
    page, offset = _split_slots(slots)
    return read_tokens(as_cache_tensor(cache_data, "cache_data"), page, offset)


def padded_by_request(rows: torch.Tensor, cache_seqlens: torch.Tensor, n_max: int) -> torch.Tensor:
    """Rows of the requests laid end to end, (sum(seqlens), ...) -> (b, n_max, ...), NaN past each seqlen (like the
    unused slots a kernel may load, so that masking is exercised)."""
    b = cache_seqlens.shape[0]
    out = torch.full((b, n_max, *rows.shape[1:]), float("nan"), dtype=rows.dtype, device=rows.device)
    out[torch.arange(n_max, device=rows.device)[None, :] < cache_seqlens.long()[:, None]] = rows
    return out


def dequant_parts(c8: torch.Tensor, rope: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """(n, 576) bf16 from raw parts: float(c8) * s and float(r') * s in fp32, then one rounding to bf16."""
    s = scale.unsqueeze(-1)
    return torch.cat([c8.float() * s, rope.float() * s], dim=-1).to(torch.bfloat16)


def fetch_form_is_paged(slots, block_table, seqlens) -> bool:
    """Which of fetch_dequant's two forms the arguments ask for (shared by the kernel wrapper); raises on a mix."""
    paged = block_table is not None or seqlens is not None
    if (slots is None) == (not paged):
        raise ValueError("fetch_dequant: give either slots, or block_table and seqlens (exactly one of the two forms)")
    if paged and (block_table is None or seqlens is None):
        raise ValueError("fetch_dequant: the paged form needs both block_table and seqlens")
    return paged


def fetch_dequant(
    cache_data: torch.Tensor,
    slots: Optional[torch.Tensor] = None,
    *,
    block_table: Optional[torch.Tensor] = None,
    seqlens: Optional[torch.Tensor] = None,
    num_tokens: Optional[int] = None,
) -> torch.Tensor:
    """Gather cached tokens back to BF16 rows (Fused-Fetch-Dequant reference).

    Exactly one form:
    - slots: (n,) int32/int64 -> n rows in that order; a negative slot gives a row of zeros.
    - block_table (b, max_pages) int32 and seqlens (b,) int32 -> sum(seqlens) rows, request 0's tokens first.
    num_tokens, if given, must equal the number of rows returned (the kernel sizes its output from it).
    Returns (n, 576) bf16: content = float(c8) * s, rope = float(r') * s in fp32, one rounding to bf16.
    """
    data = as_cache_tensor(cache_data, "cache_data")
    if fetch_form_is_paged(slots, block_table, seqlens):
        flat = paged_slots(data, block_table, seqlens)
    else:
        _check_index_tensor(slots, "slots", 1, _INDEX_DTYPES, data.device)
        flat = slots.long()
        _check_slot_range(flat, data.shape[0])
    if num_tokens is not None and num_tokens != flat.numel():
        raise ValueError(f"num_tokens = {num_tokens} does not match the {flat.numel()} rows requested")

    out = torch.zeros(flat.numel(), L.D_QK, dtype=torch.bfloat16, device=data.device)
    rows = (flat >= 0).nonzero().flatten()
    out[rows] = dequant_parts(*read_slots(data, flat[rows]))
    return out
