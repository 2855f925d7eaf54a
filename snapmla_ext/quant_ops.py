"""Fused quantization ops (docs/numerics_contract.md sections 2-3, 6): Fused-Q-Quant, Fused-K-Append, Fused-Fetch-Dequant.

CUDA tensors run the kernels (torch.ops.snapmla.*, one launch each); CPU tensors run snapmla_ext.reference, which
defines the numerics the kernels match bit for bit. Differences between the two paths, by design:
- A slot >= num_blocks * 64: the kernels never write (append) or read (fetch, zero row) it and raise nothing,
  because checking would cost a device-to-host sync; set SNAPMLA_CHECK_SLOTS=1 for a checked mode that syncs
  and raises. The reference always raises.
- Paged fetch: the kernel clamps seqlens into [0, max_pages * 64] and gives a zero row for a page id outside
  [0, num_blocks); the reference raises on both. A num_tokens smaller than sum(seqlens) truncates the output on
  CUDA (rows past num_tokens are dropped); the reference raises.
- A slot repeated within one append_kv call: the reference keeps the last row; the kernel writes the rows
  concurrently, so which one wins is unspecified (as in vLLM's reshape_and_cache). Pass distinct slots.
"""

from __future__ import annotations

from typing import Optional, Union

import torch

from snapmla_ext import reference
from snapmla_ext._ext import load_ops
from snapmla_ext.cache import SnapMLAKVCache, as_cache_tensor
from snapmla_ext.types import QuantizedQ

CacheLike = Union[SnapMLAKVCache, torch.Tensor]


def quantize_q(q: torch.Tensor) -> QuantizedQ:
    """Quantize a query per (request, query token, head) row (Fused-Q-Quant).

    q: (b, s_q, h_q, 576) bfloat16, last dim contiguous (other strides free, rows 16-byte aligned on CUDA).
    Returns QuantizedQ(content (b, s_q, h_q, 512) float8_e4m3fn, rope (b, s_q, h_q, 64) bfloat16 pre-scaled by
    1/scale, scale (b, s_q, h_q) float32), all contiguous.
    """
    if isinstance(q, torch.Tensor) and q.device.type == "cuda":
        content, rope, scale = load_ops().quantize_q(q)
        return QuantizedQ(content=content, rope=rope, scale=scale)
    return reference.quantize_q(q)


def append_kv(k_cache: CacheLike, kv: torch.Tensor, slots: torch.Tensor) -> None:
    """Quantize BF16 latent rows and write them into the paged FP8 cache, in place (Fused-K-Append).

    k_cache: SnapMLAKVCache or its (num_blocks, 41216) uint8 tensor.
    kv:      (n, 576) bfloat16, last dim contiguous (rows 16-byte aligned on CUDA).
    slots:   (n,) int32 or int64, page * 64 + offset; a negative slot skips its row. n = 0 launches nothing.
    """
    data = as_cache_tensor(k_cache)
    if data.device.type == "cuda":
        load_ops().append_kv(data, kv, slots)
    else:
        reference.append_kv(data, kv, slots)


def append_kv_parts(k_cache: CacheLike, kv_c: torch.Tensor, k_pe: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """append_kv from the two tensors an engine holds (vLLM's concat_and_cache_mla inputs), read in place: the
    same bytes as append_kv(k_cache, torch.cat([kv_c, k_pe], -1), slot_mapping) without the concatenation.

    kv_c:         (n, 512) bfloat16, the latent rows (last dim contiguous, rows 16-byte aligned on CUDA).
    k_pe:         (n, 64) or (n, 1, 64) bfloat16, the rotary part of the key (the same layout rules).
    slot_mapping: (n,) int32 or int64, page * 64 + offset; -1 (any negative slot) skips its row.
    """
    if isinstance(k_pe, torch.Tensor) and k_pe.dim() == 3 and k_pe.shape[1] == 1:
        k_pe = k_pe.squeeze(1)  # vLLM's key rope (n, 1, 64): a view
    data = as_cache_tensor(k_cache)
    if data.device.type == "cuda":
        load_ops().append_kv_parts(data, kv_c, k_pe, slot_mapping)
    else:
        reference.append_kv(data, torch.cat([kv_c, k_pe], dim=-1), slot_mapping)


def fetch_dequant(
    k_cache: CacheLike,
    slots: Optional[torch.Tensor] = None,
    *,
    block_table: Optional[torch.Tensor] = None,
    seqlens: Optional[torch.Tensor] = None,
    num_tokens: Optional[int] = None,
) -> torch.Tensor:
    """Gather cached tokens back to BF16 rows (Fused-Fetch-Dequant): content = bf16(float(c8) * s),
    rope = bf16(float(r') * s), each product in fp32 and rounded once.

    Exactly one form:
    - slots: (n,) int32/int64 -> (n, 576) bfloat16 in that order; a negative slot gives a row of zeros.
    - block_table (b, max_pages) int32 and seqlens (b,) int32 -> (num_tokens, 576) bfloat16, request 0's tokens
      first; only the first ceil(seqlens[i] / 64) entries of block_table row i are read.
      num_tokens defaults to int(seqlens.sum()), a device-to-host sync on CUDA: pass it to avoid the sync (and to
      capture the call in a CUDA graph). On CUDA, rows past sum(seqlens) are zero, and block-table rows are read
      through their stride up to the end of the table's storage, as the decode reads them (a view narrower than
      the lengths works); a length past that is clamped. The CPU reference needs seqlens[i] <= max_pages * 64.
    k_cache: SnapMLAKVCache or its (num_blocks, 41216) uint8 tensor.
    """
    data = as_cache_tensor(k_cache)
    paged = reference.cache_ops.fetch_form_is_paged(slots, block_table, seqlens)
    if data.device.type != "cuda":
        return reference.fetch_dequant(data, slots, block_table=block_table, seqlens=seqlens, num_tokens=num_tokens)
    ops = load_ops()
    if not paged:
        return ops.fetch_dequant_slots(data, slots)
    if num_tokens is None:
        num_tokens = int(seqlens.sum())
    return ops.fetch_dequant_paged(data, block_table, seqlens, num_tokens)
