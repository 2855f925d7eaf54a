"""Reference quantizers: per-token KV rows (docs/numerics_contract.md section 2) and per-row queries (docs/numerics_contract.md section 3).

The CUDA kernels (Fused-K-Append, Fused-Q-Quant) must match these bit for bit, so every step is spelled out:

    x      = input.float()                                   (exact for bf16 / fp16 / fp32 inputs)
    amax   = torch.amax(|x[..., :512]|)                      NaN anywhere in the content -> amax NaN
    a      = clamp(amax, AMAX_FLOOR, CONTENT_MAX)            NaN stays NaN; +inf and anything above 2^16 -> 2^16
    scale  = a / 448                                         fp32, IEEE round-to-nearest division (not a multiply
                                                             by 1/448, which differs in the last bit)
    inv    = 448 / a                                         fp32, IEEE division, once per row
    c8     = e4m3(clamp(x[..., :512] * inv, -448, 448))      fp32 multiply, then clamp, then RNE to e4m3fn
    rope   = bf16(clamp(x[..., 512:], -ROPE_MAX, ROPE_MAX) * inv)   clamp (NaN stays), fp32 multiply, RNE to bf16

x * inv is within one fp32 ulp of x / scale (the contract's c / s); the kernels multiply because 576 correctly rounded
divisions per row made them instruction-bound, and this definition keeps them bit-identical to this reference.

CONTENT_MAX = 2^16 and ROPE_MAX = 2^32 are the input range (kv_layout.h, docs/numerics_contract.md section 2):
content saturates at +-2^16 and RoPE at +-2^32, so every scale is at most 2^16 / 448 and every decode result of a
finite input is finite.

Non-finite inputs follow from these formulas and nothing else (the kernels must not special-case them):
- NaN anywhere in the 512 content values: scale = NaN, so every c8 and every RoPE value of the token is NaN.
- +-inf in the content (and no NaN): it saturates like any value above 2^16: a = 2^16, the infinite values
  become +-448 in e4m3 (+-2^16 dequantized), the rest is quantized against that scale.
- +-inf in the RoPE part saturates to +-2^32 before the scaling; NaN there stays NaN and leaves the rest of the
  token unaffected.
The clamp matters for the cast: which out-of-range values torch's float8 cast saturates and which it turns into
NaN differs across versions and devices, so no value outside [-448, 448] ever reaches it. With a finite scale,
|x * inv| <= 448 up to one rounding, so the clamp only removes that rounding (448 * (1 + 2^-23) -> 448).
"""

from __future__ import annotations

import torch

from snapmla_ext import layout as L
from snapmla_ext.types import QuantizedQ


def div_ieee(x: torch.Tensor, d: float) -> torch.Tensor:
    """x / d, correctly rounded on every device.

    torch's CUDA division by a Python (CPU) scalar multiplies by the scalar's reciprocal, which is not the IEEE
    quotient (amax / 448 came out 1 ulp off for ~60% of rows in a test), so d goes in as a tensor on x's device.
    """
    return x / torch.tensor(d, dtype=x.dtype, device=x.device)


def e4m3(x: torch.Tensor) -> torch.Tensor:
    """fp32 (any shape) -> float8_e4m3fn: clamp to [-448, 448] (NaN stays NaN), then round to nearest even."""
    return torch.clamp(x, -L.FP8_E4M3_MAX, L.FP8_E4M3_MAX).to(torch.float8_e4m3fn)


def _check_last_dim(x: torch.Tensor, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor (bf16 expected), got {x.dtype}")
    if x.dim() < 1 or x.shape[-1] != L.D_QK:
        raise ValueError(
            f"{name} must have last dimension {L.D_QK} (512 content + 64 RoPE), got shape {tuple(x.shape)}"
        )


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantize latent rows one scale per row (the module docstring gives the exact definition).

    x: (..., 576) floating point (bf16 in practice); computed in fp32 from x.float().
    Returns c8 (..., 512) float8_e4m3fn, rope (..., 64) bfloat16 pre-scaled by 1/scale, scale (...) float32.
    """
    _check_last_dim(x, "x")
    xf = x.float()
    content, rope = xf[..., : L.D_CONTENT], xf[..., L.D_CONTENT :]
    amax = torch.amax(content.abs(), dim=-1)  # propagates NaN, unlike a max-reduction with fmaxf
    bounded = torch.clamp(amax, L.AMAX_FLOOR, L.CONTENT_MAX)  # torch.clamp keeps NaN
    scale = div_ieee(bounded, L.FP8_E4M3_MAX)
    # 448 as a tensor on the same device: a tensor-by-tensor division is IEEE on CPU and CUDA alike.
    inv = (torch.full_like(bounded, L.FP8_E4M3_MAX) / bounded).unsqueeze(-1)
    c8 = e4m3(content * inv)
    rope_scaled = (torch.clamp(rope, -L.ROPE_MAX, L.ROPE_MAX) * inv).to(torch.bfloat16)
    return c8, rope_scaled, scale


def quantize_q(q: torch.Tensor) -> QuantizedQ:
    """Fused-Q-Quant reference: q (b, s_q, h_q, 576) bf16 -> QuantizedQ, one scale per (request, token, head)."""
    _check_last_dim(q, "q")
    if q.dim() != 4:
        raise ValueError(f"q must have shape (b, s_q, h_q, {L.D_QK}), got {tuple(q.shape)}")
    c8, rope, scale = quantize_rows(q)
    return QuantizedQ(content=c8, rope=rope, scale=scale)


def dequantize_q(qq: QuantizedQ, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """QuantizedQ (or any (content, rope, scale) triple) -> (..., 576) in dtype: content * scale, rope * scale,
    computed in dtype (fp32: the kernel's domain; float64: exact, for the float64 references)."""
    s = qq.scale.to(dtype).unsqueeze(-1)
    return torch.cat([qq.content.to(dtype) * s, qq.rope.to(dtype) * s], dim=-1)
