"""The same-process peers of bench/bench_decode.py: other MLA decode kernels, each called the way its engine calls
it, on its own cache filled with random data of the same shapes as ours.

| peer           | cache                                          | call                                                      |
| -------------- | ---------------------------------------------- | --------------------------------------------------------- |
| flashmla_bf16  | (num_blocks, 64, 1, 576) bf16                  | flash_mla.get_mla_metadata once, flash_mla_with_kvcache   |
| fa3_bf16       | the same BF16 cache, as two views              | flash_attn_interface.flash_attn_with_kvcache as vLLM's FLASH_ATTN_MLA backend: q = q_pe (64 dims), qv = the latent part (512), k = the RoPE slice, v = the latent slice, page table, scheduler metadata precomputed by get_scheduler_metadata |
| vllm_fp8       | (num_blocks, 64, 1, 576) e4m3, one scale per tensor | vLLM's FlashMLA fork, sm90 dense FP8 kernel: get_mla_decoding_metadata_dense_fp8 once, fwd_kvcache_mla_fp8 with q pre-quantized to e4m3 with one scale (outside the timed call), descale_q / descale_k of shape (1,) |

Each is imported only when present (they are built on the GPU machine from their public sources, never
committed; docs/development.md). `available_peers()` tries each import and one small call and returns the peers
that ran, with the reasons of those that did not. A peer's `prepare(x)` allocates its cache and returns the call
to time; the cache lives as long as the returned callable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from snapmla_ext import layout as L

SOFTMAX_SCALE = L.D_QK**-0.5  # ours by default; every peer gets the same (FA3's default would be 64 ** -0.5)


@dataclass(frozen=True)
class PeerInputs:
    """One case's inputs, shared by ours and every peer.

    q (b, s_q, h_q, 576) bf16 CUDA; block_table (b, max_pages) int32 CUDA; seqlens (b,) int32 CUDA and its CPU
    copy; num_blocks: the pages the table uses (ids 0 .. num_blocks - 1)."""

    q: torch.Tensor
    block_table: torch.Tensor
    seqlens: torch.Tensor
    seqlens_cpu: torch.Tensor
    num_blocks: int
    causal: bool = False


@dataclass(frozen=True)
class Peer:
    """name: JSON key; label: printed; precision: "bf16" or "fp8" (the goals compare with the faster BF16 peer);
    prepare(x) -> the call to time (owns its cache); note: how it is called, for the JSON."""

    name: str
    label: str
    precision: str
    prepare: Callable[[PeerInputs], Callable[[], object]]
    note: str = ""


def _bf16_cache(num_blocks: int, device) -> torch.Tensor:
    """(num_blocks, 64, 1, 576) bf16, N(0, 0.1^2): FlashMLA's test data."""
    return torch.randn(num_blocks, L.PAGE_BLOCK_SIZE, 1, L.D_QK, device=device, dtype=torch.bfloat16).mul_(0.1)


def flashmla_peer(flash_mla) -> Peer:
    def prepare(x: PeerInputs):
        cache = _bf16_cache(x.num_blocks, x.q.device)
        s_q, h_q = x.q.shape[1], x.q.shape[2]
        meta = flash_mla.get_mla_metadata(x.seqlens, s_q * h_q, 1)
        # The 2025 API returns (metadata, num_splits) tensors, the 2026 one (sched_meta, None): both positional.
        return lambda: flash_mla.flash_mla_with_kvcache(x.q, cache, x.block_table, x.seqlens, L.D_CONTENT, meta[0],
                                                        meta[1], softmax_scale=SOFTMAX_SCALE, causal=x.causal)

    return Peer("flashmla_bf16", "FlashMLA BF16", "bf16", prepare, "get_mla_metadata once per case")


def _first_out(ret) -> torch.Tensor:
    """out of a call that returns out alone or (out, lse, ...)."""
    return ret[0] if isinstance(ret, (tuple, list)) else ret


def fa3_mla_call(flash_attn_with_kvcache, q: torch.Tensor, cache: torch.Tensor, block_table: torch.Tensor,
                 seqlens: torch.Tensor, softmax_scale: float, causal: bool, scheduler_metadata=None) -> torch.Tensor:
    """FlashAttention-3's MLA path as vLLM's FLASH_ATTN_MLA backend calls it, on a BF16 MLA cache.

    q (b, s_q, h_q, 576) bf16: q = its RoPE part (64), qv = its latent part (512); cache (num_blocks, 64, 1, 576)
    bf16: k = the RoPE slice, v = the latent slice (two views of one cache); block_table (b, width) int32, seqlens
    (b,) int32. Returns out (b, s_q, h_q, 512) bf16."""
    out = flash_attn_with_kvcache(q=q[..., L.D_CONTENT :], k_cache=cache[..., L.D_CONTENT :],
                                  v_cache=cache[..., : L.D_CONTENT], qv=q[..., : L.D_CONTENT], cache_seqlens=seqlens,
                                  page_table=block_table, softmax_scale=softmax_scale, causal=causal,
                                  scheduler_metadata=scheduler_metadata)
    return _first_out(out)


def fa3_peer(flash_attn_with_kvcache, get_scheduler_metadata: Optional[Callable]) -> Peer:
    def prepare(x: PeerInputs):
        cache = _bf16_cache(x.num_blocks, x.q.device)
        b, s_q, h_q = x.q.shape[:3]
        sched = None
        if get_scheduler_metadata is not None:
            sched = get_scheduler_metadata(
                batch_size=b, max_seqlen_q=s_q, max_seqlen_k=int(x.seqlens_cpu.max()), num_heads_q=h_q,
                num_heads_kv=1, headdim=L.D_ROPE, cache_seqlens=x.seqlens, qkv_dtype=torch.bfloat16,
                headdim_v=L.D_CONTENT, page_size=L.PAGE_BLOCK_SIZE, causal=x.causal,
            )
        return lambda: fa3_mla_call(flash_attn_with_kvcache, x.q, cache, x.block_table, x.seqlens, SOFTMAX_SCALE,
                                    x.causal, sched)

    note = "scheduler metadata precomputed" if get_scheduler_metadata else "no get_scheduler_metadata: planned per call"
    return Peer("fa3_bf16", "FA3 BF16", "bf16", prepare, note)


def vllm_fp8_peer(ops) -> Peer:
    """ops: a module (or torch.ops namespace) with vLLM's FlashMLA fork's get_mla_decoding_metadata_dense_fp8 and
    fwd_kvcache_mla_fp8. Its generic get_mla_metadata must not be used here: it plans in pages where this kernel
    reads token offsets."""

    def prepare(x: PeerInputs):
        b, s_q, h_q = x.q.shape[:3]
        fp8 = torch.float8_e4m3fn
        # Static per-tensor scales, as vLLM's calc_kv_scales computes them: amax / 448.
        latent = torch.randn(x.num_blocks, L.PAGE_BLOCK_SIZE, 1, L.D_QK, device=x.q.device).mul_(0.1)
        k_scale = (latent.abs().amax() / L.FP8_E4M3_MAX).reshape(1)
        cache = (latent / k_scale).clamp_(-L.FP8_E4M3_MAX, L.FP8_E4M3_MAX).to(fp8)
        del latent
        q_scale = (x.q.float().abs().amax() / L.FP8_E4M3_MAX).clamp_min(1e-12).reshape(1)
        q8 = (x.q.float() / q_scale).clamp_(-L.FP8_E4M3_MAX, L.FP8_E4M3_MAX).to(fp8).contiguous()
        meta, splits = ops.get_mla_decoding_metadata_dense_fp8(x.seqlens, s_q * h_q, 1)
        return lambda: ops.fwd_kvcache_mla_fp8(q8, cache, L.D_CONTENT, x.seqlens, x.block_table, SOFTMAX_SCALE,
                                               x.causal, meta, splits, q_scale, k_scale)

    return Peer("vllm_fp8", "vLLM FP8", "fp8", prepare, "per-tensor FP8, q quantized before the timed call")


def _probe_inputs(h_q: int = 16) -> PeerInputs:
    """Two pages, one request of 70 tokens, s_q 1."""
    seqlens_cpu = torch.tensor([70], dtype=torch.int32)
    return PeerInputs(q=torch.randn(1, 1, h_q, L.D_QK, device="cuda", dtype=torch.bfloat16),
                      block_table=torch.tensor([[0, 1]], dtype=torch.int32, device="cuda"),
                      seqlens=seqlens_cpu.cuda(), seqlens_cpu=seqlens_cpu, num_blocks=2)


def _tried(peer: Peer) -> Optional[str]:
    """None when one small call of the peer runs and returns out of the expected shape, else why not."""
    x = _probe_inputs()
    try:
        out = _first_out(peer.prepare(x)())
        torch.cuda.synchronize()
    except Exception as exc:  # a broken or mismatched build may raise anything
        return f"its first call failed: {type(exc).__name__}: {exc}"
    if tuple(out.shape) != (1, 1, x.q.shape[2], L.D_CONTENT):
        return f"its first call returned out of shape {tuple(out.shape)}"
    return None


def _import_flashmla() -> list[Peer]:
    import flash_mla

    return [flashmla_peer(flash_mla)]


def _import_fa3() -> list[Peer]:
    import flash_attn_interface as fa

    # With the scheduler metadata precomputed, as vLLM calls it; a build whose get_scheduler_metadata is missing
    # or takes other arguments still runs, planning inside each call (the note says which ran).
    variants = [fa3_peer(fa.flash_attn_with_kvcache, fa.get_scheduler_metadata)] if hasattr(
        fa, "get_scheduler_metadata") else []
    return variants + [fa3_peer(fa.flash_attn_with_kvcache, None)]


def _import_vllm_fp8() -> list[Peer]:
    """A standalone build of the fork's csrc/extension/sm90/dense_fp8 as the module `vllm_flashmla_fp8`
    (docs/development.md), else vLLM's own `_flashmla_extension_C` ops."""
    try:
        import vllm_flashmla_fp8 as ops
    except ImportError:
        import vllm._flashmla_extension_C  # noqa: F401  (registers torch.ops._flashmla_extension_C)

        ops = torch.ops._flashmla_extension_C
    return [vllm_fp8_peer(ops)]


# name -> a function that imports the peer and returns its variants, the preferred first.
PEER_IMPORTS: tuple[tuple[str, Callable[[], list[Peer]]], ...] = (
    ("flashmla_bf16", _import_flashmla),
    ("fa3_bf16", _import_fa3),
    ("vllm_fp8", _import_vllm_fp8),
)


def available_peers(names: Optional[list[str]] = None) -> tuple[list[Peer], dict[str, str]]:
    """(the peers that import and run here, {name: why not} for the others). names: only these (default all).
    Of a peer's variants the first that runs is taken."""
    peers, missing = [], {}
    for name, make in PEER_IMPORTS:
        if names is not None and name not in names:
            continue
        try:
            variants = make()
        except Exception as exc:  # ImportError, or a broken build raising anything at import
            missing[name] = f"import failed: {type(exc).__name__}: {exc}"
            continue
        reasons = []
        for peer in variants:
            why = _tried(peer)
            if why is None:
                peers.append(peer)
                break
            reasons.append(f"{peer.note or peer.label}: {why}")
        else:
            missing[name] = "; ".join(reasons)
    return peers, missing
