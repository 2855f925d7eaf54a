"""The main job: build a paged FP8 cache, append tokens, decode, and compare with float64 attention.

    python -m snapmla_ext.demo [--b 4] [--s-q 1] [--h-q 16] [--s-k 1000] [--cpu]

On a Hopper GPU with the compiled extension it runs the kernels (Fused-K-Append, Fused-Q-Quant, the FP8 decode
kernel) and checks them against the exact emulation; anywhere else it runs the pure-PyTorch reference on small
shapes and says so.
"""

import argparse
import time

import torch

import snapmla_ext
from snapmla_ext import layout as L
from snapmla_ext import reference as ref


def _inputs(b, s_q, h_q, s_k, device, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    seqlens = torch.randint(max(1, s_k // 2), s_k + 1, (b,), generator=g, dtype=torch.int32)
    pages_per_req = (s_k + L.PAGE_BLOCK_SIZE - 1) // L.PAGE_BLOCK_SIZE
    num_blocks = b * pages_per_req + 1
    # Pages in random order, as an engine's block allocator hands them out.
    block_table = torch.randperm(num_blocks, generator=g)[: b * pages_per_req].view(b, pages_per_req).int()
    kv = (torch.randn(b, pages_per_req * L.PAGE_BLOCK_SIZE, L.D_QK, generator=g) * 0.1).clamp(-1, 1)
    q = (torch.randn(b, s_q, h_q, L.D_QK, generator=g) * 0.1).clamp(-1, 1)
    slots = (block_table.long()[:, :, None] * L.PAGE_BLOCK_SIZE + torch.arange(L.PAGE_BLOCK_SIZE)).view(b, -1)
    keep = torch.arange(slots.shape[1])[None, :] < seqlens[:, None].long()
    slots = torch.where(keep, slots, torch.full_like(slots, -1))  # -1: padding, skipped by append
    to = dict(device=device)
    return (q.bfloat16().to(**to), kv.bfloat16().to(**to), seqlens.to(**to), block_table.to(**to),
            slots.to(**to), num_blocks)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--b", type=int, default=4)
    p.add_argument("--s-q", type=int, default=1)
    p.add_argument("--h-q", type=int, default=16)
    p.add_argument("--s-k", type=int, default=1000)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--cpu", action="store_true", help="force the reference path")
    a = p.parse_args(argv)

    on_gpu = (not a.cpu) and torch.cuda.is_available() and snapmla_ext.extension_available()
    device = "cuda" if on_gpu else "cpu"
    if not on_gpu:
        why = "forced by --cpu" if a.cpu else (
            "no CUDA GPU" if not torch.cuda.is_available() else "the compiled extension is not importable")
        print(f"[snapmla] running the pure-PyTorch REFERENCE path on the CPU ({why}); the kernels are not used")
        a.b, a.s_k = min(a.b, 4), min(a.s_k, 2048)
    q, kv, seqlens, block_table, slots, num_blocks = _inputs(a.b, a.s_q, a.h_q, a.s_k, device)
    cache = snapmla_ext.SnapMLAKVCache(num_blocks, device=device)
    print(f"[snapmla] b={a.b} s_q={a.s_q} h_q={a.h_q} s_k<={a.s_k} causal={a.causal}: cache {cache.num_blocks} pages x "
          f"{L.PAGE_BYTES} B ({L.TOKEN_BYTES} B/token vs {L.BF16_TOKEN_BYTES} B in BF16)")

    t0 = time.perf_counter()
    if on_gpu:
        from snapmla_ext import ops

        ops.append_kv(cache, kv.flatten(0, 1), slots.flatten())
        meta, splits = ops.get_mla_metadata(seqlens, a.s_q * a.h_q, 1)
        out, lse = ops.flash_mla_with_kvcache(q, cache, block_table, seqlens, L.D_CONTENT, meta, splits,
                                              causal=a.causal)
        torch.cuda.synchronize()
        emu_out, emu_lse = ref.decode(q, cache, block_table, seqlens, causal=a.causal)
        err = (out.double() - emu_out.double()).norm() / emu_out.double().norm()
        print(f"[snapmla] kernel vs exact emulation: rel L2 {err.item():.2e} (tolerance 3e-3)")
    else:
        ref.append_kv(cache.data, kv.flatten(0, 1), slots.flatten())
        out, lse = ref.decode(q, cache, block_table, seqlens, causal=a.causal)
    elapsed = time.perf_counter() - t0

    exact_out, _ = ref.attention_fp64(q, kv, seqlens, causal=a.causal)
    err64 = (out.double() - exact_out).norm() / exact_out.norm()
    print(f"[snapmla] out {tuple(out.shape)} {out.dtype}, lse {tuple(lse.shape)}; {elapsed * 1e3:.1f} ms "
          f"({'kernels' if on_gpu else 'reference'})")
    print(f"[snapmla] vs float64 attention on the BF16 inputs: rel L2 {err64.item():.2e} "
          "(FP8 error; the numerics contract expects about 3.7e-2 on this data)")


if __name__ == "__main__":
    main()
