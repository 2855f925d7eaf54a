"""Fake (meta) implementations of the quantization operators, so torch.compile can trace them.

Imported by snapmla_ext._ext right after the extension is loaded: register_fake needs the operator
schemas that csrc/api/quant_api.cpp registers. Output shapes and dtypes mirror the C++ entry points.
"""

import torch

from snapmla_ext import layout as L


@torch.library.register_fake("snapmla::quantize_q")
def _quantize_q_fake(q):
    b, s_q, h_q, _ = q.shape
    content = q.new_empty((b, s_q, h_q, L.D_CONTENT), dtype=torch.float8_e4m3fn)
    rope = q.new_empty((b, s_q, h_q, L.D_ROPE), dtype=torch.bfloat16)
    scale = q.new_empty((b, s_q, h_q), dtype=torch.float32)
    return content, rope, scale


@torch.library.register_fake("snapmla::append_kv")
def _append_kv_fake(kv_cache, kv, slots):
    return None


@torch.library.register_fake("snapmla::append_kv_parts")
def _append_kv_parts_fake(kv_cache, kv_c, k_pe, slots):
    return None


@torch.library.register_fake("snapmla::fetch_dequant_slots")
def _fetch_dequant_slots_fake(kv_cache, slots):
    return kv_cache.new_empty((slots.shape[0], L.D_QK), dtype=torch.bfloat16)


@torch.library.register_fake("snapmla::fetch_dequant_paged")
def _fetch_dequant_paged_fake(kv_cache, block_table, seqlens, num_tokens):
    return kv_cache.new_empty((num_tokens, L.D_QK), dtype=torch.bfloat16)
