"""A study layer as a real paged SnapMLA cache, decoded by the compiled kernel or by the paged reference emulation.

The schemes of schemes.py run on dense rows; this file is the path a user's engine takes (append into pages
through a block table, then flash_mla_with_kvcache), used for two checks: the page order of the block table must
not change the result, and the compiled kernel must agree with the emulation (docs/numerics_contract.md section 7 tolerances).
"""

from __future__ import annotations

import math

import torch

from snapmla_ext import layout as L
from snapmla_ext._ext import extension_available
from snapmla_ext.cache import SnapMLAKVCache
from snapmla_ext.numerics.data import Layer
from snapmla_ext.reference import decode

PAGE_ORDERS = ("sequential", "random")


def kernel_ready() -> bool:
    """True when the compiled decode kernel can run here: a CUDA device and the built extension."""
    return torch.cuda.is_available() and extension_available()


def build_cache(layer: Layer, order: str, seed: int, device="cpu") -> tuple[SnapMLAKVCache, torch.Tensor, torch.Tensor]:
    """Write layer.kv into a fresh paged cache whose block table is sequential or a random choice of pages.

    The random order draws the pages from a pool half again as large, so unused (NaN-poisoned) pages sit between
    used ones. Returns (cache, block_table (1, pages) int32, cache_seqlens (1,) int32), all on `device`.
    """
    if order not in PAGE_ORDERS:
        raise ValueError(f"order must be one of {PAGE_ORDERS}, got {order!r}")
    n = layer.kv.shape[0]
    pages = math.ceil(n / L.PAGE_BLOCK_SIZE)
    if order == "sequential":
        pool, table = pages, torch.arange(pages)
    else:
        pool = pages + pages // 2 + 1
        table = torch.randperm(pool, generator=torch.Generator().manual_seed(seed))[:pages]
    cache = SnapMLAKVCache(pool, device=device)
    offsets = torch.arange(L.PAGE_BLOCK_SIZE).repeat(pages)
    slots = (table.repeat_interleave(L.PAGE_BLOCK_SIZE) * L.PAGE_BLOCK_SIZE + offsets)[:n]
    cache.append(layer.kv.to(device), slots.to(device))  # the fused append kernel on CUDA, the reference on CPU
    block_table = table.to(torch.int32).view(1, pages).to(device)
    seqlens = torch.tensor([n], dtype=torch.int32, device=device)
    return cache, block_table, seqlens


def _rows(out: torch.Tensor, lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """out (1, s_q, h_q, 512), lse (1, h_q, s_q) -> (R, 512) and (R,) with row = s * h_q + h, on the CPU."""
    return out[0].reshape(-1, L.D_CONTENT).cpu(), lse[0].transpose(0, 1).reshape(-1).cpu()


def emulate_paged(
    layer: Layer, softmax_scale: float, order: str, seed: int, split_blocks=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """reference.decode over a CPU paged cache of the layer. Returns o (R, 512) bf16 and lse (R,) fp32."""
    cache, table, seqlens = build_cache(layer, order, seed)
    out, lse = decode(layer.q.unsqueeze(0), cache, table, seqlens, softmax_scale, split_blocks=split_blocks)
    return _rows(out, lse)


def kernel_paged(layer: Layer, softmax_scale: float, order: str, seed: int, device="cuda") -> dict[str, torch.Tensor]:
    """flash_mla_with_kvcache on a paged cache of the layer on `device` (built with the fused append kernel).

    Returns {"o": (R, 512) bf16, "lse": (R,) fp32} from the kernel, and {"o_emu", "lse_emu"} from reference.decode
    over a CPU copy of the same cache bytes, so the comparison isolates the decode kernel.
    """
    from snapmla_ext import ops

    cache, table, seqlens = build_cache(layer, order, seed, device=device)
    q = layer.q.unsqueeze(0).to(device)
    sched_meta, num_splits = ops.get_mla_metadata()
    out, lse = ops.flash_mla_with_kvcache(
        q, cache.data, table, seqlens, L.D_CONTENT, sched_meta, num_splits,
        softmax_scale=softmax_scale, causal=False, is_fp8_kvcache=True,
    )
    o, lse = _rows(out, lse)  # .cpu() waits for the kernel
    out_emu, lse_emu = decode(q.cpu(), cache.data.cpu(), table.cpu(), seqlens.cpu(), softmax_scale)
    o_emu, lse_emu = _rows(out_emu, lse_emu)
    return {"o": o, "lse": lse, "o_emu": o_emu, "lse_emu": lse_emu}
