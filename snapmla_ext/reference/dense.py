"""decode_dense: the attention numerics of docs/numerics_contract.md section 4 on dense, batched inputs, computed
the way the decode kernels compute them (csrc/kernels/sm90/decode_fp8/shared/softmax.cuh).

One query row walks its KV tokens in blocks of p_block, in increasing order, keeping the state (m, inv, O~, L~)
with inv = 1 / sigma. In base 2 (log2 e folded into the row's logit multiplier), with n the block and j a token:

    x2_j     = (acc_j * q_mul) * k_scale_j     acc_j = q_c . k_c_j + q_r . k_r_j (fp32),
                                               q_mul = q_scale * (softmax_scale * log2 e) (fp32)
    m_n      = max(m_{n-1}, max_j x2_j)
    e_j      = 2^(x2_j - m_n)                  (0 by select for a masked token)
    p'_j     = e_j * k_scale_j                 (scale fusion: V's per-token scale moves into P)
    inv_n    = 448 * rcp(max(max_j p'_j, P_FLOOR))          (sigma_n = 1 / inv_n)
    p8_j     = e4m3(p'_j * inv_n)
    f_n      = 2^(m_{n-1} - m_n) * (inv_n * rcp(inv_{n-1}))  (0 before the first visible token)
    O~_n     = O~_{n-1} * f_n + sum_j p8_j * k_c_j
    L~_n     = L~_{n-1} * f_n + (sum_j e_j) * inv_n
    o        = O~_N * rcp(L~_N),   lse = ln 2 * (m_N + log2(L~_N / inv_N))

rcp is the fp32 reciprocal (the kernels' MUFU.RCP is within one ulp of it) and 2^x torch.exp2 (MUFU.EX2 within
two ulps): the same operations in the same order, so even degenerate data (q = 0: uniform attention over every
token; identical tokens) that amplifies each rounding stays within the contract's tolerances of the kernel. That
is docs/numerics_contract.md section 8 item 6; the contract's natural-log form of section 4 is the same algebra.

The PV sum is fp32 by default. pv_accumulation="fp8_wgmma" computes it as the kernels' tensor cores do: a fresh
accumulator per block, the block's tokens in k32 steps of 32 tokens with each step's products truncated to 13
fraction bits of the largest exponent (snapmla_ext/reference/mma.py), then folded into O~ in fp32. That
truncation is what separates kernel and fp32 emulation when attention is spread evenly over thousands of tokens
(q = 0: o is the mean of V, much smaller than its terms): rel L2 up to ~5e-3 at 16k tokens. It materialises one
float64 per product (rows x 512 x 32 per step), so it is for tests on small cases, not for the fuzz.

A block in which all of a row's p'_j are 0 (no visible token, e.g. the causal tail or the padding past a shorter
request, or every p' underflowed) leaves that row's state unchanged, as the kernel does. A row that sees no token
returns o = 0 and lse = +inf.

P_FLOOR = 2^-60 (kv_layout.h) bounds the forward ratio sigma_{n-1} / sigma_n after a block of tiny p' (every logit
~75 or more below the running max) by p'_max / 2^-60 ~ 1.7e20 (p' <= 2^16 / 448: the quantizers' content range),
so O~ and L~ cannot overflow; with FLT_MIN as the floor that ratio reached ~1e35 and o became NaN.

Masking is by select only: masked logits become -inf, masked p' become 0, and V rows that no row sees are
zeroed before the PV product, so NaN or garbage in unused cache slots never reaches a result (a token that some
row sees is data, and must be finite for every row's sake, as in the kernel).

p_quant="running" is an alternative studied in snapmla_ext.numerics, not what the kernel does:

    sigma_n = max(max_j p'_j / 448, alpha_n * sigma_{n-1})     (sigma_{-1} = P_FLOOR / 448)

so f_n <= 1 whatever the floor; a block is quantized against the running maximum of p' instead of its own when
that is larger (measured cost on FlashMLA-like data: rel L2 2.81e-2 -> 2.83e-2 against float64).

p_quant="bound" is the block scale as an upper bound of max_j p'_j that needs no reduction over p':

    sigma_n = 2^(max_j x2_j - m_n) * max_j k_scale_j / 448     (inv_n = 448 * rcp(max(that, P_FLOOR)))

with the first maximum the row's logit maximum of the block (already reduced for m_n) and the second over the
block's tokens that the request sees (one value per block, shared by every row). p' * inv_n <= 448 still holds, so
nothing saturates; a row whose largest e_j and largest k_scale_j fall on different tokens quantizes its P on a
coarser grid. Also studied in snapmla_ext.numerics (docs/design.md: the compute-bound design's budget).

p_ref="block" takes each block's exponentials against the block's own logit maximum instead of the running one,
the form a kernel needs when consecutive blocks' softmaxes run on different warpgroups or CTAs (docs/design.md
section 4, candidate E): no block's softmax then waits for the previous block's state. With r_n = max_j x2_j:

    e_j = 2^(x2_j - r_n),  p'_j = e_j * k_scale_j,  inv_n = 448 * rcp(max(max_j p'_j, P_FLOOR))
    f_n = 2^(r_{n-1} - r_n) * (inv_n * rcp(inv_{n-1})),  L~_n = L~_{n-1} * f_n + (sum_j e_j) * inv_n

which is the contract's algebra with the running maximum m_n replaced by r_n (sigma_n = 2^(r_n - m_n) / inv_n in
the contract's units): p8 is the same up to the rounding of 2^x. The running maximum m_n is still kept, for the
floor only: a block whose largest p' in the contract's units, 2^(r_n - m_n) max_j p'_j, is below P_FLOOR is
dropped (its p8 would be quantised on the floored grid, worth < 2^-60 of the row's largest term), which bounds
f_n as P_FLOOR does. lse = ln 2 * (r_N + log2(L~_N / inv_N)), r_N of the row's last kept block.
"""

from __future__ import annotations

import torch

from snapmla_ext import layout as L
from snapmla_ext.reference.mma import fp8_gemm_chain
from snapmla_ext.reference.quant import e4m3

P_QUANT_MODES = ("block", "running", "bound", "none", "unscaled")
P_REFS = ("running", "block")
PV_ACCUMULATIONS = ("fp32", "fp8_wgmma")
LOG2E = 1.4426950408889634  # config.h LOG2E (the kernels fold it into the row's logit multiplier)
LN2 = 0.6931471805599453

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
    p_ref: str = "running",
    block_offset: int = 0,
    pv_accumulation: str = "fp32",
) -> tuple[torch.Tensor, torch.Tensor]:
    """docs/numerics_contract.md section 4 for B independent problems of R query rows over N tokens (see the module docstring).

    q_c (B, R, 512), q_r (B, R, 64), q_scale (B, R): fp32 query values (e.g. float(q8), float(q_r'), scale).
    k_c (B, N, 512), k_r (B, N, 64), k_scale (B, N): fp32 key values; V is k_c.
    visible (B, R, N) bool: which tokens each row attends to.
    softmax_scale: multiplies the logits (natural log domain).
    p_block: tokens per P-quantization block. p_quant: "block" (contract: per row and block sigma), "running" (sigma
    never drops below alpha_n * sigma_{n-1}, see the module docstring), "bound" (sigma from the row's logit maximum
    and the block's largest k_scale, no reduction over p'), "none" (p' kept in fp32, sigma = 1),
    "unscaled" (p8 = e4m3(p') with sigma = 1, as per-tensor FP8 engines do).
    p_ref: "running" (the contract: exponentials against the running maximum) or "block" (against each block's
    own maximum, see the module docstring; with p_quant "block" only).
    block_offset: the walk starts at token block_offset and counts its P blocks from there (a split piece's first
    page starts a P block, also when p_block spans two pages); a multiple of p_block, or of a page (64) when
    p_block is larger. Earlier tokens are not part of this piece and are never read, so a split piece can take
    the whole sequence's tensors.
    pv_accumulation: "fp32" (the PV sum in fp32) or "fp8_wgmma" (the tensor cores' truncating accumulation, see
    the module docstring; slow, for small cases).
    Returns o (B, R, 512) fp32 and lse (B, R) fp32 (natural log; o = 0, lse = +inf for a row with no visible token).
    On CUDA this assumes fp32 matmuls (torch.backends.cuda.matmul.allow_tf32 = False, torch's default).
    """
    _check_shapes(q_c, q_r, q_scale, k_c, k_r, k_scale, visible)
    if p_quant not in P_QUANT_MODES:
        raise ValueError(f"p_quant must be one of {P_QUANT_MODES}, got {p_quant!r}")
    if p_ref not in P_REFS:
        raise ValueError(f"p_ref must be one of {P_REFS}, got {p_ref!r}")
    if p_ref == "block" and p_quant != "block":
        raise ValueError(f"p_ref='block' needs p_quant='block', got p_quant={p_quant!r}")
    if not isinstance(p_block, int) or p_block <= 0:
        raise ValueError(f"p_block must be a positive int, got {p_block!r}")
    N = k_c.shape[1]
    align = min(p_block, L.PAGE_BLOCK_SIZE)
    if block_offset < 0 or block_offset % align or block_offset > N:
        raise ValueError(
            f"block_offset must be a multiple of min(p_block, {L.PAGE_BLOCK_SIZE}) = {align} in [0, N = {N}], "
            f"got {block_offset}"
        )

    if pv_accumulation not in PV_ACCUMULATIONS:
        raise ValueError(f"pv_accumulation must be one of {PV_ACCUMULATIONS}, got {pv_accumulation!r}")

    B, R, _ = q_c.shape
    dev = q_c.device
    zero = torch.zeros((), device=dev)
    neg_inf = torch.tensor(-float("inf"), device=dev)
    q = torch.cat([q_c, q_r], dim=-1)  # one fp32 accumulator for content and RoPE, as in the kernel
    # The row's logit multiplier, rounded as the kernel rounds it (schedule.cuh row_logit_multiplier).
    q_mul = (q_scale * torch.tensor(softmax_scale * LOG2E, dtype=torch.float32)).unsqueeze(-1)

    m = torch.full((B, R), -float("inf"), device=dev)
    ref = m.clone()  # the exponentials' reference of the last kept block: m itself unless p_ref = "block"
    inv = torch.full((B, R), L.FP8_E4M3_MAX / L.P_FLOOR, device=dev)  # 1 / sigma_{-1} = 448 / P_FLOOR
    o_acc = torch.zeros(B, R, L.D_CONTENT, device=dev)
    l_acc = torch.zeros(B, R, device=dev)
    seen = torch.zeros(B, R, dtype=torch.bool, device=dev)

    chunk = p_block * max(1, _CHUNK_ELEMENTS // max(1, B * R * p_block))
    for c0 in range(block_offset, N, chunk):
        c1 = min(N, c0 + chunk)
        vis = visible[:, :, c0:c1]
        k = torch.cat([k_c[:, c0:c1], k_r[:, c0:c1]], dim=-1)
        ks = k_scale[:, None, c0:c1]
        x = torch.where(vis, torch.bmm(q, k.transpose(1, 2)) * q_mul * ks, neg_inf)
        # V rows that no row sees may be NaN (unused slots): zero them, since p8 = 0 times NaN is NaN.
        v = torch.where(vis.any(dim=1).unsqueeze(-1), k_c[:, c0:c1], zero)
        seen |= vis.any(dim=-1)

        for b0 in range(0, c1 - c0, p_block):
            b1 = min(c1 - c0, b0 + p_block)
            xb, vb = x[:, :, b0:b1], vis[:, :, b0:b1]
            x_max = xb.amax(dim=-1)
            m_new = torch.maximum(m, x_max)
            # A row that has seen nothing has m_new = -inf: its exponent base is 0 (its logits are all -inf).
            m_use = torch.where(m_new == -float("inf"), zero, m_new)
            if p_ref == "block":
                m_use = torch.where(x_max == -float("inf"), zero, x_max)
            e = torch.where(vb, torch.exp2(xb - m_use.unsqueeze(-1)), zero)
            p = torch.where(vb, e * ks[:, :, b0:b1], zero)
            p_max = p.amax(dim=-1)
            if p_quant == "bound":
                # The block's largest scale over the tokens the request sees (0 for a block it does not see).
                ks_vis = torch.where(vb.any(dim=1, keepdim=True), ks[:, :, b0:b1], zero)
                e_max = torch.where(x_max == -float("inf"), zero, torch.exp2(x_max - m_use))
                bound = e_max * ks_vis.amax(dim=-1)
                inv_new = L.FP8_E4M3_MAX * torch.reciprocal(torch.clamp_min(bound, L.P_FLOOR))
                p_op = e4m3(p * inv_new.unsqueeze(-1)).float()
            elif p_quant in ("block", "running"):
                inv_new = L.FP8_E4M3_MAX * torch.reciprocal(torch.clamp_min(p_max, L.P_FLOOR))
                if p_quant == "running":  # sigma_n >= alpha_n sigma_{n-1}, i.e. inv_n <= inv_{n-1} / alpha_n
                    alpha = torch.where(m == -float("inf"), torch.ones((), device=dev), torch.exp2(m - m_new))
                    inv_new = torch.minimum(inv_new, inv / alpha)
                p_op = e4m3(p * inv_new.unsqueeze(-1)).float()
            elif p_quant == "unscaled":
                inv_new = torch.ones_like(inv)
                p_op = e4m3(p).float()
            else:
                inv_new = torch.ones_like(inv)
                p_op = p
            ref_new = m_new if p_ref == "running" else x_max
            ratio = torch.exp2(ref - ref_new) * (inv_new * torch.reciprocal(inv))
            f = torch.where(ref == -float("inf"), zero, ratio)  # nothing to rescale before the first token
            if pv_accumulation == "fp8_wgmma":
                pv = fp8_gemm_chain(p_op.double(), v[:, b0:b1].double().transpose(1, 2))
                o_new = (o_acc.double() * f.double().unsqueeze(-1) + pv).float()  # the fold's FFMA: one rounding
            else:
                o_new = o_acc * f.unsqueeze(-1) + torch.bmm(p_op, v[:, b0:b1])
            l_new = l_acc * f + e.sum(dim=-1) * inv_new
            upd = p_max > 0  # rows with nothing to add keep their state (see the module docstring)
            if p_ref == "block":  # the floor as a drop rule: p' in the contract's units below P_FLOOR
                upd = upd & (torch.exp2(x_max - m_new) * p_max >= L.P_FLOOR)
            m, inv = torch.where(upd, m_new, m), torch.where(upd, inv_new, inv)
            ref = torch.where(upd, ref_new, ref)
            l_acc = torch.where(upd, l_new, l_acc)
            o_acc = torch.where(upd.unsqueeze(-1), o_new, o_acc)

    o = torch.where(seen.unsqueeze(-1), o_acc * torch.reciprocal(l_acc).unsqueeze(-1), zero)
    lse = torch.where(seen, LN2 * (ref + torch.log2(l_acc / inv)), torch.tensor(float("inf"), device=dev))
    return o, lse
