"""The barrier protocol of candidate E of docs/design.md section 4 (a 2-CTA cluster over one 64-row tile, pages in
pairs), modelled before the kernel exists so that its waits and arrivals are fixed and checked against deadlock
on the CPU, with the agents and scheduler of tests/utils/decode_protocol.py.

Both CTAs of the cluster walk the same schedule row (pieces of 0.. pages). A piece's pages form pairs counted from
its first page (the last one alone when the count is odd); the row's pairs alternate between the CTAs: pair p's
softmax runs in CTA p % 2 (its owner), which also issues the pair's pages, each multicast into both CTAs' stage
n % STAGES. The softmax takes its exponentials against the pair's own maximum (docs/numerics_contract.md,
`decode_dense(p_ref="block")`), so no pair's softmax waits for the previous pair's state: the state chain (the
running maximum for the floor, the fold scales, L~) is a separate, scalar step per pair that each CTA runs for
every pair, in order, from the pair's published row scalars. Per CTA:
  producer   per page: wait kv_empty (the stage's previous page consumed in BOTH CTAs), arm its own kv_full
             (arrive.expect_tx); the owner then issues the multicast (one completion on each CTA's kv_full). Per
             piece: the query tile into its own buffer (q_full / q_empty), as today.
  softmax    for the pairs it owns: wait q_full; wait the pair's pages; QK, softmax, P8; per page publish the
             hand-off (P^T and the row scalars) locally (one elected arrival on xchg_full after the warpgroup's stores)
             and push it to the peer (a remote arrive.expect_tx on the peer's xchg_full, whose phase the bulk
             copy's bytes complete); arrive kv_empty
             of both CTAs per page (its QK read K and RoPE). After the piece's last own QK (or at once for a piece
             with no own pair) arrive q_empty. After each own pair, and after the piece's last own pair for the
             rest: the state step of every pair not yet stepped, in order: wait the pair's hand-off (xchg_full:
             local for its own pairs, pushed for the peer's), compute the fold scales into the stage, arrive scale_full
             (128). So a CTA's softmax never waits for the peer's softmax of a later pair, only (in the state step)
             for that of an earlier one.
  pv0, pv1   every page: wait kv_full (the multicast lands in the two CTAs at different times, and V is read from
             this CTA's copy), the page's hand-off (xchg_full: P^T) and scale_full (the fold scales),
             PV, then arrive kv_empty of both CTAs, except the piece's last page, whose stage holds the final state
             until the epilogue has read it.
kv_empty takes 5 x 128 arrivals per phase (the owner's softmax and both CTAs' two PV warpgroups), the same count
in both CTAs because every consumer arrives on both. The peer's pushed hand-off lands in a slot of the stage that
only that stage's release frees, so it needs no empty barrier of its own.

broken (for the model's own check): "local_release" (the softmax frees its stages only in its own CTA: the peer's
kv_empty never completes and the peer, owning a later pair, waits forever for the stage); "pv_skips_kv_full" (the
PV warpgroups wait only for the hand-off, as in the one-CTA kernels: the non-owner's PV then reads V before its
copy landed, and its releases can run a phase ahead of its own producer, whose parity wait then blocks for
good; the model found both in the first draft of this protocol); "state_skips_push" (the state step of a peer's
pair does not wait for the pushed hand-off); "pv_skips_scale_full" (PV folds with scales the state step has not
written). Races are reported as reads of data that had not arrived.
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
        # A page's hand-off completes one phase of xchg_full in each CTA, whoever owns it: one arrival, by the
        # owner's elected thread after its warpgroup's stores (locally) or by the push (the remote
        # arrive.expect_tx and the copy's bytes, modelled as one landing). With a barrier per side instead (128
        # local arrivals, or the push), a stage's phases would no longer follow its pages (the model's first
        # draft of this revision deadlocked on row [5, 0, 2]). scale_full: the state step (128 arrivals).
        self.xchg_full = [[b(f"cta{c}.xchg_full{i}", 1) for i in range(STAGES)] for c in range(2)]
        self.scale_full = [[b(f"cta{c}.scale_full{i}", WG_THREADS) for i in range(STAGES)] for c in range(2)]
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

    def state_step(self, c: int, pages: list[int]) -> Agent:
        for n in pages:
            st, ph = self.stage(n)
            bar = self.xchg_full[c][st]
            if self.broken == "state_skips_push" and self.owner(n) != c:
                if not bar.passed(ph) and self.race is None:
                    self.race = f"cta{c} read the hand-off of page {n} before its push landed"
            else:
                yield ("wait", bar, ph)
            yield ("arrive", self.scale_full[c][st], WG_THREADS)

    def softmax(self, c: int) -> Agent:
        for piece, nb in enumerate(self.pieces):
            yield ("wait", self.q_full[c], piece & 1)
            row_pairs = [(p, pages) for pc, p, pages in self.pairs if pc == piece]
            mine = [(i, pages) for i, (p, pages) in enumerate(row_pairs) if p % 2 == c]
            stepped = 0  # pairs of the piece whose state step ran
            for k, (i, pages) in enumerate(mine):
                for n in pages:
                    yield ("wait", self.kv_full[c][self.stage(n)[0]], self.stage(n)[1])
                if k == len(mine) - 1:
                    yield ("arrive", self.q_empty[c], WG_THREADS)  # the piece's last QK of this CTA retired
                for n in pages:
                    st = self.stage(n)[0]
                    yield ("arrive", self.xchg_full[c][st], 1)  # local hand-off (one elected arrival)
                    yield ("land", [self.xchg_full[1 - c][st]])  # the push, completing on the peer later
                    yield ("arrive", self.kv_empty[c][st], WG_THREADS)
                    if self.broken != "local_release":
                        yield ("arrive", self.kv_empty[1 - c][st], WG_THREADS)
                while stepped <= i:
                    yield from self.state_step(c, row_pairs[stepped][1])
                    stepped += 1
            if not mine:
                yield ("arrive", self.q_empty[c], WG_THREADS)
            while stepped < len(row_pairs):  # the peer's pairs after this CTA's last one
                yield from self.state_step(c, row_pairs[stepped][1])
                stepped += 1

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
                if self.broken == "pv_skips_scale_full":
                    if not self.scale_full[c][st].passed(ph) and self.race is None:
                        self.race = f"cta{c} read the fold scales of page {n + j} before the state step"
                else:
                    yield ("wait", self.scale_full[c][st], ph)
                if j + 1 < nb:
                    yield ("arrive", self.kv_empty[0][st], WG_THREADS)
                    yield ("arrive", self.kv_empty[1][st], WG_THREADS)
            if nb:  # the piece's last stage, after the epilogue read the final state from it
                st = self.stage(n + nb - 1)[0]
                yield ("arrive", self.kv_empty[0][st], WG_THREADS)
                yield ("arrive", self.kv_empty[1][st], WG_THREADS)
            n += nb


def simulate_pair_cluster(pieces: list[int], seed: int, broken: Optional[str] = None) -> Optional[str]:
    """None when both CTAs finish the row, else the deadlock or the race."""
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
    for bars in (*cl.kv_full, *cl.kv_empty, *cl.xchg_full, *cl.scale_full, cl.q_full, cl.q_empty):
        for bar in bars:
            if bar.pending != bar.count:
                return f"unbalanced: {bar.name} has {bar.count - bar.pending} of {bar.count} arrivals of a phase"
    return None
