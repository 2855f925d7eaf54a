"""Benchmark of the fused quantization kernels: Fused-Q-Quant, Fused-K-Append, Fused-Fetch-Dequant (slots, paged).

Question: how close to the GPU's streaming roofline do they run? Each line gives us per call, the op's minimum
traffic (bytes read + written), GB/s and % of a device-to-device copy measured in the same run.
Bytes per token: append 1152 read + 644 written + slot; fetch 644 read + slot + 1152 written; Q-quant per row
1152 read + 644 written. Cache ops run with L2 flushed (data >> L2 anyway); Q-quant also with q hot in L2.

    python3 bench/bench_quant.py [--out DIR] [--quick]
JSON goes to bench/results/ and to --out.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import harness as H  # noqa: E402
from snapmla_ext import layout as L  # noqa: E402
from snapmla_ext._ext import load_ops  # noqa: E402
from snapmla_ext.cache import SnapMLAKVCache  # noqa: E402
from tests.utils.data import make_q  # noqa: E402

ROW_BYTES_BF16 = L.D_QK * 2  # 1152


def kv_rows(n: int, seed: int) -> torch.Tensor:
    """(n, 576) bf16 ~ N(0, 0.1^2) drawn on the GPU (the CPU generators of tests/utils are slow at 4M rows)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(n, L.D_QK, device="cuda", generator=gen) * 0.1).to(torch.bfloat16)


def bench_q_quant(ops, ceiling: float) -> list[H.Result]:
    out = []
    for b, s_q, h_q in [(128, 1, 128), (64, 1, 128), (128, 2, 128), (128, 1, 16), (1, 1, 128), (512, 1, 128)]:
        q = make_q(b, s_q, h_q, seed=1, device="cuda")
        rows = b * s_q * h_q
        nbytes = rows * (ROW_BYTES_BF16 + L.TOKEN_BYTES)
        params = {"b": b, "s_q": s_q, "h_q": h_q}
        for l2 in ("hot", "cold"):
            out.append(H.measure(f"q_quant b={b} s_q={s_q} h_q={h_q}", lambda: ops.quantize_q(q), nbytes, l2=l2,
                                 ceiling_gbps=ceiling, params=params))
            H.print_result(out[-1])
        del q
    return out


def bench_cache_ops(ops, ceiling: float, sizes: list[int]) -> list[H.Result]:
    out = []
    for n in sizes:
        num_blocks = -(-n // L.PAGE_BLOCK_SIZE)
        cache = SnapMLAKVCache(num_blocks, device="cuda")
        kv = kv_rows(n, seed=2)
        gen = torch.Generator(device="cuda").manual_seed(3)
        for order in ("sequential", "random_pages"):
            if order == "sequential":
                slots = torch.arange(n, device="cuda", dtype=torch.int64)
            else:  # whole pages in random order, tokens in order inside a page (a paged allocator's pattern)
                perm = torch.randperm(num_blocks, device="cuda", generator=gen)
                tok = torch.arange(n, device="cuda")
                slots = perm[tok // L.PAGE_BLOCK_SIZE] * L.PAGE_BLOCK_SIZE + tok % L.PAGE_BLOCK_SIZE
            params = {"n": n, "slots": order, "slot_dtype": "int64"}
            r = H.measure(f"append_kv n={n} {order}", lambda: ops.append_kv(cache.data, kv, slots),
                          n * (ROW_BYTES_BF16 + L.TOKEN_BYTES + 8), ceiling_gbps=ceiling, params=params)
            out.append(r); H.print_result(r)
            r = H.measure(f"fetch_dequant_slots n={n} {order}", lambda: ops.fetch_dequant_slots(cache.data, slots),
                          n * (L.TOKEN_BYTES + 8 + ROW_BYTES_BF16), ceiling_gbps=ceiling, params=params)
            out.append(r); H.print_result(r)
        del kv, slots
        for seqlen in (4096, 32768):
            b = n // seqlen
            perm = torch.randperm(num_blocks, device="cuda", generator=gen).to(torch.int32)
            block_table = perm[: b * (seqlen // L.PAGE_BLOCK_SIZE)].view(b, -1).contiguous()
            seqlens = torch.full((b,), seqlen, dtype=torch.int32, device="cuda")
            tokens = b * seqlen
            params = {"num_tokens": tokens, "b": b, "seqlen": seqlen}
            r = H.measure(f"fetch_dequant_paged n={tokens} b={b}",
                          lambda: ops.fetch_dequant_paged(cache.data, block_table, seqlens, tokens),
                          tokens * (L.TOKEN_BYTES + ROW_BYTES_BF16), ceiling_gbps=ceiling, params=params)
            out.append(r); H.print_result(r)
        del cache
        torch.cuda.empty_cache()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="also write the JSON into this directory")
    ap.add_argument("--quick", action="store_true", help="n = 1M only")
    args = ap.parse_args()
    ops = load_ops()
    ceiling = H.copy_ceiling_gbps()
    print(f"device: {torch.cuda.get_device_name(0)}; copy ceiling (1 GiB D2D, read + write): {ceiling:.1f} GB/s")
    H.print_header()
    results = bench_cache_ops(ops, ceiling, [1 << 20] if args.quick else [1 << 20, 1 << 22])
    results += bench_q_quant(ops, ceiling)
    dirs = [H.RESULTS_DIR] + ([args.out] if args.out else [])
    for p in H.write_json("bench_quant", results, {"copy_ceiling_gbps": ceiling}, dirs):
        print("wrote", p)


if __name__ == "__main__":
    main()
