"""The quantization schemes the study compares, each expressed as inputs to reference.decode_dense.

Every scheme is a Q quantizer, a KV quantizer and a P mode. A quantizer maps rows x (..., 576) to
(content values, RoPE values, scale) with x ~ scale * [content | RoPE]: the values are what the tensor cores would
see (FP8 or BF16 numbers, held in fp32) and the scale is what the kernel multiplies back in. decode_dense then
runs the same blocked online softmax and P quantization as the kernel emulation, so every scheme differs from
SnapMLA only in what it names, and nothing else.

Schemes (the letters follow the SnapMLA paper's Appendix G):
- snapmla:  per-token content scale, RoPE BF16 pre-scaled by it; Q per (token, head) likewise; block-wise FP8 P.
- config_a: per-token, RoPE-unaware: the whole 576-dim row in FP8 under one scale (Q likewise).
- config_b: per-tensor static, scale 1.0: content cast to FP8 as is, RoPE BF16.
- config_c: per-tensor dynamic: one amax-based scale for all content of the layer, RoPE BF16 pre-scaled.
- config_d: per-block: one scale per 64-token page, RoPE BF16 pre-scaled.
- engine_pt: today's engines' per-tensor FP8 (FlashMLA PR #54 lineage, vLLM): one scale for all of Q and one
  for all of KV, RoPE included in FP8; the scales are applied outside the GEMMs (to the logits and to the output)
  and P in [0, 1] is cast to FP8 without a scale.
- bf16: no quantization (what FlashMLA computes) - the floor. Its P stays fp32 in decode_dense, where FlashMLA
  rounds P to BF16 before PV: the floor is that much optimistic (about 2^-9 relative per probability).
Configs B, C and D only change the cache: their Q is SnapMLA's, since a kernel for those caches would quantize Q
per (token, head) too. Config A also changes Q, because with the RoPE part in FP8 the RoPE GEMM is FP8 as well.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, NamedTuple

import torch

from snapmla_ext import layout as L
from snapmla_ext.reference import e4m3, quantize_rows

Quantizer = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


def _split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xf = x.float()
    return xf[..., : L.D_CONTENT], xf[..., L.D_CONTENT :]


def _scale_of(amax: torch.Tensor) -> torch.Tensor:
    """FP8 scale from an absolute maximum, with the project's floor (an all-zero block keeps a positive scale)."""
    return torch.clamp_min(amax, L.AMAX_FLOOR) / L.FP8_E4M3_MAX


def _fp8_values(x: torch.Tensor) -> torch.Tensor:
    return e4m3(x).float()


def _bf16_values(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).float()


def q_per_row(x: torch.Tensor):
    """SnapMLA's per-row quantizer (reference.quantize_rows): content FP8, RoPE BF16 pre-scaled, one scale per row."""
    c8, rope, scale = quantize_rows(x)
    return c8.float(), rope.float(), scale


def q_per_row_576(x: torch.Tensor):
    """RoPE-unaware per-row: one scale from the amax of all 576 dims, content and RoPE both FP8."""
    c, r = _split(x)
    scale = _scale_of(torch.cat([c, r], dim=-1).abs().amax(dim=-1))
    s = scale.unsqueeze(-1)
    return _fp8_values(c / s), _fp8_values(r / s), scale


def q_static_unit(x: torch.Tensor):
    """Per-tensor static with scale 1.0: content cast to FP8 as is (saturating at +-448), RoPE BF16."""
    c, r = _split(x)
    return _fp8_values(c), _bf16_values(r), torch.ones(x.shape[:-1], device=x.device)


def q_per_tensor_content(x: torch.Tensor):
    """Per-tensor dynamic: one scale from the amax of all content values, RoPE BF16 pre-scaled by it."""
    c, r = _split(x)
    scale = _scale_of(c.abs().amax())
    return _fp8_values(c / scale), _bf16_values(r / scale), scale.expand(x.shape[:-1]).clone()


def q_per_page(x: torch.Tensor):
    """Per-block: one scale per 64-token page (x is (n, 576), tokens in sequence order), RoPE BF16 pre-scaled."""
    c, r = _split(x)
    n = x.shape[0]
    pages = -(-n // L.PAGE_BLOCK_SIZE)
    padded = c.new_zeros(pages * L.PAGE_BLOCK_SIZE, L.D_CONTENT)
    padded[:n] = c.abs()
    page_scale = _scale_of(padded.view(pages, -1).amax(dim=-1))
    scale = page_scale.repeat_interleave(L.PAGE_BLOCK_SIZE)[:n]
    s = scale.unsqueeze(-1)
    return _fp8_values(c / s), _bf16_values(r / s), scale


def q_per_tensor_576(x: torch.Tensor):
    """Per-tensor over all 576 dims (RoPE included in FP8): one amax-based scale for the whole tensor."""
    c, r = _split(x)
    scale = _scale_of(x.float().abs().amax())
    return _fp8_values(c / scale), _fp8_values(r / scale), scale.expand(x.shape[:-1]).clone()


def q_bf16(x: torch.Tensor):
    """No quantization: BF16 values, scale 1."""
    c, r = _split(x)
    return _bf16_values(c), _bf16_values(r), torch.ones(x.shape[:-1], device=x.device)


class DenseInputs(NamedTuple):
    """Arguments of reference.decode_dense for one layer (B = 1), plus the per-tensor factors applied outside it.

    q_c (1, R, 512), q_r (1, R, 64), q_scale (1, R), k_c (1, N, 512), k_r (1, N, 64), k_scale (1, N): fp32
    logit_scale: multiplies softmax_scale (per-tensor Q and KV scales applied to the logits once)
    out_scale:   multiplies the output (a per-tensor V scale applied after PV)
    """

    q_c: torch.Tensor
    q_r: torch.Tensor
    q_scale: torch.Tensor
    k_c: torch.Tensor
    k_r: torch.Tensor
    k_scale: torch.Tensor
    logit_scale: float
    out_scale: float


@dataclass(frozen=True)
class Scheme:
    """One way of computing decode attention.

    name: short key (JSON, CLI); label: legend text; q_quant / kv_quant: quantizers (rows (..., 576) in);
    p_quant / p_block / p_ref: decode_dense's P mode, block size and exponentials' reference;
    tensor_scales: the scales are per tensor and applied outside the GEMMs (engine_pt), not fused per token.
    """

    name: str
    label: str
    q_quant: Quantizer
    kv_quant: Quantizer
    p_quant: str = "block"
    p_block: int = L.PAGE_BLOCK_SIZE
    p_ref: str = "running"
    tensor_scales: bool = False

    def prepare(self, q: torch.Tensor, kv: torch.Tensor) -> DenseInputs:
        """q (m, h_q, 576) and kv (n, 576), BF16 -> decode_dense inputs with B = 1 and R = m * h_q rows."""
        q_c, q_r, q_s = self.q_quant(q.reshape(-1, L.D_QK))
        k_c, k_r, k_s = self.kv_quant(kv)
        logit_scale = out_scale = 1.0
        if self.tensor_scales:
            # The engine applies its two scalar scales once: to the logits, and to O after PV. Inside, P = e in
            # [0, 1] is cast to FP8 as is (decode_dense fuses k_scale into P, so k_scale must be 1 here).
            logit_scale = float(q_s.flatten()[0]) * float(k_s.flatten()[0])
            out_scale = float(k_s.flatten()[0])
            q_s, k_s = torch.ones_like(q_s), torch.ones_like(k_s)
        return DenseInputs(
            q_c[None], q_r[None], q_s.reshape(1, -1), k_c[None], k_r[None], k_s.reshape(1, -1), logit_scale, out_scale
        )


SCHEMES: tuple[Scheme, ...] = (
    Scheme("snapmla", "SnapMLA (per-token, RoPE BF16)", q_per_row, q_per_row),
    Scheme("config_a", "A: per-token, RoPE in FP8", q_per_row_576, q_per_row_576),
    Scheme("config_b", "B: per-tensor static (1.0)", q_per_row, q_static_unit),
    Scheme("config_c", "C: per-tensor dynamic", q_per_row, q_per_tensor_content),
    Scheme("config_d", "D: per-block (64 tokens)", q_per_row, q_per_page),
    Scheme(
        "engine_pt", "engines: per-tensor FP8, RoPE FP8", q_per_tensor_576, q_per_tensor_576, "unscaled",
        tensor_scales=True,
    ),
    Scheme("bf16", "BF16 (FlashMLA)", q_bf16, q_bf16, "none"),
)

_SNAP = SCHEMES[0]
ABLATIONS: tuple[Scheme, ...] = (
    _SNAP,
    replace(_SNAP, name="p_none", label="P not quantized (fp32)", p_quant="none"),
    replace(_SNAP, name="p_unscaled", label="P cast to FP8 without scale", p_quant="unscaled"),
    replace(_SNAP, name="p_running", label="P scale floored at the running one", p_quant="running"),
    replace(_SNAP, name="q_bf16", label="BF16 Q (FP8 cache)", q_quant=q_bf16),
    replace(_SNAP, name="p_block_32", label="P block 32", p_block=32),
    replace(_SNAP, name="p_block_128", label="P block 128", p_block=128),
    replace(_SNAP, name="p_bound", label="P scale as an upper bound (no p' reduction)", p_quant="bound"),
    replace(_SNAP, name="p_bound_128", label="P bound, block 128", p_quant="bound", p_block=128),
    replace(_SNAP, name="p_local", label="exponentials against the block's own maximum", p_ref="block"),
    replace(_SNAP, name="p_local_128", label="block's own maximum, P block 128", p_ref="block", p_block=128),
)


def by_name(names: list[str], pool: tuple[Scheme, ...] = SCHEMES) -> list[Scheme]:
    """Select schemes by name, in the order given; raises ValueError naming the unknown ones."""
    table = {s.name: s for s in pool}
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"unknown scheme(s) {unknown}; known: {sorted(table)}")
    return [table[n] for n in names]
