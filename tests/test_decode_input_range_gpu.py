"""The input range (docs/numerics_contract.md section 2, "Input range"): finite outputs for every finite input,
results that match the emulation at the range's edges, and the debug checks that reject scales outside it.

Content saturates at +-2^16 and RoPE at +-2^32 when quantized (Fused-K-Append, Fused-Q-Quant). At the edges,
with a query small enough that logits stay within ~30 nats, kernel and emulation agree to section 7's tolerances;
at the BF16 maximum (3.39e38) in q, in the content and in the RoPE, logits reach ~1e20 nats and the outputs are
finite, o bounded by the largest visible |v| (a weighted average, up to P's e4m3 rounding).
"""

import pytest
import torch

from snapmla_ext import layout as L
from snapmla_ext import ops, reference
from snapmla_ext.decode_ops import flash_mla_with_kvcache, get_mla_metadata
from snapmla_ext.types import QuantizedQ
from utils.compare import cos_diff, max_abs, rel_l2
from utils.data import make_paged_inputs
from utils.kernel_choice import force_kernel
from utils.sched_plan import split_blocks

pytestmark = pytest.mark.gpu

O_REL_L2, O_COS, LSE_ATOL = 3e-3, 1e-5, 1e-3
BF16_MAX = torch.finfo(torch.bfloat16).max
KERNELS = [("narrow", 1, 16), ("wide", 1, 32), ("ws", 2, 64)]
LENS = [3000, 700, 64]


def _decode(p, q, s_q, h_q, parts=None):
    kw = {} if parts is None else {"num_sm_parts": parts}
    meta, splits = get_mla_metadata(p.cache_seqlens, s_q * h_q, 1, **kw)
    out, lse = flash_mla_with_kvcache(q, p.cache, p.block_table, p.cache_seqlens, L.D_CONTENT, meta, splits)
    torch.cuda.synchronize()
    return out, lse, split_blocks(meta, p.seqlens)  # the plan's pieces, for the emulation


def _rewrite(p, rows):
    """Write rows (b, s_k_max, 576) bf16 into p's cache through its slots (Fused-K-Append)."""
    valid = p.slots >= 0
    ops.append_kv(p.cache, rows[valid].contiguous(), p.slots[valid])
    p.kv = torch.where(valid.unsqueeze(-1), rows, p.kv)


def _edge_rows(p, value_c, value_r, seed):
    """p.kv with every 5th token's channels 3 and 200 at +-value_c and its RoPE channels 0 and 33 at +-value_r."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    rows = p.kv.clone()
    tok = torch.arange(rows.shape[1], device="cuda") % 5 == 0
    sign = torch.where(torch.rand(rows.shape[:2], generator=g, device="cuda") < 0.5, -1.0, 1.0)
    for ch, v in ((3, value_c), (200, value_c), (L.D_CONTENT, value_r), (L.D_CONTENT + 33, value_r)):
        rows[:, :, ch] = torch.where(tok, (sign * v).to(rows.dtype), rows[:, :, ch])
    return rows


@pytest.mark.parametrize("kernel,s_q,h_q", KERNELS, ids=[f"{k}_h{h}" for k, _, h in KERNELS])
@pytest.mark.parametrize("value_c,value_r", [(L.CONTENT_MAX, L.ROPE_MAX), (BF16_MAX, BF16_MAX)],
                         ids=["at_the_edges", "bf16_max_saturates"])
def test_range_edges_match_the_emulation(kernel, s_q, h_q, value_c, value_r):
    """Cache tokens at the range's edges (or beyond: saturated to them) with a query whose logits stay within
    ~30 nats (content ~1e-5, RoPE ~1e-10): kernel = emulation within section 7, through a split plan too."""
    force_kernel(kernel)
    p = make_paged_inputs(len(LENS), s_q, h_q, LENS, seed=h_q + 1, device="cuda", q_std=1e-5)
    _rewrite(p, _edge_rows(p, value_c, value_r, seed=h_q))
    q = p.q.clone()
    q[..., L.D_CONTENT :] = (q[..., L.D_CONTENT :].float() * 1e-5).to(q.dtype)
    for parts in (None, 64):
        out, lse, pieces = _decode(p, q, s_q, h_q, parts)
        ref_out, ref_lse = reference.decode(q, p.cache, p.block_table, p.cache_seqlens, split_blocks=pieces)
        assert ref_lse.abs().max() < 30, float(ref_lse.abs().max())
        o_err, o_cos, lse_err = rel_l2(out.float(), ref_out.float()), cos_diff(out.float(), ref_out.float()), max_abs(lse, ref_lse)
        print(f"\n{kernel} h{h_q} edges c={value_c:.3g} r={value_r:.3g} parts={parts}: o rel_l2 {o_err:.3e} "
              f"1-cos {o_cos:.3e} | lse {lse_err:.3e}")
        assert out.isfinite().all() and lse.isfinite().all()
        assert o_err <= O_REL_L2 and o_cos <= O_COS and lse_err <= LSE_ATOL


@pytest.mark.parametrize("kernel,s_q,h_q", KERNELS, ids=[f"{k}_h{h}" for k, _, h in KERNELS])
def test_bf16_max_everywhere_stays_finite(kernel, s_q, h_q):
    """q heads, content and RoPE at +-3.39e38 (logits up to ~1e20 nats, far outside the matching range): out and
    lse finite, |o| <= 1.07 max |v| over the request's tokens (o is a weighted average of them; e4m3 P rounds
    by at most 2^-4), split and unsplit."""
    force_kernel(kernel)
    p = make_paged_inputs(len(LENS), s_q, h_q, LENS, seed=5 * h_q, device="cuda", clip=None)
    _rewrite(p, _edge_rows(p, BF16_MAX, BF16_MAX, seed=h_q + 9))
    q = p.q.clone()
    q[:, :, ::3, 7] = BF16_MAX        # content at the maximum in every third head
    q[:, :, 1::3, L.D_CONTENT + 5] = -BF16_MAX  # RoPE at the maximum in others (content stays small there)
    q[:, :, 2::4, :] = BF16_MAX        # the whole row at the maximum
    v = reference.fetch_dequant(p.cache.data, p.slots.reshape(-1).clamp_min(0)).float()
    v = v.reshape(p.slots.shape + (L.D_QK,))[..., : L.D_CONTENT].masked_fill((p.slots < 0).unsqueeze(-1), 0)
    v_max = v.abs().amax(dim=(1, 2))  # (b,)
    for parts in (None, 1, 64):
        out, lse, _ = _decode(p, q, s_q, h_q, parts)
        print(f"\n{kernel} h{h_q} bf16 max parts={parts}: max |lse| {lse.abs().max().item():.3e}, "
              f"max |o| / max |v| {(out.float().abs().amax(dim=(1, 2, 3)) / v_max).max().item():.4f}")
        assert out.isfinite().all() and lse.isfinite().all()
        assert (out.float().abs().amax(dim=(1, 2, 3)) <= 1.07 * v_max).all()


def test_debug_checks_reject_scales_outside_the_range(monkeypatch):
    """SNAPMLA_DEBUG_CHECKS=1: a caller-made QuantizedQ scale outside (0, 2^16 / 448], and a read token's scale
    outside it (a cache written by other means), raise naming the argument; unread NaN slots do not."""
    monkeypatch.setenv("SNAPMLA_DEBUG_CHECKS", "1")
    p = make_paged_inputs(2, 1, 16, [100, 70], seed=3, device="cuda")
    qq = ops.quantize_q(p.q)
    _decode(p, qq, 1, 16)  # in range: no error (the pages hold NaN in every unused slot)
    for bad in (1e30, 0.0, -1.0, float("nan"), float("inf")):
        scale = qq.scale.clone()
        scale[1, 0, 5] = bad
        with pytest.raises(RuntimeError, match=r"q_scale: the query scales \(QuantizedQ.scale\) must lie in \(0, 146.28"):
            _decode(p, QuantizedQ(qq.content, qq.rope, scale), 1, 16)
    page = int(p.block_table[1, 1])  # request 1's tokens 64 .. 69
    off = L.SCALE_OFFSET + 4 * 5
    saved = p.cache.data[page, off : off + 4].clone()
    for bad in (1e30, float("nan"), 0.0):
        p.cache.data[page, off : off + 4] = torch.tensor([bad], dtype=torch.float32, device="cuda").view(torch.uint8)
        with pytest.raises(RuntimeError, match=rf"k_cache: the scale of token 69 of request 1 \(page {page}, slot 5\) must lie in"):
            _decode(p, p.q, 1, 16)
    # Slot 6 of that page is past request 1's 70 tokens: never read, never checked.
    p.cache.data[page, off : off + 4] = saved
    p.cache.data[page, off + 4 : off + 8] = torch.tensor([1e30], dtype=torch.float32, device="cuda").view(torch.uint8)
    out, _, _ = _decode(p, p.q, 1, 16)
    assert out.isfinite().all()
