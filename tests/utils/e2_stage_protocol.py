"""The barrier protocol of candidate E2's stage map (docs/design.md section 4), as `tools/microbench/e2_stage_stream.cu`
runs it, modelled with the agents and scheduler of tests/utils/decode_protocol.py so that a hang or an overwritten
hand-off shows up on the CPU before the microbenchmark (or a kernel) runs on the GPU.

A cluster of 2 CTAs walks `pages` pages; page n is owned by CTA n % 2 and is page k = n // 2 of the owner's own
pages and of the other CTA's peer pages. Per CTA:
  producer  per page in walk order. Own page k: wait own_empty of own stage k % OWN_STAGES (its previous page
            released), then the load (arm own_full, the bytes land later). Peer page k: wait peer_empty of peer
            stage k % PEER_STAGES, then (from the second use of the stage on) a remote arrival on the owner's
            slot_free of that index, then the load of the half content (arm peer_full, bytes later).
  softmax   per own page: wait own_full; arrive own_xchg (the local hand-off) and own_empty (its reads); wait
            slot_free (from the second use of the slot on); push the hand-off into the peer's slot (one landing on
            the peer's peer_xchg, later).
  pv        per page in walk order. Own: wait own_xchg, arrive own_empty. Peer: arm peer_xchg (arrive.expect_tx),
            wait peer_full and peer_xchg, arrive peer_empty.
Counts: own_full 2 (arm + bytes), own_empty 2 (softmax, pv), own_xchg 1, peer_full 2, peer_empty 1, peer_xchg 2
(arm + push), slot_free 1.

broken (the model's own check): "push_skips_slot_free" (the softmax pushes without waiting for its peer to free the
slot: a hand-off lands on one the peer's PV has not consumed, reported as a race); "arm_after_wait" (the PV arms
peer_xchg only after waiting on it: the phase needs that arrival, so the wait never passes).
"""

from __future__ import annotations

from typing import Optional

from utils.decode_protocol import Agent, Barrier, run_agents

OWN_STAGES = 3
PEER_STAGES = 3


class E2Cluster:
    def __init__(self, pages: int, broken: Optional[str] = None, own_stages: int = OWN_STAGES,
                 peer_stages: int = PEER_STAGES):
        self.pages, self.broken, self.os, self.ps = pages, broken, own_stages, peer_stages
        b = Barrier
        self.own_full = [[b(f"cta{c}.own_full{i}", 2) for i in range(own_stages)] for c in range(2)]
        self.own_empty = [[b(f"cta{c}.own_empty{i}", 2) for i in range(own_stages)] for c in range(2)]
        self.own_xchg = [[b(f"cta{c}.own_xchg{i}", 1) for i in range(own_stages)] for c in range(2)]
        self.peer_full = [[b(f"cta{c}.peer_full{i}", 2) for i in range(peer_stages)] for c in range(2)]
        self.peer_empty = [[b(f"cta{c}.peer_empty{i}", 1) for i in range(peer_stages)] for c in range(2)]
        self.peer_xchg = [[b(f"cta{c}.peer_xchg{i}", 2) for i in range(peer_stages)] for c in range(2)]
        self.slot_free = [[b(f"cta{c}.slot_free{i}", 1) for i in range(peer_stages)] for c in range(2)]
        self.race: Optional[str] = None

    def producer(self, c: int) -> Agent:
        for n in range(self.pages):
            k = n // 2
            if n % 2 == c:
                st, use = k % self.os, k // self.os
                if use > 0:
                    yield ("wait", self.own_empty[c][st], (use - 1) & 1)
                yield ("tma", self.own_full[c][st])
            else:
                st, use = k % self.ps, k // self.ps
                if use > 0:
                    yield ("wait", self.peer_empty[c][st], (use - 1) & 1)
                    yield ("arrive", self.slot_free[1 - c][st], 1)
                yield ("tma", self.peer_full[c][st])

    def softmax(self, c: int) -> Agent:
        for n in range(c, self.pages, 2):
            k = n // 2
            st, use = k % self.os, k // self.os
            yield ("wait", self.own_full[c][st], use & 1)
            yield ("arrive", self.own_xchg[c][st], 1)
            yield ("arrive", self.own_empty[c][st], 1)
            slot, slot_use = k % self.ps, k // self.ps
            if slot_use > 0 and self.broken != "push_skips_slot_free":
                yield ("wait", self.slot_free[c][slot], (slot_use - 1) & 1)
            # The peer's PV has consumed the slot's previous hand-off once it released that peer stage: its
            # peer_empty completed slot_use phases.
            if self.peer_empty[1 - c][slot].completed < slot_use and self.race is None:
                self.race = f"cta{c} pushed the hand-off of page {n} over one cta{1 - c} had not consumed"
            yield ("land", [self.peer_xchg[1 - c][slot]])

    def pv(self, c: int) -> Agent:
        for n in range(self.pages):
            k = n // 2
            if n % 2 == c:
                st, use = k % self.os, k // self.os
                yield ("wait", self.own_xchg[c][st], use & 1)
                yield ("arrive", self.own_empty[c][st], 1)
            else:
                st, use = k % self.ps, k // self.ps
                if self.broken != "arm_after_wait":
                    yield ("arrive", self.peer_xchg[c][st], 1)  # arrive.expect_tx
                yield ("wait", self.peer_full[c][st], use & 1)
                yield ("wait", self.peer_xchg[c][st], use & 1)
                if self.broken == "arm_after_wait":
                    yield ("arrive", self.peer_xchg[c][st], 1)
                yield ("arrive", self.peer_empty[c][st], 1)

    def barriers(self):
        for group in (self.own_full, self.own_empty, self.own_xchg, self.peer_full, self.peer_empty, self.peer_xchg,
                      self.slot_free):
            for per_cta in group:
                yield from per_cta


def simulate_e2(pages: int, seed: int, broken: Optional[str] = None, land_p: float = 0.3) -> Optional[str]:
    """None when both CTAs finish the walk with every started phase completed, else the deadlock or the race."""
    cl = E2Cluster(pages, broken)
    agents = {}
    for c in range(2):
        agents.update({f"cta{c}.producer": cl.producer(c), f"cta{c}.softmax": cl.softmax(c), f"cta{c}.pv": cl.pv(c)})
    result = run_agents(agents, seed, land_p=land_p)
    if result or cl.race:
        return result or cl.race
    for bar in cl.barriers():
        if bar.pending != bar.count:
            return f"unbalanced: {bar.name} has {bar.count - bar.pending} of {bar.count} arrivals of a phase"
    return None
