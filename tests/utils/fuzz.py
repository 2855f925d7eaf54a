"""Random decode problems for the fuzz sweeps (tests/test_fuzz_gpu.py, tests/test_fuzz_host.py).

A configuration is drawn from one integer seed (draw_config), so a failure is replayed from the seed alone; the
data is drawn on the device the problem runs on from the same seed (build_case). Sizes are capped so that the
two references (the emulation and float64 attention over padded (b, n_max) tensors) stay within a few GB and
well under a second per problem on an H200:
- at most TOKEN_BUDGET tokens in b * n_max (the references pad every request to the longest);
- at most ELEMENT_BUDGET logits in b * s_q * h_q * n_max.
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Optional

import torch

from snapmla_ext import layout as L
from snapmla_ext.cache import SnapMLAKVCache

MAX_B, MAX_S_Q, MAX_H_Q, MAX_SEQLEN = 300, 8, 128, 70_000
TOKEN_BUDGET = 1 << 20
ELEMENT_BUDGET = 1 << 27
PAGE_EDGES = (1, 63, 64, 65, 127, 128, 129)
SENTINELS = (2147480000, -1, "num_blocks")  # block ids past a request's pages: never to be read
APIS = ("ops", "flash_mla_2026", "flash_mla_2025")
SPARE_BLOCKS = 3  # pages no request uses (they stay NaN)


@dataclasses.dataclass(frozen=True)
class FuzzConfig:
    seed: int
    b: int
    s_q: int
    h_q: int
    seqlens: tuple
    causal: bool
    num_sm_parts: Optional[int]  # None: the default
    sentinel: object  # an int, or "num_blocks" (the first id past the cache)
    shared_pages: bool  # a request's first pages are another request's (prefix sharing)
    quantized_q: bool  # the caller passes a QuantizedQ instead of the BF16 q
    api: str  # APIS
    kernel: str  # the decode-kernel override: auto, narrow, wide or ws
    table_slack: int  # block-table columns past the longest request's pages

    @property
    def q_rows(self) -> int:
        return self.s_q * self.h_q

    def short(self) -> str:
        return (f"b{self.b}-sq{self.s_q}-h{self.h_q}-max{max(self.seqlens)}-{'causal' if self.causal else 'full'}"
                f"-parts{self.num_sm_parts}-{self.api}-{self.kernel}")


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return min(hi, max(lo, int(math.exp(rng.uniform(math.log(lo), math.log(hi + 1))))))


def draw_config(seed: int) -> FuzzConfig:
    rng = random.Random(seed)
    b = rng.choice((1, 2, 3, 4, 16, 64, 128, 300)) if rng.random() < 0.4 else _log_uniform(rng, 1, MAX_B)
    s_q = rng.choice((1, 1, 1, 2, 2, 3, 4, 5, 8))
    h_q = rng.choice((16, 64, 128, 32)) if rng.random() < 0.5 else rng.randint(1, MAX_H_Q)
    n_cap = min(MAX_SEQLEN, TOKEN_BUDGET // b, ELEMENT_BUDGET // (b * s_q * h_q))
    n_max = _log_uniform(rng, 1, max(1, n_cap))
    seqlens = []
    for _ in range(b):
        r = rng.random()
        if r < 0.08:
            n = 0
        elif r < 0.25:
            n = min(rng.choice(PAGE_EDGES), n_cap)
        else:
            n = rng.randint(0, n_max)
        seqlens.append(n)
    causal = rng.random() < 0.5
    if causal:
        # A causal length whose last page holds no visible token for some query row (n > 64, n % 64 in [1, s_q))
        # moves past it: the emulation overflows there (docs/numerics_contract.md section 4);
        # tests/test_decode_gpu.py test_causal_empty_last_block_stays_finite covers the kernel on it.
        seqlens = [n + s_q if n > 64 and 0 < n % 64 < s_q else n for n in seqlens]
    num_sm_parts = rng.choice((None, None, 1, rng.randint(1, 400)))
    rows = s_q * h_q
    kernels = ["auto", "auto", "wide"] + (["narrow"] if rows <= 16 else ["ws"])
    return FuzzConfig(
        seed=seed, b=b, s_q=s_q, h_q=h_q, seqlens=tuple(seqlens), causal=causal, num_sm_parts=num_sm_parts,
        sentinel=rng.choice(SENTINELS), shared_pages=b >= 2 and rng.random() < 0.3,
        quantized_q=rng.random() < 0.3, api=rng.choice(APIS), kernel=rng.choice(kernels),
        table_slack=rng.randint(1, 3),
    )


@dataclasses.dataclass
class FuzzCase:
    """q (b, s_q, h_q, 576) bf16; cache (NaN bytes in every slot no token was written to); block_table
    (b, max_pages + slack) int32 with the sentinel past each request's pages; cache_seqlens (b,) int32."""

    q: torch.Tensor
    cache: SnapMLAKVCache
    block_table: torch.Tensor
    cache_seqlens: torch.Tensor


def build_case(cfg: FuzzConfig, device, append) -> FuzzCase:
    """The problem of cfg on `device`; `append(cache_data, kv (n, 576), slots (n,))` writes the cache (the kernel
    on CUDA, the reference on the CPU). The tokens go in in random order, with skipped rows (slot -1) among them."""
    rng = random.Random(cfg.seed ^ 0x5EED)
    cpu_gen = torch.Generator().manual_seed(cfg.seed)
    pages = [math.ceil(n / L.PAGE_BLOCK_SIZE) for n in cfg.seqlens]
    total_pages = sum(pages)
    num_blocks = total_pages + SPARE_BLOCKS
    sentinel = num_blocks if cfg.sentinel == "num_blocks" else cfg.sentinel
    order = torch.randperm(num_blocks, generator=cpu_gen)[:total_pages].to(torch.int32)
    own = torch.full((cfg.b, max(pages) + cfg.table_slack), sentinel, dtype=torch.int32)
    start = 0
    for r, n in enumerate(pages):
        own[r, :n] = order[start : start + n]
        start += n

    # Every token of every request goes into its own pages; sharing below only changes what the table reads.
    lengths = torch.tensor(cfg.seqlens, dtype=torch.int64)
    req = torch.repeat_interleave(torch.arange(cfg.b), lengths)
    token = torch.arange(int(lengths.sum())) - torch.repeat_interleave(torch.cumsum(lengths, 0) - lengths, lengths)
    slots = own[req, token // L.PAGE_BLOCK_SIZE].long() * L.PAGE_BLOCK_SIZE + token % L.PAGE_BLOCK_SIZE
    n_skip = rng.randint(0, 8)
    slots = torch.cat([slots, torch.full((n_skip,), -1, dtype=torch.int64)])
    slots = slots[torch.randperm(slots.numel(), generator=cpu_gen)]

    table = own.clone()
    if cfg.shared_pages:
        # Only full pages are shared (a prefix cache shares whole pages): a partly written page would hand the
        # other request NaN slots as tokens.
        full = [r for r, n in enumerate(cfg.seqlens) if n >= L.PAGE_BLOCK_SIZE]
        readers = [r for r, n in enumerate(pages) if n > 0]
        if full and len(readers) >= 2:
            src = rng.choice(full)
            dst = rng.choice([r for r in readers if r != src])
            k = rng.randint(1, min(cfg.seqlens[src] // L.PAGE_BLOCK_SIZE, pages[dst]))
            table[dst, :k] = own[src, :k]

    dev_gen = torch.Generator(device=device).manual_seed(cfg.seed)
    kv = (torch.randn((slots.numel(), L.D_QK), generator=dev_gen, device=device) * 0.1).clamp_(-1, 1)
    kv = kv.to(torch.bfloat16)
    cache = SnapMLAKVCache(num_blocks, device=device)
    append(cache.data, kv, slots.to(device))
    q = (torch.randn((cfg.b, cfg.s_q, cfg.h_q, L.D_QK), generator=dev_gen, device=device) * 0.1).clamp_(-1, 1)
    return FuzzCase(q=q.to(torch.bfloat16), cache=cache, block_table=table.to(device),
                    cache_seqlens=lengths.to(torch.int32).to(device))
