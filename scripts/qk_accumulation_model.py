"""Model of the FP8 WGMMA accumulation precision in the decode kernel's QK, and of promoting it to fp32.

Question: the kernel's lse is 5.9e-3 nats off the fp32 emulation on the heavy-tailed synthetic layer of
tests/test_numerics.py (H200, measured), against SPEC's 1e-3. Would promoting the QK accumulator to fp32 every
few k-steps (DeepGEMM's fix for long K) close that gap, and at what cost?

Model: Hopper's FP8 MMA keeps about 14 significant bits when it adds into its accumulator (DeepSeek-V3). Each
k32 WGMMA step adds an exact 32-term partial dot product and the result is truncated to B bits; a "group" of g
steps starts from a fresh accumulator and is added to an fp32 total (the promotion). The RoPE k-group (BF16
WGMMA) is added in fp32. The error reported is the largest |lse - lse_exact| over the layer's query rows.

    PYTHONPATH=. python3 scripts/qk_accumulation_model.py        (CPU, ~2 min)

Result (2026-11-29): with no promotion (g = 16) the model gives 7.7e-3 at B = 14 and 3.1e-3 at B = 15, which
brackets the measured 5.9e-3; g = 4 gives 1.9e-3 / 6.6e-4, g = 2 1.1e-3 / 3.8e-4, g = 1 6.3e-4 / 2.9e-4 (the
largest logit is 32 nats). Promotion every 4 k-steps would bring the error near SPEC's 1e-3 but not reliably
under it; every 2 k-steps would (8 FADD passes of 32 values per block). The error is about |logit| * 2^-14.5,
inherent to FP8 WGMMA accumulation (docs/decode_kernel.md, Open problems).
"""

import torch

from snapmla_ext.numerics.data import SyntheticConfig, synthetic_layer
from snapmla_ext.reference import quantize_rows

K_STEP = 32  # dims per FP8 WGMMA k-step
CONTENT_STEPS = 16


def truncate_bits(x: torch.Tensor, bits: int) -> torch.Tensor:
    """x with its significand truncated (toward zero) to `bits` bits."""
    m, e = torch.frexp(x)
    return torch.ldexp(torch.trunc(m * 2.0**bits) / 2.0**bits, e)


def main() -> None:
    cfg = SyntheticConfig(seqlen=1000, num_queries=2, num_heads=64)
    layer = synthetic_layer(cfg, 7)  # the layer of test_kernel_lse_agrees_with_emulation_on_heavy_tailed_data
    qc, qr, qs = quantize_rows(layer.q.reshape(-1, layer.q.shape[-1]))
    kc, kr, ks = quantize_rows(layer.kv)
    qc, kc, qr, kr = qc.double(), kc.double(), qr.double(), kr.double()
    parts = torch.stack([qc[:, K_STEP * k : K_STEP * (k + 1)] @ kc[:, K_STEP * k : K_STEP * (k + 1)].T
                         for k in range(CONTENT_STEPS)])  # (16, rows, tokens), exact
    rope = (qr @ kr.T).float().double()
    logit_mul = qs.double()[:, None] * ks.double()[None, :] * cfg.softmax_scale

    def lse(acc: torch.Tensor) -> torch.Tensor:
        return torch.logsumexp(acc * logit_mul, dim=1)

    exact = lse((parts.sum(0).float().double() + rope).float().double())
    print(f"largest |logit|: {((parts.sum(0) + rope) * logit_mul).abs().max().item():.1f} nats")
    for bits in (14, 15):
        for group in (16, 4, 2, 1):
            total = torch.zeros_like(rope)
            for g0 in range(0, CONTENT_STEPS, group):
                acc = torch.zeros_like(rope)
                for k in range(g0, g0 + group):
                    acc = truncate_bits(acc + parts[k], bits)
                total = (total + acc).float().double()
            err = (lse((total + rope).float().double()) - exact).abs().max().item()
            print(f"accumulator bits {bits}, promotion every {group:2d} k-steps: lse max error {err:.2e}")


if __name__ == "__main__":
    main()
