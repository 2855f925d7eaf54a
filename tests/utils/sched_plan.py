"""The split-KV scheduler's plan replayed the way the decode kernel walks it (csrc/kernels/sched/sched_meta.h):
shared by tests/test_sched.py (fixed cases), tests/test_fuzz_host.py (random batches) and the GPU tests that give
the emulation the kernel's pieces (split_blocks)."""

import math

import torch

from snapmla_ext.decode_ops import SCHED_META_INTS, get_mla_metadata

OVERHEAD = 5  # PIECE_OVERHEAD_BLOCKS in sched_meta.h
BEGIN_REQ, BEGIN_BLOCK, END_REQ, END_BLOCK, BEGIN_SPLIT = range(5)


def blocks(seqlen: int) -> int:
    return max(0, math.ceil(seqlen / 64))


def replay(meta: torch.Tensor, seqlens: list[int]):
    """Pieces per request [(part, split, first, last)], and the cost of each part, as the decode kernel sees them."""
    pieces = [[] for _ in seqlens]
    costs = []
    for p, row in enumerate(meta.tolist()):
        cost = 0
        for r in range(row[BEGIN_REQ], row[END_REQ] + 1):
            n = blocks(seqlens[r])
            first = row[BEGIN_BLOCK] if r == row[BEGIN_REQ] else 0
            last = row[END_BLOCK] if r == row[END_REQ] else n
            split = row[BEGIN_SPLIT] if r == row[BEGIN_REQ] else 0
            pieces[r].append((p, split, first, last))
            cost += OVERHEAD + last - first
        costs.append(cost)
    return pieces, costs


def split_blocks(meta: torch.Tensor, seqlens: list[int]) -> list[list[int]]:
    """Per-request block boundaries of the plan (reference.decode's split_blocks): 0, then each piece's end."""
    pieces, _ = replay(meta.cpu(), seqlens)
    return [[0] + [last for _, _, _, last in ps] for ps in pieces]


def plan(seqlens, num_sm_parts):
    t = torch.tensor(seqlens, dtype=torch.int32)
    meta, num_splits = get_mla_metadata(t, 64, 1, num_sm_parts=num_sm_parts)
    return meta, num_splits


def check_plan(seqlens, num_sm_parts):
    meta, num_splits = plan(seqlens, num_sm_parts)
    b = len(seqlens)
    assert meta.shape == (num_sm_parts, SCHED_META_INTS) and meta.dtype == torch.int32
    assert num_splits.shape == (b + 1,) and num_splits.dtype == torch.int32
    pieces, costs = replay(meta, seqlens)
    ns = num_splits.tolist()
    assert ns[0] == 0
    assert ns[-1] <= b + num_sm_parts - 1, f"{ns[-1]} pieces > b + num_sm_parts - 1"
    for r, (ps, seqlen) in enumerate(zip(pieces, seqlens)):
        n = blocks(seqlen)
        assert len(ps) == ns[r + 1] - ns[r], f"request {r}: {len(ps)} pieces, num_splits says {ns[r + 1] - ns[r]}"
        assert [s for _, s, _, _ in ps] == list(range(len(ps))), f"request {r}: split indices {ps}"
        assert [p for p, _, _, _ in ps] == sorted({p for p, _, _, _ in ps}), f"request {r}: parts out of order"
        if n == 0:
            assert ps and len(ps) == 1 and ps[0][2:] == (0, 0), f"zero-length request {r}: pieces {ps}"
            continue
        covered = [blk for _, _, first, last in ps for blk in range(first, last)]
        assert covered == list(range(n)), f"request {r} ({n} blocks): covered {covered[:8]}..., pieces {ps}"
        assert all(last > first for _, _, first, last in ps), f"request {r}: empty piece {ps}"
    total = sum(OVERHEAD + blocks(s) for s in seqlens)
    payload = max(1, -(-total // num_sm_parts))
    assert max(costs) <= payload + OVERHEAD, f"part costs {max(costs)} > {payload} + {OVERHEAD}"
    return meta, num_splits
