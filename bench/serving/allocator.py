"""Pages, the request stream and continuous batching of bench/bench_serving.py (host side, plus one device helper).

- `request_stream(seed, context, output_tokens)`: an endless, seeded stream of requests. Every side of the
  benchmark draws its own copy of the same stream, so both caches serve the same requests in the same order.
- `PagePool`: the page ids of one layer's cache. Every layer has a cache of the same page count and one block
  table serves them all, as in an engine, so one pool stands for all layers. Page 0 is the scratch page that
  padding rows of a padded batch point at; it is never handed out.
- `Batcher`: first-come first-served admission while pages are free, retirement, refill. A request reserves the
  pages of its prompt plus its whole output when it is admitted (no preemption, no growth failures mid-request;
  the memory of the tokens not yet generated is idle, as in an engine that reserves ahead). Requests occupy rows
  0 .. n-1 of the batch; a retired row is filled by the last row (swap-remove), so the batch stays dense and the
  device block table changes by a few row operations per step (`take_row_ops`, `apply_row_ops`).
- `step_tokens`: the positions and cache slots of a step's new tokens, computed on the device from the lengths and
  the block table (inside the step's CUDA graph), -1 for padding rows.

MTP (s_q > 1): a step verifies 1 token + (s_q - 1) draft tokens per request and writes s_q KV rows at positions
len .. len + s_q - 1. Drafts are accepted in order, each with probability `accept_p`, drawn from a per-request
generator (the same draws on every side). The cache length advances by the accepted count; a rejected draft's row
is overwritten by the next step, as in an engine. Only accepted tokens count as generated.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Iterator, Optional

import torch

PAGE_BLOCK_SIZE = 64  # tokens per page (snapmla_ext.cache.PAGE_BLOCK_SIZE; FlashMLA BF16 uses the same)
SCRATCH_PAGE = 0  # padding rows read (and the BF16 side's padding writes land in) this page
CONTEXT_SPREAD = (0.75, 1.25)  # prompt length ~ uniform in this range x the target context
OUTPUT_SPREAD = (0.5, 1.5)  # output length ~ uniform in this range x --output-tokens


def pages_for(tokens: int) -> int:
    return -(-int(tokens) // PAGE_BLOCK_SIZE)


@dataclass(frozen=True)
class Request:
    rid: int  # position in the stream, 0, 1, ...
    prompt_len: int  # tokens already in the cache at admission (prefill is not timed)
    output_len: int  # tokens to generate
    warm_progress: int  # tokens already generated when admitted into the very first batch (steady state at t=0)


def request_stream(seed: int, context: int, output_tokens: int) -> Iterator[Request]:
    """Requests with prompts uniform in CONTEXT_SPREAD x context and outputs uniform in OUTPUT_SPREAD x
    output_tokens, rounded. warm_progress is uniform in [0, output_len): the requests of the first batch start
    part-way through their outputs, as in a server that has been running, so they retire at staggered times
    instead of all together after ~output_tokens steps."""
    rng = random.Random(f"stream:{seed}:{context}:{output_tokens}")
    rid = 0
    while True:
        prompt = max(1, round(context * rng.uniform(*CONTEXT_SPREAD)))
        output = max(1, round(output_tokens * rng.uniform(*OUTPUT_SPREAD)))
        yield Request(rid=rid, prompt_len=prompt, output_len=output, warm_progress=rng.randrange(output))
        rid += 1


def max_request_tokens(context: int, output_tokens: int, s_q: int) -> int:
    """An upper bound of the cache slots any request of request_stream(.., context, output_tokens) reserves."""
    prompt = math.ceil(context * CONTEXT_SPREAD[1]) + 1
    output = math.ceil(output_tokens * OUTPUT_SPREAD[1]) + 1
    return prompt + output + s_q - 1


def reserved_tokens(req: Request, s_q: int) -> int:
    """Slots a request can write: its last step starts at len = prompt + output - 1 and writes s_q rows."""
    return req.prompt_len + req.output_len + s_q - 1


class PagePool:
    """Page ids 1 .. num_pages - 1 of a cache with num_pages pages per layer (page 0: SCRATCH_PAGE).

    Pages are handed out and taken back last-in first-out, so after some churn a request's pages are scattered
    over the cache, as an engine's free list leaves them."""

    def __init__(self, num_pages: int):
        if num_pages < 2:
            raise ValueError(f"num_pages must be >= 2 (one scratch page + one usable page), got {num_pages}")
        self.num_pages = num_pages
        self._free = list(range(num_pages - 1, SCRATCH_PAGE, -1))  # pop() hands out 1, 2, 3, ... first
        self._used: set[int] = set()

    @property
    def capacity(self) -> int:
        return self.num_pages - 1

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return len(self._used)

    def alloc(self, n: int) -> Optional[list[int]]:
        """n distinct free pages, or None (and nothing taken) when fewer than n are free."""
        if n > len(self._free):
            return None
        pages = [self._free.pop() for _ in range(n)]
        self._used.update(pages)
        return pages

    def free(self, pages: list[int]) -> None:
        for p in pages:
            if p not in self._used:
                raise ValueError(f"page {p} is not allocated (freed twice, or never handed out)")
            self._used.remove(p)
        self._free.extend(reversed(pages))


@dataclass
class Running:
    req: Request
    pages: list[int]  # reserved at admission, in token order
    cached: int  # tokens in the cache before this step: prompt + accepted tokens so far
    generated: int  # accepted output tokens so far
    rng: random.Random = field(repr=False)  # MTP acceptance draws, seeded by the request id


class Batcher:
    """Continuous batching over a PagePool (admission, retirement, refill; see the module docstring).

    Per step: `seqlens()` gives the decode lengths of rows 0 .. n-1 (cached + s_q: the step's own tokens
    included), then `finish_step()` accounts the accepted tokens, retires finished requests and admits new ones,
    and `take_row_ops()` hands the block-table updates to apply before the next step."""

    def __init__(self, pool: PagePool, stream: Iterator[Request], *, max_batch: int, s_q: int = 1,
                 accept_p: float = 0.7, table_width: Optional[int] = None, seed: int = 0):
        if max_batch < 1 or s_q < 1 or not 0.0 <= accept_p <= 1.0:
            raise ValueError(f"need max_batch >= 1, s_q >= 1, 0 <= accept_p <= 1; got {max_batch}, {s_q}, {accept_p}")
        self.pool, self.stream = pool, stream
        self.max_batch, self.s_q, self.accept_p, self.seed = max_batch, s_q, accept_p, seed
        self.table_width = table_width
        self.rows: list[Running] = []
        self.admitted: list[int] = []  # rids in admission order
        self.retired: list[int] = []  # rids in retirement order
        self._row_ops: list[tuple] = []
        self._next: Optional[Request] = None
        self._started = False

    def _peek(self) -> Request:
        if self._next is None:
            self._next = next(self.stream)
        return self._next

    def admit(self) -> int:
        """Admit requests in stream order while a row and the pages for prompt + output are free; stops at the
        first request that does not fit (FCFS, no overtaking). Returns how many were admitted."""
        warm = not self._started
        self._started = True
        count = 0
        while len(self.rows) < self.max_batch:
            req = self._peek()
            need = pages_for(reserved_tokens(req, self.s_q))
            if need > self.pool.capacity or (self.table_width is not None and need > self.table_width):
                raise ValueError(
                    f"request {req.rid} needs {need} pages ({reserved_tokens(req, self.s_q)} tokens), more than the "
                    f"cache holds ({self.pool.capacity} pages) or the block table is wide ({self.table_width}): "
                    "raise --kv-gib or lower --contexts")
            pages = self.pool.alloc(need)
            if pages is None:
                break
            self._next = None
            done = req.warm_progress if warm else 0
            rng = random.Random(f"accept:{self.seed}:{req.rid}")
            self._row_ops.append(("set", len(self.rows), pages))
            self.rows.append(Running(req, pages, cached=req.prompt_len + done, generated=done, rng=rng))
            self.admitted.append(req.rid)
            count += 1
        return count

    def seqlens(self) -> list[int]:
        """Decode lengths of rows 0 .. n-1 for this step: the cached tokens plus the step's s_q new ones."""
        return [r.cached + self.s_q for r in self.rows]

    def _accepted(self, r: Running) -> int:
        k = 1
        for _ in range(self.s_q - 1):  # drafts are accepted in order until the first rejection
            if r.rng.random() >= self.accept_p:
                break
            k += 1
        return min(k, r.req.output_len - r.generated)

    def finish_step(self) -> int:
        """Account one decode step of every row; retire finished requests, refill. Returns the accepted tokens."""
        tokens, done = 0, []
        for i, r in enumerate(self.rows):
            k = self._accepted(r)
            r.generated += k
            r.cached += k
            tokens += k
            if r.generated >= r.req.output_len:
                done.append(i)
        for i in reversed(done):  # descending: a row that moves down is never one still to be retired
            self._retire(i)
        self.admit()
        return tokens

    def _retire(self, i: int) -> None:
        last = len(self.rows) - 1
        r = self.rows[i]
        self.pool.free(r.pages)
        self.retired.append(r.req.rid)
        if i != last:
            self.rows[i] = self.rows[last]
            self._row_ops.append(("move", last, i))
        self.rows.pop()
        self._row_ops.append(("clear", last))

    def take_row_ops(self) -> list[tuple]:
        """Block-table updates since the last call, in order: ("set", row, pages), ("move", src, dst), ("clear",
        row)."""
        ops, self._row_ops = self._row_ops, []
        return ops

    def reserved_pages(self) -> int:
        return sum(len(r.pages) for r in self.rows)


def apply_row_ops(block_table: torch.Tensor, ops: list[tuple]) -> None:
    """Apply Batcher row operations to a (max_batch, width) int32 block table on any device, in place. Entries past
    a request's pages and cleared rows hold SCRATCH_PAGE, so a padding row (length s_q) reads the scratch page."""
    width = block_table.shape[1]
    for op in ops:
        if op[0] == "set":
            _, row, pages = op
            host = torch.full((width,), SCRATCH_PAGE, dtype=torch.int32)
            host[: len(pages)] = torch.tensor(pages, dtype=torch.int32)
            block_table[row].copy_(host)
        elif op[0] == "move":
            _, src, dst = op
            block_table[dst].copy_(block_table[src])
        elif op[0] == "clear":
            block_table[op[1]].fill_(SCRATCH_PAGE)
        else:
            raise ValueError(f"unknown row operation {op[0]!r}")


def step_tokens(seqlens: torch.Tensor, active: torch.Tensor, block_table: torch.Tensor,
                s_q: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions and slots of a step's new tokens, on seqlens' device with no host sync (capturable).

    seqlens (b,) int32 decode lengths (the step's tokens included), active (b,) bool (False: padding row),
    block_table (b, width) int32. Returns positions (b * s_q,) int64 (token j of row i at seqlens[i] - s_q + j) and
    slots (b * s_q,) int64 = page * 64 + offset, -1 for padding rows (the KV write skips them)."""
    offsets = torch.arange(s_q, device=seqlens.device)
    pos = seqlens.long()[:, None] - s_q + offsets  # (b, s_q)
    pos = pos.clamp(min=0)
    page = block_table.gather(1, pos // PAGE_BLOCK_SIZE).long()  # (b, s_q)
    slots = torch.where(active[:, None], page * PAGE_BLOCK_SIZE + pos % PAGE_BLOCK_SIZE, -1)
    return pos.reshape(-1), slots.reshape(-1)
