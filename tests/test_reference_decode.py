"""snapmla_ext.reference decode_dense / decode / attention_fp64 (docs/numerics_contract.md section 4 and section 7's accuracy bands).

Measured on this data (CPU, torch 2.14): decode_dense with p_quant="none" matches float64 attention over the same
fp32 values to rel L2 1.6e-7; the block P quantization alone costs rel L2 2.6e-2 .. 2.8e-2 (e4m3 keeps 3 mantissa
bits of each p'; as large as the K/V quantization error, 2.5e-2 .. 2.7e-2); splits change o by ~1e-5 (bf16 flips);
against float64 attention on the raw bf16 rows the whole FP8 pipeline gives rel L2 0.035-0.038 (contract: ~3.7e-2).
A request with one or two tokens has almost no P error, so the cases below avoid tiny requests where a norm over
the whole batch would let them dominate.
"""

import re

import pytest
import torch

from snapmla_ext import layout as L
from snapmla_ext.reference import (
    attention_fp64,
    attention_fp64_dequant,
    combine_splits,
    decode,
    decode_dense,
    e4m3,
    quantize_q,
    quantize_rows,
)
from snapmla_ext.reference.quant import div_ieee
from utils.compare import assert_bitwise_equal, assert_close_report, assert_same_nonfinite, max_abs, rel_l2
from utils.data import make_kv_rows, make_paged_inputs, make_q

SCALE = L.D_QK**-0.5
INF = float("inf")


def _dense_problem(B, R, N, lengths, seed):
    """Quantized dense operands (fp32 values) and the same values as float64 q (B, 1, R, 576) / kv (B, N, 576)."""
    qq = quantize_q(make_q(B, 1, R, seed=seed))
    c8, rope, scale = quantize_rows(make_kv_rows(B * N, seed=seed + 1))
    ops = dict(
        q_c=qq.content.float().reshape(B, R, 512),
        q_r=qq.rope.float().reshape(B, R, 64),
        q_scale=qq.scale.reshape(B, R),
        k_c=c8.float().reshape(B, N, 512),
        k_r=rope.float().reshape(B, N, 64),
        k_scale=scale.reshape(B, N),
    )
    ops["visible"] = (torch.arange(N)[None, None, :] < torch.tensor(lengths)[:, None, None]).expand(B, R, N)
    q64 = torch.cat([ops["q_c"], ops["q_r"]], -1).double() * ops["q_scale"].double()[..., None]
    k64 = torch.cat([ops["k_c"], ops["k_r"]], -1).double() * ops["k_scale"].double()[..., None]
    return ops, q64.unsqueeze(1), k64


def _fp64_rows(q64, k64, lengths):
    o, lse = attention_fp64(q64, k64, lengths, SCALE)
    return o[:, 0], lse[:, :, 0]


# ---- decode_dense ----


def test_decode_dense_without_p_quant_matches_fp64():
    lengths = [300, 211, 157]
    ops, q64, k64 = _dense_problem(3, 19, 300, lengths, seed=1)
    o, lse = decode_dense(**ops, softmax_scale=SCALE, p_quant="none")
    o64, lse64 = _fp64_rows(q64, k64, lengths)
    assert o.dtype == torch.float32 and o.shape == (3, 19, 512) and lse.shape == (3, 19)
    assert_close_report(o, o64, name="o", rel_l2_tol=1e-6, cos_tol=1e-10)  # measured 1.6e-7
    assert_close_report(lse, lse64, name="lse", atol=1e-5)  # measured 3.8e-7


def test_decode_dense_block_p_quant_error_band():
    lengths = [300, 211, 157]
    ops, q64, k64 = _dense_problem(3, 19, 300, lengths, seed=1)
    o, lse = decode_dense(**ops, softmax_scale=SCALE)
    o64, lse64 = _fp64_rows(q64, k64, lengths)
    m = assert_close_report(o, o64, name="o", rel_l2_tol=4e-2, cos_tol=1e-3)  # measured 2.8e-2, 3.9e-4
    assert m["rel_l2"] > 1.5e-2, "block P quantization should be visible; is p8 really rounded to e4m3?"
    assert_close_report(lse, lse64, name="lse", atol=1e-5)  # lse does not see P quantization: 6e-7


@pytest.mark.parametrize("p_quant", ["none", "block", "unscaled"])
def test_decode_dense_single_block_closed_form(p_quant):
    # One block: m = max x, e = exp(x - m), p' = e * k_scale and o = sigma * sum_j p_op_j * k_c_j / sum_j e_j.
    lengths = [50, 37]
    ops, q64, k64 = _dense_problem(2, 3, 50, lengths, seed=2)
    o, lse = decode_dense(**ops, softmax_scale=SCALE, p_quant=p_quant)
    vis = ops["visible"]
    x = torch.einsum("brd,bnd->brn", q64[:, 0], k64) * SCALE
    x = torch.where(vis, x, torch.tensor(-INF, dtype=torch.float64))
    m = x.amax(-1, keepdim=True)
    e = torch.exp(x - m)
    p = (e * ops["k_scale"].double()[:, None, :]).float()  # the fp32 p' to within an ulp
    if p_quant == "block":
        sigma = p.amax(-1, keepdim=True) / 448
        p_op = e4m3(p / sigma).double() * sigma.double()
    elif p_quant == "unscaled":
        p_op = e4m3(p).double()
    else:
        p_op = p.double()
    o_ref = torch.einsum("brn,bnd->brd", p_op, ops["k_c"].double()) / e.sum(-1, keepdim=True)
    assert_close_report(o, o_ref, name="o", rel_l2_tol=1e-6)
    assert_close_report(lse, (m[..., 0] + torch.log(e.sum(-1))), name="lse", atol=1e-5)


def test_decode_dense_single_visible_token_is_exact():
    # p'/sigma = 448 exactly, so o = k_scale * k_c: no P error at all for a lone token.
    ops, _, _ = _dense_problem(1, 4, 64, [1], seed=3)
    o, _ = decode_dense(**ops, softmax_scale=SCALE)
    v = (ops["k_c"][0, 0] * ops["k_scale"][0, 0]).expand(4, 512)
    assert_close_report(o[0], v, name="o", rel_l2_tol=1e-6)


def test_decode_dense_p_block_changes_only_the_quantization_groups():
    lengths = [250, 100]
    ops, q64, k64 = _dense_problem(2, 5, 250, lengths, seed=3)
    o64, _ = _fp64_rows(q64, k64, lengths)
    for p_block in (16, 33, 64, 250):
        o, _ = decode_dense(**ops, softmax_scale=SCALE, p_block=p_block)
        assert_close_report(o, o64, name=f"o (p_block={p_block})", rel_l2_tol=4e-2)  # measured 2.6e-2 .. 3.0e-2
        o_none, _ = decode_dense(**ops, softmax_scale=SCALE, p_block=p_block, p_quant="none")
        assert_close_report(o_none, o64, name=f"o none (p_block={p_block})", rel_l2_tol=1e-6)


def test_decode_dense_block_offset_equals_masking_the_prefix():
    ops, _, _ = _dense_problem(2, 6, 320, [320, 200], seed=4)
    o, lse = decode_dense(**ops, softmax_scale=SCALE, block_offset=128)
    masked = dict(ops, visible=ops["visible"].clone())
    masked["visible"][:, :, :128] = False
    o_ref, lse_ref = decode_dense(**masked, softmax_scale=SCALE)
    assert_bitwise_equal(o, o_ref, "o")
    assert_bitwise_equal(lse, lse_ref, "lse")


def test_decode_dense_nan_in_masked_tokens_never_leaks():
    ops, _, _ = _dense_problem(2, 7, 193, [193, 193], seed=5)
    vis = ops["visible"].clone()
    vis[0, :, 150:] = False  # masked for every row of problem 0: these V rows are zeroed by select
    vis[1, 3:, 100:] = False  # a causal-like cut: rows 3.. miss tokens that rows 0..2 see
    vis[1, :, 180:] = False
    clean = dict(ops, visible=vis)
    poisoned = {k: v.clone() for k, v in clean.items()}
    poisoned["k_c"][0, 150:] = float("nan")
    poisoned["k_r"][0, 150:] = float("nan")
    poisoned["k_scale"][0, 150:] = float("nan")
    poisoned["k_c"][1, 180:] = float("nan")
    poisoned["k_r"][1, 180:] = -INF
    poisoned["k_scale"][1, 180:] = INF
    o, lse = decode_dense(**poisoned, softmax_scale=SCALE)
    o_ref, lse_ref = decode_dense(**clean, softmax_scale=SCALE)
    assert_bitwise_equal(o, o_ref, "o", nan_equal=False)
    assert_bitwise_equal(lse, lse_ref, "lse", nan_equal=False)


def test_decode_dense_row_without_visible_token_gives_zero_and_inf():
    ops, _, _ = _dense_problem(2, 4, 70, [70, 70], seed=6)
    vis = ops["visible"].clone()
    vis[0, 1] = False
    vis[1] = False
    o, lse = decode_dense(**dict(ops, visible=vis), softmax_scale=SCALE)
    assert (o[0, 1] == 0).all() and (o[1] == 0).all()
    assert lse[0, 1] == INF and (lse[1] == INF).all()
    assert o[0, [0, 2, 3]].isfinite().all() and lse[0, [0, 2, 3]].isfinite().all()


# ---- combine ----


def test_combine_splits_weights_and_empty_pieces():
    gen = torch.Generator().manual_seed(7)
    o_parts = torch.randn(3, 2, 512, generator=gen)
    lse_parts = torch.tensor([[1.0, INF], [INF, INF], [-0.5, INF]])
    o, lse = combine_splits(o_parts, lse_parts)
    w0, w2 = torch.softmax(torch.tensor([1.0, -0.5]), 0)
    assert abs(lse[0].item() - torch.logsumexp(torch.tensor([1.0, -0.5]), 0).item()) < 1e-6
    assert_close_report(o[0], w0 * o_parts[0, 0] + w2 * o_parts[2, 0], name="o", atol=1e-6)
    assert lse[1] == INF and (o[1] == 0).all()


def test_combine_splits_weights_sum_to_one_at_huge_lse():
    """47 equal pieces at lse 1.5e18 (logits at the input range's far end): lse = m + log 47 rounds to m in fp32,
    and weights exp(lse_i - lse) would be 1 each (o = 47 o_i); normalising by the sum keeps o = o_i."""
    o_parts = torch.full((47, 1, 512), 0.25)
    lse_parts = torch.full((47, 1), 1.5e18)
    o, lse = combine_splits(o_parts, lse_parts)
    assert_close_report(o, o_parts[0], name="o", atol=1e-6)
    assert lse.item() == lse_parts[0, 0].item()


# ---- decode over the paged cache ----


def test_decode_isolated_from_kv_quantization_matches_fp64_dequant():
    p = make_paged_inputs(3, 2, 16, [200, 77, 333], seed=8)
    o, lse = decode(p.q, p.cache, p.block_table, p.cache_seqlens)
    o64, lse64 = attention_fp64_dequant(quantize_q(p.q), p.cache, p.block_table, p.cache_seqlens)
    assert o.dtype == torch.bfloat16 and o.shape == (3, 2, 16, 512)
    assert lse.dtype == torch.float32 and lse.shape == (3, 16, 2)
    # What is left is the P quantization (and the final bf16 rounding): measured 2.5e-2, cos 3.1e-4, lse 4.8e-7.
    m = assert_close_report(o, o64, name="o", rel_l2_tol=4e-2, cos_tol=1e-3)
    assert m["rel_l2"] > 1.5e-2
    assert_close_report(lse, lse64, name="lse", atol=1e-5)


def test_decode_accuracy_against_fp64_on_raw_bf16_rows():
    p = make_paged_inputs(2, 1, 64, [1000, 4097], seed=9)
    o, lse = decode(p.q, p.cache, p.block_table, p.cache_seqlens)
    o64, lse64 = attention_fp64(p.q, p.kv, p.seqlens)
    err = rel_l2(o, o64)
    assert 2.5e-2 < err < 5e-2, f"rel L2 {err:.3e} outside the FP8 band around the contract's 3.7e-2"
    assert max_abs(lse, lse64) < 1e-3  # measured 7.5e-5 .. 1.1e-4


@pytest.mark.parametrize("s_q", [1, 2, 3, 4])
def test_decode_causal(s_q):
    # seqlen 2 < s_q = 3, 4 leaves early query tokens without any token; the last page of 129 (1 token) and 194
    # (2 tokens) has no visible token for the first query tokens when s_q > 1 (resp. s_q > 2).
    lengths = [129, 2, 194]
    p = make_paged_inputs(3, s_q, 5, lengths, seed=10 + s_q)
    o, lse = decode(p.q, p.cache, p.block_table, p.cache_seqlens, causal=True)
    o64, lse64 = attention_fp64_dequant(quantize_q(p.q), p.cache, p.block_table, p.cache_seqlens, causal=True)
    assert_close_report(o, o64, name="o", rel_l2_tol=4e-2, cos_tol=1e-3)
    assert_close_report(lse, lse64, name="lse", atol=1e-5)
    assert_same_nonfinite(lse, lse64.float(), "lse")
    if s_q > 2:
        assert lse[1, :, 0].eq(INF).all() and (o[1, 0] == 0).all()
    o_raw, _ = attention_fp64(p.q, p.kv, lengths, causal=True)
    assert rel_l2(o, o_raw) < 5e-2


def test_decode_causal_row_with_empty_last_block():
    # Query token 0 sees tokens 0..63; block 1 (token 64) has no visible token for its rows. Following the contract
    # literally (sigma_1 = P_FLOOR / 448) would overflow O~ and L~; the row's state must stay as it was.
    p = make_paged_inputs(1, 2, 4, [65], seed=14)
    o, lse = decode(p.q, p.cache, p.block_table, p.cache_seqlens, causal=True)
    assert o.isfinite().all() and lse.isfinite().all()
    o64, lse64 = attention_fp64_dequant(quantize_q(p.q), p.cache, p.block_table, p.cache_seqlens, causal=True)
    assert_close_report(o, o64, name="o", rel_l2_tol=4e-2)
    assert_close_report(lse, lse64, name="lse", atol=1e-5)


def _underflow_problem():
    """One row, two blocks: block 0 holds logits near 0, every logit of block 1 is -100 (e = 3.7e-44 > 0)."""
    gen = torch.Generator().manual_seed(21)
    q_r = torch.zeros(1, 1, 64)
    q_r[0, 0, 0] = 1.0
    k_r = torch.zeros(1, 128, 64)
    k_r[0, :64, 0] = torch.randn(64, generator=gen)
    k_r[0, 64:, 0] = -100.0
    ops = dict(
        q_c=torch.zeros(1, 1, 512), q_r=q_r, q_scale=torch.ones(1, 1),
        k_c=e4m3(torch.randn(1, 128, 512, generator=gen) * 100).float(), k_r=k_r, k_scale=torch.ones(1, 128),
        visible=torch.ones(1, 1, 128, dtype=torch.bool),
    )
    q64 = torch.cat([ops["q_c"], q_r], -1).double()[:, None]
    kv64 = torch.cat([ops["k_c"], k_r], -1).double()
    return ops, attention_fp64(q64, kv64, [128], 1.0)


@pytest.mark.parametrize("p_quant", ["block", "running", "bound"])
def test_tiny_p_block_does_not_overflow_the_state(p_quant):
    # Block 1's p' (3.7e-44) is below P_FLOOR = 2^-60: sigma_1 = 2^-60 / 448 and the forward ratio is 2^60, which
    # the state (O~ <= 64 * 448^2) absorbs. With FLT_MIN as the floor this ratio was ~1e35 and o overflowed to NaN.
    ops, (o64, lse64) = _underflow_problem()
    o, lse = decode_dense(**ops, softmax_scale=1.0, p_quant=p_quant)
    assert o.isfinite().all() and lse.isfinite().all()
    assert_close_report(o, o64[:, 0], name="o", rel_l2_tol=4e-2)
    assert_close_report(lse, lse64[:, :, 0], name="lse", atol=1e-5)


def test_running_p_scale_costs_little_accuracy():
    lengths = [300, 211, 157]
    ops, q64, k64 = _dense_problem(3, 19, 300, lengths, seed=1)
    o64, _ = _fp64_rows(q64, k64, lengths)
    err_block = rel_l2(decode_dense(**ops, softmax_scale=SCALE)[0], o64)
    err_running = rel_l2(decode_dense(**ops, softmax_scale=SCALE, p_quant="running")[0], o64)
    assert err_running < 1.1 * err_block, (err_block, err_running)  # measured 2.81e-2 -> 2.83e-2


def test_bound_p_scale_equals_the_block_scale_when_the_scales_are_equal():
    # sigma = 2^(max x2 - m) * max k_scale / 448 is max p' / 448 exactly when every token of the block has the same
    # scale (2^(max x2 - m) is the largest e_j): the same bits as p_quant="block".
    lengths = [300, 211, 157]
    ops, _, _ = _dense_problem(3, 19, 300, lengths, seed=2)
    ops["k_scale"] = torch.full_like(ops["k_scale"], float(ops["k_scale"].mean()))
    o_block, lse_block = decode_dense(**ops, softmax_scale=SCALE, p_quant="block")
    o_bound, lse_bound = decode_dense(**ops, softmax_scale=SCALE, p_quant="bound")
    assert_bitwise_equal(o_bound, o_block, name="o")
    assert_bitwise_equal(lse_bound, lse_block, name="lse")


def test_bound_p_scale_never_saturates_and_stays_accurate():
    # With per-token scales spread over 16x the bound is loose for some rows, so their P uses a coarser grid; p8
    # never saturates (p' * inv <= 448), so o stays within the contract's band of float64 (measured on this data:
    # 2.60e-2 for "block", 2.64e-2 for "bound"; the 16-layer study in docs/design.md section 4 measures its cost).
    lengths = [300, 211, 157]
    ops, q64, k64 = _dense_problem(3, 19, 300, lengths, seed=3)
    spread = torch.exp2(torch.rand(ops["k_scale"].shape, generator=torch.Generator().manual_seed(4)) * 4 - 2)
    ops["k_scale"] = ops["k_scale"] * spread
    k64 = torch.cat([ops["k_c"], ops["k_r"]], -1).double() * ops["k_scale"].double()[..., None]
    o64, _ = _fp64_rows(q64, k64, lengths)
    err_block = rel_l2(decode_dense(**ops, softmax_scale=SCALE)[0], o64)
    err_bound = rel_l2(decode_dense(**ops, softmax_scale=SCALE, p_quant="bound")[0], o64)
    assert err_bound < 4e-2 and err_bound < 1.25 * err_block, (err_block, err_bound)


def test_block_reference_gives_the_running_reference_up_to_rounding():
    # p_ref="block" (exponentials against each block's own maximum, candidate E of docs/design.md section 4) is
    # the contract's algebra with another reference: p' * inv_n is the same real number, so p8 differs only where
    # the rounding of 2^x moves it across an e4m3 rounding boundary. Measured on this data: o 1.9e-7 rel L2.
    lengths = [300, 211, 157]
    ops, _, _ = _dense_problem(3, 19, 300, lengths, seed=5)
    o_run, lse_run = decode_dense(**ops, softmax_scale=SCALE)
    o_blk, lse_blk = decode_dense(**ops, softmax_scale=SCALE, p_ref="block")
    assert not torch.equal(o_run, o_blk)  # the two walks round differently: the test compares two computations
    assert_close_report(o_blk, o_run, name="o", rel_l2_tol=2e-6)
    assert_close_report(lse_blk, lse_run, name="lse", atol=1e-5)


def test_block_reference_drops_a_block_below_the_floor():
    # Block 1's largest p' in the contract's units (3.7e-44) is below P_FLOOR: with p_ref="block" it is dropped
    # (its own maximum would quantise it on the full grid and its fold ratio would be 2^100), so the result is
    # that of block 0 alone, bit for bit.
    ops, (o64, lse64) = _underflow_problem()
    o, lse = decode_dense(**ops, softmax_scale=1.0, p_ref="block")
    alone = dict(ops, visible=ops["visible"].clone())
    alone["visible"][..., 64:] = False
    o0, lse0 = decode_dense(**alone, softmax_scale=1.0, p_ref="block")
    assert_bitwise_equal(o, o0, name="o")
    assert_bitwise_equal(lse, lse0, name="lse")
    assert_close_report(o, o64[:, 0], name="o", rel_l2_tol=4e-2)
    assert_close_report(lse, lse64[:, :, 0], name="lse", atol=1e-5)


@pytest.mark.parametrize(
    "kwargs,match",
    [(dict(p_ref="local"), "p_ref must be one of"), (dict(p_ref="block", p_quant="bound"), "needs p_quant='block'")],
)
def test_decode_dense_rejects_p_ref(kwargs, match):
    ops, _, _ = _dense_problem(1, 3, 64, [64], seed=6)
    with pytest.raises(ValueError, match=match):
        decode_dense(**ops, softmax_scale=SCALE, **kwargs)


def test_decode_zero_length_sequences():
    p = make_paged_inputs(3, 1, 3, [0, 5, 0], seed=15)
    o, lse = decode(p.q, p.cache, p.block_table, p.cache_seqlens)
    assert (o[[0, 2]] == 0).all() and (lse[[0, 2]] == INF).all()
    assert o[1].isfinite().all() and lse[1].isfinite().all()
    o64, lse64 = attention_fp64_dequant(p.q, p.cache, p.block_table, p.cache_seqlens)
    assert_same_nonfinite(lse, lse64.float(), "lse")


def test_decode_all_sequences_empty():
    p = make_paged_inputs(2, 2, 3, [0, 0], seed=16)
    o, lse = decode(p.q, p.cache, p.block_table, p.cache_seqlens, causal=True)
    assert (o == 0).all() and (lse == INF).all()


@pytest.mark.parametrize(
    "splits",
    [
        [[0, 1, 4], [0, 1], [0, 2, 3, 6]],
        [[0, 4], [0, 1], [0, 1, 2, 3, 4, 5, 6]],
        [[0, 2, 2, 4], [0, 0, 1], [0, 6, 6]],  # empty pieces weigh nothing
    ],
)
def test_decode_split_invariance(splits):
    p = make_paged_inputs(3, 2, 8, [200, 1, 333], seed=17)
    o, lse = decode(p.q, p.cache, p.block_table, p.cache_seqlens, causal=True)
    o_s, lse_s = decode(p.q, p.cache, p.block_table, p.cache_seqlens, causal=True, split_blocks=splits,
                        partials="fp32")
    # Splitting moves m and sigma but not the ratios p'_j / sigma_n: only fp32 rounding differs (measured 6e-6).
    assert_close_report(o_s, o, name="o", rel_l2_tol=1e-4, cos_tol=1e-8)
    assert_close_report(lse_s, lse, name="lse", atol=1e-5)


@pytest.mark.parametrize("seed", [17, 18])
def test_decode_bf16_partials_cost_one_rounding(seed):
    # The kernels' o_accum holds each piece's output in bf16: a split request's o is rounded once more; lse is not
    # rounded. Both results are rounded to bf16 at the end, so they differ by whole bf16 ulps (2^-8 to 2^-7 of the
    # value) where the partials' rounding carried o across a rounding boundary: rel L2 measured 2.7e-3.
    p = make_paged_inputs(2, 2, 16, [700, 333], seed=seed)
    splits = [[0, 3, 6, 11], [0, 2, 6]]
    o_32, lse_32 = decode(p.q, p.cache, p.block_table, p.cache_seqlens, split_blocks=splits, partials="fp32")
    o_16, lse_16 = decode(p.q, p.cache, p.block_table, p.cache_seqlens, split_blocks=splits)
    assert rel_l2(o_16, o_32) > 1e-4  # the rounding happens
    assert_close_report(o_16, o_32, name="o", rel_l2_tol=5e-3, cos_tol=2e-5)
    assert_bitwise_equal(lse_16, lse_32, name="lse")
    o_1, _ = decode(p.q, p.cache, p.block_table, p.cache_seqlens, split_blocks=[[0, 11], [0, 6]])
    o_1f, _ = decode(p.q, p.cache, p.block_table, p.cache_seqlens, split_blocks=[[0, 11], [0, 6]], partials="fp32")
    assert_bitwise_equal(o_1, o_1f, name="o of one-piece requests")  # written straight to out, rounded once


def test_p_pages_2_equals_p_pages_1_on_one_page_requests():
    # A P block of two pages over a request of at most one page is that page's block: the same bits.
    p = make_paged_inputs(3, 2, 8, [64, 1, 40], seed=21)
    o1, lse1 = decode(p.q, p.cache, p.block_table, p.cache_seqlens, causal=True)
    o2, lse2 = decode(p.q, p.cache, p.block_table, p.cache_seqlens, causal=True, p_pages=2)
    assert_bitwise_equal(o2, o1, name="o")
    assert_bitwise_equal(lse2, lse1, name="lse")


def test_p_pages_2_changes_the_blocks_and_keeps_the_accuracy():
    p = make_paged_inputs(3, 2, 16, [200, 77, 333], seed=8)
    o1, _ = decode(p.q, p.cache, p.block_table, p.cache_seqlens)
    o2, lse2 = decode(p.q, p.cache, p.block_table, p.cache_seqlens, p_pages=2)
    o64, lse64 = attention_fp64_dequant(quantize_q(p.q), p.cache, p.block_table, p.cache_seqlens)
    assert rel_l2(o2, o1) > 1e-3  # other P scales for requests of 2+ pages: not the same quantization
    # The P quantization error stays in the band of the one-page blocks (2.5e-2 there).
    assert_close_report(o2, o64, name="o", rel_l2_tol=4e-2, cos_tol=1e-3)
    assert_close_report(lse2, lse64, name="lse", atol=1e-5)


@pytest.mark.parametrize("splits", [[[0, 2, 4], [0, 2], [0, 2, 6]], [[0, 4], [0, 2], [0, 4, 6]]])
def test_p_pages_2_split_at_even_pages_is_invariant(splits):
    # Pieces that start at even pages see the same page pairs as the whole request: only fp32 rounding differs.
    p = make_paged_inputs(3, 2, 8, [200, 65, 333], seed=17)
    o, lse = decode(p.q, p.cache, p.block_table, p.cache_seqlens, causal=True, p_pages=2)
    o_s, lse_s = decode(p.q, p.cache, p.block_table, p.cache_seqlens, causal=True, split_blocks=splits, p_pages=2,
                        partials="fp32")
    assert_close_report(o_s, o, name="o", rel_l2_tol=1e-4, cos_tol=1e-8)
    assert_close_report(lse_s, lse, name="lse", atol=1e-5)


def test_p_pages_2_pairs_start_at_each_piece():
    # Three pages split as page 0 | pages 1-2: counted from each piece, the second piece is one pair (1, 2);
    # counted from the request's start (pairs (0, 1), (2)) both pieces would hold single pages only, and the result
    # would be p_pages=1's to the bit.
    p = make_paged_inputs(1, 1, 8, [192], seed=23)
    split = [[0, 1, 3]]
    o_2, lse_2 = decode(p.q, p.cache, p.block_table, p.cache_seqlens, split_blocks=split, p_pages=2)
    o_1, lse_1 = decode(p.q, p.cache, p.block_table, p.cache_seqlens, split_blocks=split)
    assert rel_l2(o_2, o_1) > 1e-4
    assert_close_report(lse_2, lse_1, name="lse", atol=1e-5)  # the P scales cancel in lse


def test_kernel_comparisons_need_the_plans_pieces():
    # Why the GPU tests give the emulation the plan's pieces (tests/utils/sched_plan.py split_blocks): with bf16
    # partials, a kernel-like deviation (here the tensor cores' PV accumulation, pv_accumulation="fp8_wgmma") shows
    # as 2.7e-3 against the unsplit emulation, close to the 3e-3 of docs/numerics_contract.md section 7, but as
    # 6.7e-4 against the split one (4.9e-4 with fp32 partials against the unsplit emulation).
    p = make_paged_inputs(2, 1, 16, [700, 333], seed=17)
    splits = [[0, 3, 6, 11], [0, 2, 6]]
    stand_in, _ = decode(p.q, p.cache, p.block_table, p.cache_seqlens, split_blocks=splits,
                         pv_accumulation="fp8_wgmma")
    unsplit, _ = decode(p.q, p.cache, p.block_table, p.cache_seqlens)
    split, _ = decode(p.q, p.cache, p.block_table, p.cache_seqlens, split_blocks=splits)
    assert rel_l2(stand_in.float(), unsplit.float()) > 2e-3
    assert rel_l2(stand_in.float(), split.float()) < 1e-3


@pytest.mark.parametrize("bad", ["fp16", None, 1])
def test_decode_rejects_partials(bad):
    p = make_paged_inputs(1, 1, 2, [10], seed=0)
    with pytest.raises(ValueError, match=rf"partials must be 'bf16' or 'fp32' \(a split piece's output before the "
                                         rf"merge\), got {re.escape(repr(bad))}"):
        decode(p.q, p.cache, p.block_table, p.cache_seqlens, partials=bad)


@pytest.mark.parametrize("bad", [0, 3, 1.0, True])
def test_decode_rejects_p_pages(bad):
    p = make_paged_inputs(1, 1, 2, [10], seed=0)
    with pytest.raises(ValueError, match=rf"p_pages must be 1 or 2 \(pages per P block\), got {bad!r}"):
        decode(p.q, p.cache, p.block_table, p.cache_seqlens, p_pages=bad)


def test_decode_quantized_q_and_default_scale():
    p = make_paged_inputs(2, 1, 4, [90, 64], seed=18)
    o, lse = decode(p.q, p.cache, p.block_table, p.cache_seqlens)
    o_q, lse_q = decode(quantize_q(p.q), p.cache.data, p.block_table, p.cache_seqlens, softmax_scale=576**-0.5)
    assert_bitwise_equal(o_q, o, "o")
    assert_bitwise_equal(lse_q, lse, "lse")


def _rope_unaware(x):
    """One e4m3 scale over the whole 576 row (RoPE quantized too): (content, rope, scale) fp32 values."""
    xf = x.float()
    s = torch.clamp_min(xf.abs().amax(-1), L.AMAX_FLOOR) / L.FP8_E4M3_MAX
    x8 = e4m3(xf / s[..., None]).float()
    return x8[..., :512], x8[..., 512:], s


def test_rope_aware_cache_beats_rope_unaware_on_large_rope():
    # Cached RoPE ~1e3 next to content ~1e-2: one shared scale pushes the content below e4m3's range.
    p = make_paged_inputs(2, 1, 16, [150, 77], seed=20, content_std=1e-2, rope_std=1e3, clip=None)
    q = p.q.float()
    q[..., 512:] *= 1e-2  # keep the logits O(1)
    q = q.to(torch.bfloat16)
    o64, _ = attention_fp64(q, p.kv, p.seqlens)
    err_snap = rel_l2(decode(q, p.cache, p.block_table, p.cache_seqlens)[0], o64)

    n = p.kv.shape[1]
    k_c, k_r, k_s = _rope_unaware(torch.nan_to_num(p.kv))
    q_c, q_r, q_s = _rope_unaware(q)
    vis = (torch.arange(n)[None, None, :] < p.cache_seqlens.long()[:, None, None]).expand(2, 16, n)
    o_unaware, _ = decode_dense(
        q_c.reshape(2, 16, 512), q_r.reshape(2, 16, 64), q_s.reshape(2, 16), k_c, k_r, k_s, vis, SCALE
    )
    err_unaware = rel_l2(o_unaware, o64[:, 0])
    # measured: SnapMLA 3.7e-2, RoPE-unaware 0.33
    assert err_snap < 5e-2 and err_unaware > 4 * err_snap, (err_snap, err_unaware)


# ---- one test per error message ----


def _ops():
    ops, _, _ = _dense_problem(1, 2, 64, [64], seed=0)
    return ops


def test_decode_dense_rejects_p_quant():
    msg = r"p_quant must be one of \('block', 'running', 'bound', 'none', 'unscaled'\), got 'fp8'"
    with pytest.raises(ValueError, match=msg):
        decode_dense(**_ops(), softmax_scale=SCALE, p_quant="fp8")


def test_decode_dense_rejects_pv_accumulation():
    with pytest.raises(ValueError, match=r"pv_accumulation must be one of \('fp32', 'fp8_wgmma'\), got 'fp16'"):
        decode_dense(**_ops(), softmax_scale=SCALE, pv_accumulation="fp16")


def test_decode_dense_rejects_p_block():
    with pytest.raises(ValueError, match=r"p_block must be a positive int, got 0"):
        decode_dense(**_ops(), softmax_scale=SCALE, p_block=0)


def test_decode_dense_rejects_unaligned_block_offset():
    with pytest.raises(ValueError, match=r"block_offset must be a multiple of min\(p_block, 64\) = 64 in \[0, N = 64\], got 32"):
        decode_dense(**_ops(), softmax_scale=SCALE, block_offset=32)


def test_decode_dense_rejects_q_c_shape():
    ops = _ops()
    ops["q_c"] = ops["q_c"][..., :256]
    with pytest.raises(ValueError, match=r"q_c must have shape \(B, R, 512\), got \(1, 2, 256\)"):
        decode_dense(**ops, softmax_scale=SCALE)


def test_decode_dense_rejects_k_c_shape():
    ops = _ops()
    ops["k_c"] = ops["k_c"][None]
    with pytest.raises(ValueError, match=r"k_c must have shape \(1, N, 512\), got \(1, 1, 64, 512\)"):
        decode_dense(**ops, softmax_scale=SCALE)


def test_decode_dense_rejects_other_shapes():
    ops = _ops()
    ops["visible"] = ops["visible"][:, :, :10]
    with pytest.raises(ValueError, match=r"visible must have shape \(1, 2, 64\), got \(1, 2, 10\)"):
        decode_dense(**ops, softmax_scale=SCALE)


def test_decode_dense_rejects_non_fp32_values():
    ops = _ops()
    ops["k_r"] = ops["k_r"].bfloat16()
    msg = r"k_r must be float32 \(values of the quantized operands\), got torch.bfloat16"
    with pytest.raises(ValueError, match=msg):
        decode_dense(**ops, softmax_scale=SCALE)


def test_decode_dense_rejects_non_bool_mask():
    ops = _ops()
    ops["visible"] = ops["visible"].int()
    with pytest.raises(ValueError, match=r"visible must be a bool mask, got torch.int32"):
        decode_dense(**ops, softmax_scale=SCALE)


def test_decode_dense_rejects_mixed_devices():
    ops = _ops()
    ops["k_scale"] = ops["k_scale"].to("meta")
    with pytest.raises(ValueError, match=r"k_scale must be on q_c's device cpu, got meta"):
        decode_dense(**ops, softmax_scale=SCALE)


def test_decode_rejects_q_shape():
    p = make_paged_inputs(1, 1, 2, [10], seed=0)
    with pytest.raises(ValueError, match=r"q must have shape \(b, s_q, h_q, 576\), got \(1, 2, 576\)"):
        decode(p.q[0], p.cache, p.block_table, p.cache_seqlens)


def test_decode_rejects_block_table_rows():
    p = make_paged_inputs(2, 1, 2, [10, 3], seed=0)
    with pytest.raises(ValueError, match=r"block_table must have shape \(2, max_pages\), got \(1, 2\)"):
        decode(p.q, p.cache, p.block_table[:1], p.cache_seqlens)


def test_decode_rejects_split_blocks_count():
    p = make_paged_inputs(2, 1, 2, [10, 3], seed=0)
    with pytest.raises(ValueError, match=r"split_blocks must have one list per request \(2\), got 1"):
        decode(p.q, p.cache, p.block_table, p.cache_seqlens, split_blocks=[[0, 1]])


def test_decode_rejects_split_blocks_bounds():
    p = make_paged_inputs(2, 1, 2, [70, 3], seed=0)
    msg = r"split_blocks\[0\] must be non-decreasing block boundaries from 0 to 2 \(seqlen 70\), got \[0, 1\]"
    with pytest.raises(ValueError, match=msg):
        decode(p.q, p.cache, p.block_table, p.cache_seqlens, split_blocks=[[0, 1], [0, 1]])


def test_decode_names_cache_seqlens_in_errors():
    p = make_paged_inputs(1, 1, 2, [10], seed=0)
    with pytest.raises(ValueError, match=r"cache_seqlens must have dtype torch.int32, got torch.int64"):
        decode(p.q, p.cache, p.block_table, p.cache_seqlens.long())


def test_attention_fp64_rejects_q_shape():
    with pytest.raises(ValueError, match=r"q must have shape \(b, s_q, h_q, 576\), got \(1, 2, 512\)"):
        attention_fp64(torch.zeros(1, 2, 512), torch.zeros(1, 3, 576), [3])


def test_attention_fp64_rejects_kv_shape():
    with pytest.raises(ValueError, match=r"kv must have shape \(1, s_k_max, 576\), got \(2, 3, 576\)"):
        attention_fp64(torch.zeros(1, 1, 2, 576), torch.zeros(2, 3, 576), [3, 3])


def test_pv_accumulation_models_the_tensor_cores_truncation():
    """pv_accumulation="fp8_wgmma" takes each block's PV through the k32 truncation model: close to the fp32 sum on
    ordinary data, never equal to it there (the truncation does drop bits), and lse unchanged (it only changes PV)."""
    ops, _, _ = _dense_problem(2, 3, 64 * 5 + 7, [64 * 5 + 7, 200], seed=4)
    o32, lse32 = decode_dense(**ops, softmax_scale=SCALE)
    o8, lse8 = decode_dense(**ops, softmax_scale=SCALE, pv_accumulation="fp8_wgmma")
    err = rel_l2(o8, o32)
    assert 0 < err < 1e-3, err
    assert_bitwise_equal(lse8, lse32, "lse")


def test_uniform_attention_takes_the_kernels_reciprocal():
    """q = 0: m = 0, e = 1, and block n's p8_j = e4m3(s_j * inv_n) with inv_n = 448 * rcp(max s), the kernel's
    order; O~ and L~ take f_n = inv_n * rcp(inv_{n-1}). Dividing by sigma = max s / 448 instead rounds some e4m3
    ties of the scales' bf16 ratios the other way (13 of these 4096 tokens): the data exercises the order."""
    n = 4096
    ops, _, _ = _dense_problem(1, 1, n, [n], seed=2)
    ops = dict(ops, q_c=torch.zeros_like(ops["q_c"]), q_r=torch.zeros_like(ops["q_r"]))
    o, _ = decode_dense(**ops, softmax_scale=SCALE)
    s, v = ops["k_scale"][0].view(-1, 64), ops["k_c"][0].view(-1, 64, 512)
    inv = L.FP8_E4M3_MAX * torch.reciprocal(s.amax(-1))
    p8 = e4m3(s * inv[:, None]).float()
    assert (p8 != e4m3(s / div_ieee(s.amax(-1), L.FP8_E4M3_MAX)[:, None]).float()).any()
    o_acc, l_acc = p8[0] @ v[0], 64 * inv[0]
    for blk in range(1, s.shape[0]):
        f = inv[blk] * torch.reciprocal(inv[blk - 1])
        o_acc = o_acc * f + p8[blk] @ v[blk]
        l_acc = l_acc * f + 64 * inv[blk]
    assert rel_l2(o[0, 0], o_acc * torch.reciprocal(l_acc)) < 1e-6
