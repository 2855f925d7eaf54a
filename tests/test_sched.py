"""The split-KV scheduler (CPU): the plan of torch.ops.snapmla.get_mla_metadata on CPU seqlens (the same plan.h
arithmetic the device kernel runs; tests/test_decode_gpu.py checks device == host), replayed the way the decode
kernel walks it (csrc/kernels/sched/sched_meta.h), and the Python defaults of snapmla_ext.decode_ops.
"""

import random
import re

import pytest
import torch

from snapmla_ext import decode_ops
from snapmla_ext.decode_ops import default_num_sm_parts, get_mla_metadata
from utils.sched_plan import BEGIN_REQ, END_REQ, OVERHEAD, blocks, check_plan

CASES = [
    ("one request", [1000], 1),
    ("zero length alone", [0], 1),
    ("zero lengths, more parts than work", [0, 0, 0], 132),
    ("mixed short and long", [1, 64, 65, 0, 128 * 1024], 132),
    ("forced split into single blocks", [65536], 1000),
    ("negative seqlen counts as empty", [-5, 3, 0], 4),
    ("b = 64 at 16k, 132 SMs", [16384] * 64, 132),
    ("b = 128 at 4k, h_q = 128 (66 parts)", [4096] * 128, 66),
]


@pytest.mark.parametrize("name,seqlens,parts", CASES, ids=[c[0] for c in CASES])
def test_plan_examples(requires_ext, name, seqlens, parts):
    check_plan(seqlens, parts)


@pytest.mark.parametrize("b", [1, 3, 74, 132, 200])
@pytest.mark.parametrize("parts", [1, 7, 66, 132, 397])
def test_plan_random_varlen(requires_ext, b, parts):
    rng = random.Random(1000 * b + parts)
    seqlens = [0 if rng.random() < 0.15 else rng.randint(1, 65536) for _ in range(b)]
    check_plan(seqlens, parts)


def test_one_part_never_splits(requires_ext):
    seqlens = [0, 1, 64, 65, 100000]
    meta, num_splits = check_plan(seqlens, 1)
    assert num_splits.tolist() == list(range(len(seqlens) + 1))
    assert meta[0, :5].tolist() == [0, 0, len(seqlens) - 1, blocks(seqlens[-1]), 0]


def test_huge_seqlens_do_not_overflow(requires_ext):
    check_plan([2**31 - 1, 2**31 - 1, 7], 132)


def test_idle_parts_are_marked_empty(requires_ext):
    meta, _ = check_plan([64], 16)  # 6 cost units over 16 parts: most parts get nothing
    idle = meta[:, BEGIN_REQ] > meta[:, END_REQ]
    assert idle.sum() >= 10


def test_every_part_works_when_there_are_enough_units(requires_ext):
    # b16 at 8k over 132 parts: 2128 cost units. Parts of ceil(2128 / 132) = 17 units left the last 6 parts
    # empty and 105 of them at 17 blocks; parts of 16 or 17 units (plan.h part_begin) give every part work.
    meta, _ = check_plan([8192] * 16, 132)
    assert int((meta[:, BEGIN_REQ] > meta[:, END_REQ]).sum()) == 0
    blocks = []
    for row in meta.tolist():
        br, bb, er, eb = row[:4]
        blocks.append(sum((eb if r == er else 128) - (bb if r == br else 0) for r in range(br, er + 1)))
    assert max(blocks) == 17 and blocks.count(17) <= 16, blocks


@pytest.mark.parametrize("b, parts", [(1, 132), (1, 66), (2, 132), (4, 132)])
def test_short_parts_keep_their_length(requires_ext, b, parts):
    # Parts of P = ceil(cost / parts) <= 5 units (a piece's fixed cost, PIECE_OVERHEAD_BLOCKS) are not spread
    # over all parts (b1 8k: 128 one-block pieces over 132 parts were 0.9x of 67 two-block ones): part p owns
    # cost positions [p P, (p + 1) P), so the parts from ceil(cost / P) on are empty, and a request has a piece
    # in each part its blocks (positions C_r + OVERHEAD ..) touch.
    seqlens = [8192 - 100 * r for r in range(b)]
    costs = [OVERHEAD + blocks(s) for s in seqlens]
    payload = -(-sum(costs) // parts)
    assert payload <= OVERHEAD
    used = -(-sum(costs) // payload)
    meta, num_splits = check_plan(seqlens, parts)
    assert used < parts and not (meta[used:, BEGIN_REQ] <= meta[used:, END_REQ]).any()
    start, expected = 0, [0]
    for c in costs:
        expected.append(expected[-1] + (start + c - 1) // payload - (start + OVERHEAD) // payload + 1)
        start += c
    assert num_splits.tolist() == expected


def test_gpu_combine_cases_have_the_pieces_they_name(requires_ext):
    # The kernel tests' combine cases (tests/test_decode_kernel_gpu.py) name the most pieces a request gets, since
    # what they cover depends on it (past one 32-piece chunk of weights, one round per set): the plan keeps them true.
    from test_decode_kernel_gpu import CASES

    named = [c for c in CASES if re.search(r"_(\d+)_pieces", c[0]) and c[6] is not None]
    assert len(named) >= 4
    for name, b, _, _, seqlens, _, parts in named:
        _, num_splits = check_plan(seqlens, parts)
        ns = num_splits.tolist()
        most = max(ns[r + 1] - ns[r] for r in range(b))
        assert most == int(re.search(r"_(\d+)_pieces", name).group(1)), f"{name}: at most {most} pieces"


# ---- argument checks of the op (one test per message) ----


def test_sched_rejects_dtype(requires_ext):
    with pytest.raises(RuntimeError, match="cache_seqlens must have dtype Int, got Long"):
        requires_ext.get_mla_metadata(torch.ones(3, dtype=torch.int64), 16, 1, 4)


def test_sched_rejects_dim(requires_ext):
    with pytest.raises(RuntimeError, match="cache_seqlens must have 1 dimensions, got 2"):
        requires_ext.get_mla_metadata(torch.ones(3, 1, dtype=torch.int32), 16, 1, 4)


def test_sched_rejects_empty_batch(requires_ext):
    with pytest.raises(RuntimeError, match=r"cache_seqlens.shape\[0\] \(b\) must be >= 1, got 0"):
        requires_ext.get_mla_metadata(torch.ones(0, dtype=torch.int32), 16, 1, 4)


def test_sched_rejects_num_heads_k(requires_ext):
    with pytest.raises(RuntimeError, match="num_heads_k must be 1 .*, got 2"):
        requires_ext.get_mla_metadata(torch.ones(3, dtype=torch.int32), 16, 2, 4)


def test_sched_rejects_num_q_tokens(requires_ext):
    with pytest.raises(RuntimeError, match=r"num_q_tokens_per_head_k \(s_q \* h_q\) must be >= 1, got 0"):
        requires_ext.get_mla_metadata(torch.ones(3, dtype=torch.int32), 0, 1, 4)


def test_sched_rejects_num_sm_parts(requires_ext):
    with pytest.raises(RuntimeError, match=r"num_sm_parts must be in \[1, 65535\] \(grid.y\), got 0"):
        requires_ext.get_mla_metadata(torch.ones(3, dtype=torch.int32), 16, 1, 0)


def test_sched_rejects_non_contiguous(requires_ext):
    with pytest.raises(RuntimeError, match="cache_seqlens must be contiguous"):
        requires_ext.get_mla_metadata(torch.ones(6, dtype=torch.int32)[::2], 16, 1, 4)


# ---- Python side (no extension needed) ----


@pytest.mark.parametrize(
    "rows,h_k,expected", [(16, 1, 132), (64, 1, 132), (128, 1, 66), (256, 1, 33), (128 * 8, 1, 8), (10000, 1, 1)]
)
def test_default_num_sm_parts(monkeypatch, rows, h_k, expected):
    monkeypatch.delenv("SNAPMLA_FORCE_SPLIT", raising=False)
    monkeypatch.setattr(decode_ops, "_sm_count", lambda device: 132)
    assert default_num_sm_parts(rows, h_k, "cpu") == expected


def test_force_split_env(monkeypatch):
    monkeypatch.setenv("SNAPMLA_FORCE_SPLIT", "500")
    assert default_num_sm_parts(128, 1, "cpu") == 500


def test_force_split_env_invalid(monkeypatch):
    monkeypatch.setenv("SNAPMLA_FORCE_SPLIT", "many")
    with pytest.raises(ValueError, match="SNAPMLA_FORCE_SPLIT must be a positive integer"):
        default_num_sm_parts(128, 1, "cpu")


def test_new_style_metadata_is_empty():
    meta, none = get_mla_metadata()
    assert none is None and not meta.have_initialized and meta.tile_scheduler_metadata is None


def test_new_style_keeps_forced_parts():
    meta, _ = get_mla_metadata(num_sm_parts=7)
    assert meta.num_sm_parts == 7


def test_old_style_sparse_not_supported():
    with pytest.raises(NotImplementedError, match="sparse attention \\(topk\\) is not supported"):
        get_mla_metadata(torch.ones(2, dtype=torch.int32), 16, 1, topk=2048)
