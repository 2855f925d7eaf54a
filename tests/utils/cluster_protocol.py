"""A model of the barrier protocol of the 2-CTA cluster decode kernel as built (csrc/kernels/sm90/decode_fp8/
cluster: config.h, producer.cuh, handoff.cuh, mainloop.cuh, epilogue.cuh, kernel.cuh), for one cluster and one
schedule row (a list of pieces, each a block count, zero included).

It runs on decode_protocol.run_agents (random interleavings, deadlock and extra-arrival detection) and adds what
the single-CTA models lack: loads that land in two CTAs (TMA multicast, one landing per CTA, each completing
bytes on its own CTA's barrier), barriers armed with a byte count (arrive.expect_tx; the bytes may land before
the arm), shared-memory copies pushed into the peer CTA (cp.async.bulk ... complete_tx on the peer's barrier),
remote arrivals that are in flight for a while, and a check of every shared-memory slot: a write (a load landing,
a push landing, a store) into a slot whose previous contents some reader has not consumed yet is reported, and
so is a read of a slot that does not hold what the reader expects (not landed yet, or already overwritten).

What is modelled, per block n of the running walk (pieces in order, n counting across them):
- ownership: rank n % 2, math warpgroup (n / 2) % 2 there; stage s = n % 6 (KV_STAGES_C), so a stage's blocks
  all have owner rank s % 2 (config.h StageView.owned).
- each CTA c's producer (producer.cuh run_producer_c): per piece, once its q_empty phase of the piece before
  completed (both local math warpgroups), the query tile on q_full; per block, if n >= 6, its own kv_empty[s]
  wait for block n - 6, then
    owner:     kv_full[s] armed with 41216 B; its 2 own-dims content tiles, the RoPE tile and the scales unicast
               into itself, the 2 other-dims content tiles multicast into both CTAs (the bytes complete on the
               kv_full[s] of each destination CTA on their own);
    non-owner: kv_full[s] armed with the 16384 multicast bytes, xchg_full[s] armed with 5376 B (1 arrival).
- each math warpgroup (c, w) (mainloop.cuh run_math_c), per piece: q_full; q_empty at once if it owns no block
  of the piece; then for each own block j (local index): PV up to j - 3; kv_full; QK (the 4 content tiles, the
  RoPE tile, the query tile); q_empty after the last own QK; softmax (the scales); P^T stored into the RoPE
  tile's first 4096 B and pushed to the peer's peer_handoff; PV up to j - 2; (j > 0) the wait for block n - 1's
  hand-off in its own CTA (pushed by the other rank) and the read of its state; the state stored into the RoPE
  tile at 4096, the 128 local arrivals on xchg_full[s], the state pushed to the peer; PV up to j. Then PV up to
  n_blocks - 2, the last block's PV without release, the epilogue's read of the final state from the last
  block's hand-off slot, and its release.
- PV(m) of (c, w): kv_full[s] of its own CTA (its copy of the page: a multicast lands per CTA, so the owner's
  hand-off does not imply it landed here), the V^T read of its dims' content tile, xchg_full[s] of its own CTA,
  the reads of P^T and the state from the hand-off slot (owned stage: the RoPE tile; other: peer_handoff), then
  the release: one arrival per warp (here weight 4 per warpgroup) on kv_empty[s] of both CTAs (16 per phase),
  the remote one in flight.
- barrier counts as kernel.cuh initialises them: kv_full 1 (+ tx), kv_empty 16, xchg_full 128 in the owner and
  1 (+ tx) in the other CTA, q_full 1 (+ tx), q_empty 256.
Checked slots, per CTA and stage: the multicast content tiles (both CTAs) and the unicast own-dims tiles (owner),
the owner's RoPE tile in two parts ([0, 4096): RoPE, then P^T; [4096, 8192): RoPE, then the state; the pushes
read them), the scales, the non-owner's peer_handoff in the same two parts (P^T; the state, also read by the
next block's owner for the chain and by the epilogue), and each CTA's query tile.

Loads, pushes and remote arrivals land in any order, each at a random later step (land_p); `slow` makes one
role lag (lagging). ClusterPair's switches break the protocol on purpose (the model must catch each), and
`stages` shortens the ring (2 stages alias kv_full phases).

Not modelled: the threads of a warpgroup one by one (a warpgroup moves as one, its named barrier before a push
included, and its 4 warps' kv_empty arrivals are one of weight 4); the split of a PV's reads (the V^T
fragments are read right after the kv_full wait, P^T and the column scales right after the xchg_full wait, and
the release follows); the memory model (proxy fences, the scope of the remote arrival's release: the model takes
a read that precedes an arrival in program order as done when the arrival counts); the data (numerics, masking,
live rows, page ids; the query tile's byte count is a constant); the trace build; kernel start and end (barrier
init, cluster_sync_all); mbarrier tx-count limits; time (a step is a step; compute is free).
"""

from __future__ import annotations

from typing import Callable, Optional

from utils.decode_protocol import Agent, Barrier, WG_THREADS, run_agents

STAGES = 6  # KV_STAGES_C
OWNER_CYCLE = 4  # CLUSTER_CTAS * NUM_MATH_WG: warpgroup (c, w) owns the blocks with n % 4 == c + 2 w
WARPS = 4  # per math warpgroup: one kv_empty arrival per warp in each CTA
# Bytes (config.h, exchange.cuh): a content tile, the RoPE tile, the scales, a query tile; the two pushes.
TILE, ROPE, SCALES, QTILE = 8192, 8192, 256, 40960
OWNER_TX, PEER_TX = 4 * TILE + ROPE + SCALES, 2 * TILE  # 41216, 16384
PT_PUSH, STATE_PUSH = 4096, 1280
XCHG_TX = PT_PUSH + STATE_PUSH  # 5376


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


class Push(Landing):
    """A bulk copy into the peer CTA (handoff.cuh push_to_peer): when it lands it has read its source (which must
    still hold what was pushed: nothing may overwrite it before), written its destination and completed its bytes
    on the peer's barrier."""

    def __init__(self, src: Slot, dst: Slot, what: str, readers: set, bar: TxBarrier, nbytes: int):
        key = ("push", what)
        src.readers.add(key)  # issued now: the source has one more reader until the copy lands

        def land() -> None:
            src.read(key, what)
            dst.write(what, readers)

        super().__init__(bar, nbytes, land)


class RemoteArrival:
    """An arrival on the other CTA's barrier (mbarrier.arrive.shared::cluster): it counts when it gets there."""

    def __init__(self, bar: Barrier, weight: int):
        self.bar, self.weight = bar, weight

    def arrive(self, _weight: int) -> None:
        self.bar.arrive(self.weight)


class ClusterPair:
    """The built kernel's protocol for one schedule row. Broken variants, for the model's own checks:
      no_pv_kv_wait:  PV runs without waiting for its own CTA's kv_full (it relies on the hand-off, which in the
                      non-owner CTA says nothing about the multicast content landing there);
      early_arm:      the non-owner's producer arms kv_full / xchg_full before its kv_empty wait;
      local_release:  kv_empty counts only the 8 local warps (no remote arrivals): the owner refills the
                      multicast tiles (and its RoPE tile, and pushes new hand-offs) while the peer still reads;
      no_state_wait:  the chain reads the state of block n - 1 without waiting for its hand-off;
      early_release:  a piece's last block is released before the epilogue read its final state.
    stages: the ring's length (even, so that a stage keeps its owner rank); a short one aliases phases."""

    def __init__(self, pieces: list[int], no_pv_kv_wait: bool = False, early_arm: bool = False,
                 local_release: bool = False, no_state_wait: bool = False, early_release: bool = False,
                 stages: int = STAGES):
        assert stages % 2 == 0, stages
        self.pieces, self.stages = pieces, stages
        self.no_pv_kv_wait, self.early_arm, self.local_release = no_pv_kv_wait, early_arm, local_release
        self.no_state_wait, self.early_release = no_state_wait, early_release
        t = TxBarrier
        cs = [(c, s) for c in range(2) for s in range(stages)]
        self.kv_full = {(c, s): t(f"kv_full[{c}][{s}]", 1) for c, s in cs}
        empty_count = (1 if local_release else 2) * 2 * WARPS  # KV_EMPTY_ARRIVALS_C = 16
        self.kv_empty = {(c, s): Barrier(f"kv_empty[{c}][{s}]", empty_count) for c, s in cs}
        # Owned stage: the owner warpgroup's 128 threads; other: the producer's arm + the 5376 pushed bytes.
        self.xchg_full = {(c, s): t(f"xchg_full[{c}][{s}]", WG_THREADS if s % 2 == c else 1) for c, s in cs}
        self.q_full = [t(f"q_full[{c}]", 1) for c in range(2)]
        self.q_empty = [Barrier(f"q_empty[{c}]", 2 * WG_THREADS) for c in range(2)]
        # Slots. mc: the multicast tiles (the non-owner's dims) in both CTAs; own: the owner's dims, unicast.
        self.mc = {(c, s, i): Slot(f"mc[{c}][{s}][{i}]") for c, s in cs for i in range(2)}
        self.own = {(s, i): Slot(f"own_tiles[{s % 2}][{s}][{i}]") for s in range(stages) for i in range(2)}
        # The owner's RoPE tile in two parts (the hand-off's P^T, then its state, reuse it: exchange.cuh), the
        # scales; the non-owner's peer_handoff in the same two parts (part 1: the state and the column scales).
        self.rope = {(s, h): Slot(f"own_rope[{s % 2}][{s}] part {h}") for s in range(stages) for h in range(2)}
        self.scale = {s: Slot(f"own_scale[{s % 2}][{s}]") for s in range(stages)}
        self.peer = {(s, h): Slot(f"peer_handoff[{1 - s % 2}][{s}] part {h}") for s in range(stages) for h in range(2)}
        self.qtile = [Slot(f"q[{c}]") for c in range(2)]

    @staticmethod
    def owner(n: int) -> tuple[int, int]:
        return n % 2, (n // 2) % 2

    def phase(self, n: int) -> int:
        """The parity of block n's use of its stage (config.h stage_phase)."""
        return (n // self.stages) & 1

    def handoff(self, c: int, s: int, h: int) -> Slot:
        """Part h of stage s's hand-off slot in CTA c (StageView::handoff)."""
        return self.rope[(s, h)] if s % 2 == c else self.peer[(s, h)]

    # ---- producer.cuh run_producer_c ----
    def producer(self, c: int) -> Agent:
        n = 0
        for piece, nb in enumerate(self.pieces):
            if piece > 0:
                yield ("wait", self.q_empty[c], (piece - 1) & 1)
            yield ("do", lambda: self.q_full[c].expect(QTILE))
            yield ("load", [Landing(self.q_full[c], QTILE,
                                    lambda p=piece: self.qtile[c].write(f"q piece {p}", {("QK", c, 0), ("QK", c, 1)}))])
            for _ in range(nb):
                s = n % self.stages
                if s % 2 == c:
                    if n >= self.stages:
                        yield ("wait", self.kv_empty[(c, s)], ((n // self.stages) - 1) & 1)
                    yield from self.issue_page(c, s, n)
                else:
                    if self.early_arm:  # the arms first: they may count in the phase of block n - 6
                        yield ("do", lambda s=s: self.kv_full[(c, s)].expect(PEER_TX))
                        yield ("do", lambda s=s: self.xchg_full[(c, s)].expect(XCHG_TX))
                    if n >= self.stages:
                        yield ("wait", self.kv_empty[(c, s)], ((n // self.stages) - 1) & 1)
                    if not self.early_arm:
                        yield ("do", lambda s=s: self.kv_full[(c, s)].expect(PEER_TX))
                        yield ("do", lambda s=s: self.xchg_full[(c, s)].expect(XCHG_TX))
                n += 1

    def issue_page(self, c: int, s: int, n: int) -> Agent:
        """issue_block in the owner c: everything lands in c (41216 B on its kv_full), the multicast tiles in the
        peer too (16384 B on the peer's kv_full)."""
        qk, page = ("QK", c, (n // 2) % 2), f"page {n}"
        yield ("do", lambda: self.kv_full[(c, s)].expect(OWNER_TX))
        for i in range(2):
            yield ("load", [Landing(self.kv_full[(c, s)], TILE,  # own dims: the owner's QK and its PV of dims i
                                    lambda i=i: self.own[(s, i)].write(page, {qk, ("PV", c, i)}))])
            # other dims: in the owner the QK reads them, in the peer its warpgroup i's PV
            yield ("load", [Landing(self.kv_full[(d, s)], TILE,
                                    lambda d=d, i=i: self.mc[(d, s, i)].write(page, {qk} if d == c else {("PV", d, i)}))
                            for d in (c, 1 - c)])
        for h in range(2):
            yield ("load", [Landing(self.kv_full[(c, s)], ROPE // 2,
                                    lambda h=h: self.rope[(s, h)].write(f"rope {n}", {qk}))])
        yield ("load", [Landing(self.kv_full[(c, s)], SCALES, lambda: self.scale[s].write(f"scales {n}", {qk}))])

    # ---- mainloop.cuh run_math_c ----
    def pv(self, c: int, w: int, n: int, release: bool = True) -> Agent:
        """pv_block_c (+ release_stage_c): this CTA's copy of the page, V^T of the warpgroup's dims, the hand-off."""
        s, ph, me = n % self.stages, self.phase(n), ("PV", c, w)
        if not self.no_pv_kv_wait:
            yield ("wait", self.kv_full[(c, s)], ph)
        (self.own[(s, w)] if s % 2 == c else self.mc[(c, s, w)]).read(me, f"page {n}")  # V^T fragments
        yield ("wait", self.xchg_full[(c, s)], ph)
        self.handoff(c, s, 0).read(me, f"P^T {n}")
        self.handoff(c, s, 1).read(me, f"state {n}")  # the column scales of the fold
        if release:
            yield from self.release(c, s)

    def pv_upto(self, c: int, w: int, pv_next: list[int], last: int) -> Agent:
        """run_math_c's pv_upto: PV (and release) of every block up to `last` not done yet, in order."""
        while pv_next[0] <= last:
            yield from self.pv(c, w, pv_next[0])
            pv_next[0] += 1

    def release(self, c: int, s: int) -> Agent:
        yield ("arrive", self.kv_empty[(c, s)], WARPS)
        if not self.local_release:
            yield ("load", [RemoteArrival(self.kv_empty[(1 - c, s)], WARPS)])

    def math(self, c: int, w: int) -> Agent:
        qk = ("QK", c, w)
        my_slot = c + 2 * w
        block_idx = 0
        for piece, nb in enumerate(self.pieces):
            yield ("wait", self.q_full[c], piece & 1)
            first_own = (my_slot - block_idx % OWNER_CYCLE) % OWNER_CYCLE
            if first_own >= nb:  # no QK of this warpgroup in the piece
                self.qtile[c].read_done(qk)
                yield ("arrive", self.q_empty[c], WG_THREADS)
            pv_next = [block_idx]  # the next block to run PV for
            end = block_idx + nb - 2  # pv_upto's bound: the piece's last block is left to the epilogue

            for j in range(first_own, nb, OWNER_CYCLE):
                n = block_idx + j
                s, peer = n % self.stages, 1 - c
                yield from self.pv_upto(c, w, pv_next, min(n - 3, end))
                yield ("wait", self.kv_full[(c, s)], self.phase(n))
                # QK over the 4 content tiles, the RoPE tile and the query tile (issued and waited for).
                self.qtile[c].check(qk, f"q piece {piece}")
                for i in range(2):
                    self.own[(s, i)].read(qk, f"page {n}")
                    self.mc[(c, s, i)].read(qk, f"page {n}")
                for h in range(2):
                    self.rope[(s, h)].read(qk, f"rope {n}")
                if j + OWNER_CYCLE >= nb:  # the last QK of the piece
                    self.qtile[c].read_done(qk)
                    yield ("arrive", self.q_empty[c], WG_THREADS)
                self.scale[s].read(qk, f"scales {n}")  # the softmax's logits
                # P^T into the RoPE tile (dead after the QK), then pushed into the peer's peer_handoff.
                yield ("do", lambda n=n, s=s: self.rope[(s, 0)].write(f"P^T {n}", {("PV", c, 0), ("PV", c, 1)}))
                yield ("load", [Push(self.rope[(s, 0)], self.peer[(s, 0)], f"P^T {n}",
                                     {("PV", peer, 0), ("PV", peer, 1)}, self.xchg_full[(peer, s)], PT_PUSH)])
                yield from self.pv_upto(c, w, pv_next, min(n - 2, end))
                if j > 0:  # the state after block n - 1, owned by the other rank: its hand-off was pushed here
                    sp = (n - 1) % self.stages
                    if not self.no_state_wait:
                        yield ("wait", self.xchg_full[(c, sp)], self.phase(n - 1))
                    self.peer[(sp, 1)].read(("chain", n), f"state {n - 1}")
                # The state: read here by both PVs (and the epilogue after the piece's last block), pushed to the
                # peer where the same and the chain of block n + 1 read it.
                readers = {d: {("PV", d, 0), ("PV", d, 1)} for d in (c, peer)}
                if j == nb - 1:
                    for d in (c, peer):
                        readers[d] |= {("epilogue", d, 0), ("epilogue", d, 1)}
                else:
                    readers[peer].add(("chain", n + 1))
                yield ("do", lambda n=n, s=s, r=readers[c]: self.rope[(s, 1)].write(f"state {n}", r))
                yield ("arrive", self.xchg_full[(c, s)], WG_THREADS)
                yield ("load", [Push(self.rope[(s, 1)], self.peer[(s, 1)], f"state {n}", readers[peer],
                                     self.xchg_full[(peer, s)], STATE_PUSH)])
                yield from self.pv_upto(c, w, pv_next, min(n, end))
            yield from self.pv_upto(c, w, pv_next, end)
            if nb > 0:  # the last block: its PV, the epilogue's read of the final state, then the release
                n = block_idx + nb - 1
                s = n % self.stages
                yield from self.pv(c, w, n, release=False)
                if self.early_release:
                    yield from self.release(c, s)
                    for _ in range(8):  # store_piece_c's global stores before its final-state read
                        yield ("do", _idle)
                self.handoff(c, s, 1).read(("epilogue", c, w), f"state {n}")
                if not self.early_release:
                    yield from self.release(c, s)
            block_idx += nb


def lagging(agent: Agent, lag: int) -> Agent:
    """The agent with `lag` idle steps before each of its actions: run_agents picks among the runnable agents
    uniformly, so this is how one role (a producer, a warpgroup) falls far behind the others. The cluster agents
    ignore what run_agents sends back (it answers only "test" actions, which they do not use)."""
    for act in agent:
        for _ in range(lag):
            yield ("do", _idle)
        yield act


def _idle() -> None:
    pass


AGENTS = ("producer0", "producer1", "math00", "math01", "math10", "math11")


def simulate_cluster(pieces: list[int], seed: int, land_p: float = 0.3, slow: Optional[str] = None, lag: int = 6,
                     **variant) -> Optional[str]:
    """None when the pair completes the row; else the deadlock, or the protocol violation (an extra arrival, a
    slot written before its readers were done, or read before it held what the reader expects) as a string.
    land_p: decode_protocol.run_agents' chance per step that an in-flight load, push or remote arrival lands (low:
    late landings, e.g. a multicast that reaches one CTA long after the other). slow: one of AGENTS, run with
    `lag` idle steps before each action (lagging)."""
    pair = ClusterPair(pieces, **variant)
    agents = {f"producer{c}": pair.producer(c) for c in range(2)}
    agents.update({f"math{c}{w}": pair.math(c, w) for c in range(2) for w in range(2)})
    if slow is not None:
        agents[slow] = lagging(agents[slow], lag)
    try:
        return run_agents(agents, seed, land_p=land_p)
    except AssertionError as e:
        return f"violation: {e}"
