"""Model of one Hopper WGMMA k-step's accumulation, as the decode kernels' tensor cores compute it.

FP8 WGMMA does not accumulate in full fp32 (docs/design.md section 6). One k32 FP8 step D = C + sum of 32
products: the 32 exact products and C are aligned to the largest exponent among them (a product's exponent is the
sum of its factors' exponents), each is truncated toward zero to 13 fraction bits of that exponent, the truncated
terms are summed exactly, and the sum is truncated toward zero to 13 fraction bits (14 significant bits). The
BF16 k16 step is the same with 25 fraction bits per term and an fp32 (23-bit) result. The H200 matches this bit
for bit on single WGMMAs (tools/microbench/wgmma_fp8_accumulation.cu); tools/numerics/qk_accumulation_model.py
uses it for the QK product, decode_dense(pv_accumulation="fp8_wgmma") for PV.

All tensors are float64 holding e4m3 / bf16 / fp32 values, so every product and every aligned sum is exact.
"""

from __future__ import annotations

import torch

FP8_K_STEP = 32  # k of one FP8 WGMMA (m64nNk32)
BF16_K_STEP = 16  # k of one BF16 WGMMA (m64nNk16)
FP8_FRAC_BITS = 13
BF16_STEP_FRAC_BITS, FP32_FRAC_BITS = 25, 23
E4M3_MIN_EXP, BF16_MIN_EXP = -6, -126
NO_EXP = -100000.0  # exponent of a zero term: never the largest


def exponents(x: torch.Tensor, min_exp: int) -> torch.Tensor:
    """floor(log2 |x|), at least min_exp (subnormals), NO_EXP for 0 (exact: frexp, not a logarithm)."""
    e = (torch.frexp(x)[1] - 1).to(x.dtype).clamp(min=min_exp)
    return torch.where(x == 0, torch.full_like(x, NO_EXP), e)


def truncate_frac(x: torch.Tensor, frac_bits: int) -> torch.Tensor:
    """x truncated toward zero to frac_bits fraction bits of its own exponent (frac_bits + 1 significant bits)."""
    unit = torch.exp2(exponents(x, -100000) - frac_bits)
    return torch.where(x == 0, x, torch.trunc(x / unit) * unit)


def mma_step(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, frac_bits: int, out_frac_bits: int,
             min_exp: int) -> torch.Tensor:
    """One WGMMA k-step as modelled above: D[..., r, t] = C + sum_k a[..., r, k] * b[..., t, k].

    c (..., R, T), a (..., R, K), b (..., T, K), float64 (leading dims broadcast); returns D (..., R, T).
    Memory: one float64 per product, (..., R, T, K).
    """
    prods = a[..., :, None, :] * b[..., None, :, :]  # (..., R, T, K), exact in float64
    e_prod = exponents(a, min_exp)[..., :, None, :] + exponents(b, min_exp)[..., None, :, :]
    e_max = torch.maximum(e_prod.amax(-1), exponents(c, -126))  # (..., R, T)
    unit = torch.exp2(e_max - frac_bits)
    total = (torch.trunc(prods / unit[..., None]) * unit[..., None]).sum(-1) + torch.trunc(c / unit) * unit
    return truncate_frac(total, out_frac_bits)


def fp8_gemm_chain(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """sum_k a[..., r, k] b[..., t, k] as one chain of FP8 k32 steps from a zero accumulator (k in order).

    a (..., R, K), b (..., T, K): float64 holding e4m3 values; K a multiple of 32 or less than 32 (a partial step
    is zero-padded, which changes nothing). Returns (..., R, T) float64 (14 significant bits, exact in fp32).
    """
    c = torch.zeros(*torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-2],
                    dtype=torch.float64, device=a.device)
    for k0 in range(0, a.shape[-1], FP8_K_STEP):
        sl = slice(k0, k0 + FP8_K_STEP)
        c = mma_step(c, a[..., sl], b[..., sl], FP8_FRAC_BITS, FP8_FRAC_BITS, E4M3_MIN_EXP)
    return c
