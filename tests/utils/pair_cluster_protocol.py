"""The barrier protocol of candidate E of docs/design.md section 4 (a 2-CTA cluster over one 64-row tile, pages in
pairs), modelled before the kernel exists so that its waits and arrivals are fixed and checked against deadlock
on the CPU, with the agents and scheduler of tests/utils/decode_protocol.py.

Both CTAs of the cluster walk the same schedule row (pieces of 0.. pages). A piece's pages form pairs counted from
its first page (the last one alone when the count is odd); the row's pairs alternate between the CTAs: pair p's
softmax runs in CTA p % 2 (its owner), which also issues the pair's pages, each multicast into both CTAs' stage
n % STAGES. Per CTA:
  producer   per page: wait kv_empty (the stage's previous page consumed in BOTH CTAs), arm its own kv_full
             (arrive.expect_tx); the owner then issues the multicast (one completion on each CTA's kv_full). Per
             piece: the query tile into its own buffer (q_full / q_empty), as today.
  softmax    for the pairs it owns: wait q_full; wait the pair's pages; for a pair after the piece's first, wait
             the previous pair's hand-off (its state, pushed by the other CTA); then per page publish the hand-off
             (P^T and state) locally and push it to the peer: one arrival of 128 on each CTA's xchg_full of that
             stage; arrive kv_empty of both CTAs per page (its QK reads K and RoPE). After the piece's last QK (or
             at once for a piece with no owned pair) arrive q_empty.
  pv0, pv1   every page: wait kv_full (the multicast lands in the two CTAs at different times, and V is read from
             this CTA's copy: the owner's hand-off only says that the owner's copy landed) and xchg_full of its
             stage (the owner's local or pushed hand-off), PV, then arrive
             kv_empty of both CTAs, except the piece's last page, whose stage holds the final state until the
             epilogue has read it.
kv_empty takes 5 x 128 arrivals per phase (the owner's softmax and both CTAs' two PV warpgroups), the same count
in both CTAs because every consumer arrives on both. The peer's hand-off copy lands in a slot of the stage that
only that stage's release frees, so it needs no barrier of its own.

broken (for the model's own check): "local_release" (the softmax frees its stages only in its own CTA: the peer's
kv_empty never completes and the peer, owning a later pair, waits forever for the stage); "pv_skips_kv_full" (the
PV warpgroups wait only for the hand-off, as in the one-CTA kernels: the non-owner's PV then reads V before its
copy landed, and its releases can run a phase ahead of its own producer, whose parity wait then blocks for
good; the model found both in the first draft of this protocol); "no_state_wait" (the softmax of a pair does not
wait for the previous pair's hand-off). Races are reported as reads of data that had not arrived.
"""

from __future__ import annotations

from typing import Optional

from utils.decode_protocol import WG_THREADS, Agent, Barrier, run_agents

STAGES = 4
CONSUMERS_PER_PAGE = 5  # the owner's softmax warpgroup and the two PV warpgroups of each CTA


def pairs_of(pieces: list[int]) -> list[tuple[int, int, list[int]]]:
    """[(piece, pair index in the row, [running page indices])] in row order."""
    out, n, p = [], 0, 0
    for piece, nb in enumerate(pieces):
        for first in range(0, nb, 2):
            out.append((piece, p, list(range(n + first, n + min(first + 2, nb)))))
            p += 1
        n += nb
    return out


class PairCluster:
    def __init__(self, pieces: list[int], broken: Optional[str] = None):
        self.pieces, self.broken = pieces, broken
        self.pairs = pairs_of(pieces)
        b = Barrier
        self.kv_full = [[b(f"cta{c}.kv_full{i}", 2) for i in range(STAGES)] for c in range(2)]
        self.kv_empty = [[b(f"cta{c}.kv_empty{i}", CONSUMERS_PER_PAGE * WG_THREADS) for i in range(STAGES)]
                         for c in range(2)]
        self.xchg_full = [[b(f"cta{c}.xchg_full{i}", WG_THREADS) for i in range(STAGES)] for c in range(2)]
        self.q_full = [b(f"cta{c}.q_full", 2) for c in range(2)]
        self.q_empty = [b(f"cta{c}.q_empty", WG_THREADS) for c in range(2)]
        self.race: Optional[str] = None

    @staticmethod
    def stage(n: int) -> tuple[int, int]:
        return n % STAGES, (n // STAGES) & 1

    def owner(self, n: int) -> int:
        return next(p for _, p, pages in self.pairs if n in pages) % 2

    def producer(self, c: int) -> Agent:
        n = 0
        for piece, nb in enumerate(self.pieces):
            if piece >= 1:
                yield ("wait", self.q_empty[c], (piece - 1) & 1)
            yield ("tma", self.q_full[c])
            for _ in range(nb):
                st, ph = self.stage(n)
                if n >= STAGES:
                    yield ("wait", self.kv_empty[c][st], ph ^ 1)  # the previous page consumed in both CTAs
                yield ("arrive", self.kv_full[c][st], 1)  # arrive.expect_tx of this CTA's copy
                if self.owner(n) == c:
                    yield ("land", [self.kv_full[0][st], self.kv_full[1][st]])  # the multicast
                n += 1

    def softmax(self, c: int) -> Agent:
        for piece, nb in enumerate(self.pieces):
            yield ("wait", self.q_full[c], piece & 1)
            mine = [(p, pages) for pc, p, pages in self.pairs if pc == piece and p % 2 == c]
            for i, (p, pages) in enumerate(mine):
                for n in pages:
                    yield ("wait", self.kv_full[c][self.stage(n)[0]], self.stage(n)[1])
                first_of_piece = pages[0] == sum(self.pieces[:piece])
                if not first_of_piece:  # the state after the previous pair, handed off by the other CTA
                    prev = pages[0] - 1
                    st, ph = self.stage(prev)
                    if self.broken == "no_state_wait":
                        if not self.xchg_full[c][st].passed(ph) and self.race is None:
                            self.race = f"cta{c} read the state of page {prev} before its hand-off arrived"
                    else:
                        yield ("wait", self.xchg_full[c][st], ph)
                if i == len(mine) - 1:
                    yield ("arrive", self.q_empty[c], WG_THREADS)  # the piece's last QK of this CTA retired
                for n in pages:
                    st = self.stage(n)[0]
                    yield ("arrive", self.xchg_full[c][st], WG_THREADS)  # local hand-off
                    yield ("arrive", self.xchg_full[1 - c][st], WG_THREADS)  # pushed to the peer
                    yield ("arrive", self.kv_empty[c][st], WG_THREADS)
                    if self.broken != "local_release":
                        yield ("arrive", self.kv_empty[1 - c][st], WG_THREADS)
            if not mine:
                yield ("arrive", self.q_empty[c], WG_THREADS)

    def pv(self, c: int) -> Agent:
        n = 0
        for nb in self.pieces:
            for j in range(nb):
                st, ph = self.stage(n + j)
                if self.broken == "pv_skips_kv_full":
                    yield ("wait", self.xchg_full[c][st], ph)
                    if not self.kv_full[c][st].passed(ph) and self.race is None:
                        self.race = f"cta{c} read V of page {n + j} before its copy landed"
                else:
                    yield ("wait", self.kv_full[c][st], ph)
                    yield ("wait", self.xchg_full[c][st], ph)
                if j + 1 < nb:
                    yield ("arrive", self.kv_empty[0][st], WG_THREADS)
                    yield ("arrive", self.kv_empty[1][st], WG_THREADS)
            if nb:  # the piece's last stage, after the epilogue read the final state from it
                st = self.stage(n + nb - 1)[0]
                yield ("arrive", self.kv_empty[0][st], WG_THREADS)
                yield ("arrive", self.kv_empty[1][st], WG_THREADS)
            n += nb


def simulate_pair_cluster(pieces: list[int], seed: int, broken: Optional[str] = None) -> Optional[str]:
    """None when both CTAs finish the row, else the deadlock (or, for broken="no_state_wait", the race)."""
    cl = PairCluster(pieces, broken)
    agents = {}
    for c in range(2):
        agents.update({f"cta{c}.producer": cl.producer(c), f"cta{c}.softmax": cl.softmax(c),
                       f"cta{c}.pv0": cl.pv(c), f"cta{c}.pv1": cl.pv(c)})
    result = run_agents(agents, seed)
    if result or cl.race:
        return result or cl.race
    # Every phase that was started must have completed: arrivals left over would land in a later page's phase
    # (a release counted for the wrong page) instead of blocking anyone here.
    for bars in (*cl.kv_full, *cl.kv_empty, *cl.xchg_full, cl.q_full, cl.q_empty):
        for bar in bars:
            if bar.pending != bar.count:
                return f"unbalanced: {bar.name} has {bar.count - bar.pending} of {bar.count} arrivals of a phase"
    return None
