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
- the owner warpgroup of n ((n / 2) % 2 in CTA n % 2) waits kv_full, runs QK, writes P^T into its own RoPE slot
  and into the peer's slot s (a remote store), waits for the state of n - 1 (xchg of the other CTA's block, in
  its own CTA), then publishes: xchg[c][s] locally (128 arrivals) and xchg[peer][s] remotely (one per warp, 4).
- every warpgroup runs PV(n) in block order: wait kv_full (the content, in the non-owner CTA) and xchg[c][s],
  then release kv_empty[c][s] and kv_empty_cluster[s].
- at a piece end the four warpgroups exchange their partial L~: each writes into both CTAs' lsum buffer
  piece % 2 and arrives on both lsum_full barriers; each waits on its own CTA's.
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
        self.bar, self.nbytes, self.on_land, self.name = bar, nbytes, on_land, bar.name

    def arrive(self, _weight: int) -> None:  # run_agents completes in-flight loads through arrive(1)
        self.on_land()
        self.bar.complete(self.nbytes)


CONTENT, ROPE, QTILE = 32768, 8448, 40960  # bytes: a page's content tiles, its RoPE tile + scales, a query tile


class ClusterPair:
    """The plan's protocol for one schedule row (pieces of block counts). Broken variants for the model's own
    checks: early_arm (the non-issuing producer arms a peer stage without waiting for its warpgroups),
    local_release (rank 0 multicasts after its own warpgroups' release only), no_content_wait (the non-owner
    CTA's warpgroups run PV without waiting for the multicast content: the hand-off alone does not order it)."""

    def __init__(self, pieces: list[int], early_arm: bool = False, local_release: bool = False,
                 no_content_wait: bool = False):
        self.pieces, self.early_arm, self.local_release = pieces, early_arm, local_release
        self.no_content_wait = no_content_wait
        b, t = Barrier, TxBarrier
        self.kv_full = [[t(f"kv_full[{c}][{s}]", 1) for s in range(STAGES)] for c in range(2)]
        self.kv_empty = [[b(f"kv_empty[{c}][{s}]", 2 * WG_THREADS) for s in range(STAGES)] for c in range(2)]
        self.kv_empty_cluster = [b(f"kv_empty_cluster[{s}]", 4 * WG_THREADS) for s in range(STAGES)]
        # xchg: own stages take the owner's 128 local arrivals, peer stages the peer owner's 4 remote ones.
        self.xchg = [[b(f"xchg[{c}][{s}]", WG_THREADS if s % 2 == c else WARPS) for s in range(STAGES)]
                     for c in range(2)]
        self.q_full = [t(f"q_full[{c}]", 1) for c in range(2)]
        self.q_empty = [b(f"q_empty[{c}]", 2 * WG_THREADS) for c in range(2)]
        self.lsum_full = [[b(f"lsum_full[{c}][{p}]", 4 * WG_THREADS) for p in range(2)] for c in range(2)]
        self.content = [[Slot(f"content[{c}][{s}]") for s in range(STAGES)] for c in range(2)]
        self.rope = [[Slot(f"rope[{c}][{s}]") for s in range(STAGES)] for c in range(2)]
        self.qtile = [Slot(f"q[{c}]") for c in range(2)]
        self.lsum = [[Slot(f"lsum[{c}][{p}]") for p in range(2)] for c in range(2)]

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

    def math(self, c: int, w: int) -> Agent:
        me, peer = (c, w), 1 - c
        block_idx = 0
        for piece, nb in enumerate(self.pieces):
            yield ("wait", self.q_full[c], piece & 1)
            own_blocks = [j for j in range(nb) if self.owner(block_idx + j) == me]
            if not own_blocks:
                self.qtile[c].read(me, f"q piece {piece}")
                yield ("arrive", self.q_empty[c], WG_THREADS)
            for j in range(nb):
                n = block_idx + j
                s, ph = n % STAGES, (n // STAGES) & 1
                if self.owner(n) == me:
                    yield ("wait", self.kv_full[c][s], ph)  # QK over the content and the RoPE tile
                    self.qtile[c].check(me, f"q piece {piece}")
                    self.content[c][s].check(me, f"content {n}")
                    self.rope[c][s].read(("qk", c), f"rope {n}")
                    if j == own_blocks[-1]:  # the warpgroup's last QK of the piece
                        self.qtile[c].read_done(me)
                        yield ("arrive", self.q_empty[c], WG_THREADS)
                    yield ("do", lambda c=c, s=s, n=n: self.rope[c][s].write(f"hand-off {n}", {(c, 0), (c, 1)}))
                    yield ("do", lambda s=s, n=n: self.rope[peer][s].write(f"hand-off {n}", {(peer, 0), (peer, 1)}))
                    if j > 0:  # the state of n - 1 (the other CTA's block), delivered into this CTA
                        yield ("wait", self.xchg[c][(n - 1) % STAGES], ((n - 1) // STAGES) & 1)
                    yield ("arrive", self.xchg[c][s], WG_THREADS)
                    for _ in range(WARPS):
                        yield ("arrive", self.xchg[peer][s], 1)
                if n % 2 != c and not self.no_content_wait:
                    yield ("wait", self.kv_full[c][s], ph)  # the multicast content, for V^T
                yield ("wait", self.xchg[c][s], ph)  # P^T and the fold scales of n
                self.content[c][s].read(me, f"content {n}")
                self.rope[c][s].read(me, f"hand-off {n}")
                yield ("arrive", self.kv_empty[c][s], WG_THREADS)
                yield ("arrive", self.kv_empty_cluster[s], WG_THREADS)
            # Piece end: the partial L~ of each warpgroup into both CTAs, then the wait for all four.
            p = piece % 2
            for d in range(2):
                lsum = self.lsum[d][p]
                if lsum.holds != f"piece {piece}":
                    lsum.write(f"piece {piece}", {(d, 0), (d, 1)})
                yield ("arrive", self.lsum_full[d][p], WG_THREADS)
            yield ("wait", self.lsum_full[c][p], (piece // 2) & 1)
            self.lsum[c][p].read(me, f"piece {piece}")
            block_idx += nb


def simulate_cluster(pieces: list[int], seed: int, **variant) -> Optional[str]:
    """None when the pair completes the row; else the deadlock, or the protocol violation (an extra arrival, or a
    slot written before its readers were done) as a string."""
    pair = ClusterPair(pieces, **variant)
    agents = {f"producer{c}": pair.producer(c) for c in range(2)}
    agents.update({f"math{c}{w}": pair.math(c, w) for c in range(2) for w in range(2)})
    try:
        return run_agents(agents, seed)
    except AssertionError as e:
        return f"violation: {e}"
