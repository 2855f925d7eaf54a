"""Drop-in for the 2025 generation of FlashMLA's Python API (`import snapmla_ext.flash_mla_2025 as flash_mla`).

In this generation `get_mla_metadata(cache_seqlens, num_q_tokens_per_head_k, num_heads_k, num_heads_q=None,
is_fp8_kvcache=False, topk=None, *, num_sm_parts=None)` returns the tensor pair `(tile_scheduler_metadata
(num_sm_parts, 8) int32, num_splits (b + 1,) int32)`, computed on the device (capturable), and
`flash_mla_with_kvcache` takes both (SGLang and sgl_kernel's wrapper, vLLM before its 2026 backend).
"""

from snapmla_ext.decode_ops import _old_style_metadata as get_mla_metadata
from snapmla_ext.decode_ops import flash_mla_with_kvcache

__all__ = ["get_mla_metadata", "flash_mla_with_kvcache"]
