"""How many requests fit a KV budget: BF16 cache (1152 B/token) against the SnapMLA FP8 cache (644 B/token).

Pure arithmetic (no GPU), the same page rounding as the benchmark's allocator: the budget is split evenly over
`layers` per-layer caches of whole 64-token pages, and a request of `context` tokens takes ceil(context / 64)
pages in every layer. `reserved_pages` pages per layer are kept back (the benchmark keeps one scratch page).
"""

from __future__ import annotations

from snapmla_ext.cache import PAGE_BLOCK_SIZE, TOKEN_BYTES
from snapmla_ext.layout import BF16_TOKEN_BYTES

FP8_TOKEN_BYTES = TOKEN_BYTES  # 644
CONTEXTS = (4096, 8192, 16384, 32768, 65536, 131072)


def pages_per_layer(budget_bytes: int, layers: int, token_bytes: int) -> int:
    """Whole pages of one layer's cache when budget_bytes is shared by `layers` equal caches."""
    if layers < 1 or token_bytes < 1 or budget_bytes < 0:
        raise ValueError(f"need layers >= 1, token_bytes >= 1, budget_bytes >= 0; got {layers}, {token_bytes}, "
                         f"{budget_bytes}")
    return int(budget_bytes) // (layers * token_bytes * PAGE_BLOCK_SIZE)


def requests_that_fit(budget_bytes: int, layers: int, token_bytes: int, context: int, reserved_pages: int = 0) -> int:
    """Concurrent requests of `context` cached tokens each (whole pages per request) that fit the budget."""
    pages = pages_per_layer(budget_bytes, layers, token_bytes) - reserved_pages
    per_request = -(-int(context) // PAGE_BLOCK_SIZE)
    return max(pages, 0) // per_request


def capacity_table(budget_bytes: int, layers: int, contexts=CONTEXTS, reserved_pages: int = 0) -> list[dict]:
    """One row per context length: requests that fit with the BF16 and with the FP8 cache, and their ratio."""
    rows = []
    for context in contexts:
        bf16 = requests_that_fit(budget_bytes, layers, BF16_TOKEN_BYTES, context, reserved_pages)
        fp8 = requests_that_fit(budget_bytes, layers, FP8_TOKEN_BYTES, context, reserved_pages)
        rows.append(dict(
            context=int(context), bf16_requests=bf16, fp8_requests=fp8, ratio=(fp8 / bf16) if bf16 else None,
            bf16_pages_per_layer=pages_per_layer(budget_bytes, layers, BF16_TOKEN_BYTES) - reserved_pages,
            fp8_pages_per_layer=pages_per_layer(budget_bytes, layers, FP8_TOKEN_BYTES) - reserved_pages,
        ))
    return rows


def format_capacity_table(rows: list[dict], budget_bytes: int, layers: int) -> str:
    lines = [f"capacity: {budget_bytes / 2**30:.4g} GiB of KV over {layers} layers "
             f"({rows[0]['bf16_pages_per_layer'] if rows else 0} BF16 / {rows[0]['fp8_pages_per_layer'] if rows else 0} "
             f"FP8 pages of {PAGE_BLOCK_SIZE} tokens per layer)",
             f"{'context':>9} {'BF16 reqs':>10} {'FP8 reqs':>9} {'ratio':>6}"]
    for r in rows:
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "-"
        lines.append(f"{r['context']:>9} {r['bf16_requests']:>10} {r['fp8_requests']:>9} {ratio:>6}")
    return "\n".join(lines)
