"""The numerics study's schemes are what they claim, its data and loader behave, and its CLI runs (CPU, fast)."""

import json

import pytest
import torch

from snapmla_ext import layout as L
from snapmla_ext.numerics import paged
from snapmla_ext.numerics.__main__ import main
from snapmla_ext.numerics.data import Layer, SyntheticConfig, load_dump, save_dump, synthetic_layer, synthetic_layers
from snapmla_ext.numerics.metrics import error_metrics
from snapmla_ext.numerics.schemes import SCHEMES, by_name, q_per_page, q_static_unit
from snapmla_ext.numerics.study import emulate, kernel_agreement, reference
from snapmla_ext.reference import quantize_rows

TINY = SyntheticConfig(num_layers=16, seqlen=512, num_queries=2, num_heads=8, seed=0)


def rel_l2(scheme_name: str, layer: Layer, softmax_scale: float = TINY.softmax_scale) -> float:
    o_ref, lse_ref = reference(layer, softmax_scale)
    o, lse = emulate(by_name([scheme_name])[0], layer, softmax_scale)
    return error_metrics(o, lse, o_ref, lse_ref)["rel_l2"]


def test_config_a_error_rises_with_rope_amplitude_while_snapmla_does_not():
    # Content reaches 10; RoPE at 1e6 puts the content more than 2^15 below the row's FP8 scale (underflow).
    low, high = (synthetic_layer(TINY, 8, rope_amax=a) for a in (1e2, 1e6))
    a_low, a_high = rel_l2("config_a", low), rel_l2("config_a", high)
    s_low, s_high = rel_l2("snapmla", low), rel_l2("snapmla", high)
    assert a_high > 2.5 * a_low, (a_low, a_high)
    assert a_high > 5 * s_high, (a_high, s_high)
    assert s_high < 1.5 * s_low and s_low < 1.5 * s_high, (s_low, s_high)


def test_per_tensor_static_overflows_and_underflows():
    # The quantizer itself: scale 1.0 saturates past 448 and flushes values below half of 2^-9 to zero.
    x = torch.zeros(3, L.D_QK)
    x[0, :2] = torch.tensor([1000.0, -600.0])
    x[1, :2] = 1e-4
    x[2, :2] = 3.0
    c, _, scale = q_static_unit(x)
    assert torch.equal(scale, torch.ones(3))
    assert c[0, :2].tolist() == [448.0, -448.0]
    assert c[1, :2].tolist() == [0.0, 0.0]
    assert c[2, :2].tolist() == [3.0, 3.0]
    # End to end: content 100x larger saturates, 1000x smaller underflows; SnapMLA's per-token scale copes with both.
    for gain in (1e2, 1e-3):
        layer = synthetic_layer(TINY, 8, content_gain=gain)
        b, s = rel_l2("config_b", layer), rel_l2("snapmla", layer)
        assert b > 3 * s, (gain, b, s)
    layer = synthetic_layer(TINY, 8)
    assert rel_l2("config_b", layer) < 3 * rel_l2("snapmla", layer)


def test_bf16_floor_is_lowest():
    for i in (0, 15):
        layer = synthetic_layer(TINY, i)
        errors = {s.name: rel_l2(s.name, layer) for s in SCHEMES}
        floor = errors.pop("bf16")
        assert floor < 5e-3, floor
        assert all(floor < 0.2 * e for e in errors.values()), (floor, errors)


def test_schemes_quantize_as_named():
    layer = synthetic_layer(TINY, 3)
    snap = by_name(["snapmla"])[0].prepare(layer.q, layer.kv)
    c8, rope, scale = quantize_rows(layer.kv)
    assert torch.equal(snap.k_c[0], c8.float()) and torch.equal(snap.k_r[0], rope.float())
    assert torch.equal(snap.k_scale[0], scale)
    assert snap.logit_scale == 1.0 and snap.out_scale == 1.0

    engine = by_name(["engine_pt"])[0].prepare(layer.q, layer.kv)
    kv_scale = layer.kv.float().abs().max() / L.FP8_E4M3_MAX
    assert engine.out_scale == pytest.approx(kv_scale.item())
    assert torch.equal(engine.k_scale, torch.ones_like(engine.k_scale))
    # RoPE in FP8: every RoPE value is an e4m3 number.
    assert torch.equal(engine.k_r, engine.k_r.to(torch.float8_e4m3fn).float())

    _, _, page_scale = q_per_page(layer.kv)
    pages = page_scale.view(-1, L.PAGE_BLOCK_SIZE)
    assert torch.equal(pages, pages[:, :1].expand_as(pages))


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_dump_round_trip(tmp_path, suffix):
    if suffix == ".safetensors":
        pytest.importorskip("safetensors")
    layers = synthetic_layers(SyntheticConfig(num_layers=2, seqlen=64, num_queries=1, num_heads=2))
    path = tmp_path / f"dump{suffix}"
    save_dump(path, layers, softmax_scale=0.1)
    loaded, scale = load_dump(path)
    assert scale == pytest.approx(0.1)
    assert len(loaded) == 2
    for a, b in zip(layers, loaded):
        assert torch.equal(a.kv, b.kv) and torch.equal(a.q, b.q)


def test_dump_errors_name_the_key(tmp_path):
    path = tmp_path / "bad.pt"
    torch.save({"layers.0.kv": torch.zeros(4, L.D_QK)}, path)
    with pytest.raises(ValueError, match=r"layers\.0\.q"):
        load_dump(path)
    torch.save({"layers.0.kv": torch.zeros(4, 512), "layers.0.q": torch.zeros(1, 2, L.D_QK)}, path)
    with pytest.raises(ValueError, match=r"layers\.0\.kv must have shape"):
        load_dump(path)
    torch.save({"kv": torch.zeros(4, L.D_QK)}, path)
    with pytest.raises(ValueError, match="unexpected key 'kv'"):
        load_dump(path)


def test_page_order_and_paged_path_match_dense():
    layer = synthetic_layer(SyntheticConfig(seqlen=200, num_queries=2, num_heads=4), 5)  # last page partly filled
    seq = paged.emulate_paged(layer, TINY.softmax_scale, "sequential", seed=1)
    rnd = paged.emulate_paged(layer, TINY.softmax_scale, "random", seed=1)
    dense = emulate(by_name(["snapmla"])[0], layer, TINY.softmax_scale)
    assert torch.equal(seq[0], rnd[0]) and torch.equal(seq[1], rnd[1])
    # Same arithmetic through another batching: the matmul's summation order may differ with the CPU's vector
    # width (bit-equal here, 1 ulp of lse apart on the H200 machine's CPU), so allow float32 rounding.
    torch.testing.assert_close(seq[0].float(), dense[0].float(), rtol=0, atol=1e-6)
    torch.testing.assert_close(seq[1], dense[1], rtol=1e-6, atol=1e-6)


def test_cli_tiny_run(tmp_path, capsys):
    results = main(["--layers", "2", "--seqlen", "128", "--heads", "4", "--queries", "1", "--out", str(tmp_path),
                    "--backend", "emulation"])
    printed = capsys.readouterr().out
    assert "SnapMLA (per-token, RoPE BF16)" in printed and "rope_amax" in printed
    saved = json.loads((tmp_path / "results.json").read_text())
    assert set(saved["schemes"]) == {s.name for s in SCHEMES}
    assert len(saved["schemes"]["snapmla"]["layers"]) == 2
    assert saved["page_order"]["emulation: random vs sequential pages"] == {"o_max_abs": 0.0, "lse_max_abs": 0.0}
    for png in ("error_per_layer.png", "metrics_per_layer.png", "ablations.png", "sweeps.png", "data.png"):
        assert (tmp_path / png).stat().st_size > 1000
    assert results["meta"]["backend"].startswith("emulation")


def test_cli_rejects_unknown_scheme_and_unusable_kernel(capsys):
    with pytest.raises(SystemExit):
        main(["--schemes", "snapmla,foo", "--no-plots"])
    assert "unknown scheme(s) ['foo']" in capsys.readouterr().err
    if not paged.kernel_ready():
        with pytest.raises(SystemExit):
            main(["--backend", "kernel", "--no-plots"])
        assert "backend 'kernel' needs a CUDA GPU" in capsys.readouterr().err


def test_kernel_check_plumbing_on_cpu(monkeypatch):
    """The kernel path's shapes and the agreement verdict, with the kernel stood in for by the emulation."""
    from snapmla_ext import ops
    from snapmla_ext.reference import decode

    def fake_kernel(q, k_cache, block_table, cache_seqlens, head_dim_v, meta, num_splits, softmax_scale, **kw):
        out, lse = decode(q, k_cache, block_table, cache_seqlens, softmax_scale)
        return (out.float() * (1 + bias)).to(torch.bfloat16), lse

    monkeypatch.setattr(ops, "flash_mla_with_kvcache", fake_kernel)
    layer = synthetic_layer(SyntheticConfig(seqlen=130, num_queries=2, num_heads=4), 2)
    bias = 0.0
    exact = kernel_agreement([paged.kernel_paged(layer, TINY.softmax_scale, "random", seed=0, device="cpu")])
    assert exact["pass"] and exact["worst"]["rel_l2"] == 0.0
    bias = 0.01
    off = kernel_agreement([paged.kernel_paged(layer, TINY.softmax_scale, "random", seed=0, device="cpu")])
    assert not off["pass"] and off["worst"]["rel_l2"] > 3e-3


@pytest.mark.gpu
def test_kernel_agrees_with_emulation():
    layer = synthetic_layer(SyntheticConfig(seqlen=1000, num_queries=2, num_heads=64), 7)
    out = paged.kernel_paged(layer, TINY.softmax_scale, "random", seed=0)
    worst = kernel_agreement([out])["worst"]
    assert worst["rel_l2"] <= 3e-3 and worst["cos_diff"] <= 1e-5, worst  # docs/numerics_contract.md section 7, on o


@pytest.mark.gpu
@pytest.mark.xfail(strict=True, reason="known gap: QK accumulated in FP8 WGMMA (13 fraction bits at the accumulator's "
                   "exponent) gives lse 2.25e-3 nats off on this heavy-tailed layer with two chains of 8 k-steps "
                   "(H200, 2026-12-01; 5.9e-3 with one chain); docs/design.md section 6")
def test_kernel_lse_agrees_with_emulation_on_heavy_tailed_data():
    # the contract's lse bound (1e-3) holds on FlashMLA-like data (tests/test_decode_gpu.py); not yet on logits of ~80 nats.
    layer = synthetic_layer(SyntheticConfig(seqlen=1000, num_queries=2, num_heads=64), 7)
    out = paged.kernel_paged(layer, TINY.softmax_scale, "random", seed=0)
    assert kernel_agreement([out])["worst"]["lse_max"] <= 1e-3
