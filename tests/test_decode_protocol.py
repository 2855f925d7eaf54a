"""The decode kernels' barrier protocols cannot deadlock (CPU models, tests/utils/decode_protocol.py).

A hang on the GPU shows up as a test that never returns, and the schedules that trigger one (an empty piece
between two pieces of a CTA's row, a piece that starts just where the producer's lookahead ends) are rare in
random GPU inputs. The model replays the kernel's waits and arrivals for whole schedule rows in random
interleavings, so every producer policy the kernel has used is checked against rows built to contain those
cases. The model is checked too: one producer policy of a transposer design (not in the library) hung the full
GPU sweep, and the model must find that deadlock.
"""

import random

import pytest

from utils.decode_protocol import POLICIES, random_pieces, simulate, simulate_narrow, simulate_swapab, simulate_ws

# Rows with the structures that matter: empty pieces first, in the middle and last; one-block pieces (a math
# warpgroup owning no block of a piece); a piece starting two blocks after the previous one's first.
EDGE_ROWS = [[0], [1], [9], [0, 0, 3], [3, 0, 0], [5, 0, 2], [2, 0, 0, 1], [1] * 8, [1, 0] * 4, [2, 2, 2, 2],
             [0, 1, 0, 2, 0, 3], [4, 0, 1, 0, 5]]
SAFE = [name for name in POLICIES if name != "blocking_deadlocks"]


@pytest.mark.parametrize("policy", SAFE)
def test_edge_rows_complete(policy):
    for row in EDGE_ROWS:
        for seed in range(20):
            result = simulate(row, POLICIES[policy], seed)
            assert result is None, f"{policy} on row {row}, interleaving {seed}: {result}"


@pytest.mark.parametrize("policy", SAFE)
def test_random_rows_complete(policy):
    rng = random.Random(2026)
    for case in range(300):
        row = random_pieces(rng)
        result = simulate(row, POLICIES[policy], seed=case)
        assert result is None, f"{policy} on row {row}, interleaving {case}: {result}"


def test_merged_pv_stream_completes():
    # A math order tried for the wide kernel (PV(n - 1) and PV(n) as one chunk stream) with the blocking producer.
    rng = random.Random(7)
    rows = EDGE_ROWS + [random_pieces(rng) for _ in range(200)]
    for case, row in enumerate(rows):
        result = simulate(row, POLICIES["blocking"], seed=case, merged_pv=True)
        assert result is None, f"merged PV on row {row}, interleaving {case}: {result}"


def test_model_finds_the_blocking_producer_deadlock():
    # Blocking on q_empty for block n + 2 right after transposing n: entering the piece after an empty one
    # waits for the math warpgroups to finish the piece before it, i.e. for the PV of n + 1, which waits for
    # the transpose this warp has not done yet.
    found = [simulate([5, 0, 2], POLICIES["blocking_deadlocks"], seed) for seed in range(50)]
    hung = [r for r in found if r is not None]
    assert hung, "the model no longer finds the deadlock the GPU sweep hit"
    assert "q_empty" in hung[0], hung[0]


def test_model_rejects_an_extra_arrival():
    # A barrier that gets more arrivals than its phase expects is a protocol bug the model must report.
    from utils.decode_protocol import Barrier

    bar = Barrier("x", 2)
    bar.arrive(2)
    with pytest.raises(AssertionError, match="more than the phase expects"):
        bar.arrive(3)


@pytest.mark.parametrize("kernel", ["narrow", "wide", "ws"])
def test_one_thread_producer_kernels_complete(kernel):
    # narrow/kernel.cuh: one TMA thread, 4 stages released by the block's owner, 2 query buffers, the merge's
    # two mbarriers over both math warpgroups at the end of every piece (empty pieces included).
    # The wide kernel: the same producer with one query buffer, the P^T hand-off, stages released by both
    # warpgroups after their PV.
    # The ws kernel: the same producer; the softmax warpgroup waits for page n + 1 before handing off block n,
    # the PV warpgroups hold each piece's last stage until its epilogue.
    simulate_kernel = {"narrow": simulate_narrow, "wide": simulate_swapab, "ws": simulate_ws}[kernel]
    rng = random.Random({"narrow": 11, "wide": 13, "ws": 17}[kernel])
    rows = EDGE_ROWS + [[12], [0, 13, 0], [1, 11, 2]] + [random_pieces(rng) for _ in range(300)]
    for case, row in enumerate(rows):
        result = simulate_kernel(row, seed=case)
        assert result is None, f"{kernel} kernel on row {row}, interleaving {case}: {result}"


def test_model_finds_a_ws_deadlock():
    # The ws kernel's PV warpgroups holding every stage of a piece until its epilogue (not just the last one):
    # with more blocks than stages the producer waits for a stage they keep, the softmax warpgroup for the page
    # the producer cannot load, and they for a hand-off that needs that page.
    found = [simulate_ws([6], seed, hold_piece_stages=True) for seed in range(20)]
    assert all(r is not None and "kv_" in r for r in found), found[:3]
    assert all(simulate_ws([6], seed) is None for seed in range(20))


def test_model_finds_a_narrow_deadlock():
    # Holding a piece's stages until its merge: with more own blocks than stages, the producer waits for a
    # stage the warpgroup keeps while that warpgroup waits for a page the producer cannot load.
    found = [simulate_narrow([9], seed, release_at_piece_end=True) for seed in range(20)]
    assert all(r is not None and "kv_" in r for r in found), found[:3]


# ---- candidate E of docs/design.md section 4: a 2-CTA cluster over one tile, pages in pairs (no kernel yet) ----


def test_pair_cluster_protocol_completes():
    # Both CTAs finish every row and leave no phase half-arrived: odd page counts (a lone last page), pieces with
    # no pair of one CTA, empty pieces, rows whose pairs reuse every stage several times.
    from utils.pair_cluster_protocol import simulate_pair_cluster

    rng = random.Random(19)
    rows = EDGE_ROWS + [[12], [0, 13, 0], [1, 11, 2], [3, 3, 3]] + [random_pieces(rng) for _ in range(300)]
    for case, row in enumerate(rows):
        result = simulate_pair_cluster(row, seed=case)
        assert result is None, f"pair cluster on row {row}, interleaving {case}: {result}"


def test_pair_cluster_pairs_count_from_each_piece():
    from utils.pair_cluster_protocol import pairs_of

    assert pairs_of([3, 0, 2, 1]) == [(0, 0, [0, 1]), (0, 1, [2]), (2, 2, [3, 4]), (3, 3, [5])]


@pytest.mark.parametrize(
    "broken,row,found",
    [
        ("local_release", [5, 0, 2], "deadlock"),   # the peer never sees the stage freed
        ("local_release", [9], "unbalanced"),       # ... or its releases drift into a later page's phase
        ("pv_skips_kv_full", [5, 0, 2], "read V"),  # the first draft of this protocol
        ("state_skips_push", [9], "before its push landed"),
        ("pv_skips_scale_full", [9], "before the state step"),
    ],
)
def test_model_finds_pair_cluster_faults(broken, row, found):
    from utils.pair_cluster_protocol import simulate_pair_cluster

    results = [simulate_pair_cluster(row, seed, broken=broken) for seed in range(40)]
    assert any(r is not None and found in r for r in results), results[:3]
    assert all(simulate_pair_cluster(row, seed) is None for seed in range(40))


def test_e2_stage_protocol_completes():
    # E2's stage map as tools/microbench/e2_stage_stream.cu runs it: both CTAs finish walks of odd and even length,
    # short ones (stages never reused) and long ones (every stage reused many times), with loads and pushes landing
    # early or late, and leave no phase half-arrived.
    from utils.e2_stage_protocol import simulate_e2

    for pages in (1, 2, 5, 6, 7, 13, 40):
        for seed in range(25):
            for land_p in (0.1, 0.6):
                assert simulate_e2(pages, seed, land_p=land_p) is None, (pages, seed, land_p)


@pytest.mark.parametrize("broken,found", [("push_skips_slot_free", "pushed the hand-off"),
                                          ("arm_after_wait", "deadlock")])
def test_model_finds_e2_faults(broken, found):
    from utils.e2_stage_protocol import simulate_e2

    results = [simulate_e2(40, seed, broken=broken, land_p=0.1) for seed in range(40)]
    assert any(r is not None and found in r for r in results), results[:3]
