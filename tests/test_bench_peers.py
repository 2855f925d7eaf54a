"""bench/peers.py on the CPU, with stand-ins for the peers' modules: each peer is called the way its engine calls
it (FA3's MLA path as vLLM's FLASH_ATTN_MLA backend: q_pe, qv, the cache's RoPE and latent slices, scheduler
metadata for 64 + 512 dims and 64-token pages), a peer that does not import or run is reported with its reason,
and of FA3's variants the first that runs is taken."""

import sys
import types

import pytest
import torch

from utils.scripts import script_module


@pytest.fixture(scope="module")
def peers():
    with script_module("peers", folder="bench") as mod:
        yield mod


def _inputs(peers, b=2, s_q=2, h_q=8, pages=3):
    seqlens_cpu = torch.tensor([130, 70][:b], dtype=torch.int32)
    return peers.PeerInputs(q=torch.randn(b, s_q, h_q, 576).to(torch.bfloat16),
                            block_table=torch.arange(b * pages, dtype=torch.int32).view(b, pages),
                            seqlens=seqlens_cpu.clone(), seqlens_cpu=seqlens_cpu, num_blocks=b * pages)


def test_fa3_is_called_as_vllm_calls_it(peers):
    seen = {}

    def sched(**kw):
        seen["sched"] = kw
        return "sched-meta"

    def call(**kw):
        seen["call"] = kw
        return torch.zeros(1)

    x = _inputs(peers)
    peers.fa3_peer(call, sched).prepare(x)()
    c, s = seen["call"], seen["sched"]
    assert torch.equal(c["q"], x.q[..., 512:]) and torch.equal(c["qv"], x.q[..., :512])
    assert c["k_cache"].shape == (6, 64, 1, 64) and c["v_cache"].shape == (6, 64, 1, 512)
    assert c["k_cache"].data_ptr() == c["v_cache"].data_ptr() + 512 * 2  # two views of one BF16 cache
    assert c["page_table"] is x.block_table and c["cache_seqlens"] is x.seqlens
    assert c["softmax_scale"] == pytest.approx(576**-0.5) and c["scheduler_metadata"] == "sched-meta"
    assert (s["headdim"], s["headdim_v"], s["page_size"], s["num_heads_kv"]) == (64, 512, 64, 1)
    assert (s["batch_size"], s["max_seqlen_q"], s["max_seqlen_k"], s["num_heads_q"]) == (2, 2, 130, 8)


def test_flashmla_is_called_with_its_metadata(peers):
    seen = {}
    fm = types.SimpleNamespace(
        get_mla_metadata=lambda seqlens, rows, h_k: ("meta", "splits") if (rows, h_k) == (16, 1) else None,
        flash_mla_with_kvcache=lambda *a, **kw: seen.update(args=a, kw=kw),
    )
    x = _inputs(peers)
    peers.flashmla_peer(fm).prepare(x)()
    a = seen["args"]
    assert a[0] is x.q and a[1].shape == (6, 64, 1, 576) and a[1].dtype == torch.bfloat16
    assert a[4:7] == (512, "meta", "splits") and seen["kw"]["causal"] is False


def test_missing_and_failing_peers_are_reported(peers, monkeypatch):
    monkeypatch.setitem(sys.modules, "flash_mla", None)  # import fails
    fa = types.ModuleType("flash_attn_interface")
    fa.flash_attn_with_kvcache = lambda **kw: torch.zeros(1)
    fa.get_scheduler_metadata = lambda **kw: None
    monkeypatch.setitem(sys.modules, "flash_attn_interface", fa)
    tried = []

    def fake_tried(peer):  # the scheduler variant fails, the plain one runs
        tried.append(peer.note)
        return "TypeError: unexpected keyword" if peer.note.startswith("scheduler") else None

    monkeypatch.setattr(peers, "_tried", fake_tried)
    got, missing = peers.available_peers()
    assert [p.name for p in got] == ["fa3_bf16"] and got[0].note.startswith("no get_scheduler_metadata")
    assert tried == ["scheduler metadata precomputed", got[0].note]
    assert missing["flashmla_bf16"].startswith("import failed: ") and "flash_mla" in missing["flashmla_bf16"]


def test_only_the_named_peers_are_tried(peers, monkeypatch):
    monkeypatch.setattr(peers, "_tried", lambda peer: pytest.fail("no peer should be tried"))
    assert peers.available_peers(["none_of_them"]) == ([], {})


def test_vllm_fp8_gets_a_per_tensor_fp8_q_and_cache_and_its_own_metadata(peers):
    seen = {}
    ops = types.SimpleNamespace(
        get_mla_decoding_metadata_dense_fp8=lambda seqlens, rows, h_k: ("meta", "splits"),
        fwd_kvcache_mla_fp8=lambda *a: seen.update(args=a),
    )
    x = _inputs(peers)
    peers.vllm_fp8_peer(ops).prepare(x)()
    q8, cache, d_v, seqlens, table, scale, causal, meta, splits, q_s, k_s = seen["args"]
    assert q8.dtype == torch.float8_e4m3fn and q8.shape == x.q.shape and q8.is_contiguous()
    assert cache.dtype == torch.float8_e4m3fn and cache.shape == (6, 64, 1, 576)
    assert (d_v, meta, splits, causal) == (512, "meta", "splits", False) and seqlens is x.seqlens
    assert q_s.shape == (1,) and k_s.shape == (1,) and q_s.dtype == k_s.dtype == torch.float32
    # The scales are amax / 448: q dequantizes back to within e4m3's rounding, and the largest |q8| is 448.
    assert float(q8.float().abs().max()) == 448.0
    assert torch.allclose(q8.float() * q_s, x.q.float(), rtol=0.07, atol=float(q_s) * 2**-9)
