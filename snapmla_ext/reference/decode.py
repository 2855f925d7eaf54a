"""decode: the exact emulation of flash_mla_with_kvcache over the SnapMLA paged cache (docs/numerics_contract.md section 4).

Gathers each request's tokens through its block table, runs decode_dense per request (or per split piece, then
the log-sum-exp combine of the pieces' bf16-rounded outputs), and rounds o to bf16 at the end. Query rows are
folded as row = s * h_q + h.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch

from snapmla_ext import layout as L
from snapmla_ext.cache import SnapMLAKVCache, as_cache_tensor
from snapmla_ext.reference.cache_ops import padded_by_request, paged_slots, read_slots
from snapmla_ext.reference.dense import decode_dense
from snapmla_ext.reference.quant import quantize_q
from snapmla_ext.types import QuantizedQ


def combine_splits(o_parts: torch.Tensor, lse_parts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge split-KV pieces with log-sum-exp weights.

    o_parts (P, ..., 512) fp32, lse_parts (P, ...) fp32 natural log, +inf for a piece that saw no token (weight 0).
    Returns o (..., 512) = sum_i exp(lse_i - lse) * o_i (computed as exp(lse_i - m) / S with m = max_i lse_i,
    S = sum_i exp(lse_i - m), as the combine kernel does) and lse (...) = m + log S; o = 0 and lse = +inf where no
    piece saw a token.
    """
    lse_w = torch.where(lse_parts == float("inf"), torch.full_like(lse_parts, -float("inf")), lse_parts)
    m = lse_w.amax(dim=0)
    empty = m == -float("inf")
    # Weights exp(lse_i - m) / S, as the combine kernel takes them: exp(lse_i - lse) with lse = m + log S would
    # lose log S to fp32 rounding at lse ~1e18 (the input range's far end) and stop summing to 1.
    e = torch.where(empty.unsqueeze(0), torch.zeros_like(lse_w), torch.exp(lse_w - torch.where(empty, 0.0, m).unsqueeze(0)))
    total = e.sum(dim=0)
    w = e * torch.where(empty, 0.0, torch.reciprocal(total)).unsqueeze(0)
    o = (w.unsqueeze(-1) * o_parts).sum(dim=0)
    lse = m + torch.log(total)
    return o, torch.where(empty, torch.full_like(lse, float("inf")), lse)


def _check_split_blocks(split_blocks, lengths: list[int]) -> list[list[int]]:
    if len(split_blocks) != len(lengths):
        raise ValueError(f"split_blocks must have one list per request ({len(lengths)}), got {len(split_blocks)}")
    out = []
    for i, (bounds, n) in enumerate(zip(split_blocks, lengths)):
        bounds = [int(x) for x in bounds]
        blocks = math.ceil(n / L.PAGE_BLOCK_SIZE)
        if len(bounds) < 2 or bounds[0] != 0 or bounds[-1] != blocks or any(a > b for a, b in zip(bounds, bounds[1:])):
            raise ValueError(
                f"split_blocks[{i}] must be non-decreasing block boundaries from 0 to {blocks} "
                f"(seqlen {n}), got {bounds}"
            )
        out.append(bounds)
    return out


def decode(
    q: Union[torch.Tensor, QuantizedQ],
    k_cache: Union[torch.Tensor, SnapMLAKVCache],
    block_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    *,
    split_blocks: Optional[Sequence[Sequence[int]]] = None,
    pv_accumulation: str = "fp32",
    p_pages: int = 1,
    partials: str = "bf16",
) -> tuple[torch.Tensor, torch.Tensor]:
    """What the SnapMLA decode kernel computes, in pure PyTorch.

    q:             (b, s_q, h_q, 576) bf16 (quantized here with quantize_q) or a QuantizedQ.
    k_cache:       (num_blocks, 41216) uint8 or a SnapMLAKVCache.
    block_table:   (b, max_pages) int32; entries past ceil(seqlen / 64) are never read (may be sentinels).
    cache_seqlens: (b,) int32.
    softmax_scale: default 576 ** -0.5. causal: query token i sees cache tokens 0 .. seqlen - s_q + i.
    split_blocks:  optional per-request block boundaries, e.g. [0, 3, 7] = pieces [0, 3) and [3, 7); each piece
                   runs from a fresh state and the pieces are merged by combine_splits (fp32).
    pv_accumulation: "fp32" or "fp8_wgmma" (the tensor cores' PV accumulation; slow), see decode_dense.
    p_pages:       pages per P-quantization block: 1 is what the kernels compute; 2 is the 128-token P block of the
                   page-pair designs (docs/design.md section 4), counted from each piece's first page.
    partials:      "bf16": a request of more than one piece has each piece's output rounded to bf16 before the
                   merge, as the kernels' o_accum holds it; "fp32": not rounded (a split then changes only fp32
                   rounding).
    Returns out (b, s_q, h_q, 512) bf16 and lse (b, h_q, s_q) fp32 (natural log; +inf for a row seeing no token).
    """
    data = as_cache_tensor(k_cache)
    if isinstance(q, QuantizedQ):
        qq = q
    else:
        if not isinstance(q, torch.Tensor) or q.dim() != 4 or q.shape[-1] != L.D_QK:
            shape = tuple(q.shape) if isinstance(q, torch.Tensor) else type(q).__name__
            raise ValueError(f"q must have shape (b, s_q, h_q, {L.D_QK}), got {shape}")
        qq = quantize_q(q)
    b, s_q, h_q = qq.scale.shape
    if block_table.dim() != 2 or block_table.shape[0] != b:
        raise ValueError(f"block_table must have shape ({b}, max_pages), got {tuple(block_table.shape)}")
    if softmax_scale is None:
        softmax_scale = L.D_QK**-0.5
    if not isinstance(p_pages, int) or isinstance(p_pages, bool) or p_pages not in (1, 2):
        raise ValueError(f"p_pages must be 1 or 2 (pages per P block), got {p_pages!r}")
    p_block = p_pages * L.PAGE_BLOCK_SIZE
    if partials not in ("bf16", "fp32"):
        raise ValueError(
            f"partials must be 'bf16' or 'fp32' (a split piece's output before the merge), got {partials!r}"
        )

    slots = paged_slots(data, block_table, cache_seqlens, "cache_seqlens")
    c8, rope, scale = read_slots(data, slots)
    lengths = cache_seqlens.tolist()
    n_max = max(math.ceil(n / L.PAGE_BLOCK_SIZE) for n in lengths) * L.PAGE_BLOCK_SIZE if b else 0
    dev = data.device
    k_c, k_r, k_s = (padded_by_request(x, cache_seqlens, n_max) for x in (c8.float(), rope.float(), scale))

    rows = s_q * h_q
    q_c = qq.content.float().reshape(b, rows, L.D_CONTENT)
    q_r = qq.rope.float().reshape(b, rows, L.D_ROPE)
    q_s = qq.scale.float().reshape(b, rows)
    token = torch.arange(n_max, device=dev).view(1, 1, n_max)
    seqlen = cache_seqlens.long().view(b, 1, 1)
    visible = token < seqlen
    if causal:
        s_of_row = torch.arange(rows, device=dev).div(h_q, rounding_mode="floor").view(1, rows, 1)
        visible = visible & (token <= seqlen - s_q + s_of_row)
    else:
        visible = visible.expand(b, rows, n_max)

    if split_blocks is None:
        o, lse = decode_dense(
            q_c, q_r, q_s, k_c, k_r, k_s, visible, softmax_scale, p_block=p_block, pv_accumulation=pv_accumulation
        )
    else:
        o, lse = torch.empty(b, rows, L.D_CONTENT, device=dev), torch.empty(b, rows, device=dev)
        for i, bounds in enumerate(_check_split_blocks(split_blocks, lengths)):
            parts = []
            for a, z in zip(bounds, bounds[1:]):
                end = z * L.PAGE_BLOCK_SIZE
                one = slice(i, i + 1)
                parts.append(
                    decode_dense(
                        q_c[one], q_r[one], q_s[one], k_c[one, :end], k_r[one, :end], k_s[one, :end],
                        visible[one, :, :end], softmax_scale, p_block=p_block, block_offset=a * L.PAGE_BLOCK_SIZE,
                        pv_accumulation=pv_accumulation,
                    )
                )
            o_parts = torch.stack([p[0][0] for p in parts])
            if len(parts) > 1 and partials == "bf16":  # the kernels' o_accum
                o_parts = o_parts.to(torch.bfloat16).float()
            o[i], lse[i] = combine_splits(o_parts, torch.stack([p[1][0] for p in parts]))

    out = o.reshape(b, s_q, h_q, L.D_CONTENT).to(torch.bfloat16)
    return out, lse.reshape(b, s_q, h_q).transpose(1, 2).contiguous()
