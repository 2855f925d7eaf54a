"""FlashMLA-compatible decode API over the SnapMLA FP8 cache: get_mla_metadata and flash_mla_with_kvcache.

Both keep FlashMLA's names and argument order, so `from snapmla_ext.ops import get_mla_metadata,
flash_mla_with_kvcache` replaces `from flash_mla import ...`; `k_cache` is the SnapMLA cache (docs/numerics_contract.md section 2).

Split-KV: the scheduler (torch.ops.snapmla.get_mla_metadata, one device kernel, no host sync) cuts the KV work
of the batch into `num_sm_parts` balanced runs of 64-token blocks; the decode kernel runs one CTA column per
part and a combine kernel merges requests split across parts. Default num_sm_parts =
max(sm_count // ceil(s_q * h_q / 64) // num_heads_k, 1), as FlashMLA. Forcing more parts (for tests, or to
study the split path): pass `num_sm_parts=` to get_mla_metadata, or set SNAPMLA_FORCE_SPLIT=<num_sm_parts>.

Everything here is CUDA-graph capturable (metadata, Q quantization, decode and combine are device work only).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import NamedTuple, Optional, Union

import torch

from snapmla_ext import layout as L
from snapmla_ext._ext import load_ops, require_cuda_tensor
from snapmla_ext.cache import SnapMLAKVCache, as_cache_tensor
from snapmla_ext.types import QuantizedQ

BLOCK_M = 64  # query rows (s * h_q + h) per decode CTA; csrc/kernels/sm90/decode_fp8/launch.h
SCHED_META_INTS = 8  # int32 per tile_scheduler_metadata row; csrc/kernels/sched/sched_meta.h
CPU_PLAN_SM_COUNT = 132  # SMs assumed when planning for CPU seqlens (H100 SXM / H200): the CPU plan mirrors a GPU's


_SM_COUNTS: dict = {}  # device -> SM count (a plain dict: torch.compile warns about traced lru_caches)


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return CPU_PLAN_SM_COUNT
    if device not in _SM_COUNTS:
        _SM_COUNTS[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SM_COUNTS[device]


def default_num_sm_parts(num_q_tokens_per_head_k: int, num_heads_k: int = 1, device="cuda") -> int:
    """FlashMLA's default: one CTA per SM across the M tiles, i.e. max(sm_count // num_m_tiles // h_k, 1), with
    num_m_tiles = ceil(s_q * h_q / 64). SNAPMLA_FORCE_SPLIT=<n> overrides it (n >= 1)."""
    forced = os.environ.get("SNAPMLA_FORCE_SPLIT")
    if forced:
        try:
            n = int(forced)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"SNAPMLA_FORCE_SPLIT must be a positive integer (num_sm_parts), got {forced!r}")
        return n
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    num_m_tiles = -(-int(num_q_tokens_per_head_k) // BLOCK_M)
    return max(_sm_count(device) // max(num_m_tiles, 1) // max(int(num_heads_k), 1), 1)


def decode_kernel(q_rows: int) -> str:
    """The decode kernel ("narrow", "wide" or "ws") that a call with q_rows = s_q * h_q query rows runs now: the
    extension's choice (csrc/kernels/sm90/decode_fp8/kernel_choice.h) under the current override."""
    return load_ops().decode_kernel(int(q_rows))


@contextlib.contextmanager
def forced_decode_kernel(choice: str):
    """Within the block, calls run `choice` ("auto", "narrow", "wide" or "ws") where it can run the rows (narrow
    up to 16 query rows, ws above 16, wide always; else the nearest that can). Process-wide, for tests and
    benchmarks; the environment variable SNAPMLA_DECODE_KERNEL sets the same override once, at the first call."""
    previous = load_ops().set_decode_kernel(str(choice))
    try:
        yield
    finally:
        load_ops().set_decode_kernel(previous)


@dataclasses.dataclass
class SnapMLASchedMeta:
    """New-style scheduling metadata (FlashMLA's FlashMLASchedMeta): empty until the first
    flash_mla_with_kvcache call fills it, then reused by later calls (e.g. the other layers of a step).

    Reuse it only while the shapes and the values of cache_seqlens stay the same, as FlashMLA requires. A reuse
    that would follow a stale plan raises instead of giving wrong results: other shapes ("metadata reused with
    other shapes"), another cache_seqlens tensor or one written in place since the plan was made (its memory and
    torch's version counter are compared; the values themselves would need a host sync), and a plan made
    outside a CUDA-graph capture used inside one or the reverse (a captured plan follows new lengths only on
    replay). Under torch.compile tracing only the shapes are checked (the metadata is then normally made in
    the compiled function).
    """

    @dataclasses.dataclass(frozen=True)
    class Config:
        b: int
        s_q: int
        h_q: int
        causal: bool
        num_sm_parts: int
        device: torch.device

    num_sm_parts: Optional[int] = None  # None: default_num_sm_parts at first use
    have_initialized: bool = False
    config: Optional[Config] = None
    tile_scheduler_metadata: Optional[torch.Tensor] = None  # (num_sm_parts, 8) int32
    num_splits: Optional[torch.Tensor] = None  # (b + 1,) int32
    planned_from: Optional["_PlanSource"] = None  # the cache_seqlens the plan was made from; None when traced


def _old_style_metadata(
    cache_seqlens: torch.Tensor,
    num_q_tokens_per_head_k: int,
    num_heads_k: int,
    num_heads_q: Optional[int] = None,
    is_fp8_kvcache: bool = False,
    topk: Optional[int] = None,
    *,
    num_sm_parts: Optional[int] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    # num_heads_q and is_fp8_kvcache only select FlashMLA's sparse / fp8 planners; the SnapMLA plan needs neither.
    if topk is not None:
        raise NotImplementedError("get_mla_metadata: sparse attention (topk) is not supported by snapmla_ext")
    if not isinstance(cache_seqlens, torch.Tensor):
        raise TypeError(f"cache_seqlens must be a torch.Tensor, got {type(cache_seqlens).__name__}")
    if num_sm_parts is None:
        num_sm_parts = default_num_sm_parts(num_q_tokens_per_head_k, num_heads_k, cache_seqlens.device)
    return load_ops().get_mla_metadata(cache_seqlens, int(num_q_tokens_per_head_k), int(num_heads_k), int(num_sm_parts))


def get_mla_metadata(*args, **kwargs):
    """Split-KV scheduling metadata, in both of FlashMLA's generations.

    Old style, `get_mla_metadata(cache_seqlens, num_q_tokens_per_head_k, num_heads_k, num_heads_q=None,
    is_fp8_kvcache=False, topk=None, *, num_sm_parts=None)`:
        cache_seqlens (b,) int32 on the device that will run the decode; num_q_tokens_per_head_k = s_q * h_q;
        num_heads_k = 1. Returns (tile_scheduler_metadata (num_sm_parts, 8) int32, num_splits (b + 1,) int32),
        computed on cache_seqlens' device by one kernel (no host sync; capturable). CPU seqlens are planned on
        the host (for tests), for a 132-SM GPU by default. sparse (topk) raises NotImplementedError.
    New style, `get_mla_metadata()` (any arguments that do not start with a tensor are ignored, as in FlashMLA;
    the keyword num_sm_parts= is honoured): returns (SnapMLASchedMeta(), None), filled by the first
    flash_mla_with_kvcache call that uses it.
    num_sm_parts (snapmla extension): force the number of KV parts (default: default_num_sm_parts).
    """
    if (args and isinstance(args[0], torch.Tensor)) or "cache_seqlens" in kwargs:
        return _old_style_metadata(*args, **kwargs)
    return SnapMLASchedMeta(num_sm_parts=kwargs.get("num_sm_parts")), None


def _checked_q(q) -> Union[torch.Tensor, QuantizedQ]:
    """q as given, after the Python-side checks of a BF16 q (the op checks it again, as Fused-Q-Quant does)."""
    if isinstance(q, QuantizedQ):
        # The op checks the parts' dtypes, shapes and layouts (named q_content, q_rope, q_scale); the scale's shape
        # is read here first, for the metadata's reuse check.
        for name, t in (("q_content", q.content), ("q_rope", q.rope), ("q_scale", q.scale)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} (a QuantizedQ part) must be a torch.Tensor, got {type(t).__name__}")
        if q.scale.dim() != 3:
            raise ValueError(f"q_scale (QuantizedQ.scale) must have shape (b, s_q, h_q), got {tuple(q.scale.shape)}")
        return q
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"q must be a torch.Tensor or a snapmla_ext.types.QuantizedQ, got {type(q).__name__}")
    if q.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        raise ValueError(
            f"q must have dtype torch.bfloat16 (or be a QuantizedQ), got {q.dtype}: a per-tensor FP8 q cannot be used "
            "with the SnapMLA cache; pass the BF16 q, which is quantized per row inside the call"
        )
    if q.dtype != torch.bfloat16:
        raise ValueError(f"q must have dtype torch.bfloat16 (or be a QuantizedQ), got {q.dtype}")
    if q.dim() != 4 or q.shape[-1] != L.D_QK:
        raise ValueError(f"q must have shape (b, s_q, h_q, {L.D_QK}), got {tuple(q.shape)}")
    # Device last, as in the C++ checks.
    require_cuda_tensor("q", q)
    return q


def _metadata_from_sched_meta(
    sched_meta: SnapMLASchedMeta, q_shape: tuple[int, int, int], cache_seqlens: torch.Tensor, causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    b, s_q, h_q = q_shape
    if not sched_meta.have_initialized:
        num_sm_parts = sched_meta.num_sm_parts or default_num_sm_parts(s_q * h_q, 1, cache_seqlens.device)
        meta, splits = load_ops().get_mla_metadata(cache_seqlens, s_q * h_q, 1, num_sm_parts)
        sched_meta.config = SnapMLASchedMeta.Config(b, s_q, h_q, causal, num_sm_parts, cache_seqlens.device)
        sched_meta.tile_scheduler_metadata, sched_meta.num_splits = meta, splits
        sched_meta.planned_from = _plan_source(cache_seqlens)
        sched_meta.have_initialized = True
        return meta, splits
    cfg = sched_meta.config
    if (b, s_q, h_q, causal, cache_seqlens.device) != (cfg.b, cfg.s_q, cfg.h_q, cfg.causal, cfg.device):
        raise ValueError(
            "tile_scheduler_metadata: metadata reused with other shapes: it was filled for "
            f"(b={cfg.b}, s_q={cfg.s_q}, h_q={cfg.h_q}, causal={cfg.causal}, device={cfg.device}), this call has "
            f"(b={b}, s_q={s_q}, h_q={h_q}, causal={causal}, device={cache_seqlens.device}); "
            "call get_mla_metadata() again"
        )
    now, then = _plan_source(cache_seqlens), sched_meta.planned_from
    if now is not None and then is not None and now != then:
        if now.capturing != then.capturing:
            where = {True: "inside", False: "outside"}
            why = (f"it was filled {where[then.capturing]} a CUDA-graph capture and this call is "
                   f"{where[now.capturing]} one (a captured plan follows new lengths only on replay)")
        elif now.tensor != then.tensor:
            why = "cache_seqlens is another tensor than the one it was planned from"
        else:
            why = f"cache_seqlens was written in place since it was planned (version {then.version} -> {now.version})"
        raise ValueError(f"tile_scheduler_metadata: stale metadata: {why}; call get_mla_metadata() again for each "
                         "new set of lengths")
    return sched_meta.tile_scheduler_metadata, sched_meta.num_splits


class _PlanSource(NamedTuple):
    tensor: tuple  # cache_seqlens' (data_ptr, shape, strides)
    version: int  # its in-place version counter
    capturing: bool  # a CUDA graph was being captured on the current stream


def _plan_source(cache_seqlens: torch.Tensor) -> Optional[_PlanSource]:
    """What a SnapMLASchedMeta's plan depends on beyond the shapes, comparable without a host sync; None under
    torch.compile tracing (data_ptr and the version counter are not traceable)."""
    if torch.compiler.is_compiling():
        return None
    capturing = cache_seqlens.device.type == "cuda" and torch.cuda.is_current_stream_capturing()
    tensor = (cache_seqlens.data_ptr(), tuple(cache_seqlens.shape), tuple(cache_seqlens.stride()))
    return _PlanSource(tensor, cache_seqlens._version, capturing)


def flash_mla_with_kvcache(
    q: Union[torch.Tensor, QuantizedQ],
    k_cache: Union[torch.Tensor, SnapMLAKVCache],
    block_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    head_dim_v: int,
    tile_scheduler_metadata: Union[SnapMLASchedMeta, torch.Tensor],
    num_splits: Optional[torch.Tensor] = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    is_fp8_kvcache: bool = False,
    indices: Optional[torch.Tensor] = None,
    attn_sink: Optional[torch.Tensor] = None,
    extra_k_cache: Optional[torch.Tensor] = None,
    extra_indices_in_kvcache: Optional[torch.Tensor] = None,
    topk_length: Optional[torch.Tensor] = None,
    extra_topk_length: Optional[torch.Tensor] = None,
    descale_q: Optional[torch.Tensor] = None,
    descale_k: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """FP8 SnapMLA decode (FlashMLA's flash_mla_with_kvcache, dense mode).

    q:             (b, s_q, h_q, 576) bfloat16, quantized inside by Fused-Q-Quant (the same op launches it right
                   before the decode kernel);
                   or a snapmla_ext.types.QuantizedQ (content (b, s_q, h_q, 512) e4m3, rope (b, s_q, h_q, 64)
                   bf16, scale (b, s_q, h_q) fp32) quantized by the caller. h_q in 1..128, s_q >= 1.
    k_cache:       a SnapMLAKVCache or a contiguous uint8 tensor with 41216 bytes per page: (num_blocks, 41216),
                   or an engine's view of it such as (num_blocks, 64, 644) or (num_blocks, 64, 1, 644) (byte map
                   in csrc/kv_layout.h). The page stores its content, RoPE and scale parts separately, not
                   per-token rows: write it with append_kv. FlashMLA-shaped bf16 caches are rejected.
    block_table:   (b, max_pages) int32, last dim contiguous. Rows are read through their stride, as FlashMLA
                   reads them: a request may use entries past the view's width (engines capture CUDA graphs
                   with a narrow view of a wider buffer), up to the end of the table's storage. Entries past a
                   request's pages are never read.
    cache_seqlens: (b,) int32. Not checked on the host (that would need a sync): the kernel clamps request r
                   to the pages between its row and the end of the table's storage; SNAPMLA_DEBUG_CHECKS=1
                   checks lengths and page ids, synchronously.
    head_dim_v:    must be 512.
    tile_scheduler_metadata / num_splits: either a SnapMLASchedMeta from get_mla_metadata() (new style; then
                   num_splits must be None) or the two int32 tensors of the old-style get_mla_metadata(...).
    softmax_scale: default 576 ** -0.5 (q.shape[-1] ** -0.5). causal: query token i sees cache tokens
                   0 .. seqlen - s_q + i.
    is_fp8_kvcache: accepted for FlashMLA compatibility; the SnapMLA cache is always FP8.
    indices, attn_sink, extra_k_cache, extra_indices_in_kvcache, topk_length, extra_topk_length: sparse-mode
                   arguments of FlashMLA, not supported (NotImplementedError).
    descale_q, descale_k: the per-tensor FP8 scales of vLLM's and sgl_kernel's wrappers; only None is accepted
                   (the SnapMLA cache carries per-token scales and q is quantized per row inside the call).
    out:           optional (b, s_q, h_q, 512) bfloat16 tensor that receives the output (it is also returned).
    Returns out (b, s_q, h_q, 512) bfloat16 and lse (b, h_q, s_q) float32 (natural log; a row that sees no token
    gets out = 0 and lse = +inf).
    Kernel: s_q * h_q <= 16 runs the narrow kernel, 17..63 the wide one, >= 64 the warp-specialised wide
    kernel (QK and softmax in one warpgroup, PV in two others; the same bits as the wide one)
    (docs/design.md); SNAPMLA_DECODE_KERNEL=narrow|wide|ws|auto (read once, at the first call) or
    forced_decode_kernel() overrides the choice (wide also for s_q * h_q <= 16; ws only above 16).
    """
    unsupported = {
        "indices": indices,
        "attn_sink": attn_sink,
        "extra_k_cache": extra_k_cache,
        "extra_indices_in_kvcache": extra_indices_in_kvcache,
        "topk_length": topk_length,
        "extra_topk_length": extra_topk_length,
    }
    given = [name for name, v in unsupported.items() if v is not None]
    if given:
        raise NotImplementedError(
            f"flash_mla_with_kvcache: sparse attention is not supported by snapmla_ext (got {', '.join(given)}); "
            "only dense decode over the SnapMLA FP8 cache is implemented"
        )
    for name, v in (("descale_q", descale_q), ("descale_k", descale_k)):
        if v is not None:
            raise ValueError(
                f"{name} must be None, got a {type(v).__name__}: snapmla_ext quantizes q per row and the cache per "
                "token itself; pass the BF16 q and no per-tensor FP8 scales"
            )
    if head_dim_v != L.D_CONTENT:
        raise ValueError(f"head_dim_v must be {L.D_CONTENT}, got {head_dim_v}")
    for name, t in (("block_table", block_table), ("cache_seqlens", cache_seqlens)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    kv_cache = as_cache_tensor(k_cache, "k_cache")
    qq = _checked_q(q)
    q_shape = tuple(qq.scale.shape) if isinstance(qq, QuantizedQ) else tuple(qq.shape[:3])
    if softmax_scale is None:
        softmax_scale = L.D_QK**-0.5
    if isinstance(tile_scheduler_metadata, SnapMLASchedMeta):
        if num_splits is not None:
            raise ValueError("num_splits must be None with a SnapMLASchedMeta (new-style get_mla_metadata())")
        meta, splits = _metadata_from_sched_meta(tile_scheduler_metadata, q_shape, cache_seqlens, bool(causal))
    else:
        if not isinstance(tile_scheduler_metadata, torch.Tensor) or not isinstance(num_splits, torch.Tensor):
            raise TypeError(
                "tile_scheduler_metadata and num_splits must be the two tensors of get_mla_metadata(cache_seqlens, "
                "...) or a SnapMLASchedMeta (with num_splits=None); got "
                f"{type(tile_scheduler_metadata).__name__} and {type(num_splits).__name__}"
            )
        meta, splits = tile_scheduler_metadata, num_splits
    if out is not None:
        expected = (*q_shape, L.D_CONTENT)
        if not isinstance(out, torch.Tensor) or out.dtype != torch.bfloat16 or tuple(out.shape) != expected:
            got = f"{out.dtype} {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(f"out must be a torch.bfloat16 tensor of shape {expected}, got {got}")
    if isinstance(qq, QuantizedQ):
        o, lse = load_ops().decode_fp8(
            qq.content, qq.rope, qq.scale, kv_cache, block_table, cache_seqlens, meta, splits, float(softmax_scale),
            bool(causal),
        )
    else:
        # BF16 q: Fused-Q-Quant, decode and combine launched back to back by one op (csrc/api/decode_api.cpp).
        o, lse = load_ops().decode_fp8_bf16q(
            qq, kv_cache, block_table, cache_seqlens, meta, splits, float(softmax_scale), bool(causal)
        )
    if out is None:
        return o, lse
    out.copy_(o)  # one extra copy of the output; the kernels allocate their own
    return out, lse
