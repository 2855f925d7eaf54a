"""Deterministic test data, identical on CPU and CUDA: everything is drawn on the CPU from a seeded generator
and then moved to `device`, so a GPU test and its CPU reference see the same bits.

Defaults follow FlashMLA's tests: values ~ N(0, 0.1^2) clipped to +-1, in bf16.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch

from snapmla_ext import layout as L
from snapmla_ext.cache import SnapMLAKVCache
from snapmla_ext.reference import append_kv

SENTINEL_PAGE = 2147480000  # a block id far outside any cache, as FlashMLA's tests put past a request's pages


def _normal(shape, std: float, gen: torch.Generator, clip: Optional[float]) -> torch.Tensor:
    x = torch.randn(shape, generator=gen, dtype=torch.float32) * std
    return x.clamp(-clip, clip) if clip is not None else x


def make_q(b: int, s_q: int, h_q: int, *, seed: int, device="cpu", std: float = 0.1, clip: Optional[float] = 1.0):
    """Query (b, s_q, h_q, 576) bf16 ~ N(0, std^2), clipped to +-clip (None: no clip)."""
    gen = torch.Generator().manual_seed(seed)
    return _normal((b, s_q, h_q, L.D_QK), std, gen, clip).to(torch.bfloat16).to(device)


def make_kv_rows(
    n: int,
    *,
    seed: int,
    device="cpu",
    content_std: float = 0.1,
    rope_std: float = 0.1,
    clip: Optional[float] = 1.0,
) -> torch.Tensor:
    """Latent rows (n, 576) bf16: content ~ N(0, content_std^2), RoPE ~ N(0, rope_std^2), clipped to +-clip."""
    gen = torch.Generator().manual_seed(seed)
    content = _normal((n, L.D_CONTENT), content_std, gen, clip)
    rope = _normal((n, L.D_ROPE), rope_std, gen, clip)
    return torch.cat([content, rope], dim=1).to(torch.bfloat16).to(device)


@dataclass
class PagedInputs:
    """One decode problem over a paged SnapMLA cache.

    q:             (b, s_q, h_q, 576) bf16
    kv:            (b, s_k_max, 576) bf16 raw latent rows; rows past a request's seqlen are NaN (never valid data)
    cache:         SnapMLAKVCache holding request i's first seqlens[i] rows; every other slot keeps its NaN bytes
    block_table:   (b, max_pages) int32, pages in random order, SENTINEL past each request's pages (max_pages is
                   one more than the longest request needs, so every row has at least one sentinel)
    cache_seqlens: (b,) int32
    slots:         (b, s_k_max) int64, the slot of each kv row, -1 past seqlen
    """

    q: torch.Tensor
    kv: torch.Tensor
    cache: SnapMLAKVCache
    block_table: torch.Tensor
    cache_seqlens: torch.Tensor
    slots: torch.Tensor

    @property
    def seqlens(self) -> list[int]:
        return self.cache_seqlens.tolist()


def make_paged_inputs(
    b: int,
    s_q: int,
    h_q: int,
    seqlens: Sequence[int],
    *,
    seed: int,
    device="cpu",
    num_spare_blocks: int = 3,
    sentinel: int = SENTINEL_PAGE,
    q_std: float = 0.1,
    content_std: float = 0.1,
    rope_std: float = 0.1,
    clip: Optional[float] = 1.0,
    append: Optional[Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]] = None,
) -> PagedInputs:
    """Build q, raw kv rows and a poisoned paged cache filled through `append(cache.data, kv_rows, slots)`.

    `append` defaults to snapmla_ext.reference.append_kv; GPU tests pass the kernel. All rows of all requests are
    appended in one call (the padding rows past each seqlen go in with slot -1, so the skip path is exercised).
    num_spare_blocks pages are never used and stay NaN.
    """
    if len(seqlens) != b:
        raise ValueError(f"seqlens must have b = {b} entries, got {len(seqlens)}")
    gen = torch.Generator().manual_seed(seed)
    q = _normal((b, s_q, h_q, L.D_QK), q_std, gen, clip).to(torch.bfloat16)
    s_k_max = max(seqlens, default=0)
    content = _normal((b, s_k_max, L.D_CONTENT), content_std, gen, clip)
    rope = _normal((b, s_k_max, L.D_ROPE), rope_std, gen, clip)
    kv = torch.cat([content, rope], dim=-1).to(torch.bfloat16)
    lengths = torch.tensor(list(seqlens), dtype=torch.int64)
    valid = torch.arange(s_k_max)[None, :] < lengths[:, None]
    kv[~valid] = float("nan")

    pages_per_req = [math.ceil(n / L.PAGE_BLOCK_SIZE) for n in seqlens]
    total_pages = sum(pages_per_req)
    num_blocks = total_pages + num_spare_blocks
    order = torch.randperm(num_blocks, generator=gen)[:total_pages]
    max_pages = max(pages_per_req, default=0) + 1
    block_table = torch.full((b, max_pages), sentinel, dtype=torch.int32)
    start = 0
    for i, n in enumerate(pages_per_req):
        block_table[i, :n] = order[start : start + n].to(torch.int32)
        start += n

    token = torch.arange(s_k_max)
    # Past a request's seqlen this reads sentinel entries; those slots are replaced by -1 just below.
    slots = block_table[:, token // L.PAGE_BLOCK_SIZE].long() * L.PAGE_BLOCK_SIZE + token % L.PAGE_BLOCK_SIZE
    slots = torch.where(valid, slots, torch.full_like(slots, -1))

    q, kv, block_table, slots = (t.to(device) for t in (q, kv, block_table, slots))
    cache = SnapMLAKVCache(max(num_blocks, 1), device=device)
    (append or append_kv)(cache.data, kv.reshape(-1, L.D_QK), slots.reshape(-1))
    return PagedInputs(
        q=q,
        kv=kv,
        cache=cache,
        block_table=block_table,
        cache_seqlens=lengths.to(torch.int32).to(device),
        slots=slots,
    )
