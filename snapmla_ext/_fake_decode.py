"""Fake (meta) implementations of the decode-side operators, so torch.compile / make_fx can trace calls to them.

They return tensors of the shapes, dtypes and devices the real operators return, without touching data.
Imported by snapmla_ext._ext right after the compiled library (which defines the schemas) is loaded.
"""

import torch

from snapmla_ext import layout as L
from snapmla_ext.decode_ops import SCHED_META_INTS


@torch.library.register_fake("snapmla::get_mla_metadata")
def _get_mla_metadata_fake(cache_seqlens, num_q_tokens_per_head_k, num_heads_k, num_sm_parts):
    b = cache_seqlens.shape[0]
    meta = cache_seqlens.new_empty((num_sm_parts, SCHED_META_INTS), dtype=torch.int32)
    num_splits = cache_seqlens.new_empty((b + 1,), dtype=torch.int32)
    return meta, num_splits


def _decode_outputs(q_like):
    """out (b, s_q, h_q, 512) bf16 and lse (b, h_q, s_q) fp32 for a query-shaped (b, s_q, h_q, ...) tensor."""
    b, s_q, h_q = q_like.shape[:3]
    out = q_like.new_empty((b, s_q, h_q, L.D_CONTENT), dtype=torch.bfloat16)
    lse = q_like.new_empty((b, h_q, s_q), dtype=torch.float32)
    return out, lse


@torch.library.register_fake("snapmla::decode_fp8")
def _decode_fp8_fake(
    q_content, q_rope, q_scale, kv_cache, block_table, cache_seqlens, tile_scheduler_metadata, num_splits,
    softmax_scale, causal,
):
    return _decode_outputs(q_content)


@torch.library.register_fake("snapmla::decode_fp8_bf16q")
def _decode_fp8_bf16q_fake(
    q, kv_cache, block_table, cache_seqlens, tile_scheduler_metadata, num_splits, softmax_scale, causal,
):
    return _decode_outputs(q)
