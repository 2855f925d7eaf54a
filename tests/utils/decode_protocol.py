"""A model of the decode kernels' barrier protocols (csrc/kernels/sm90/decode_fp8: the wide kernel, SwapAbCta, and
the narrow one, NarrowCta), to find deadlocks on the CPU. Cta and POLICIES model a wide-kernel design that is
not in the library: a transposer warpgroup that built V^T in shared memory and also issued TMA (docs/design.md
section 5). They stay as the model's own check: one of its producer policies hung the GPU sweep, and the model
must find that deadlock.

The kernel's roles only meet at mbarriers, so whether a CTA can hang depends on the order of waits and arrivals
alone. This model replays that order for one CTA's schedule row (a list of pieces, each a block count, zero
included) with agents that are Python generators yielding barrier actions, and a scheduler that runs them in a
random interleaving: the 2 math warpgroups (mainloop.cuh run_math), the producer (the transposer design: 4 warps
with TmaLoader; the kernels in the library: one TMA thread, tma_producer.cuh) and the TMA unit (completes each
issued load at a random later step). A state where
no agent can move (or where the only moves are failed polls, for a long time) is a deadlock.

Barriers follow mbarrier semantics: an arrival count per phase, a completed-phase counter c, and waits by parity
(a wait for parity P passes when c & 1 != P), so stale-parity aliasing would show up too. What is abstracted:
the threads of a warpgroup (or warp) move together and arrive with their thread count; compute takes no time.

The narrow kernel (narrow/kernel.cuh) also meets at two mbarriers over both math warpgroups at the end of each
piece (merge_bar: arrive, then wait for the piece's parity).

Producer policies of the transposer design (Policy): which warps issue TMA, whether a warp polls its loader while
it waits, and the loader's blocking bounds after transposing block n (TmaLoader: q_empty may block for blocks <
need_q, kv_empty for blocks < need, prefetch up to want). `POLICIES` holds the ones that design went through.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Generator, Optional

KV_STAGES = 3
VT_STAGES = 2
WG_THREADS = 128
WARP = 32


class Barrier:
    def __init__(self, name: str, count: int):
        self.name, self.count, self.pending, self.completed = name, count, count, 0

    def arrive(self, weight: int) -> None:
        self.pending -= weight
        if self.pending < 0:
            raise AssertionError(f"{self.name}: {-self.pending} arrivals more than the phase expects")
        if self.pending == 0:
            self.completed += 1
            self.pending = self.count

    def passed(self, parity: int) -> bool:
        return (self.completed & 1) != parity


@dataclass(frozen=True)
class Policy:
    name: str
    issuers: tuple[int, ...]  # producer warps that issue TMA (kv_full takes one arrival per issuer)
    poll: bool                # issuing warps poll their loader while waiting for kv_full / vt_empty
    park_when_idle: bool      # ... and park in a plain wait once the loader has nothing left to issue
    prologue: Optional[tuple[int, int, int]]      # (need_q, need, want) before the first block, or None
    after: Callable[[int], tuple[int, int, int]]  # (need_q, need, want) after transposing block n


INF = 1 << 30
POLICIES = {
    # Warp 0 alone issues, polls between tests, blocks only for the block it waits for.
    "one_issuer_polling": Policy("one_issuer_polling", (0,), True, False, None,
                                 lambda n: (n + 1, n + 1, n + 1 + KV_STAGES)),
    # Every warp issues its own content tile; parks once its loader is idle.
    "four_issuers_parking": Policy("four_issuers_parking", (0, 1, 2, 3), True, True, None,
                                   lambda n: (n + 1, n + 1, n + 1 + KV_STAGES)),
    # No polling, blocking up to n + 2 for both barriers. Deadlocks when a piece past an empty one starts at
    # n + 2 (q_empty of the empty piece needs the PV of n + 1): the policy that hung the GPU sweep.
    "blocking_deadlocks": Policy("blocking_deadlocks", (0, 1, 2, 3), False, False, (1, 1, KV_STAGES),
                                 lambda n: (n + 3, n + 3, n + 4)),
    # The same with q_empty blocking only up to n + 1.
    "blocking": Policy("blocking", (0, 1, 2, 3), False, False, (1, 1, KV_STAGES), lambda n: (n + 2, n + 3, n + 4)),
}

Action = tuple  # ("wait", bar, parity) | ("test", bar, parity) | ("arrive", bar, weight) | ("tma", bar) |
#                ("land", [bars]): copies in flight that each complete one arrival on its barrier later (multicast)
Agent = Generator[Action, Optional[bool], None]


class Cta:
    def __init__(self, pieces: list[int], policy: Policy, merged_pv: bool = False):
        # merged_pv: PV(n - 1) and PV(n) as one chunk stream (a math order tried for the wide kernel): both P read
        # first, the V^T of n waited for mid-stream, the V^T half of n - 1 released before that of n.
        self.pieces, self.policy, self.merged_pv = pieces, policy, merged_pv
        b = Barrier
        self.kv_full = [b(f"kv_full{i}", 2 * len(policy.issuers)) for i in range(KV_STAGES)]
        self.kv_empty = [b(f"kv_empty{i}", 3 * WG_THREADS) for i in range(KV_STAGES)]
        self.xchg_full = [b(f"xchg_full{i}", WG_THREADS) for i in range(KV_STAGES)]
        self.vt_full = [[b(f"vt_full{i}{h}", 2 * WARP) for h in range(2)] for i in range(VT_STAGES)]
        self.vt_empty = [[b(f"vt_empty{i}{h}", WG_THREADS) for h in range(2)] for i in range(VT_STAGES)]
        self.q_full = b("q_full", 2)
        self.q_empty = b("q_empty", 2 * WG_THREADS)

    # ---- math warpgroup (mainloop.cuh run_math) ----
    def pv(self, n: int, wg: int) -> Agent:
        yield ("wait", self.vt_full[n % VT_STAGES][wg], (n // VT_STAGES) & 1)
        yield ("arrive", self.vt_empty[n % VT_STAGES][wg], WG_THREADS)

    def math(self, wg: int) -> Agent:
        block_idx = 0
        for i, nb in enumerate(self.pieces):
            yield ("wait", self.q_full, i & 1)
            first_own = 0 if (block_idx & 1) == wg else 1
            if first_own >= nb:
                yield ("arrive", self.q_empty, WG_THREADS)
            for j in range(first_own, nb, 2):
                n = block_idx + j
                yield ("wait", self.kv_full[n % KV_STAGES], (n // KV_STAGES) & 1)  # QK
                if j + 2 >= nb:
                    yield ("arrive", self.q_empty, WG_THREADS)
                if j > 0:
                    yield ("wait", self.xchg_full[(n - 1) % KV_STAGES], ((n - 1) // KV_STAGES) & 1)
                yield ("arrive", self.xchg_full[n % KV_STAGES], WG_THREADS)  # publish
                if j > 0 and self.merged_pv:
                    yield ("arrive", self.kv_empty[(n - 1) % KV_STAGES], WG_THREADS)  # P(n - 1) read
                    yield ("arrive", self.kv_empty[n % KV_STAGES], WG_THREADS)  # own P read back
                    yield ("wait", self.vt_full[(n - 1) % VT_STAGES][wg], ((n - 1) // VT_STAGES) & 1)
                    yield ("wait", self.vt_full[n % VT_STAGES][wg], (n // VT_STAGES) & 1)
                    yield ("arrive", self.vt_empty[(n - 1) % VT_STAGES][wg], WG_THREADS)
                    yield ("arrive", self.vt_empty[n % VT_STAGES][wg], WG_THREADS)
                    continue
                if j > 0:
                    yield ("arrive", self.kv_empty[(n - 1) % KV_STAGES], WG_THREADS)  # P(n - 1) read
                    yield from self.pv(n - 1, wg)
                yield ("arrive", self.kv_empty[n % KV_STAGES], WG_THREADS)  # own P read back
                yield from self.pv(n, wg)
            if nb > 0 and ((block_idx + nb - 1) & 1) != wg:
                n = block_idx + nb - 1
                yield ("wait", self.xchg_full[n % KV_STAGES], (n // KV_STAGES) & 1)
                yield ("arrive", self.kv_empty[n % KV_STAGES], WG_THREADS)
                yield from self.pv(n, wg)
            block_idx += nb

    # ---- producer warp (producer.cuh run_producer, TmaLoader) ----
    def producer(self, warp: int) -> Agent:
        pol = self.policy
        issuer = warp in pol.issuers
        ld = {"piece": -1, "blk": 0, "blk_end": 0, "pieces": 0, "blocks": 0}

        def run(need_q: int, need: int, want: int):  # -> True when it got to `want` or the end of the row
            while ld["blocks"] < want:
                if ld["blk"] == ld["blk_end"]:
                    if ld["piece"] + 1 >= len(self.pieces):
                        return True
                    if warp == 0 and ld["pieces"] > 0:
                        ok = yield (("wait" if ld["blocks"] < need_q else "test"), self.q_empty,
                                    (ld["pieces"] - 1) & 1)
                        if ok is False:
                            return False
                    ld["piece"] += 1
                    ld["blk"], ld["blk_end"] = 0, self.pieces[ld["piece"]]
                    ld["pieces"] += 1
                    if warp == 0:
                        yield ("tma", self.q_full)
                    continue
                stage = ld["blocks"] % KV_STAGES
                if ld["blocks"] >= KV_STAGES:
                    ok = yield (("wait" if ld["blocks"] < need else "test"), self.kv_empty[stage],
                                ((ld["blocks"] // KV_STAGES) - 1) & 1)
                    if ok is False:
                        return False
                yield ("tma", self.kv_full[stage])
                ld["blk"] += 1
                ld["blocks"] += 1
            return True

        def wait(bar: Barrier, parity: int, n: int):
            if not (issuer and pol.poll):
                yield ("wait", bar, parity)
                return
            while True:
                idle = yield from run(n + 1, n + 1, n + KV_STAGES)
                if idle and pol.park_when_idle:
                    yield ("wait", bar, parity)
                    return
                ok = yield ("test", bar, parity)
                if ok:
                    return

        half = warp // 2
        if issuer and pol.prologue:
            yield from run(*pol.prologue)
        n = 0
        for nb in self.pieces:
            for _ in range(nb):
                yield from wait(self.kv_full[n % KV_STAGES], (n // KV_STAGES) & 1, n)
                yield from wait(self.vt_empty[n % VT_STAGES][half], ((n // VT_STAGES) & 1) ^ 1, n)
                yield ("arrive", self.vt_full[n % VT_STAGES][half], WARP)  # transposed
                yield ("arrive", self.kv_empty[n % KV_STAGES], WARP)
                if issuer:
                    yield from run(*pol.after(n))
                n += 1
        if issuer:
            yield from run(INF, INF, INF)


def simulate(pieces: list[int], policy: Policy, seed: int, stall_limit: int = 4000,
             merged_pv: bool = False) -> Optional[str]:
    """The wide kernel: runs one random interleaving to the end. Returns None when every agent finished, else a
    description of the deadlock (what each unfinished agent waits for)."""
    cta = Cta(pieces, policy, merged_pv)
    agents = {f"math{wg}": cta.math(wg) for wg in range(2)}
    agents.update({f"warp{w}": cta.producer(w) for w in range(4)})
    return run_agents(agents, seed, stall_limit)


def simulate_narrow(pieces: list[int], seed: int, release_at_piece_end: bool = False) -> Optional[str]:
    """The narrow kernel, as simulate. release_at_piece_end: a broken variant that keeps every stage of a piece
    until the merge (the model must find its deadlock)."""
    cta = NarrowCta(pieces, release_at_piece_end)
    agents = {f"math{wg}": cta.math(wg) for wg in range(2)}
    agents["producer"] = cta.producer()
    return run_agents(agents, seed)


def simulate_swapab(pieces: list[int], seed: int) -> Optional[str]:
    """The wide kernel with swap-AB PV (wide/mainloop.cuh), as simulate."""
    cta = SwapAbCta(pieces)
    agents = {f"math{wg}": cta.math(wg) for wg in range(2)}
    agents["producer"] = cta.producer()
    return run_agents(agents, seed)


def _blocked(act: Action) -> bool:
    if act[0] == "wait":
        return not act[1].passed(act[2])
    return False


def _describe(act: Action) -> str:
    return f"{act[1].name} parity {act[2]}"


def run_agents(agents: dict[str, Agent], seed: int, stall_limit: int = 4000, land_p: float = 0.3) -> Optional[str]:
    """land_p: the chance per step that an in-flight load completes (lower: loads stay in flight longer)."""
    rng = random.Random(seed)
    nxt: dict[str, Optional[Action]] = {}
    for name, ag in agents.items():
        nxt[name] = next(ag, None)
    inflight: list[Barrier] = []  # issued TMA loads not yet complete
    stall = 0
    while True:
        live = [a for a, act in nxt.items() if act is not None]
        if not live and not inflight:
            return None
        runnable = [a for a in live if not _blocked(nxt[a])]
        if not runnable and not inflight:
            return "deadlock: " + ", ".join(f"{a} waits {_describe(nxt[a])}" for a in live)
        if stall > stall_limit:
            return "livelock (only failed polls): " + ", ".join(
                f"{a} at {nxt[a][0]} {nxt[a][1].name}" for a in live)
        if inflight and (not runnable or rng.random() < land_p):
            inflight.pop(rng.randrange(len(inflight))).arrive(1)
            stall = 0
            continue
        a = rng.choice(runnable)
        act = nxt[a]
        result: Optional[object] = None
        if act[0] == "wait":
            result = True
        elif act[0] == "test":
            result = act[1].passed(act[2])
            stall = 0 if result else stall + 1
        elif act[0] == "arrive":
            act[1].arrive(act[2])
            stall = 0
        elif act[0] == "tma":
            act[1].arrive(1)  # the issuer's arrive.expect_tx
            inflight.append(act[1])  # complete_tx, later
            stall = 0
        elif act[0] == "land":
            inflight.extend(act[1])  # one complete_tx per destination, each at its own later step
            stall = 0
        try:
            nxt[a] = agents[a].send(result)
        except StopIteration:
            nxt[a] = None


def random_pieces(rng: random.Random) -> list[int]:
    """A schedule row: 1-8 pieces of 0-9 blocks, zero-length pieces often, in any position."""
    return [rng.choice([0, 0, 1, 1, 2, 3, 5, 9]) for _ in range(rng.randint(1, 8))]


# ---- the one-thread TMA producer of the narrow, wide and ws kernels (tma_producer.cuh) ----
def tma_producer(pieces: list[int], q_full: list[Barrier], q_empty: list[Barrier], kv_full: list[Barrier],
                 kv_empty: list[Barrier]) -> Agent:
    """run_producer: per piece the query tile into buffer piece % len(q_full) (once the math warpgroups freed
    it), then each block's page into stage n % len(kv_full) (once its previous page was consumed)."""
    q_bufs, stages = len(q_full), len(kv_full)
    n = 0  # running block index
    for piece, nb in enumerate(pieces):
        qb = piece % q_bufs
        if piece >= q_bufs:
            yield ("wait", q_empty[qb], ((piece // q_bufs) - 1) & 1)
        yield ("tma", q_full[qb])
        for _ in range(nb):
            stage = n % stages
            if n >= stages:
                yield ("wait", kv_empty[stage], ((n // stages) - 1) & 1)
            yield ("tma", kv_full[stage])
            n += 1


# ---- the narrow kernel (narrow/kernel.cuh, narrow/merge_store.cuh) ----
NARROW_STAGES = 4
NARROW_Q_BUFS = 2


class NarrowCta:
    """narrow/kernel.cuh: the math warpgroups run alternate blocks and merge at every piece end."""

    def __init__(self, pieces: list[int], release_at_piece_end: bool = False):
        self.pieces, self.release_at_piece_end = pieces, release_at_piece_end
        b = Barrier
        # TMA barriers: the issuer's arrive.expect_tx and the load's complete_tx count one arrival each (as Cta).
        self.kv_full = [b(f"kv_full{i}", 2) for i in range(NARROW_STAGES)]
        self.kv_empty = [b(f"kv_empty{i}", WG_THREADS) for i in range(NARROW_STAGES)]  # the block's owner
        self.q_full = [b(f"q_full{i}", 2) for i in range(NARROW_Q_BUFS)]
        self.q_empty = [b(f"q_empty{i}", 2 * WG_THREADS) for i in range(NARROW_Q_BUFS)]
        # The piece merge (merge_store.cuh): merge_bar[MERGE_PUBLISHED], then merge_bar[MERGE_READ], both math
        # warpgroups' threads arriving on each, one phase per piece.
        self.merge = [b("merge_published", 2 * WG_THREADS), b("merge_read", 2 * WG_THREADS)]

    def math(self, wg: int) -> Agent:
        block_idx = 0
        for piece, nb in enumerate(self.pieces):
            qb = piece % NARROW_Q_BUFS
            yield ("wait", self.q_full[qb], (piece // NARROW_Q_BUFS) & 1)
            first_own = 0 if (block_idx & 1) == wg else 1
            if first_own >= nb:
                yield ("arrive", self.q_empty[qb], WG_THREADS)
            held = []
            for j in range(first_own, nb, 2):
                n = block_idx + j
                yield ("wait", self.kv_full[n % NARROW_STAGES], (n // NARROW_STAGES) & 1)  # QK, V^T fragments
                if self.release_at_piece_end:
                    held.append(n)
                else:
                    yield ("arrive", self.kv_empty[n % NARROW_STAGES], WG_THREADS)
                if j + 2 >= nb:
                    yield ("arrive", self.q_empty[qb], WG_THREADS)
            for bar in self.merge:  # publish_piece_state; published; merge_and_store; read
                yield ("arrive", bar, WG_THREADS)
                yield ("wait", bar, piece & 1)
            for n in held:
                yield ("arrive", self.kv_empty[n % NARROW_STAGES], WG_THREADS)
            block_idx += nb

    def producer(self) -> Agent:
        return tma_producer(self.pieces, self.q_full, self.q_empty, self.kv_full, self.kv_empty)


# ---- the wide kernel with swap-AB PV (wide/mainloop.cuh, tma_producer.cuh) ----
SWAPAB_STAGES = 4


class SwapAbCta:
    """One TMA thread (a single query buffer), 4 stages; the owner hands P^T and the state over through
    xchg_full; each warpgroup releases a stage (kv_empty, both needed) after its PV of the block."""

    def __init__(self, pieces: list[int]):
        self.pieces = pieces
        b = Barrier
        self.kv_full = [b(f"kv_full{i}", 2) for i in range(SWAPAB_STAGES)]
        self.kv_empty = [b(f"kv_empty{i}", 2 * WG_THREADS) for i in range(SWAPAB_STAGES)]
        self.xchg_full = [b(f"xchg_full{i}", WG_THREADS) for i in range(SWAPAB_STAGES)]
        self.q_full = [b("q_full", 2)]
        self.q_empty = [b("q_empty", 2 * WG_THREADS)]

    def stage(self, n: int) -> tuple[int, int]:
        return n % SWAPAB_STAGES, (n // SWAPAB_STAGES) & 1

    def math(self, wg: int) -> Agent:
        block_idx = 0
        for piece, nb in enumerate(self.pieces):
            yield ("wait", self.q_full[0], piece & 1)
            first_own = 0 if (block_idx & 1) == wg else 1
            if first_own >= nb:
                yield ("arrive", self.q_empty[0], WG_THREADS)
            for j in range(first_own, nb, 2):
                n = block_idx + j
                st, ph = self.stage(n)
                yield ("wait", self.kv_full[st], ph)  # QK
                if j + 2 >= nb:
                    yield ("arrive", self.q_empty[0], WG_THREADS)
                if j > 0:
                    yield ("wait", self.xchg_full[self.stage(n - 1)[0]], self.stage(n - 1)[1])
                yield ("arrive", self.xchg_full[st], WG_THREADS)  # publish
                if j > 0:
                    yield ("arrive", self.kv_empty[self.stage(n - 1)[0]], WG_THREADS)  # PV(n - 1)
                yield ("wait", self.xchg_full[st], ph)  # the own hand-off complete
                yield ("arrive", self.kv_empty[st], WG_THREADS)  # PV(n)
            if nb > 0 and ((block_idx + nb - 1) & 1) != wg:
                st, ph = self.stage(block_idx + nb - 1)
                yield ("wait", self.xchg_full[st], ph)
                yield ("arrive", self.kv_empty[st], WG_THREADS)
            block_idx += nb

    def producer(self) -> Agent:
        return tma_producer(self.pieces, self.q_full, self.q_empty, self.kv_full, self.kv_empty)


# ---- the warp-specialised wide kernel (ws/kernel.cuh: ws/softmax_wg.cuh, ws/pv_wg.cuh, tma_producer.cuh) ----
class WsCta:
    """One TMA thread, 4 stages and one query buffer as SwapAbCta. The softmax warpgroup runs every block: it waits
    for the page of block n + 1 before the softmax of block n (chain A of n + 1 goes out first), hands off each
    block (xchg_full) and frees the query tile after the piece's last QK. The two PV warpgroups wait for each
    hand-off and release its stage after their PV, except the piece's last stage, which they release after the
    epilogue has read the final state from it. hold_piece_stages: a broken variant that keeps every stage of a
    piece until the epilogue (the model must find its deadlock)."""

    def __init__(self, pieces: list[int], hold_piece_stages: bool = False):
        self.pieces, self.hold = pieces, hold_piece_stages
        b = Barrier
        self.kv_full = [b(f"kv_full{i}", 2) for i in range(SWAPAB_STAGES)]
        self.kv_empty = [b(f"kv_empty{i}", 2 * WG_THREADS) for i in range(SWAPAB_STAGES)]
        self.xchg_full = [b(f"xchg_full{i}", WG_THREADS) for i in range(SWAPAB_STAGES)]
        self.q_full = [b("q_full", 2)]
        self.q_empty = [b("q_empty", WG_THREADS)]

    def stage(self, n: int) -> tuple[int, int]:
        return n % SWAPAB_STAGES, (n // SWAPAB_STAGES) & 1

    def softmax(self) -> Agent:
        block_idx = 0
        for piece, nb in enumerate(self.pieces):
            yield ("wait", self.q_full[0], piece & 1)
            if nb == 0:
                yield ("arrive", self.q_empty[0], WG_THREADS)
                continue
            yield ("wait", self.kv_full[self.stage(block_idx)[0]], self.stage(block_idx)[1])  # the first chain A
            last = block_idx + nb - 1
            for n in range(block_idx, last):
                yield ("wait", self.kv_full[self.stage(n + 1)[0]], self.stage(n + 1)[1])  # chain A of n + 1
                yield ("arrive", self.xchg_full[self.stage(n)[0]], WG_THREADS)  # the hand-off of n
            yield ("arrive", self.q_empty[0], WG_THREADS)  # the piece's last QK retired
            yield ("arrive", self.xchg_full[self.stage(last)[0]], WG_THREADS)
            block_idx += nb

    def pv(self) -> Agent:
        block_idx = 0
        for nb in self.pieces:
            held = []
            for j in range(nb):
                st, ph = self.stage(block_idx + j)
                yield ("wait", self.xchg_full[st], ph)
                if j + 1 < nb and not self.hold:
                    yield ("arrive", self.kv_empty[st], WG_THREADS)
                else:
                    held.append(st)
            for st in held:  # after the epilogue
                yield ("arrive", self.kv_empty[st], WG_THREADS)
            block_idx += nb

    def producer(self) -> Agent:
        return tma_producer(self.pieces, self.q_full, self.q_empty, self.kv_full, self.kv_empty)


def simulate_ws(pieces: list[int], seed: int, hold_piece_stages: bool = False) -> Optional[str]:
    """The warp-specialised wide kernel, as simulate."""
    cta = WsCta(pieces, hold_piece_stages)
    agents = {"softmax": cta.softmax(), "pv0": cta.pv(), "pv1": cta.pv(), "producer": cta.producer()}
    return run_agents(agents, seed)
