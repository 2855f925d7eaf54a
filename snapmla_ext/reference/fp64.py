"""Plain float64 attention: the ground truth for accuracy tests, on raw rows or on the dequantized cache."""

from __future__ import annotations

from typing import Optional, Sequence, Union

import torch

from snapmla_ext import layout as L
from snapmla_ext.cache import SnapMLAKVCache, as_cache_tensor
from snapmla_ext.reference.cache_ops import padded_by_request, paged_slots, read_slots
from snapmla_ext.reference.quant import dequantize_q
from snapmla_ext.types import QuantizedQ


def attention_fp64(
    q: torch.Tensor,
    kv: torch.Tensor,
    seqlens: Union[torch.Tensor, Sequence[int]],
    softmax_scale: Optional[float] = None,
    causal: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention in float64 with V = kv[..., :512].

    q (b, s_q, h_q, 576), kv (b, s_k_max, 576): any float dtype, converted exactly to float64.
    seqlens: (b,) ints; rows of kv at or past seqlens[i] are excluded by select (they may be NaN).
    softmax_scale: default 576 ** -0.5. causal: query token i sees tokens 0 .. seqlen - s_q + i.
    Returns out (b, s_q, h_q, 512) f64 and lse (b, h_q, s_q) f64 (natural log; o = 0, lse = +inf for a row that
    sees no token).
    """
    if q.dim() != 4 or q.shape[-1] != L.D_QK:
        raise ValueError(f"q must have shape (b, s_q, h_q, {L.D_QK}), got {tuple(q.shape)}")
    b, s_q, h_q, _ = q.shape
    if kv.dim() != 3 or kv.shape[0] != b or kv.shape[2] != L.D_QK:
        raise ValueError(f"kv must have shape ({b}, s_k_max, {L.D_QK}), got {tuple(kv.shape)}")
    if softmax_scale is None:
        softmax_scale = L.D_QK**-0.5
    dev = q.device
    n = kv.shape[1]
    lengths = torch.as_tensor(seqlens, device=dev).long().view(b, 1, 1, 1)
    token = torch.arange(n, device=dev).view(1, 1, 1, n)
    visible = token < lengths
    if causal:
        visible = visible & (token <= lengths - s_q + torch.arange(s_q, device=dev).view(1, s_q, 1, 1))
    visible = visible.expand(b, s_q, h_q, n)
    row_sees = visible.any(dim=-1)
    token_used = visible.any(dim=2).any(dim=1)  # (b, n)

    kv64 = torch.where(token_used.unsqueeze(-1), kv.double(), torch.zeros((), dtype=torch.float64, device=dev))
    logits = torch.einsum("bshd,bnd->bshn", q.double(), kv64) * softmax_scale
    logits = torch.where(visible, logits, torch.tensor(-float("inf"), dtype=torch.float64, device=dev))
    lse = torch.logsumexp(logits, dim=-1)
    zero = torch.zeros((), dtype=torch.float64, device=dev)
    probs = torch.where(row_sees.unsqueeze(-1), torch.exp(logits - lse.unsqueeze(-1)), zero)
    out = torch.einsum("bshn,bnd->bshd", probs, kv64[..., : L.D_CONTENT])
    lse = torch.where(row_sees, lse, torch.tensor(float("inf"), dtype=torch.float64, device=dev))
    return out, lse.transpose(1, 2).contiguous()


def attention_fp64_dequant(
    q: Union[torch.Tensor, QuantizedQ],
    k_cache: Union[torch.Tensor, SnapMLAKVCache],
    block_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """attention_fp64 over the paged cache dequantized exactly in float64 (float(c8) * s, float(r') * s, no bf16
    rounding), so that it isolates the kernel's own error from the quantization of K and V.

    q: (b, s_q, h_q, 576) float used as is, or a QuantizedQ dequantized exactly in float64.
    Other arguments as snapmla_ext.reference.decode. Returns f64 out (b, s_q, h_q, 512) and lse (b, h_q, s_q).
    """
    data = as_cache_tensor(k_cache)
    if isinstance(q, QuantizedQ):
        q = dequantize_q(q, torch.float64)
    slots = paged_slots(data, block_table, cache_seqlens, "cache_seqlens")
    c8, rope, scale = read_slots(data, slots)
    rows = dequantize_q(QuantizedQ(c8, rope, scale), torch.float64)  # the same product, per cache token
    lengths = cache_seqlens.tolist()
    kv = padded_by_request(rows, cache_seqlens, max(lengths, default=0))
    return attention_fp64(q, kv, lengths, softmax_scale, causal)
