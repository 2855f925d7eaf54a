"""Drop-in for the 2026 generation of FlashMLA's Python API (`import snapmla_ext.flash_mla_2026 as flash_mla`).

In this generation `get_mla_metadata(*args, **kwargs)` returns `(sched_meta, None)` whatever it is given (vLLM's
2026 `flashmla.py` still passes `cache_seqlens, num_q_tokens_per_head_k, 1, is_fp8_kvcache=...` and then calls
`flash_mla_with_kvcache` without `num_splits`). The metadata is filled by the first decode call that uses it and
checked on reuse (b, s_q, h_q, causal, device), as FlashMLA checks it. The keyword `num_sm_parts=` (ours) is
honoured; every other argument is ignored.
"""

from __future__ import annotations

from snapmla_ext.decode_ops import SnapMLASchedMeta, flash_mla_with_kvcache

__all__ = ["get_mla_metadata", "flash_mla_with_kvcache", "SnapMLASchedMeta"]


def get_mla_metadata(*args, **kwargs) -> tuple[SnapMLASchedMeta, None]:
    """(SnapMLASchedMeta, None), filled lazily by flash_mla_with_kvcache; the arguments are ignored."""
    del args
    return SnapMLASchedMeta(num_sm_parts=kwargs.get("num_sm_parts")), None
