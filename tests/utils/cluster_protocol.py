"""A model of the barrier protocol that docs/cluster_kernel.md plans for a 2-CTA cluster decode kernel (not built):
two CTAs per 64-row tile, each with a one-thread producer and two math warpgroups holding 128 dims of O^T each.
It runs on decode_protocol.run_agents (random interleavings, deadlock and extra-arrival detection) and adds what
the single-CTA models lack: loads that land in two CTAs (TMA multicast), barriers armed with a byte count
(arrive.expect_tx, complete_tx), remote arrivals, and a check of every shared-memory slot: a write (a load landing
or a remote store) into a slot whose previous contents some reader has not consumed yet is reported.

The plan's protocol, per block n of the running walk (stage s = n % 4; since 4 is even, every block of stage s
is owned by CTA s % 2, so a stage is "own" or "peer" for a CTA for good):
- content (32 KB): rank 0's producer, once all four warpgroups released stage s (kv_empty_cluster[s], in rank 0),
  multicasts it into both CTAs; the RoPE tile and the scales go to the owner CTA only, from its own producer,
  once its warpgroups released the slot (kv_empty[c][s]).
- each CTA's producer arms its own kv_full[c][s] with the bytes that will land there (content, plus RoPE in the
  owner), and only after its own warpgroups released the stage: an early arm would count in the previous phase.
- the owner warpgroup of n ((n / 2) % 2 in CTA n % 2) waits kv_full, runs QK, writes P^T (state-free) into its
  own RoPE slot and the peer's slot s and publishes it (pt_full: 128 local arrivals, 4 remote ones, one per
  warp); then it waits for the state of n - 1 (st_full of the other CTA's block, delivered into its own CTA),
  and writes and publishes the state of n the same way (st_full).
- every warpgroup runs PV(n) in block order: wait kv_full (the content, in the non-owner CTA), pt_full and
  st_full, then release kv_empty[c][s] and kv_empty_cluster[s]. Its own blocks' work runs just before PV(n)
  (order "inline") or right after PV(n - 4), before the PVs of the 3 blocks between (order "early": the note's
  register plan, and the order in which only st_full orders the state chain).
- at a piece end the four warpgroups exchange their partial L~: each writes its slot of both CTAs' lsum buffer
  piece % 2 and arrives on both lsum_full barriers; each waits on its own CTA's and reads all four slots.
Checked slots: each CTA's content and RoPE tiles per stage, the hand-off's P^T and state per stage, the query
tile, the L~ partials. Not modelled: the st.async / expect_tx form of the remote stores (the receiver would arm
the barrier, with the early-arm hazard of kv_full), and the warpgroups' threads one by one.
"""

from __future__ import annotations

from typing import Callable, Optional

from utils.decode_protocol import Agent, Barrier, WG_THREADS, run_agents

STAGES = 4
WARPS = 4  # per math warpgroup: one remote arrival each for the hand-off


class TxBarrier(Barrier):
    """An mbarrier with a transaction count: a phase completes when its arrivals are in and tx is 0 again.
    complete_tx may land before the arm (tx < 0): the phase still needs the arm's arrival."""

    def __init__(self, name: str, count: int):
        super().__init__(name, count)
        self.tx = 0

    def expect(self, nbytes: int) -> None:
        self.tx += nbytes
        self.arrive(1)

    def complete(self, nbytes: int) -> None:
        self.tx -= nbytes
        self._maybe_complete()

    def arrive(self, weight: int) -> None:
        self.pending -= weight
        if self.pending < 0:
            raise AssertionError(f"{self.name}: {-self.pending} arrivals more than the phase expects")
        self._maybe_complete()

    def _maybe_complete(self) -> None:
        if self.pending == 0 and self.tx == 0:
            self.completed += 1
            self.pending = self.count


class Slot:
    """Shared memory whose contents have readers: written only once every reader of the previous contents read."""

    def __init__(self, name: str):
        self.name, self.holds, self.readers = name, None, set()

    def write(self, what: object, readers: set) -> None:
        if self.readers:
            raise AssertionError(f"{self.name}: {what} written while {sorted(self.readers)} still read {self.holds}")
        self.holds, self.readers = what, set(readers)

    def check(self, reader: object, what: object) -> None:
        """reader reads `what`: reported if the slot holds something else (not landed yet, or overwritten)."""
        if self.holds != what:
            raise AssertionError(f"{self.name}: {reader} read {what} but the slot holds {self.holds}")

    def read(self, reader: object, what: object) -> None:
        """check, and reader is done with the contents."""
        self.check(reader, what)
        self.readers.discard(reader)

    def read_done(self, reader: object) -> None:
        self.readers.discard(reader)


class Landing:
    """One destination of an issued load: at completion it fills its slot and completes bytes on its barrier."""

    def __init__(self, bar: TxBarrier, nbytes: int, on_land: Callable[[], None]):
        self.bar, self.nbytes, self.on_land = bar, nbytes, on_land

    def arrive(self, _weight: int) -> None:  # run_agents completes in-flight loads through arrive(1)
        self.on_land()
        self.bar.complete(self.nbytes)


CONTENT, ROPE, QTILE = 32768, 8448, 40960  # bytes: a page's content tiles, its RoPE tile + scales, a query tile


class ClusterPair:
    """The plan's protocol for one schedule row (pieces of block counts). Broken variants for the model's own
    checks: early_arm (the non-issuing producer arms a peer stage without waiting for its warpgroups),
    local_release (rank 0 multicasts after its own warpgroups' release only), no_content_wait (the non-owner
    CTA's warpgroups run PV without waiting for the multicast content: the hand-off alone does not order it)."""

    def __init__(self, pieces: list[int], order: str = "early", early_arm: bool = False,
                 local_release: bool = False, no_content_wait: bool = False, no_state_wait: bool = False):
        assert order in ("early", "inline"), order
        self.pieces, self.order, self.early_arm, self.local_release = pieces, order, early_arm, local_release
        self.no_content_wait, self.no_state_wait = no_content_wait, no_state_wait
        b, t = Barrier, TxBarrier
        self.kv_full = [[t(f"kv_full[{c}][{s}]", 1) for s in range(STAGES)] for c in range(2)]
        self.kv_empty = [[b(f"kv_empty[{c}][{s}]", 2 * WG_THREADS) for s in range(STAGES)] for c in range(2)]
        self.kv_empty_cluster = [b(f"kv_empty_cluster[{s}]", 4 * WG_THREADS) for s in range(STAGES)]
        # The hand-off in two parts, P^T first (state-free), then the state: own stages take the owner's 128 local
        # arrivals, peer stages the peer owner's 4 remote ones (one per warp).
        arrivals = lambda c, s: WG_THREADS if s % 2 == c else WARPS  # noqa: E731
        self.pt_full = [[b(f"pt_full[{c}][{s}]", arrivals(c, s)) for s in range(STAGES)] for c in range(2)]
        self.st_full = [[b(f"st_full[{c}][{s}]", arrivals(c, s)) for s in range(STAGES)] for c in range(2)]
        self.q_full = [t(f"q_full[{c}]", 1) for c in range(2)]
        self.q_empty = [b(f"q_empty[{c}]", 2 * WG_THREADS) for c in range(2)]
        self.lsum_full = [[b(f"lsum_full[{c}][{p}]", 4 * WG_THREADS) for p in range(2)] for c in range(2)]
        self.content = [[Slot(f"content[{c}][{s}]") for s in range(STAGES)] for c in range(2)]
        self.rope = [[Slot(f"rope[{c}][{s}]") for s in range(STAGES)] for c in range(2)]  # the TMA'd RoPE tile
        # The hand-off's P^T and state share the RoPE tile's 8 KB in the kernel; separate slots here, so that
        # each part's writes and reads are checked on their own.
        self.pt = [[Slot(f"pt[{c}][{s}]") for s in range(STAGES)] for c in range(2)]
        self.state = [[Slot(f"state[{c}][{s}]") for s in range(STAGES)] for c in range(2)]
        self.qtile = [Slot(f"q[{c}]") for c in range(2)]
        self.lsum = [[{(a, w): Slot(f"lsum[{c}][{p}] from {(a, w)}") for a in range(2) for w in range(2)}
                      for p in range(2)] for c in range(2)]

    @staticmethod
    def owner(n: int) -> tuple[int, int]:
        return n % 2, (n // 2) % 2

    def producer(self, c: int) -> Agent:
        n = 0
        for piece, nb in enumerate(self.pieces):
            if piece > 0:
                yield ("wait", self.q_empty[c], (piece - 1) & 1)
            yield ("do", lambda c=c: self.q_full[c].expect(QTILE))
            yield ("load", [Landing(self.q_full[c], QTILE,
                                    lambda c=c, p=piece: self.qtile[c].write(f"q piece {p}", {(c, 0), (c, 1)}))])
            for _ in range(nb):
                s, own = n % STAGES, n % 2 == c
                if n >= STAGES and not (self.early_arm and not own and c == 1):
                    yield ("wait", self.kv_empty[c][s], ((n // STAGES) - 1) & 1)
                if c == 0 and n >= STAGES:
                    bar = self.kv_empty[0][s] if self.local_release else self.kv_empty_cluster[s]
                    yield ("wait", bar, ((n // STAGES) - 1) & 1)
                yield ("do", lambda c=c, s=s, own=own: self.kv_full[c][s].expect(CONTENT + (ROPE if own else 0)))
                if c == 0:  # the multicast content of block n into both CTAs
                    yield ("load", [Landing(self.kv_full[d][s], CONTENT,
                                            lambda d=d, s=s, n=n: self.content[d][s].write(f"content {n}",
                                                                                           {(d, 0), (d, 1)}))
                                    for d in range(2)])
                if own:  # RoPE + scales into the owner only (the owner warpgroup's QK reads it)
                    yield ("load", [Landing(self.kv_full[c][s], ROPE,
                                            lambda s=s, n=n: self.rope[c][s].write(f"rope {n}", {("qk", c)}))])
                n += 1

    def own_block(self, c: int, w: int, piece: int, j: int, nb: int, n: int, last_own: bool) -> Agent:
        """The owner's work on block n (local block j of a piece of nb): QK, P^T into both CTAs, then the state
        once the state of n - 1 is in (a piece's first block starts from the empty state)."""
        me, peer = (c, w), 1 - c
        s, ph = n % STAGES, (n // STAGES) & 1
        yield ("wait", self.kv_full[c][s], ph)  # QK over the content and the RoPE tile
        self.qtile[c].check(me, f"q piece {piece}")
        self.content[c][s].check(me, f"content {n}")
        self.rope[c][s].read(("qk", c), f"rope {n}")
        if last_own:  # the warpgroup's last QK of the piece
            self.qtile[c].read_done(me)
            yield ("arrive", self.q_empty[c], WG_THREADS)
        # P^T (state-free): into this CTA's RoPE tile (dead after the QK) and the peer's slot of stage s.
        for d in (c, peer):
            yield ("do", lambda d=d: self.pt[d][s].write(f"P^T {n}", {(d, 0), (d, 1)}))
        yield ("arrive", self.pt_full[c][s], WG_THREADS)
        for _ in range(WARPS):
            yield ("arrive", self.pt_full[peer][s], 1)
        # The state: scalars from the state of n - 1 (the other CTA's block, delivered into this CTA).
        if j > 0:
            if not self.no_state_wait:
                yield ("wait", self.st_full[c][(n - 1) % STAGES], ((n - 1) // STAGES) & 1)
            self.state[c][(n - 1) % STAGES].read(("chain", n), f"state {n - 1}")
        # The owner of n + 1 (in the other CTA) reads this state there, if n + 1 is in the same piece.
        chain = {("chain", n + 1)} if j + 1 < nb else set()
        for d in (c, peer):
            readers = {(d, 0), (d, 1)} | (chain if d == peer else set())
            yield ("do", lambda d=d, readers=readers: self.state[d][s].write(f"state {n}", readers))
        yield ("arrive", self.st_full[c][s], WG_THREADS)
        for _ in range(WARPS):
            yield ("arrive", self.st_full[peer][s], 1)

    def math(self, c: int, w: int) -> Agent:
        """Every block's PV in order; the own blocks' work `lead` blocks ahead of their PV (order "early": right
        after PV(n - 4), before the PVs of the 3 blocks between, as the note's register plan wants; "inline":
        just before PV(n))."""
        me = (c, w)
        lead = 3 if self.order == "early" else 0
        block_idx = 0
        for piece, nb in enumerate(self.pieces):
            yield ("wait", self.q_full[c], piece & 1)
            own = [j for j in range(nb) if self.owner(block_idx + j) == me]
            if not own:
                self.qtile[c].read(me, f"q piece {piece}")
                yield ("arrive", self.q_empty[c], WG_THREADS)
            todo = list(own)
            for j in range(nb):
                while todo and todo[0] <= j + lead:
                    jj = todo.pop(0)
                    yield from self.own_block(c, w, piece, jj, nb, block_idx + jj, jj == own[-1])
                n = block_idx + j
                s, ph = n % STAGES, (n // STAGES) & 1
                if n % 2 != c and not self.no_content_wait:
                    yield ("wait", self.kv_full[c][s], ph)  # the multicast content, for V^T
                yield ("wait", self.pt_full[c][s], ph)  # P^T of n
                yield ("wait", self.st_full[c][s], ph)  # its fold scales
                self.content[c][s].read(me, f"content {n}")
                self.pt[c][s].read(me, f"P^T {n}")
                self.state[c][s].read(me, f"state {n}")
                yield ("arrive", self.kv_empty[c][s], WG_THREADS)
                yield ("arrive", self.kv_empty_cluster[s], WG_THREADS)
            # Piece end: each warpgroup's partial L~ into its slot in both CTAs, then the wait for all four.
            p = piece % 2
            for d in range(2):
                yield ("do", lambda d=d, p=p, piece=piece: self.lsum[d][p][me].write(f"piece {piece}",
                                                                                    {(d, 0), (d, 1)}))
                yield ("arrive", self.lsum_full[d][p], WG_THREADS)
            yield ("wait", self.lsum_full[c][p], (piece // 2) & 1)
            for writer in self.lsum[c][p]:
                self.lsum[c][p][writer].read(me, f"piece {piece}")
            block_idx += nb


def simulate_cluster(pieces: list[int], seed: int, land_p: float = 0.3, **variant) -> Optional[str]:
    """None when the pair completes the row; else the deadlock, or the protocol violation (an extra arrival, a
    slot written before its readers were done, or read before it held what the reader expects) as a string.
    land_p: decode_protocol.run_agents' chance per step that a load lands (low: late landings, e.g. a multicast
    that reaches one CTA long after the other)."""
    pair = ClusterPair(pieces, **variant)
    agents = {f"producer{c}": pair.producer(c) for c in range(2)}
    agents.update({f"math{c}{w}": pair.math(c, w) for c in range(2) for w in range(2)})
    try:
        return run_agents(agents, seed, land_p=land_p)
    except AssertionError as e:
        return f"violation: {e}"
