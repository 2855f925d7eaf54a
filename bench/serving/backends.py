"""The four attention backends of bench/bench_serving.py: each owns one cache per layer, its KV write and its
decode call, written the way an engine's MLA backend calls them.

| backend          | cache per layer                          | KV write                         | decode                                   |
| ---------------- | ---------------------------------------- | -------------------------------- | ---------------------------------------- |
| snapmla_fp8      | allocate_kv_cache: (num_blocks, 64, 1, 644) uint8 | ops.append_kv_parts       | snapmla_ext.flash_mla_2025               |
| flashmla_bf16    | (num_blocks, 64, 1, 576) bf16            | index_put of the (576,) row      | flash_mla.flash_mla_with_kvcache         |
| fa3_bf16         | the same BF16 cache                      | the same                         | flash_attn_interface.flash_attn_with_kvcache, q = q_pe, qv = q_latent, k = rope slice, v = latent slice |
| reference_fp8 / reference_bf16 | as above, on the CPU       | reference.append_kv / index_put  | reference.decode / paged_attention_bf16  |

The step calls, in order: `setup_step(max_batch, s_q, h_q, causal, scale)` once per run; per step `plan(seqlens)`
eagerly, before the step's CUDA graph (FlashMLA-2025-style metadata: get_mla_metadata once per step, shared by all
layers, copied into persistent buffers the graph was captured with, as SGLang does), then inside the step
`begin_step(seqlens, block_table)` and per layer `write_kv` and `attend`. Padding rows of a padded batch have
length s_q and point at the scratch page (allocator.SCRATCH_PAGE) in every backend; their KV slot is -1, which
append_kv skips and the BF16 write redirects into the scratch page.

flash_mla and flash_attn_interface are imported only when present: `probe_*` tries the import and one small
call and returns a factory of the backend, or the reason when either fails, and the benchmark skips that side with the reason printed.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from bench.peers import fa3_mla_call
from bench.serving.allocator import PAGE_BLOCK_SIZE, SCRATCH_PAGE
from snapmla_ext import layout as L
from snapmla_ext import reference

FILL_CHUNK_TOKENS = 32768  # rows per KV write when filling a cache: 32768 x 576 bf16 = 36 MiB of temporaries


class Backend:
    """A cache per layer, its KV write and its decode (see the module docstring for the call order)."""

    name = "?"
    kv_format = "?"  # "fp8" or "bf16"
    token_bytes = 0

    def __init__(self):
        self.caches: list[torch.Tensor] = []
        self.num_blocks = 0

    @property
    def page_bytes(self) -> int:
        return self.token_bytes * PAGE_BLOCK_SIZE

    def _new_cache(self, num_blocks: int, device) -> torch.Tensor:
        raise NotImplementedError

    def allocate(self, num_layers: int, num_blocks: int, device) -> None:
        self.caches = [self._new_cache(num_blocks, device) for _ in range(num_layers)]
        self.num_blocks = num_blocks

    def free(self) -> None:
        self.caches = []

    def cache_bytes(self) -> int:
        return sum(c.numel() * c.element_size() for c in self.caches)

    def fill(self, seed: int) -> None:
        """Write random latents (kv_c, k_pe ~ N(0, 1) bf16, the scale of RMSNorm's output) into every slot of
        every layer through the backend's own KV write, in chunks. The same seed gives the same rows to a cache
        of the same page count, FP8 or BF16; a request's prompt then finds finite tokens in its pages."""
        device = self.caches[0].device
        slots_total = self.num_blocks * PAGE_BLOCK_SIZE
        for layer in range(len(self.caches)):
            gen = torch.Generator(device=device).manual_seed(seed * 1000 + layer)
            for t0 in range(0, slots_total, FILL_CHUNK_TOKENS):
                n = min(FILL_CHUNK_TOKENS, slots_total - t0)
                kv = torch.randn(n, L.D_QK, generator=gen, device=device, dtype=torch.bfloat16)  # (n, 576)
                slots = torch.arange(t0, t0 + n, device=device, dtype=torch.int64)
                self.write_kv(layer, kv[:, : L.D_CONTENT], kv[:, L.D_CONTENT :], slots)

    def setup_step(self, max_batch: int, s_q: int, h_q: int, causal: bool, softmax_scale: float) -> None:
        self.max_batch, self.s_q, self.h_q, self.causal, self.softmax_scale = max_batch, s_q, h_q, causal, softmax_scale

    def plan(self, seqlens: torch.Tensor) -> None:
        """Eager, before the step (outside its graph): per-step metadata into persistent buffers."""

    def begin_step(self, seqlens: torch.Tensor, block_table: torch.Tensor) -> None:
        """Inside the step, before the first layer: seqlens (b,) int32, block_table (b, width) int32."""
        self.seqlens, self.block_table = seqlens, block_table

    def write_kv(self, layer: int, kv_c: torch.Tensor, k_pe: torch.Tensor, slots: torch.Tensor) -> None:
        """kv_c (n, 512), k_pe (n, 64) bf16, slots (n,) int64 (page * 64 + offset, -1: padding row)."""
        raise NotImplementedError

    def attend(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        """q (b, s_q, h_q, 576) bf16 -> o_latent (b, s_q, h_q, 512) bf16."""
        raise NotImplementedError


class _PersistentMetadata:
    """FlashMLA-2025-style metadata: get_mla_metadata(seqlens, s_q * h_q, 1) computed eagerly once per step and
    copied into buffers that the step's graphs were captured with. tile_scheduler_metadata's shape depends only on
    s_q * h_q and the SM count; num_splits is (b + 1,), a prefix of one (max_batch + 1,) buffer."""

    def __init__(self, get_mla_metadata, max_batch: int, q_rows: int):
        self.get, self.q_rows = get_mla_metadata, q_rows
        self.meta: Optional[torch.Tensor] = None
        self.max_batch = max_batch
        self.splits: Optional[torch.Tensor] = None

    def update(self, seqlens: torch.Tensor) -> None:
        meta, splits = self.get(seqlens, self.q_rows, 1)
        if self.meta is None:
            self.meta = torch.empty_like(meta)
            self.splits = torch.zeros(self.max_batch + 1, dtype=splits.dtype, device=splits.device)
        if meta.shape != self.meta.shape:
            raise RuntimeError(f"tile_scheduler_metadata changed shape {tuple(self.meta.shape)} -> {tuple(meta.shape)}")
        self.meta.copy_(meta)
        self.splits[: splits.numel()].copy_(splits)

    def views(self, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.meta, self.splits[: b + 1]


# ---- the SnapMLA FP8 cache ----


class SnapMLAFp8(Backend):
    """Ours: the cache an engine allocates (vLLM's (num_blocks, block_size, 1, head_size) with head_size 644),
    written by append_kv_parts, decoded by the FlashMLA-2025 drop-in."""

    name = "snapmla_fp8"
    kv_format = "fp8"
    token_bytes = L.TOKEN_BYTES  # 644

    def _new_cache(self, num_blocks, device):
        from snapmla_ext.cache import TOKEN_BYTES, allocate_kv_cache

        return allocate_kv_cache(num_blocks, device, page_shape=(PAGE_BLOCK_SIZE, 1, TOKEN_BYTES))

    def write_kv(self, layer, kv_c, k_pe, slots):
        from snapmla_ext import ops

        ops.append_kv_parts(self.caches[layer], kv_c, k_pe, slots)

    def setup_step(self, max_batch, s_q, h_q, causal, softmax_scale):
        import snapmla_ext.flash_mla_2025 as flash_mla

        super().setup_step(max_batch, s_q, h_q, causal, softmax_scale)
        self.fm = flash_mla
        self.metadata = _PersistentMetadata(flash_mla.get_mla_metadata, max_batch, s_q * h_q)

    def plan(self, seqlens):
        self.metadata.update(seqlens)

    def attend(self, layer, q):
        meta, splits = self.metadata.views(q.shape[0])
        out, _ = self.fm.flash_mla_with_kvcache(q, self.caches[layer], self.block_table, self.seqlens, L.D_CONTENT,
                                                meta, splits, softmax_scale=self.softmax_scale, causal=self.causal)
        return out


class ReferenceFp8(SnapMLAFp8):
    """The FP8 cache through snapmla_ext.reference (CPU): the kernels' exact emulation, no metadata."""

    name = "reference_fp8"

    def write_kv(self, layer, kv_c, k_pe, slots):
        reference.append_kv(self.caches[layer], torch.cat([kv_c, k_pe], dim=-1), slots)

    def setup_step(self, max_batch, s_q, h_q, causal, softmax_scale):
        Backend.setup_step(self, max_batch, s_q, h_q, causal, softmax_scale)

    def plan(self, seqlens):
        pass

    def attend(self, layer, q):
        out, _ = reference.decode(q, self.caches[layer], self.block_table, self.seqlens, self.softmax_scale,
                                  self.causal)
        return out


# ---- the BF16 cache: FlashMLA BF16's page layout, shared by FlashMLA, FA3 and the BF16 reference ----

SCRATCH_SLOT = SCRATCH_PAGE * PAGE_BLOCK_SIZE + PAGE_BLOCK_SIZE - 1  # where padding rows' BF16 writes land


class _Bf16Cache(Backend):
    kv_format = "bf16"
    token_bytes = L.BF16_TOKEN_BYTES  # 1152

    def _new_cache(self, num_blocks, device):
        return torch.zeros(num_blocks, PAGE_BLOCK_SIZE, 1, L.D_QK, dtype=torch.bfloat16, device=device)

    def write_kv(self, layer, kv_c, k_pe, slots):
        # A plain index_put of each (576,) row into its slot. Padding rows (slot -1) go to the last slot of the
        # scratch page instead of being skipped: skipping would need a data-dependent row count (a host sync).
        rows = torch.cat([kv_c, k_pe], dim=-1)  # (n, 576)
        index = torch.where(slots >= 0, slots, SCRATCH_SLOT)
        self.caches[layer].view(-1, L.D_QK).index_put_((index,), rows)


class FlashMLABf16(_Bf16Cache):
    """FlashMLA's dense BF16 decode (module from probe_flashmla). Its 2025 API returns the metadata tensor pair
    (computed per step into persistent buffers); its 2026 API returns a scheduling object that the first layer's
    call fills, created per step inside the step (inside the graph)."""

    name = "flashmla_bf16"

    def __init__(self, flash_mla, style: str):
        super().__init__()
        self.fm, self.style = flash_mla, style

    def setup_step(self, max_batch, s_q, h_q, causal, softmax_scale):
        super().setup_step(max_batch, s_q, h_q, causal, softmax_scale)
        if self.style == "pair":
            self.metadata = _PersistentMetadata(self.fm.get_mla_metadata, max_batch, s_q * h_q)

    def plan(self, seqlens):
        if self.style == "pair":
            self.metadata.update(seqlens)

    def begin_step(self, seqlens, block_table):
        super().begin_step(seqlens, block_table)
        if self.style == "object":
            self.sched = self.fm.get_mla_metadata(seqlens, self.s_q * self.h_q, 1)

    def attend(self, layer, q):
        meta = self.metadata.views(q.shape[0]) if self.style == "pair" else self.sched
        out, _ = self.fm.flash_mla_with_kvcache(q, self.caches[layer], self.block_table, self.seqlens, L.D_CONTENT,
                                                meta[0], meta[1], softmax_scale=self.softmax_scale,
                                                causal=self.causal)
        return out


class FA3Bf16(_Bf16Cache):
    """FlashAttention-3's MLA path on the BF16 cache: QK over the 64 RoPE dims with q_pe plus the 512 latent dims
    through qv, V = the latent slice; both caches are views of the one BF16 cache."""

    name = "fa3_bf16"

    def __init__(self, flash_attn_with_kvcache):
        super().__init__()
        self.fn = flash_attn_with_kvcache

    def attend(self, layer, q):
        return fa3_mla_call(self.fn, q, self.caches[layer], self.block_table, self.seqlens, self.softmax_scale,
                            self.causal)


def paged_attention_bf16(q: torch.Tensor, cache: torch.Tensor, block_table: torch.Tensor, seqlens: torch.Tensor,
                         softmax_scale: float, causal: bool) -> torch.Tensor:
    """Plain paged MLA attention over the BF16 cache, fp32 math (CPU reference).

    q (b, s_q, h_q, 576) bf16, cache (num_blocks, 64, 1, 576) bf16, block_table (b, width) int32, seqlens (b,)
    int32 (>= 1). Query token s of request i sees cache tokens 0 .. seqlens[i] - s_q + s when causal.
    Returns (b, s_q, h_q, 512) bf16."""
    b, s_q = q.shape[:2]
    out = torch.empty(*q.shape[:3], L.D_CONTENT, dtype=torch.bfloat16, device=q.device)
    for i, n in enumerate(seqlens.tolist()):
        pages = block_table[i, : -(-n // PAGE_BLOCK_SIZE)].long()
        kv = cache[pages].reshape(-1, L.D_QK)[:n].float()  # (n, 576)
        logits = torch.einsum("shd,nd->shn", q[i].float(), kv) * softmax_scale  # (s_q, h_q, n)
        if causal:
            last = n - s_q + torch.arange(s_q, device=q.device)  # (s_q,) last visible token
            hidden = torch.arange(n, device=q.device)[None, :] > last[:, None]  # (s_q, n)
            logits = logits.masked_fill(hidden[:, None, :], float("-inf"))
        out[i] = torch.einsum("shn,nd->shd", logits.softmax(-1), kv[:, : L.D_CONTENT]).to(torch.bfloat16)
    return out


class ReferenceBf16(_Bf16Cache):
    name = "reference_bf16"

    def attend(self, layer, q):
        return paged_attention_bf16(q, self.caches[layer], self.block_table, self.seqlens, self.softmax_scale,
                                    self.causal)


# ---- availability: optional imports and one small call each ----


def _probe_inputs(h_q: int = 16):
    """A 2-page cache worth of inputs on the GPU: q (1, 1, h_q, 576), block_table (1, 2), seqlens (1,) = 70."""
    q = torch.randn(1, 1, h_q, L.D_QK, device="cuda", dtype=torch.bfloat16)
    table = torch.tensor([[0, 1]], dtype=torch.int32, device="cuda")
    seqlens = torch.tensor([70], dtype=torch.int32, device="cuda")
    cache = torch.randn(2, PAGE_BLOCK_SIZE, 1, L.D_QK, device="cuda", dtype=torch.bfloat16)
    return q, cache, table, seqlens


def probe_snapmla() -> Optional[str]:
    """None when the FP8 kernels can run here, else why not."""
    from snapmla_ext import extension_available

    if not torch.cuda.is_available():
        return "no CUDA GPU"
    if torch.cuda.get_device_capability() != (9, 0):
        return f"needs sm_90 (Hopper), found sm_{''.join(map(str, torch.cuda.get_device_capability()))}"
    if not extension_available():
        return "snapmla_ext._C (the compiled extension) is not importable"
    return None


def probe_flashmla() -> tuple[Optional[Callable[[], FlashMLABf16]], Optional[str]]:
    """(a factory of FlashMLABf16 backends, None), or (None, why FlashMLA BF16 cannot run)."""
    try:
        import flash_mla
    except Exception as exc:  # ImportError, or a broken build raising anything at import
        return None, f"`import flash_mla` failed: {type(exc).__name__}: {exc}"
    try:
        q, cache, table, seqlens = _probe_inputs()
        meta = flash_mla.get_mla_metadata(seqlens, q.shape[1] * q.shape[2], 1)
        style = "pair" if isinstance(meta[0], torch.Tensor) else "object"
        out = flash_mla.flash_mla_with_kvcache(q, cache, table, seqlens, L.D_CONTENT, meta[0], meta[1], causal=False)
        torch.cuda.synchronize()
        if tuple(out[0].shape) != (1, 1, q.shape[2], L.D_CONTENT):
            return None, f"flash_mla_with_kvcache returned out of shape {tuple(out[0].shape)}"
    except Exception as exc:
        return None, f"flash_mla's first call failed: {type(exc).__name__}: {exc}"
    return (lambda: FlashMLABf16(flash_mla, style)), None


def probe_fa3() -> tuple[Optional[Callable[[], FA3Bf16]], Optional[str]]:
    """(a factory of FA3Bf16 backends, None), or (None, why FlashAttention-3's MLA path cannot run)."""
    try:
        from flash_attn_interface import flash_attn_with_kvcache
    except Exception as exc:
        return None, f"`from flash_attn_interface import flash_attn_with_kvcache` failed: {type(exc).__name__}: {exc}"
    try:
        q, cache, table, seqlens = _probe_inputs()
        out = fa3_mla_call(flash_attn_with_kvcache, q, cache, table, seqlens, 192**-0.5, causal=False)
        torch.cuda.synchronize()
        if tuple(out.shape) != (1, 1, q.shape[2], L.D_CONTENT):
            return None, f"flash_attn_with_kvcache returned out of shape {tuple(out.shape)}"
    except Exception as exc:
        return None, f"flash_attn_with_kvcache's first call (MLA: q_pe, qv, 64-token pages) failed: " \
                     f"{type(exc).__name__}: {exc}"
    return (lambda: FA3Bf16(flash_attn_with_kvcache)), None
