"""The whole decode call in a CUDA graph, and under torch.compile (GPU).

Captured once: Fused-Q-Quant + get_mla_metadata (device scheduler) + decode + combine. Replayed with new query
values and new cache_seqlens written into the captured input tensors: the replay must plan for the new lengths
(nothing was computed on the host at capture time) and give bit-for-bit what an eager call gives.
"""

import pytest
import torch

from snapmla_ext import layout as L
from snapmla_ext.decode_ops import flash_mla_with_kvcache, get_mla_metadata
from utils.compare import assert_bitwise_equal
from utils.data import make_paged_inputs, make_q
from utils.kernel_choice import force_kernel

pytestmark = pytest.mark.gpu

B, S_Q, H_Q = 6, 2, 64


@pytest.fixture(autouse=True)
def no_debug_sync(monkeypatch):
    monkeypatch.delenv("SNAPMLA_DEBUG_CHECKS", raising=False)  # its host sync cannot be captured
    monkeypatch.delenv("SNAPMLA_FORCE_SPLIT", raising=False)


def step_old_style(q, cache, block_table, seqlens, num_sm_parts):
    meta, splits = get_mla_metadata(seqlens, S_Q * H_Q, 1, num_sm_parts=num_sm_parts)
    return flash_mla_with_kvcache(q, cache, block_table, seqlens, L.D_CONTENT, meta, splits, causal=True)


def step_new_style(q, cache, block_table, seqlens, num_sm_parts):
    sched_meta, _ = get_mla_metadata(num_sm_parts=num_sm_parts)
    return flash_mla_with_kvcache(q, cache, block_table, seqlens, L.D_CONTENT, sched_meta, causal=True)


def capture(step, *args):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            step(*args)  # warm-up outside the graph: lazy loading, allocator
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = step(*args)
    return graph, outputs


def assert_replays_equal_eager(graph, outputs, step, eager_args, q, seqlens, replays, make_query, label=""):
    """Replay the captured graph with each new query and lengths written into q / seqlens, against an eager
    step(*eager_args) on the same inputs, bit for bit."""
    out, lse = outputs
    for i, new_lens in enumerate(replays):
        q.copy_(make_query(i))
        seqlens.copy_(torch.tensor(new_lens, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        eager_out, eager_lse = step(*eager_args)
        assert_bitwise_equal(out, eager_out, f"out ({label}replay {i}, seqlens {new_lens})")
        assert_bitwise_equal(lse, eager_lse, f"lse ({label}replay {i}, seqlens {new_lens})")


@pytest.mark.parametrize("step", [step_old_style, step_new_style], ids=["old_style", "new_style"])
@pytest.mark.parametrize("num_sm_parts", [None, 300], ids=["default_parts", "forced_split"])
def test_graph_replay_with_new_seqlens(step, num_sm_parts):
    full = [4000, 3000, 2500, 1000, 64, 4096]  # the cache holds these; replays use shorter prefixes
    p = make_paged_inputs(B, S_Q, H_Q, full, seed=60, device="cuda")
    q = p.q.clone()
    seqlens = p.cache_seqlens.clone()
    graph, (out, lse) = capture(step, q, p.cache, p.block_table, seqlens, num_sm_parts)

    for i, new_lens in enumerate([[4000, 1, 0, 999, 64, 4096], [17, 3000, 2500, 0, 0, 130], full]):
        q.copy_(make_q(B, S_Q, H_Q, seed=61 + i, device="cuda"))
        seqlens.copy_(torch.tensor(new_lens, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        eager_out, eager_lse = step(q, p.cache, p.block_table, seqlens, num_sm_parts)
        assert_bitwise_equal(out, eager_out, f"out (replay {i}, seqlens {new_lens})")
        assert_bitwise_equal(lse, eager_lse, f"lse (replay {i}, seqlens {new_lens})")


def test_torch_compile_matches_eager():
    p = make_paged_inputs(B, S_Q, H_Q, [300, 0, 64, 5000, 1, 77], seed=62, device="cuda")
    compiled = torch.compile(step_old_style)
    out, lse = compiled(p.q, p.cache.data, p.block_table, p.cache_seqlens, None)
    eager_out, eager_lse = step_old_style(p.q, p.cache.data, p.block_table, p.cache_seqlens, None)
    assert_bitwise_equal(out, eager_out, "out")
    assert_bitwise_equal(lse, eager_lse, "lse")


@pytest.mark.parametrize("num_sm_parts", [None, 300], ids=["default_parts", "forced_split"])
def test_graph_replay_ws_kernel(monkeypatch, num_sm_parts):
    """The warp-specialised wide kernel (SNAPMLA_DECODE_KERNEL=ws) captured and replayed with new seqlens."""
    force_kernel("ws")
    test_graph_replay_with_new_seqlens(step_old_style, num_sm_parts)


def test_graph_replay_narrow_kernel(monkeypatch):
    """The narrow kernel (q_rows <= 16, forced, whatever the automatic choice) captured and replayed with new
    seqlens, forced split."""
    force_kernel("narrow")
    b, s_q, h_q = 5, 1, 16

    def step(q, cache, block_table, seqlens):
        meta, splits = get_mla_metadata(seqlens, s_q * h_q, 1, num_sm_parts=200)
        return flash_mla_with_kvcache(q, cache, block_table, seqlens, L.D_CONTENT, meta, splits)

    full = [3000, 65, 4096, 1, 700]
    p = make_paged_inputs(b, s_q, h_q, full, seed=63, device="cuda")
    q, seqlens = p.q.clone(), p.cache_seqlens.clone()
    graph, outputs = capture(step, q, p.cache, p.block_table, seqlens)
    assert_replays_equal_eager(graph, outputs, step, (q, p.cache, p.block_table, seqlens), q, seqlens,
                               [[0, 64, 4096, 1, 3], full], lambda i: make_q(b, s_q, h_q, seed=64 + i, device="cuda"))


@pytest.mark.parametrize(
    "s_q,h_q,kernel", [(2, 64, "auto"), (2, 64, "wide"), (1, 16, "narrow"), (1, 32, "auto")],
    ids=["ws", "wide", "narrow", "wide_32_rows"],
)
@pytest.mark.parametrize("num_sm_parts", [None, 300], ids=["default_parts", "forced_split"])
def test_graph_captured_with_narrow_block_table_view(monkeypatch, s_q, h_q, kernel, num_sm_parts):
    """SGLang captures the decode with a block-table view narrower than the lengths it later replays
    (cuda_graph_kv_indices[:bs, :n]); rows are read through their stride, as FlashMLA reads them, so the replay
    equals an eager call on the full table bit for bit."""
    force_kernel(kernel)
    b = 5

    def step(q, cache, block_table, seqlens):
        meta, splits = get_mla_metadata(seqlens, s_q * h_q, 1, num_sm_parts=num_sm_parts)
        return flash_mla_with_kvcache(q, cache, block_table, seqlens, L.D_CONTENT, meta, splits, causal=True)

    full = [4000, 3000, 2500, 1000, 4096]
    p = make_paged_inputs(b, s_q, h_q, full, seed=66, device="cuda")
    for width in (1, 3):
        q = p.q.clone()
        seqlens = torch.full_like(p.cache_seqlens, 64 * width)  # what fits the view at capture time
        graph, outputs = capture(step, q, p.cache, p.block_table[:, :width], seqlens)
        # Eager on the full table: the captured narrow view must reach the same pages through its row stride.
        assert_replays_equal_eager(graph, outputs, step, (q, p.cache, p.block_table, seqlens), q, seqlens,
                                   [full, [17, 3000, 0, 65, 4096]],
                                   lambda i: make_q(b, s_q, h_q, seed=67 + i, device="cuda"), f"width {width}, ")
