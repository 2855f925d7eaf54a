"""decode_dense: the attention numerics of docs/numerics_contract.md section 4 on dense, batched inputs.

One query row walks its KV tokens in blocks of p_block, in increasing order, keeping the probability-scale-domain
state (m, sigma, O~, L~). With n the block and j a token of the block:

    x_j      = ((acc_j * q_scale) * k_scale_j) * softmax_scale     acc_j = q_c . k_c_j + q_r . k_r_j (fp32)
    m_n      = max(m_{n-1}, max_j x_j)
    alpha_n  = exp(m_{n-1} - m_n)              (1 while m_n is still -inf: nothing seen yet)
    e_j      = exp(x_j - m_n)                  (0 by select for a masked token)
    p'_j     = e_j * k_scale_j                 (scale fusion: V's per-token scale moves into P)
    sigma_n  = max(max_j p'_j, P_FLOOR) / 448
    p8_j     = e4m3(p'_j / sigma_n)
    f_n      = alpha_n * (sigma_{n-1} / sigma_n)
    O~_n     = O~_{n-1} * f_n + sum_j p8_j * k_c_j
    L~_n     = L~_{n-1} * f_n + (sum_j e_j) / sigma_n
    o        = O~_N / L~_N,   lse = m_N + ln(sigma_N * L~_N)

The state starts at m = -inf, sigma = P_FLOOR / 448, O~ = 0, L~ = 0. A block in which all of a row's p'_j are 0
(no visible token, e.g. the causal tail or the padding past a shorter request, or every p' underflowed) leaves that
row's m, sigma, O~ and L~ unchanged, as the kernel does (csrc/kernels/sm90/decode_fp8/shared/softmax.cuh). A row that
sees no token returns o = 0 and lse = +inf.

P_FLOOR = 2^-60 (kv_layout.h) bounds the forward ratio sigma_{n-1} / sigma_n after a block of tiny p' (every logit
~75 or more below the running max) by p'_max / 2^-60 ~ 1e20 for content amax <= 2^16, so O~ and L~ cannot
overflow; with FLT_MIN as the floor that ratio reached ~1e35 and o became NaN.

Masking is by select only: masked logits become -inf, masked p' become 0, and V rows that no query row sees are
zeroed before the PV product, so NaN or garbage in unused cache slots never reaches a result (a token that some
row sees is data, and must be finite for every row's sake, as in the kernel).

p_quant="running" is an alternative studied in snapmla_ext.numerics, not what the kernel does:

    sigma_n = max(max_j p'_j / 448, alpha_n * sigma_{n-1})     (sigma_{-1} = P_FLOOR / 448)

so f_n <= 1 whatever the floor; a block is quantized against the running maximum of p' instead of its own when
that is larger (measured cost on FlashMLA-like data: rel L2 2.81e-2 -> 2.83e-2 against float64).
"""

from __future__ import annotations

import torch

from snapmla_ext import layout as L
from snapmla_ext.reference.quant import div_ieee, e4m3

P_QUANT_MODES = ("block", "running", "none", "unscaled")

# Logits are computed for a chunk of tokens at a time (one batched matmul), keeping the chunk's (B, R, tokens)
# fp32 logits near 16 MiB: b = 8, h_q = 128 then takes 4096 tokens per matmul.
_CHUNK_ELEMENTS = 1 << 22


def _check_shapes(q_c, q_r, q_scale, k_c, k_r, k_scale, visible) -> None:
    named = dict(q_c=q_c, q_r=q_r, q_scale=q_scale, k_c=k_c, k_r=k_r, k_scale=k_scale, visible=visible)
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device != q_c.device:
            raise ValueError(f"{name} must be on q_c's device {q_c.device}, got {t.device}")
    if q_c.dim() != 3 or q_c.shape[2] != L.D_CONTENT:
        raise ValueError(f"q_c must have shape (B, R, {L.D_CONTENT}), got {tuple(q_c.shape)}")
    B, R, _ = q_c.shape
    if k_c.dim() != 3 or k_c.shape[0] != B or k_c.shape[2] != L.D_CONTENT:
        raise ValueError(f"k_c must have shape ({B}, N, {L.D_CONTENT}), got {tuple(k_c.shape)}")
    N = k_c.shape[1]
    expected = dict(
        q_r=(B, R, L.D_ROPE), q_scale=(B, R), k_r=(B, N, L.D_ROPE), k_scale=(B, N), visible=(B, R, N)
    )
    for name, shape in expected.items():
        if tuple(named[name].shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(named[name].shape)}")
    for name in ("q_c", "q_r", "q_scale", "k_c", "k_r", "k_scale"):
        if named[name].dtype != torch.float32:
            raise ValueError(f"{name} must be float32 (values of the quantized operands), got {named[name].dtype}")
    if visible.dtype != torch.bool:
        raise ValueError(f"visible must be a bool mask, got {visible.dtype}")


def decode_dense(
    q_c: torch.Tensor,
    q_r: torch.Tensor,
    q_scale: torch.Tensor,
    k_c: torch.Tensor,
    k_r: torch.Tensor,
    k_scale: torch.Tensor,
    visible: torch.Tensor,
    softmax_scale: float,
    *,
    p_block: int = 64,
    p_quant: str = "block",
    block_offset: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """docs/numerics_contract.md section 4 for B independent problems of R query rows over N tokens (see the module docstring).

    q_c (B, R, 512), q_r (B, R, 64), q_scale (B, R): fp32 query values (e.g. float(q8), float(q_r'), scale).
    k_c (B, N, 512), k_r (B, N, 64), k_scale (B, N): fp32 key values; V is k_c.
    visible (B, R, N) bool: which tokens each row attends to.
    softmax_scale: multiplies the logits (natural log domain).
    p_block: tokens per P-quantization block. p_quant: "block" (contract: per row and block sigma), "running" (sigma
    never drops below alpha_n * sigma_{n-1}, see the module docstring), "none" (p' kept in fp32, sigma = 1),
    "unscaled" (p8 = e4m3(p') with sigma = 1, as per-tensor FP8 engines do).
    block_offset: the walk starts at token block_offset (a multiple of p_block); earlier tokens are not part of
    this piece and are never read, so a split piece can take the whole sequence's tensors.
    Returns o (B, R, 512) fp32 and lse (B, R) fp32 (natural log; o = 0, lse = +inf for a row with no visible token).
    On CUDA this assumes fp32 matmuls (torch.backends.cuda.matmul.allow_tf32 = False, torch's default).
    """
    _check_shapes(q_c, q_r, q_scale, k_c, k_r, k_scale, visible)
    if p_quant not in P_QUANT_MODES:
        raise ValueError(f"p_quant must be one of {P_QUANT_MODES}, got {p_quant!r}")
    if not isinstance(p_block, int) or p_block <= 0:
        raise ValueError(f"p_block must be a positive int, got {p_block!r}")
    N = k_c.shape[1]
    if block_offset < 0 or block_offset % p_block or block_offset > N:
        raise ValueError(f"block_offset must be a multiple of p_block = {p_block} in [0, N = {N}], got {block_offset}")

    B, R, _ = q_c.shape
    dev = q_c.device
    neg_inf = torch.tensor(-float("inf"), device=dev)
    q = torch.cat([q_c, q_r], dim=-1)  # one fp32 accumulator for content and RoPE, as in the kernel
    qs = q_scale.unsqueeze(-1)

    m = torch.full((B, R), -float("inf"), device=dev)
    sigma = div_ieee(torch.full((B, R), L.P_FLOOR, device=dev), L.FP8_E4M3_MAX)
    o_acc = torch.zeros(B, R, L.D_CONTENT, device=dev)
    l_acc = torch.zeros(B, R, device=dev)
    seen = torch.zeros(B, R, dtype=torch.bool, device=dev)

    chunk = p_block * max(1, _CHUNK_ELEMENTS // max(1, B * R * p_block))
    for c0 in range(block_offset, N, chunk):
        c1 = min(N, c0 + chunk)
        vis = visible[:, :, c0:c1]
        k = torch.cat([k_c[:, c0:c1], k_r[:, c0:c1]], dim=-1)
        ks = k_scale[:, None, c0:c1]
        x = torch.where(vis, torch.bmm(q, k.transpose(1, 2)) * qs * ks * softmax_scale, neg_inf)
        # V rows that no row sees may be NaN (unused slots): zero them, since p8 = 0 times NaN is NaN.
        v = torch.where(vis.any(dim=1).unsqueeze(-1), k_c[:, c0:c1], torch.zeros((), device=dev))
        seen |= vis.any(dim=-1)

        for b0 in range(0, c1 - c0, p_block):
            b1 = min(c1 - c0, b0 + p_block)
            xb, vb = x[:, :, b0:b1], vis[:, :, b0:b1]
            m_new = torch.maximum(m, xb.amax(dim=-1))
            # Until a row has seen a token m stays -inf and exp(-inf - -inf) would be NaN: alpha is 1 there.
            alpha = torch.where(m_new == -float("inf"), torch.ones((), device=dev), torch.exp(m - m_new))
            e = torch.where(vb, torch.exp(xb - m_new.unsqueeze(-1)), torch.zeros((), device=dev))
            p = torch.where(vb, e * ks[:, :, b0:b1], torch.zeros((), device=dev))
            if p_quant in ("block", "running"):
                sigma_new = div_ieee(torch.clamp_min(p.amax(dim=-1), L.P_FLOOR), L.FP8_E4M3_MAX)
                if p_quant == "running":
                    sigma_new = torch.maximum(sigma_new, alpha * sigma)
                p_op = e4m3(p / sigma_new.unsqueeze(-1)).float()
            elif p_quant == "unscaled":
                sigma_new = torch.ones_like(sigma)
                p_op = e4m3(p).float()
            else:
                sigma_new = torch.ones_like(sigma)
                p_op = p
            f = alpha * (sigma / sigma_new)
            o_new = o_acc * f.unsqueeze(-1) + torch.bmm(p_op, v[:, b0:b1])
            l_new = l_acc * f + e.sum(dim=-1) / sigma_new
            upd = p.amax(dim=-1) > 0  # rows with nothing to add keep their state (see the module docstring)
            m, sigma = torch.where(upd, m_new, m), torch.where(upd, sigma_new, sigma)
            l_acc = torch.where(upd, l_new, l_acc)
            o_acc = torch.where(upd.unsqueeze(-1), o_new, o_acc)

    o = torch.where(seen.unsqueeze(-1), o_acc / l_acc.unsqueeze(-1), torch.zeros((), device=dev))
    lse = torch.where(seen, m + torch.log(sigma * l_acc), torch.tensor(float("inf"), device=dev))
    return o, lse

