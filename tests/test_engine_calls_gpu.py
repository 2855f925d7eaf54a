"""The decode as inference engines call it (GPU): vLLM's and SGLang's call sequences, written as their MLA
backends write them, on the cache views they allocate, written through append_kv_parts from a slot mapping.

- vLLM (FlashMLA 2026 generation, `snapmla_ext.flash_mla_2026`): keyword arguments, `k_cache=kv_cache.unsqueeze(-2)`,
  `get_mla_metadata(seq_lens, n, 1, is_fp8_kvcache=True)` per step shared by the layers, `descale_q=None,
  descale_k=None, out=`.
- SGLang (FlashMLA 2025 generation, `snapmla_ext.flash_mla_2025`): CUDA graphs captured at several batch sizes on
  persistent buffers with a block-table view narrower than the lengths replayed later; per step the metadata is
  computed outside the graph and `.copy_()`-ed into the captured buffers; padded batches (length-0 rows).
- torch.compile (fullgraph and reduce-overhead) of the vLLM step.

Every result is checked against float64 attention over the dequantized cache (the kernel's own error: P in FP8,
rel L2 <= 4e-2, 1 - cos <= 1e-3, |lse error| <= 1e-3, the same +-inf positions), and every graph replay or
compiled call against an eager call on the same inputs, bit for bit. Unused cache slots and pages hold NaN bytes;
block-table entries past a request's pages hold ids outside the cache.
"""

import math

import pytest
import torch

import snapmla_ext.flash_mla_2025 as flash_mla_2025
import snapmla_ext.flash_mla_2026 as flash_mla_2026
from snapmla_ext import layout as L
from snapmla_ext import quant_ops
from snapmla_ext.reference import attention_fp64_dequant
from utils.compare import assert_bitwise_equal, assert_close_report
from utils.data import make_paged_inputs, make_q

pytestmark = pytest.mark.gpu

O_REL_L2, O_COS, LSE_ATOL = 4e-2, 1e-3, 1e-3
ENGINE_PAGE = (L.PAGE_BLOCK_SIZE, L.TOKEN_BYTES)  # the (num_blocks, 64, 644) cache an engine allocates
SCALE = 192**-0.5  # DeepSeek's softmax scale (qk_nope 128 + qk_rope 64), as the engines pass it


@pytest.fixture(autouse=True)
def no_debug_sync(monkeypatch):
    monkeypatch.delenv("SNAPMLA_DEBUG_CHECKS", raising=False)  # its host sync cannot be captured
    monkeypatch.delenv("SNAPMLA_FORCE_SPLIT", raising=False)


def append_like_vllm(data, kv, slots):
    """concat_and_cache_mla's inputs: kv_c (n, 512) and k_pe (n, 1, 64) as views of one projection output, an
    int64 slot mapping with -1 for padding tokens, the cache as the engine's (num_blocks, 64, 644) view."""
    quant_ops.append_kv_parts(data.view(-1, *ENGINE_PAGE), kv[:, : L.D_CONTENT], kv[:, None, L.D_CONTENT :], slots)


def engine_inputs(b, s_q, h_q, seqlens, seed):
    """make_paged_inputs written through the engine's KV write, and the engine's view of the same cache."""
    p = make_paged_inputs(b, s_q, h_q, seqlens, seed=seed, device="cuda", append=append_like_vllm)
    return p, p.cache.data.view(-1, *ENGINE_PAGE)


def check_against_fp64(out, lse, q, p, block_table, seqlens, causal, rows=None):
    """out / lse of the first `rows` requests (default all) against float64 over the dequantized cache."""
    rows = q.shape[0] if rows is None else rows
    o64, lse64 = attention_fp64_dequant(quant_ops.quantize_q(q[:rows]), p.cache, block_table[:rows], seqlens[:rows],
                                        softmax_scale=SCALE, causal=causal)
    assert_close_report(out[:rows].double(), o64, name="o", rel_l2_tol=O_REL_L2, cos_tol=O_COS)
    assert_close_report(lse[:rows].double(), lse64, name="lse", atol=LSE_ATOL)


# ---- vLLM: FlashMLA 2026 generation, keyword calls, one metadata object per step shared by the layers ----


def vllm_decode(q, kv_cache, block_table, seq_lens, sched_meta, out=None):
    return flash_mla_2026.flash_mla_with_kvcache(
        q=q,
        k_cache=kv_cache.unsqueeze(-2),
        block_table=block_table,
        cache_seqlens=seq_lens,
        head_dim_v=L.D_CONTENT,
        tile_scheduler_metadata=sched_meta,
        softmax_scale=SCALE,
        causal=True,
        is_fp8_kvcache=True,
        descale_q=None,
        descale_k=None,
        out=out,
    )


@pytest.mark.parametrize("s_q", [1, 2], ids=["decode", "mtp"])
@pytest.mark.parametrize("h_q", [16, 64, 128])
def test_vllm_steps(s_q, h_q):
    b = 5
    full = [3000, 1, 65, 0, 2047]
    p, kv_cache = engine_inputs(b, s_q, h_q, full, seed=70 + h_q + s_q)
    for step, lens in enumerate([full, [64, 1, 0, 0, 2000]]):
        seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
        q = make_q(b, s_q, h_q, seed=80 + step, device="cuda")
        sched_meta, none = flash_mla_2026.get_mla_metadata(seq_lens, s_q * h_q, 1, is_fp8_kvcache=True)
        assert none is None
        out_buf = torch.full((b, s_q, h_q, L.D_CONTENT), float("nan"), dtype=torch.bfloat16, device="cuda")
        layer0 = vllm_decode(q, kv_cache, p.block_table, seq_lens, sched_meta, out=out_buf)
        layer1 = vllm_decode(q, kv_cache, p.block_table, seq_lens, sched_meta)  # reuses the filled metadata
        torch.cuda.synchronize()
        assert layer0[0].data_ptr() == out_buf.data_ptr()
        assert_bitwise_equal(layer1[0], layer0[0], f"out, second layer (step {step})")
        assert_bitwise_equal(layer1[1], layer0[1], f"lse, second layer (step {step})")
        check_against_fp64(*layer0, q, p, p.block_table, seq_lens, causal=True)


def test_vllm_strided_q_equals_contiguous():
    """vLLM hands q as a view of a wider buffer (rows strided, last dim contiguous): the same bits as a copy."""
    b, s_q, h_q = 3, 1, 128
    p, kv_cache = engine_inputs(b, s_q, h_q, [700, 64, 1500], seed=74)
    wide = torch.zeros(b, s_q, h_q, 640, dtype=torch.bfloat16, device="cuda")
    wide[..., : L.D_QK] = p.q
    results = []
    for q in (wide[..., : L.D_QK], p.q):
        sched_meta, _ = flash_mla_2026.get_mla_metadata()
        results.append(vllm_decode(q, kv_cache, p.block_table, p.cache_seqlens, sched_meta))
    torch.cuda.synchronize()
    assert_bitwise_equal(results[0][0], results[1][0], "out")
    assert_bitwise_equal(results[0][1], results[1][1], "lse")


# ---- SGLang: FlashMLA 2025 generation under CUDA graphs on persistent buffers ----


class SGLangGraphs:
    """The buffers and captured graphs of SGLang's FlashMLA backend: one graph per batch size, captured with
    kv_indices[:bs, :capture_pages] (narrower than the lengths replayed later), replayed after the step's
    metadata is computed eagerly and copied into the captured metadata buffers."""

    def __init__(self, kv_cache, s_q, h_q, max_bs, max_pages, capture_pages):
        dev = "cuda"
        self.kv_cache, self.s_q, self.h_q = kv_cache, s_q, h_q
        self.causal = s_q > 1  # target verify (MTP) is causal, one-token decode is not
        self.q = torch.zeros(max_bs, s_q, h_q, L.D_QK, dtype=torch.bfloat16, device=dev)
        self.seq_lens = torch.ones(max_bs, dtype=torch.int32, device=dev)
        # Entries SGLang never wrote hold stale ids: here ids outside the cache, never to be read.
        self.kv_indices = torch.full((max_bs, max_pages), 2**31 - 1, dtype=torch.int32, device=dev)
        meta, _ = flash_mla_2025.get_mla_metadata(self.seq_lens, s_q * h_q, 1)
        self.meta = torch.zeros_like(meta)
        self.num_splits = torch.zeros(max_bs + 1, dtype=torch.int32, device=dev)
        self.capture_pages = capture_pages
        self.graphs, self.outputs = {}, {}

    def step(self, bs, pages):
        return flash_mla_2025.flash_mla_with_kvcache(
            self.q[:bs], self.kv_cache.view(-1, L.PAGE_BLOCK_SIZE, 1, L.TOKEN_BYTES),  # SGLang's k_cache.view
            self.kv_indices[:bs, :pages], self.seq_lens[:bs], L.D_CONTENT, self.meta, self.num_splits[: bs + 1],
            softmax_scale=SCALE, causal=self.causal,
        )

    def fill_metadata(self, bs):
        meta, splits = flash_mla_2025.get_mla_metadata(self.seq_lens[:bs], self.s_q * self.h_q, 1)
        self.meta.copy_(meta)
        self.num_splits[: bs + 1].copy_(splits)

    def capture(self, bs):
        self.fill_metadata(bs)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self.step(bs, self.capture_pages)  # warm-up outside the graph
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.outputs[bs] = self.step(bs, self.capture_pages)
        self.graphs[bs] = graph

    def replay(self, q, block_table, lens):
        """Pad the batch to the smallest captured size (length-0 rows), write the buffers, replay."""
        raw_bs = q.shape[0]
        bs = min(s for s in self.graphs if s >= raw_bs)
        self.q[:raw_bs].copy_(q)
        self.q[raw_bs:bs].normal_()  # padding rows carry whatever the buffer holds
        self.seq_lens[:bs].zero_()
        self.seq_lens[:raw_bs].copy_(torch.tensor(lens, dtype=torch.int32))
        pages = block_table.shape[1]
        self.kv_indices[:bs].fill_(2**31 - 1)
        self.kv_indices[:raw_bs, :pages].copy_(block_table)
        self.fill_metadata(bs)
        self.graphs[bs].replay()
        return bs, self.outputs[bs]


@pytest.mark.parametrize("s_q,h_q", [(1, 16), (1, 64), (1, 128), (2, 16), (2, 128)])
def test_sglang_graphs_at_several_batch_sizes(s_q, h_q):
    full = [4000, 3000, 65, 1000, 2500, 1, 700, 129]
    p, kv_cache = engine_inputs(len(full), s_q, h_q, full, seed=90 + h_q + s_q)
    graphs = SGLangGraphs(kv_cache, s_q, h_q, max_bs=8, max_pages=p.block_table.shape[1] + 4, capture_pages=1)
    for bs in (1, 3, 8):
        graphs.capture(bs)
    # (request ids, lengths): batches that pad to each captured size, lengths up to what the cache holds.
    replays = [([0], [4000]), ([2, 3], [65, 999]), ([0, 1, 4, 6, 7], [17, 3000, 2500, 700, 0]),
               (list(range(8)), full), ([5, 6, 7], [1, 64, 129])]
    for i, (ids, lens) in enumerate(replays):
        q = make_q(len(ids), s_q, h_q, seed=100 + i, device="cuda")
        table = p.block_table[ids]
        bs, (out, lse) = graphs.replay(q, table, lens)
        torch.cuda.synchronize()
        eager = graphs.step(bs, graphs.kv_indices.shape[1])  # the full-width table, eagerly
        torch.cuda.synchronize()
        assert_bitwise_equal(out, eager[0], f"out (replay {i}, bs {bs}, lengths {lens})")
        assert_bitwise_equal(lse, eager[1], f"lse (replay {i}, bs {bs}, lengths {lens})")
        check_against_fp64(out, lse, q, p, table, torch.tensor(lens, dtype=torch.int32, device="cuda"),
                           graphs.causal)
        # Padding rows (length 0) see no token: out 0, lse +inf.
        assert (out[len(ids):] == 0).all() and (lse[len(ids):] == math.inf).all()


# ---- torch.compile of the vLLM step ----


def compiled_step(q, kv_cache, block_table, seq_lens):
    sched_meta, _ = flash_mla_2026.get_mla_metadata(seq_lens, q.shape[1] * q.shape[2], 1, is_fp8_kvcache=True)
    return vllm_decode(q, kv_cache, block_table, seq_lens, sched_meta)


@pytest.mark.parametrize("mode", ["fullgraph", "reduce-overhead"])
def test_torch_compile_of_the_engine_step(mode):
    torch._dynamo.reset()
    b, s_q, h_q = 4, 2, 64
    full = [2000, 0, 65, 777]
    p, kv_cache = engine_inputs(b, s_q, h_q, full, seed=110)
    compiled = (torch.compile(compiled_step, fullgraph=True) if mode == "fullgraph"
                else torch.compile(compiled_step, mode="reduce-overhead"))
    seq_lens = torch.zeros(b, dtype=torch.int32, device="cuda")
    for i, lens in enumerate([full, [1, 0, 64, 777], full]):
        seq_lens.copy_(torch.tensor(lens, dtype=torch.int32))
        q = make_q(b, s_q, h_q, seed=111 + i, device="cuda")
        out, lse = (t.clone() for t in compiled(q, kv_cache, p.block_table, seq_lens))
        eager_out, eager_lse = compiled_step(q, kv_cache, p.block_table, seq_lens)
        torch.cuda.synchronize()
        assert_bitwise_equal(out, eager_out, f"out ({mode}, call {i})")
        assert_bitwise_equal(lse, eager_lse, f"lse ({mode}, call {i})")
        check_against_fp64(out, lse, q, p, p.block_table, seq_lens, causal=True)


# ---- what the engines could get wrong: rejected, naming the argument ----


@pytest.fixture(scope="module")
def small():
    b, s_q, h_q = 2, 1, 16
    p, kv_cache = engine_inputs(b, s_q, h_q, [100, 300], seed=120)
    return p, kv_cache


def call_2026(p, kv_cache, **override):
    args = dict(q=p.q, k_cache=kv_cache.unsqueeze(-2), block_table=p.block_table, cache_seqlens=p.cache_seqlens,
                head_dim_v=L.D_CONTENT, tile_scheduler_metadata=flash_mla_2026.get_mla_metadata()[0],
                softmax_scale=SCALE, causal=True)
    args.update(override)
    return flash_mla_2026.flash_mla_with_kvcache(**args)


@pytest.mark.parametrize(
    "override, error, message",
    [
        (lambda p, kv: dict(k_cache=torch.zeros(4, 64, 1, 576, dtype=torch.bfloat16, device="cuda")), ValueError,
         r"k_cache must have dtype torch.uint8"),
        (lambda p, kv: dict(head_dim_v=576), ValueError, r"head_dim_v must be 512, got 576"),
        (lambda p, kv: dict(block_table=p.block_table.long()), RuntimeError,
         r"block_table must have dtype Int, got Long"),
        (lambda p, kv: dict(q=p.q.transpose(2, 3).contiguous().transpose(2, 3)), RuntimeError,
         r"q must be contiguous in its last dimension"),
        (lambda p, kv: dict(cache_seqlens=p.cache_seqlens.cpu()), RuntimeError,
         r"cache_seqlens must be (a CUDA tensor|on the same device)"),
        (lambda p, kv: dict(q=p.q.to(torch.float8_e4m3fn)), ValueError, r"pass the BF16 q"),
        (lambda p, kv: dict(descale_q=torch.ones(1, device="cuda")), ValueError, r"descale_q must be None"),
    ],
    ids=["bf16_flashmla_cache", "head_dim_v", "int64_block_table", "q_last_dim_strided", "seqlens_on_cpu",
         "fp8_q", "descale_q"],
)
def test_rejected_engine_inputs(small, override, error, message):
    p, kv_cache = small
    with pytest.raises(error, match=message):
        call_2026(p, kv_cache, **override(p, kv_cache))


def test_stale_metadata_rejected(small):
    """A 2026 metadata object reused after the lengths were written in place (the next step's lengths in the
    same buffer), and one filled eagerly then used in a CUDA-graph capture: both would follow a stale plan."""
    p, kv_cache = small
    seq_lens = p.cache_seqlens.clone()
    sched_meta, _ = flash_mla_2026.get_mla_metadata()
    call_2026(p, kv_cache, cache_seqlens=seq_lens, tile_scheduler_metadata=sched_meta)
    seq_lens.add_(1)
    with pytest.raises(ValueError, match=r"tile_scheduler_metadata: stale metadata: cache_seqlens was written in place"):
        call_2026(p, kv_cache, cache_seqlens=seq_lens, tile_scheduler_metadata=sched_meta)

    sched_meta, _ = flash_mla_2026.get_mla_metadata()
    call_2026(p, kv_cache, cache_seqlens=seq_lens, tile_scheduler_metadata=sched_meta)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(ValueError, match=r"stale metadata: it was filled outside a CUDA-graph capture and this call "
                                         r"is inside one"):
        with torch.cuda.graph(graph):
            call_2026(p, kv_cache, cache_seqlens=seq_lens, tile_scheduler_metadata=sched_meta)
