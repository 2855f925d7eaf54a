"""The decode kernels' barrier protocols cannot deadlock (CPU models, tests/utils/decode_protocol.py and, for the
2-CTA cluster kernel, tests/utils/cluster_protocol.py).

A hang on the GPU shows up as a test that never returns, and the schedules that trigger one (an empty piece
between two pieces of a CTA's row, a piece that starts just where the producer's lookahead ends) are rare in
random GPU inputs. The model replays the kernel's waits and arrivals for whole schedule rows in random
interleavings, so every producer policy the kernel has used is checked against rows built to contain those
cases. The model is checked too: the first v11 policy hung the full GPU sweep (2026-11-29), and the model must
find that deadlock. The cluster kernel's model also checks every shared-memory slot (no write before its readers
are done, no read before it holds what the reader expects), and must find each of its broken variants.
"""

import random
import re

import pytest

from utils.decode_protocol import POLICIES, random_pieces, simulate, simulate_narrow, simulate_swapab, simulate_ws

# Rows with the structures that matter: empty pieces first, in the middle and last; one-block pieces (a math
# warpgroup owning no block of a piece); a piece starting two blocks after the previous one's first.
EDGE_ROWS = [[0], [1], [9], [0, 0, 3], [3, 0, 0], [5, 0, 2], [2, 0, 0, 1], [1] * 8, [1, 0] * 4, [2, 2, 2, 2],
             [0, 1, 0, 2, 0, 3], [4, 0, 1, 0, 5]]
SAFE = [name for name in POLICIES if name != "v11_first"]


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
    # The math order of branch decode-v12-exp (PV(n - 1) and PV(n) as one chunk stream) with v11's producer.
    rng = random.Random(7)
    rows = EDGE_ROWS + [random_pieces(rng) for _ in range(200)]
    for case, row in enumerate(rows):
        result = simulate(row, POLICIES["v11"], seed=case, merged_pv=True)
        assert result is None, f"merged PV on row {row}, interleaving {case}: {result}"


def test_model_finds_the_v11_deadlock():
    # Blocking on q_empty for block n + 2 right after transposing n: entering the piece after an empty one
    # waits for the math warpgroups to finish the piece before it, i.e. for the PV of n + 1, which waits for
    # the transpose this warp has not done yet.
    found = [simulate([5, 0, 2], POLICIES["v11_first"], seed) for seed in range(50)]
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


@pytest.mark.parametrize("kernel", ["narrow", "wide_v12", "ws"])
def test_one_thread_producer_kernels_complete(kernel):
    # narrow/kernel.cuh: one TMA thread, 4 stages released by the block's owner, 2 query buffers, the merge's
    # two bar.syncs over both math warpgroups at the end of every piece (empty pieces included).
    # The wide kernel v12: the same producer with one query buffer, the P^T hand-off, stages released by both
    # warpgroups after their PV.
    # The ws kernel: the same producer; the softmax warpgroup waits for page n + 1 before handing off block n,
    # the PV warpgroups hold each piece's last stage until its epilogue.
    simulate_kernel = {"narrow": simulate_narrow, "wide_v12": simulate_swapab, "ws": simulate_ws}[kernel]
    rng = random.Random({"narrow": 11, "wide_v12": 13, "ws": 17}[kernel])
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


# ---- the 2-CTA cluster kernel as built (csrc/kernels/sm90/decode_fp8/cluster; tests/utils/cluster_protocol.py) ----
from utils.cluster_protocol import AGENTS, Slot, TxBarrier, simulate_cluster  # noqa: E402

# Pieces of 0, 1, 2, 3, 5, 7 and 13 blocks (a piece shorter than the owner cycle of 4, one shorter than the ring
# of 6, longer ones), empty pieces first, between and last, many pieces in a row, one long piece; [5, 9] and
# [3, 8, 8]: a piece of 6 or more blocks right after a piece's last block (the stage of that block is refilled
# within the next piece).
CLUSTER_ROWS = [[0], [1], [2], [3], [5], [7], [13], [0, 0, 3], [3, 0, 0], [7, 0, 13], [1] * 16, [2] * 9,
                [0, 1, 0, 2, 0, 3, 0, 5, 0, 7], [13, 7, 5, 3, 2, 1, 0], [1, 5, 1], [5, 9], [3, 8, 8], [64]]


@pytest.mark.parametrize("land_p", [0.3, 0.05])
def test_cluster_kernel_completes_without_a_slot_violation(land_p):
    # Multicast content landing per CTA, unicast RoPE / scales / own dims, the non-owner's arms, P^T and the
    # state pushed into the peer, kv_empty from all 16 warps of the cluster (remote arrivals in flight): no
    # deadlock, no extra arrival, no slot written before its readers were done or read before it held what the
    # reader expects. land_p 0.05: late landings (a multicast reaching one CTA long after the other).
    rng = random.Random(19)
    cases = [(row, seed) for row in CLUSTER_ROWS for seed in range(3)]
    cases += [(random_pieces(rng), 1000 + k) for k in range(80)]
    for row, seed in cases:
        result = simulate_cluster(row, seed, land_p=land_p)
        assert result is None, f"cluster kernel (land_p {land_p}) on row {row}, interleaving {seed}: {result}"


@pytest.mark.parametrize("slow", AGENTS)
def test_cluster_kernel_completes_with_one_role_far_behind(slow):
    # One producer or math warpgroup runs 8 idle steps before each of its actions: the others run ahead as far
    # as the protocol lets them (the interleavings a uniform pick rarely makes).
    for seed, row in enumerate(CLUSTER_ROWS):
        land_p = (0.3, 0.05)[seed % 2]
        result = simulate_cluster(row, seed, land_p=land_p, slow=slow, lag=8)
        assert result is None, f"cluster kernel, {slow} behind, row {row}, interleaving {seed}: {result}"


def _in_nonowner(slot: str) -> bool:
    """slot "name[c][s]...": stage s's blocks belong to rank s % 2; True when CTA c is the other one."""
    c, s = (int(x) for x in re.findall(r"\[(\d+)\]", slot)[:2])
    return s % 2 != c


# variant: (pieces, land_p, slow agent, the pattern every report must match, a check that one report at least must
# pass, on the pattern's match)
CLUSTER_BROKEN = {
    # PV reads its copy of the page without waiting for this CTA's kv_full: in the non-owner the hand-off says
    # nothing about the multicast (the bug v3 fixed); a content tile read before the page landed there.
    "no_pv_kv_wait": ([9, 3, 7], 0.05, None,
                      r"violation: (mc|own_tiles)(\S*): \('PV', \d, \d\) read page \d+ but the slot holds (None|page)",
                      lambda m: m.group(1) == "mc" and _in_nonowner(m.group(2))),
    # The non-owner arms kv_full / xchg_full before its kv_empty wait: the arm counts in the previous phase.
    "early_arm": ([9, 3, 7], 0.05, None,
                  r"violation: (kv_full|xchg_full)(\S*): 1 arrivals more than the phase expects",
                  lambda m: _in_nonowner(m.group(2))),
    # kv_empty counts the 8 local warps only: the owner multicasts into the peer's tiles (or refills its RoPE tile
    # under a push) before the peer's readers were done.
    "local_release": ([9, 3, 7], 0.05, None,
                      (r"violation: (mc\S*: (page \d+ written while \[\('PV'|\('PV', \d, \d\) read page \d+ but the "
                       r"slot holds page)|own_rope\S* part \d: rope \d+ written while \[\('push')"),
                      lambda m: m.group(0).startswith("violation: mc")),
    # The chain reads the state of block n - 1 without its xchg_full wait: the push has not landed.
    "no_state_wait": ([9, 3, 7], 0.05, None,
                      r"violation: peer_handoff\S* part 1: \('chain', \d+\) read state \d+ but the slot holds",
                      lambda m: True),
    # A piece's last block released before the epilogue read its final state (one warpgroup slow): the owner
    # refills the RoPE tile that holds it.
    "early_release": ([3, 8, 8], 0.3, "math01",
                      r"violation: own_rope\S* part 1: rope \d+ written while \[.*\('epilogue', \d, \d\)",
                      lambda m: True),
}


@pytest.mark.parametrize("variant", sorted(CLUSTER_BROKEN))
def test_cluster_model_finds_the_broken_variants(variant):
    pieces, land_p, slow, every, one = CLUSTER_BROKEN[variant]
    seeds = range(30)
    found = [simulate_cluster(pieces, seed, land_p=land_p, slow=slow, **{variant: True}) for seed in seeds]
    hits = [r for r in found if r is not None]
    assert hits, f"the model does not find the {variant} bug in {len(seeds)} interleavings"
    wrong = [r for r in hits if not re.match(every, r)]
    assert not wrong, f"{variant}: reported for another reason: {wrong[:3]}"
    assert any(one(re.match(every, r)) for r in hits), f"{variant}: not the expected case: {hits[:3]}"
    # The built protocol passes the same rows and interleaving seeds: the variant is what the model finds.
    for seed in seeds:
        result = simulate_cluster(pieces, seed, land_p=land_p, slow=slow)
        assert result is None, f"the built protocol on {pieces}, interleaving {seed}: {result}"


def test_cluster_model_finds_parity_aliasing_of_a_short_ring():
    # With 2 stages, the owner of block 2 (its first own block: no PV before it, PV up to j - 3) waits kv_full
    # for parity 1 on a barrier that has not completed block 0's phase: a parity wait passes there (it cannot tell
    # that phase from the one before it), and the QK reads a tile that does not hold its page.
    found = [simulate_cluster([5], seed, stages=2) for seed in range(10)]
    assert all(r is not None for r in found), found
    assert any(re.search(r"\('QK', \d, \d\) read page \d+ but the slot holds", r) for r in found), found[:3]


def test_cluster_model_checks_bytes_and_slots():
    # The transaction barrier: bytes that land before the arm do not complete the phase; a second arm in one
    # phase is an extra arrival. The slot: a write before its reader read, a read of contents not there.
    bar = TxBarrier("b", 1)
    bar.complete(16)
    assert bar.completed == 0 and bar.tx == -16
    bar.expect(16)
    assert bar.completed == 1
    bar.expect(8)
    with pytest.raises(AssertionError, match="more than the phase expects"):
        bar.expect(8)
    slot = Slot("s")
    slot.write("a", {"r"})
    with pytest.raises(AssertionError, match="written while"):
        slot.write("b", set())
    with pytest.raises(AssertionError, match="but the slot holds a"):
        slot.read("r", "b")
    slot.read("r", "a")
    slot.write("b", set())
