"""The per-token RoPE-aware FP8 paged KV cache of one layer (docs/numerics_contract.md section 2; byte map in docs/kv_cache_format.md).

The storage is one uint8 tensor `data` of shape (num_blocks, PAGE_BYTES = 41216) holding three parts per page;
content and RoPE are stored as the decode kernels' Swizzle-128B shared-memory image, so `content` and `rope` are
copies (read_part) and write_tokens stores tokens; `scale` is a typed view. `data` (or the cache object itself)
is what flash_mla_with_kvcache takes as `k_cache`. On a CUDA device append/fetch_dequant run the fused kernels;
on the CPU they run snapmla_ext.reference.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from snapmla_ext import layout as L


def _check_cache_tensor(data: torch.Tensor, name: str = "k_cache") -> None:
    if not isinstance(data, torch.Tensor):
        raise TypeError(f"{name} must be a SnapMLAKVCache or a torch.Tensor, got {type(data).__name__}")
    if data.dtype != torch.uint8:
        raise ValueError(f"{name} must have dtype torch.uint8 (the SnapMLA byte map), got {data.dtype}")
    if data.dim() != 2 or data.shape[1] != L.PAGE_BYTES:
        raise ValueError(
            f"{name} must have shape (num_blocks, {L.PAGE_BYTES}) or be a contiguous view with {L.PAGE_BYTES} bytes "
            f"per page, such as (num_blocks, {L.PAGE_BLOCK_SIZE}, {L.TOKEN_BYTES}) or "
            f"(num_blocks, {L.PAGE_BLOCK_SIZE}, 1, {L.TOKEN_BYTES}); got {tuple(data.shape)}"
        )
    if not data.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {data.stride()}")


_byte_maps: dict = {}


def _token_byte_map(part: str, device) -> torch.Tensor:
    """(64, part's bytes per token) int64: where byte k of part `part` of the token at offset t lies in its page
    (layout.py: content and RoPE are the page's Swizzle-128B image), cached per device."""
    key = (part, str(device))
    if key not in _byte_maps:
        if part == "content":
            pos_of, n = L.content_byte_in_page, L.CONTENT_TOKEN_BYTES
        elif part == "rope":
            pos_of, n = L.rope_byte_in_page, L.ROPE_TOKEN_BYTES
        else:
            raise ValueError(f"unknown cache part {part!r}")
        pos = [[pos_of(t, b) for b in range(n)] for t in range(L.PAGE_BLOCK_SIZE)]
        _byte_maps[key] = torch.tensor(pos, dtype=torch.long, device=device)
    return _byte_maps[key]


_PARTS = {"content": (torch.float8_e4m3fn, L.D_CONTENT), "rope": (torch.bfloat16, L.D_ROPE)}


def read_part(data: torch.Tensor, part: str, page: Optional[torch.Tensor] = None,
              offset: Optional[torch.Tensor] = None) -> torch.Tensor:
    """A copy of part "content" or "rope" of every token, (num_blocks, 64, d), or of tokens (page, offset) (n,)
    int64, (n, d): content float8_e4m3fn (d = 512), RoPE bfloat16 (d = 64). Not a view: the page stores these
    parts swizzled; write with write_tokens."""
    dtype, _ = _PARTS[part]
    index = _token_byte_map(part, data.device)
    if page is None:
        raw = data[:, index]  # (num_blocks, 64, bytes)
    else:
        raw = data[page[:, None], index[offset]]  # (n, bytes)
    return raw.contiguous().view(dtype)


def scale_view(data: torch.Tensor) -> torch.Tensor:
    """(num_blocks, 64) float32 view of the per-token scales (a true view: the scales are stored in token order)."""
    part = data[:, L.SCALE_OFFSET : L.PAGE_BYTES]
    return part.view(torch.float32)


def read_tokens(data: torch.Tensor, page: torch.Tensor, offset: torch.Tensor):
    """Raw parts of tokens (page, offset) (n,) int64: c8 (n, 512) e4m3, rope (n, 64) bf16, scale (n,) fp32."""
    content, rope = (read_part(data, part, page, offset) for part in ("content", "rope"))
    return content, rope, scale_view(data)[page, offset]


def write_tokens(data: torch.Tensor, page: torch.Tensor, offset: torch.Tensor, c8: Optional[torch.Tensor] = None,
                 rope: Optional[torch.Tensor] = None, scale: Optional[torch.Tensor] = None) -> None:
    """Store the given parts of tokens (page, offset) (n,) int64: c8 (n, 512) float8_e4m3fn, rope (n, 64)
    bfloat16, scale (n,) float32, at their byte positions (kv_layout.h)."""
    for part, values in (("content", c8), ("rope", rope)):
        if values is None:
            continue
        dtype, d = _PARTS[part]
        raw = values.to(dtype).reshape(-1, d).contiguous().view(torch.uint8)
        data[page[:, None], _token_byte_map(part, data.device)[offset]] = raw
    if scale is not None:
        scale_view(data)[page, offset] = scale.to(torch.float32)


# What an engine needs to size and allocate its cache (one tensor per layer): csrc/kv_layout.h is the source.
CACHE_DTYPE = torch.uint8
TOKEN_BYTES = L.TOKEN_BYTES  # 644: 512 B FP8 content + 128 B BF16 RoPE + 4 B fp32 scale
PAGE_BLOCK_SIZE = L.PAGE_BLOCK_SIZE  # 64 tokens per page (the block_table unit)
PAGE_BYTES = L.PAGE_BYTES  # 41216 = 64 * 644


def allocate_kv_cache(num_blocks: int, device="cuda", page_shape=(PAGE_BYTES,)) -> torch.Tensor:
    """A zeroed (num_blocks, *page_shape) uint8 cache for one layer, accepted as `k_cache` by the decode and the
    KV-write ops. page_shape is the engine's per-page view: (41216,) (default), (64, 644), (64, 1, 644) or
    (1, 41216); its product must be 41216. A (.., 644) row is not a token's bytes (docs/kv_cache_format.md):
    write the cache only with append_kv / append_kv_parts."""
    if not isinstance(num_blocks, int) or num_blocks <= 0:
        raise ValueError(f"num_blocks must be a positive int, got {num_blocks!r}")
    page_shape = tuple(int(d) for d in page_shape)
    if math.prod(page_shape) != PAGE_BYTES or any(d <= 0 for d in page_shape):
        raise ValueError(f"page_shape must have positive dims whose product is {PAGE_BYTES} (bytes per page), "
                         f"got {page_shape}")
    return torch.zeros((num_blocks, *page_shape), dtype=CACHE_DTYPE, device=device)


class SnapMLAKVCache:
    """Paged FP8 latent KV cache for one layer: `num_blocks` pages of 64 tokens, 644 B per token.

    Slots are `page * 64 + offset` (vLLM's slot_mapping). The memory starts as NaN bytes (0xFF is NaN in
    e4m3fn, bf16 and fp32) so that a kernel reading an unwritten slot into a result shows up in tests.
    """

    def __init__(self, num_blocks: int, device="cpu", *, data: Optional[torch.Tensor] = None):
        if data is None:
            if not isinstance(num_blocks, int) or num_blocks <= 0:
                raise ValueError(f"num_blocks must be a positive int, got {num_blocks!r}")
            data = torch.full((num_blocks, L.PAGE_BYTES), 0xFF, dtype=torch.uint8, device=device)
        _check_cache_tensor(data, "data")
        self.data = data

    @classmethod
    def from_tensor(cls, data: torch.Tensor) -> "SnapMLAKVCache":
        """Wrap an existing (num_blocks, 41216) uint8 tensor, e.g. one an inference engine allocated."""
        return cls(data.shape[0] if data.dim() else 0, data=data)

    @staticmethod
    def bytes_for(num_blocks: int) -> int:
        return num_blocks * L.PAGE_BYTES

    @property
    def num_blocks(self) -> int:
        return self.data.shape[0]

    @property
    def num_slots(self) -> int:
        return self.num_blocks * L.PAGE_BLOCK_SIZE

    @property
    def device(self) -> torch.device:
        return self.data.device

    @property
    def content(self) -> torch.Tensor:
        """A copy of every token's content, (num_blocks, 64, 512) float8_e4m3fn (read_part; write_tokens writes)."""
        return read_part(self.data, "content")

    @property
    def rope(self) -> torch.Tensor:
        """A copy of every token's pre-scaled RoPE, (num_blocks, 64, 64) bfloat16."""
        return read_part(self.data, "rope")

    @property
    def scale(self) -> torch.Tensor:
        """The per-token scales, (num_blocks, 64) float32: a view."""
        return scale_view(self.data)

    def poison(self) -> "SnapMLAKVCache":
        """Fill every byte with 0xFF (NaN in all three parts)."""
        self.data.fill_(0xFF)
        return self

    def append(self, kv: torch.Tensor, slots: torch.Tensor) -> None:
        """Quantize BF16 latent rows kv (n, 576) and write them at `slots` (n,) int32/int64; negative slots skip."""
        from snapmla_ext import ops

        ops.append_kv(self.data, kv, slots)

    def fetch_dequant(
        self,
        slots: Optional[torch.Tensor] = None,
        *,
        block_table: Optional[torch.Tensor] = None,
        seqlens: Optional[torch.Tensor] = None,
        num_tokens: Optional[int] = None,
    ) -> torch.Tensor:
        """Gather tokens back to BF16 (n, 576), RoPE rescaled to its original domain. See ops.fetch_dequant."""
        from snapmla_ext import ops

        return ops.fetch_dequant(self.data, slots, block_table=block_table, seqlens=seqlens, num_tokens=num_tokens)

    def __repr__(self) -> str:
        return f"SnapMLAKVCache(num_blocks={self.num_blocks}, device={self.device}, bytes={self.data.numel()})"


def as_cache_tensor(k_cache, name: str = "k_cache") -> torch.Tensor:
    """Accept a SnapMLAKVCache or a uint8 tensor and return the (num_blocks, 41216) tensor, checked.

    Engines allocate a layer's cache in their own shape: any contiguous uint8 tensor whose leading dimension is
    the page count and whose trailing dimensions hold 41216 bytes per page is accepted, e.g. (num_blocks, 41216),
    (num_blocks, 64, 644), (num_blocks, 64, 1, 644) (SGLang's view(-1, 64, 1, 644)) or (num_blocks, 1, 41216)
    (vLLM's unsqueeze(-2)). The bytes inside a page follow the byte map, not per-token rows: write them with
    append_kv, never by slicing a (.., 644) row.
    """
    data = k_cache.data if isinstance(k_cache, SnapMLAKVCache) else k_cache
    if (
        isinstance(data, torch.Tensor)
        and data.dtype == torch.uint8
        and data.dim() > 2
        and data.is_contiguous()
        and math.prod(data.shape[1:]) == L.PAGE_BYTES
    ):
        data = data.view(data.shape[0], L.PAGE_BYTES)
    _check_cache_tensor(data, name)
    return data
