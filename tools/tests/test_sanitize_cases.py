"""The many-piece cases of tools/device/sanitize_small.py give their CTAs the piece counts their comments promise:
the scheduler's plan (get_mla_metadata, on the CPU) replayed as the kernel walks it (tests/utils/sched_plan.py)."""

import pytest

from utils.sched_plan import plan, replay
from utils.scripts import script_module


def _pieces_per_part(seqlens, parts):
    meta, _ = plan(seqlens, parts)
    pieces, _ = replay(meta, seqlens)
    per_part = {}
    for request in pieces:
        for part, _split, _first, _last in request:
            per_part[part] = per_part.get(part, 0) + 1
    split_requests = [r for r, request in enumerate(pieces) if len(request) > 1]
    return per_part, split_requests


@pytest.mark.parametrize("index, pieces, split_request", [(8, 71, 70), (9, 71, 70), (12, 11, 10), (13, 11, 10)])
def test_many_piece_cases(index, pieces, split_request):
    with script_module("sanitize_small", "tools/device") as mod:
        b, _s_q, _h_q, seqlens, _causal, parts, _kernel = mod.CASES[index]
    assert len(seqlens) == b
    per_part, split_requests = _pieces_per_part(seqlens, parts)
    assert per_part == {p: pieces for p in range(parts)}, per_part
    assert split_requests == [split_request]
