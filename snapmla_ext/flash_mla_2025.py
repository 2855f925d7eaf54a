"""Drop-in for the 2025 generation of FlashMLA's Python API (`import snapmla_ext.flash_mla_2025 as flash_mla`).

In this generation `get_mla_metadata(cache_seqlens, num_q_tokens_per_head_k, num_heads_k, ...)` returns the
tensor pair `(tile_scheduler_metadata (num_sm_parts, 8) int32, num_splits (b + 1,) int32)`, computed on the
device (capturable), and `flash_mla_with_kvcache` takes both (SGLang and sgl_kernel's wrapper, vLLM before its
2026 backend).
"""

from __future__ import annotations

from typing import Optional

import torch

from snapmla_ext.decode_ops import _old_style_metadata, flash_mla_with_kvcache

__all__ = ["get_mla_metadata", "flash_mla_with_kvcache"]


def get_mla_metadata(
    cache_seqlens: torch.Tensor,
    num_q_tokens_per_head_k: int,
    num_heads_k: int,
    num_heads_q: Optional[int] = None,
    is_fp8_kvcache: bool = False,
    topk: Optional[int] = None,
    *,
    num_sm_parts: Optional[int] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cache_seqlens (b,) int32; num_q_tokens_per_head_k = s_q * h_q; num_heads_k = 1."""
    return _old_style_metadata(
        cache_seqlens, num_q_tokens_per_head_k, num_heads_k, num_heads_q, is_fp8_kvcache, topk,
        num_sm_parts=num_sm_parts,
    )
