"""Kernel against the emulation on degenerate data, where every rounding difference is amplified
(docs/numerics_contract.md section 8 item 6: the emulation computes what the kernels compute).

- q = 0: uniform attention over every token, o is the mean of V (much smaller than its terms), and every block's
  P is e4m3(448 * s_j / max s) exactly: with the scales' ratios of bf16 amaxes, many of those land on e4m3
  rounding ties, so an emulation that divides by sigma instead of multiplying by the kernel's reciprocal rounds
  them the other way (rel L2 4.7-5.5e-3 against the kernel before the emulation followed the kernel's order).
- near-uniform attention (q ~ 1e-3), identical tokens (o = that token's V), one token per request.
Each against decode(pv_accumulation="fp32") (the emulation the other tests use) and, for the uniform cases,
decode(pv_accumulation="fp8_wgmma") (the tensor cores' truncating PV accumulation, snapmla_ext/reference/mma.py),
printing both; tolerances are section 7's. Every kernel: narrow, wide, ws, split and unsplit.
"""

import pytest
import torch

from snapmla_ext import layout as L
from snapmla_ext import ops, reference
from snapmla_ext.decode_ops import flash_mla_with_kvcache, get_mla_metadata
from utils.compare import cos_diff, max_abs, rel_l2
from utils.data import make_paged_inputs
from utils.kernel_choice import force_kernel
from utils.sched_plan import split_blocks

pytestmark = pytest.mark.gpu

O_REL_L2, O_COS, LSE_ATOL = 3e-3, 1e-5, 1e-3
# (kernel, s_q, h_q): each decode kernel, one with two query tokens
KERNELS = [("narrow", 1, 16), ("wide", 1, 32), ("ws", 1, 64), ("ws", 2, 128)]
LONG = [16384, 4096, 777, 1]  # one request of 256 blocks, a partial last block, a single token


def _decode(p, s_q, h_q, parts):
    kw = {} if parts is None else {"num_sm_parts": parts}
    meta, splits = get_mla_metadata(p.cache_seqlens, s_q * h_q, 1, **kw)
    out, lse = flash_mla_with_kvcache(p.q, p.cache, p.block_table, p.cache_seqlens, L.D_CONTENT, meta, splits)
    torch.cuda.synchronize()
    return out, lse, split_blocks(meta, p.seqlens)  # the plan's pieces, for the emulation


def _check(name, got, p, pv_accumulations):
    out, lse, pieces = got
    assert not out.isnan().any() and not lse.isnan().any(), name
    for acc in pv_accumulations:
        ref_out, ref_lse = reference.decode(p.q, p.cache, p.block_table, p.cache_seqlens, pv_accumulation=acc,
                                            split_blocks=pieces)
        o_err, o_cos = rel_l2(out.float(), ref_out.float()), cos_diff(out.float(), ref_out.float())
        lse_err = max_abs(lse, ref_lse)
        print(f"\n{name} vs emulation ({acc}): o rel_l2 {o_err:.3e} 1-cos {o_cos:.3e} | lse {lse_err:.3e}")
        assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse)), name
        assert o_err <= O_REL_L2 and o_cos <= O_COS and lse_err <= LSE_ATOL, (name, acc)


def _with_rows(p, rows):
    """p with every request's cache rows replaced by rows (b, s_k_max, 576) bf16 through the same slots."""
    valid = p.slots >= 0
    ops.append_kv(p.cache, rows[valid].contiguous(), p.slots[valid])
    p.kv = torch.where(valid.unsqueeze(-1), rows, p.kv)
    return p


@pytest.mark.parametrize("parts", [None, 1], ids=["default_plan", "unsplit"])
@pytest.mark.parametrize("kernel,s_q,h_q", KERNELS, ids=[f"{k}_sq{s}_h{h}" for k, s, h in KERNELS])
def test_uniform_attention_q_zero(kernel, s_q, h_q, parts):
    force_kernel(kernel)
    p = make_paged_inputs(len(LONG), s_q, h_q, LONG, seed=h_q + s_q, device="cuda", q_std=0.0)
    assert (p.q == 0).all()
    _check(f"q=0 {kernel} h{h_q} parts={parts}", _decode(p, s_q, h_q, parts), p, ("fp32", "fp8_wgmma"))


@pytest.mark.parametrize("kernel,s_q,h_q", KERNELS, ids=[f"{k}_sq{s}_h{h}" for k, s, h in KERNELS])
def test_near_uniform_attention(kernel, s_q, h_q):
    force_kernel(kernel)
    p = make_paged_inputs(len(LONG), s_q, h_q, LONG, seed=7 * h_q, device="cuda", q_std=1e-3)
    _check(f"q~1e-3 {kernel} h{h_q}", _decode(p, s_q, h_q, None), p, ("fp32", "fp8_wgmma"))


@pytest.mark.parametrize("kernel,s_q,h_q", KERNELS, ids=[f"{k}_sq{s}_h{h}" for k, s, h in KERNELS])
def test_identical_tokens(kernel, s_q, h_q):
    """Every token of a request is the same row: o is that row's dequantized V whatever the logits."""
    force_kernel(kernel)
    lens = [4096, 130, 65]
    p = make_paged_inputs(len(lens), s_q, h_q, lens, seed=3 * h_q, device="cuda")
    one = p.kv[:, :1].clone()  # each request's first row
    p = _with_rows(p, one.expand_as(p.kv).contiguous())
    got = _decode(p, s_q, h_q, None)
    _check(f"identical tokens {kernel} h{h_q}", got, p, ("fp32",))
    v = reference.fetch_dequant(p.cache.data, p.slots[:, :1].reshape(-1)).float()[:, : L.D_CONTENT]  # (b, 512)
    err = rel_l2(got[0].float(), v[:, None, None, :].expand_as(got[0]))
    print(f"identical tokens {kernel} h{h_q}: o against the token's V rel_l2 {err:.3e}")
    assert err <= O_REL_L2


@pytest.mark.parametrize("q_std", [0.1, 1.0, 3.0])
@pytest.mark.parametrize("kernel,s_q,h_q", KERNELS, ids=[f"{k}_sq{s}_h{h}" for k, s, h in KERNELS])
def test_one_token(kernel, s_q, h_q, q_std):
    """One visible token per request (o is its V, lse its logit). q up to std 3: sum_d |q_d k_d| * scale stays
    within ~10 nats (at std 30 the QK product's FP8 accumulation costs 1-3e-3 nats of lse: the known gap)."""
    force_kernel(kernel)
    p = make_paged_inputs(3, s_q, h_q, [1, 1, 1], seed=11 * h_q, device="cuda", q_std=q_std, clip=None)
    _check(f"one token {kernel} h{h_q} q_std={q_std}", _decode(p, s_q, h_q, None), p, ("fp32", "fp8_wgmma"))
