"""Argument checks of the decode entry point (CPU): one test per message of torch.ops.snapmla.decode_fp8
(csrc/api/decode_api.cpp; checks run dtype -> shape -> layout -> device, so a CPU call reaches every message but
the device ones) and of the Python wrapper snapmla_ext.decode_ops.flash_mla_with_kvcache.
"""

import pytest
import torch

from snapmla_ext import layout as L
from snapmla_ext.decode_ops import SnapMLASchedMeta, flash_mla_with_kvcache, get_mla_metadata
from snapmla_ext.types import QuantizedQ
from utils.decode_args import B, H_Q, MAX_PAGES, NUM_BLOCKS, PARTS, S_Q, call, misaligned, valid_args


# ---- dtype ----


@pytest.mark.parametrize(
    "name,bad,expected,actual",
    [
        ("q_content", torch.zeros(B, S_Q, H_Q, 512, dtype=torch.bfloat16), "Float8_e4m3fn", "BFloat16"),
        ("q_rope", torch.zeros(B, S_Q, H_Q, 64), "BFloat16", "Float"),
        ("q_scale", torch.ones(B, S_Q, H_Q, dtype=torch.float64), "Float", "Double"),
        ("kv_cache", torch.zeros(NUM_BLOCKS, L.PAGE_BYTES, dtype=torch.int8), "Byte", "Char"),
        ("block_table", torch.zeros(B, MAX_PAGES, dtype=torch.int64), "Int", "Long"),
        ("cache_seqlens", torch.zeros(B, dtype=torch.int64), "Int", "Long"),
        ("tile_scheduler_metadata", torch.zeros(PARTS, 8, dtype=torch.int64), "Int", "Long"),
        ("num_splits", torch.zeros(B + 1, dtype=torch.int64), "Int", "Long"),
    ],
)
def test_dtype(requires_ext, name, bad, expected, actual):
    with pytest.raises(RuntimeError, match=f"{name} must have dtype {expected}, got {actual}"):
        call(requires_ext, **{name: bad})


# ---- shape ----


def test_q_content_dims(requires_ext):
    with pytest.raises(RuntimeError, match="q_content must have 4 dimensions, got 3"):
        call(requires_ext, q_content=torch.zeros(B, H_Q, 512, dtype=torch.float8_e4m3fn))


def test_q_content_head_dim(requires_ext):
    with pytest.raises(RuntimeError, match=r"q_content.shape\[3\] must be 512, got 576"):
        call(requires_ext, q_content=torch.zeros(B, S_Q, H_Q, 576, dtype=torch.float8_e4m3fn))


def test_batch_not_empty(requires_ext):
    with pytest.raises(RuntimeError, match=r"q_content.shape\[0\] \(b\) must be in \[1, 65535\] \(combine grid.y\), got 0"):
        call(requires_ext, q_content=torch.zeros(0, S_Q, H_Q, 512, dtype=torch.float8_e4m3fn))


def test_batch_fits_the_combine_grid(requires_ext):
    # The combine kernel's grid is (q_rows, b): b is its y dimension. A stride-0 view: only the shape is read.
    big = torch.zeros(1, S_Q, H_Q, 512, dtype=torch.float8_e4m3fn).expand(65536, S_Q, H_Q, 512)
    with pytest.raises(RuntimeError, match=r"\(b\) must be in \[1, 65535\] \(combine grid.y\), got 65536"):
        call(requires_ext, q_content=big)


def test_s_q_not_empty(requires_ext):
    with pytest.raises(RuntimeError, match=r"q_content.shape\[1\] \(s_q\) must be >= 1, got 0"):
        call(requires_ext, q_content=torch.zeros(B, 0, H_Q, 512, dtype=torch.float8_e4m3fn))


@pytest.mark.parametrize("h_q", [0, 129])
def test_h_q_range(requires_ext, h_q):
    with pytest.raises(RuntimeError, match=rf"q_content.shape\[2\] \(h_q\) must be in \[1, 128\], got {h_q}"):
        call(requires_ext, q_content=torch.zeros(B, S_Q, h_q, 512, dtype=torch.float8_e4m3fn))


def test_query_rows_limit(requires_ext):
    # Stride-0 view: the shape check comes before any layout check, so no memory is needed.
    q = torch.zeros(1, 1, 1, 512, dtype=torch.float8_e4m3fn).expand(B, 2049, 128, 512)
    with pytest.raises(RuntimeError, match=r"s_q \* h_q must be <= 262140, got 262272"):
        call(requires_ext, q_content=q)


def test_q_rope_shape(requires_ext):
    with pytest.raises(RuntimeError, match=r"q_rope must have shape \[3, 2, 16, 64\], got \[3, 2, 16, 32\]"):
        call(requires_ext, q_rope=torch.zeros(B, S_Q, H_Q, 32, dtype=torch.bfloat16))


def test_q_scale_shape(requires_ext):
    with pytest.raises(RuntimeError, match=r"q_scale must have shape \[3, 2, 16\], got \[3, 2, 16, 1\]"):
        call(requires_ext, q_scale=torch.ones(B, S_Q, H_Q, 1))


def test_kv_cache_dims(requires_ext):
    with pytest.raises(RuntimeError, match="kv_cache must have 2 dimensions, got 4"):
        call(requires_ext, kv_cache=torch.zeros(NUM_BLOCKS, 64, 1, 644, dtype=torch.uint8))


def test_kv_cache_page_bytes(requires_ext):
    with pytest.raises(RuntimeError, match=r"kv_cache.shape\[1\] must be 41216, got 73728"):
        call(requires_ext, kv_cache=torch.zeros(NUM_BLOCKS, 64 * 1152, dtype=torch.uint8))


def test_kv_cache_not_empty(requires_ext):
    with pytest.raises(RuntimeError, match=r"kv_cache.shape\[0\] \(num_blocks\) must be >= 1, got 0"):
        call(requires_ext, kv_cache=torch.zeros(0, L.PAGE_BYTES, dtype=torch.uint8))


def test_kv_cache_num_blocks_int32(requires_ext):
    kv = torch.zeros(1, L.PAGE_BYTES, dtype=torch.uint8).expand(2**31, L.PAGE_BYTES)
    with pytest.raises(RuntimeError, match=r"kv_cache.shape\[0\] \(num_blocks\) must fit in int32"):
        call(requires_ext, kv_cache=kv)


def test_block_table_dims(requires_ext):
    with pytest.raises(RuntimeError, match="block_table must have 2 dimensions, got 1"):
        call(requires_ext, block_table=torch.zeros(B, dtype=torch.int32))


def test_block_table_batch(requires_ext):
    with pytest.raises(RuntimeError, match=r"block_table.shape\[0\] must be 3, got 4"):
        call(requires_ext, block_table=torch.zeros(B + 1, MAX_PAGES, dtype=torch.int32))


def test_block_table_not_empty(requires_ext):
    with pytest.raises(RuntimeError, match=r"block_table.shape\[1\] \(max_pages\) must be >= 1, got 0"):
        call(requires_ext, block_table=torch.zeros(B, 0, dtype=torch.int32))


def test_block_table_capacity_int32(requires_ext):
    bt = torch.zeros(1, 1, dtype=torch.int32).expand(B, 2**25)
    with pytest.raises(RuntimeError, match=r"block_table.shape\[1\] \* 64 \(token capacity\) must fit in int32"):
        call(requires_ext, block_table=bt)


def test_cache_seqlens_shape(requires_ext):
    with pytest.raises(RuntimeError, match=r"cache_seqlens must have shape \[3\], got \[3, 1\]"):
        call(requires_ext, cache_seqlens=torch.zeros(B, 1, dtype=torch.int32))


def test_metadata_dims(requires_ext):
    with pytest.raises(RuntimeError, match="tile_scheduler_metadata must have 2 dimensions, got 1"):
        call(requires_ext, tile_scheduler_metadata=torch.zeros(PARTS * 8, dtype=torch.int32))


def test_metadata_row_ints(requires_ext):
    with pytest.raises(RuntimeError, match=r"tile_scheduler_metadata.shape\[1\] must be 8, got 5"):
        call(requires_ext, tile_scheduler_metadata=torch.zeros(PARTS, 5, dtype=torch.int32))


def test_metadata_num_parts(requires_ext):
    with pytest.raises(RuntimeError, match=r"\(num_sm_parts\) must be in \[1, 65535\], got 0"):
        call(requires_ext, tile_scheduler_metadata=torch.zeros(0, 8, dtype=torch.int32))


def test_num_splits_shape(requires_ext):
    with pytest.raises(RuntimeError, match=r"num_splits must have shape \(b \+ 1,\) = \(4,\) .* got \[3\]"):
        call(requires_ext, num_splits=torch.zeros(B, dtype=torch.int32))


# ---- layout ----


@pytest.mark.parametrize(
    "name,bad",
    [
        ("q_content", torch.zeros(B, S_Q, H_Q, 1024, dtype=torch.float8_e4m3fn)[..., ::2]),
        ("q_rope", torch.zeros(B, S_Q, H_Q, 128, dtype=torch.bfloat16)[..., ::2]),
        ("q_scale", torch.ones(B, S_Q, H_Q, 2)[..., 0]),
    ],
)
def test_last_dim_contiguous(requires_ext, name, bad):
    with pytest.raises(RuntimeError, match=f"{name} must be contiguous in its last dimension"):
        call(requires_ext, **{name: bad})


@pytest.mark.parametrize(
    "name,bad",
    [
        ("q_content", torch.zeros(B, H_Q, S_Q, 512, dtype=torch.float8_e4m3fn).transpose(1, 2)),
        ("q_rope", torch.zeros(B, H_Q, S_Q, 64, dtype=torch.bfloat16).transpose(1, 2)),
        ("q_scale", torch.ones(B, S_Q, 2 * H_Q)[:, :, :H_Q]),  # padded s stride: stride(1) = 2 * h_q
    ],
)
def test_rows_foldable(requires_ext, name, bad):
    with pytest.raises(RuntimeError, match=f"{name}: dims 1 and 2 \\(s_q, h_q\\) must fold into one row dimension"):
        call(requires_ext, **{name: bad})


def test_q_content_row_stride_tma(requires_ext):
    q = torch.zeros(B, S_Q, H_Q, 520, dtype=torch.float8_e4m3fn)[..., :512]
    with pytest.raises(RuntimeError, match=r"q_content: stride\(2\) = 520 elements must be a multiple of 16 bytes"):
        call(requires_ext, q_content=q)


def test_q_rope_pointer_tma(requires_ext):
    q = misaligned((B, S_Q, H_Q, 64), torch.bfloat16, 4)  # 8 B past an aligned allocation
    with pytest.raises(RuntimeError, match="q_rope: data pointer must be 16-byte aligned"):
        call(requires_ext, q_rope=q)


def test_kv_cache_contiguous(requires_ext):
    kv = torch.zeros(2 * NUM_BLOCKS, L.PAGE_BYTES, dtype=torch.uint8)[::2]
    with pytest.raises(RuntimeError, match="kv_cache must be contiguous"):
        call(requires_ext, kv_cache=kv)


def test_kv_cache_pointer_aligned(requires_ext):
    kv = misaligned((NUM_BLOCKS, L.PAGE_BYTES), torch.uint8, 8)
    with pytest.raises(RuntimeError, match="kv_cache: data pointer must be 16-byte aligned"):
        call(requires_ext, kv_cache=kv)


def test_block_table_last_dim(requires_ext):
    bt = torch.zeros(MAX_PAGES, B, dtype=torch.int32).t()
    with pytest.raises(RuntimeError, match="block_table must be contiguous in its last dimension"):
        call(requires_ext, block_table=bt)


@pytest.mark.parametrize(
    "name,bad",
    [
        ("cache_seqlens", torch.zeros(2 * B, dtype=torch.int32)[::2]),
        ("tile_scheduler_metadata", torch.zeros(8, PARTS, dtype=torch.int32).t()),
        ("num_splits", torch.zeros(2 * (B + 1), dtype=torch.int32)[::2]),
    ],
)
def test_contiguous(requires_ext, name, bad):
    with pytest.raises(RuntimeError, match=f"{name} must be contiguous"):
        call(requires_ext, **{name: bad})


# ---- device ----


def test_device(requires_ext):
    with pytest.raises(RuntimeError, match="q_content must be a CUDA tensor, got a tensor on cpu"):
        call(requires_ext)


# ---- Python wrapper (flash_mla_with_kvcache) ----


def wrapper_args(**override):
    a = valid_args()
    args = dict(
        q=QuantizedQ(a["q_content"], a["q_rope"], a["q_scale"]),
        k_cache=a["kv_cache"],
        block_table=a["block_table"],
        cache_seqlens=a["cache_seqlens"],
        head_dim_v=512,
        tile_scheduler_metadata=a["tile_scheduler_metadata"],
        num_splits=a["num_splits"],
    )
    args.update(override)
    return args


def test_sparse_not_supported():
    with pytest.raises(NotImplementedError, match="sparse attention is not supported by snapmla_ext \\(got indices\\)"):
        flash_mla_with_kvcache(**wrapper_args(indices=torch.zeros(B, S_Q, 64, dtype=torch.int32)))


def test_head_dim_v():
    with pytest.raises(ValueError, match="head_dim_v must be 512, got 576"):
        flash_mla_with_kvcache(**wrapper_args(head_dim_v=576))


def test_k_cache_checked_by_name():
    with pytest.raises(ValueError, match="k_cache must have dtype torch.uint8"):
        flash_mla_with_kvcache(**wrapper_args(k_cache=torch.zeros(NUM_BLOCKS, 64, 1, 576, dtype=torch.bfloat16)))


def test_q_type():
    with pytest.raises(TypeError, match="q must be a torch.Tensor or a snapmla_ext.types.QuantizedQ, got list"):
        flash_mla_with_kvcache(**wrapper_args(q=[1, 2]))


def test_quantized_q_parts_checked_by_name():
    a = valid_args()
    with pytest.raises(TypeError, match="q_rope \\(a QuantizedQ part\\) must be a torch.Tensor, got list"):
        flash_mla_with_kvcache(**wrapper_args(q=QuantizedQ(a["q_content"], [0], a["q_scale"])))
    with pytest.raises(ValueError, match=r"q_scale \(QuantizedQ.scale\) must have shape \(b, s_q, h_q\), got \(96,\)"):
        flash_mla_with_kvcache(**wrapper_args(q=QuantizedQ(a["q_content"], a["q_rope"], a["q_scale"].flatten())))


def test_q_dtype():
    with pytest.raises(ValueError, match="q must have dtype torch.bfloat16 \\(or be a QuantizedQ\\), got torch.float32"):
        flash_mla_with_kvcache(**wrapper_args(q=torch.zeros(B, S_Q, H_Q, 576)))


def test_q_shape():
    with pytest.raises(ValueError, match=r"q must have shape \(b, s_q, h_q, 576\), got \(3, 2, 16, 512\)"):
        flash_mla_with_kvcache(**wrapper_args(q=torch.zeros(B, S_Q, H_Q, 512, dtype=torch.bfloat16)))


def test_q_on_cpu_named_before_quantization():
    # A CPU bf16 q must not be quantized by the reference first and then fail under another name (q_content).
    with pytest.raises(RuntimeError, match="q is on cpu, but the snapmla kernels need a CUDA device"):
        flash_mla_with_kvcache(**wrapper_args(q=torch.zeros(B, S_Q, H_Q, 576, dtype=torch.bfloat16)))


@pytest.mark.parametrize("name", ["block_table", "cache_seqlens"])
def test_index_arguments_must_be_tensors(name):
    with pytest.raises(TypeError, match=f"{name} must be a torch.Tensor, got list"):
        flash_mla_with_kvcache(**wrapper_args(**{name: [0, 1, 2]}))


def test_new_style_num_splits_must_be_none():
    meta, _ = get_mla_metadata()
    with pytest.raises(ValueError, match="num_splits must be None with a SnapMLASchedMeta"):
        flash_mla_with_kvcache(**wrapper_args(tile_scheduler_metadata=meta))


def test_old_style_needs_both_tensors():
    with pytest.raises(TypeError, match="tile_scheduler_metadata and num_splits must be the two tensors"):
        flash_mla_with_kvcache(**wrapper_args(num_splits=None))


def test_metadata_reused_with_other_shapes(requires_ext):
    meta = SnapMLASchedMeta(num_sm_parts=PARTS)
    # The first call fills the metadata (on the CPU planner) and then stops at the device check.
    with pytest.raises(RuntimeError, match="q_content must be a CUDA tensor"):
        flash_mla_with_kvcache(**wrapper_args(tile_scheduler_metadata=meta, num_splits=None))
    assert meta.have_initialized and meta.config.b == B
    a = valid_args()
    q_other = QuantizedQ(a["q_content"][:, :1], a["q_rope"][:, :1], a["q_scale"][:, :1])
    with pytest.raises(ValueError, match=r"metadata reused with other shapes: .*\(b=3, s_q=2, h_q=16.* \(b=3, s_q=1"):
        flash_mla_with_kvcache(**wrapper_args(q=q_other, tile_scheduler_metadata=meta, num_splits=None))


def _filled_meta(seqlens):
    meta = SnapMLASchedMeta(num_sm_parts=PARTS)
    with pytest.raises(RuntimeError, match="q_content must be a CUDA tensor"):  # filled, then the device check
        flash_mla_with_kvcache(**wrapper_args(tile_scheduler_metadata=meta, num_splits=None, cache_seqlens=seqlens))
    assert meta.have_initialized
    return meta


def test_metadata_reused_with_the_same_lengths(requires_ext):
    seqlens = torch.full((B,), 70, dtype=torch.int32)
    meta = _filled_meta(seqlens)
    for same in (seqlens, seqlens[:]):  # the same tensor, or another view of the same memory
        with pytest.raises(RuntimeError, match="q_content must be a CUDA tensor"):
            flash_mla_with_kvcache(**wrapper_args(tile_scheduler_metadata=meta, num_splits=None, cache_seqlens=same))


def test_stale_metadata_lengths_written_in_place(requires_ext):
    seqlens = torch.full((B,), 70, dtype=torch.int32)
    meta = _filled_meta(seqlens)
    seqlens.copy_(torch.tensor([500, 1, 64], dtype=torch.int32))  # the next step's lengths in the same buffer
    with pytest.raises(ValueError, match=r"tile_scheduler_metadata: stale metadata: cache_seqlens was written in "
                                         r"place since it was planned \(version 0 -> 1\)"):
        flash_mla_with_kvcache(**wrapper_args(tile_scheduler_metadata=meta, num_splits=None, cache_seqlens=seqlens))


def test_stale_metadata_other_lengths_tensor(requires_ext):
    planned = torch.full((B,), 70, dtype=torch.int32)  # kept alive: a freed tensor's memory may be reused by the next
    meta = _filled_meta(planned)  # and identity is by data pointer (README, Limits)
    with pytest.raises(ValueError, match="stale metadata: cache_seqlens is another tensor than the one it was planned"):
        flash_mla_with_kvcache(**wrapper_args(tile_scheduler_metadata=meta, num_splits=None,
                                              cache_seqlens=torch.full((B,), 70, dtype=torch.int32)))


def test_fake_impls_trace(requires_ext):
    """make_fx with fake tensors runs only the fake (meta) implementations: what torch.compile traces."""
    from torch.fx.experimental.proxy_tensor import make_fx

    a = valid_args()

    def step(q_content, q_rope, q_scale, kv_cache, block_table, cache_seqlens):
        meta, splits = get_mla_metadata(cache_seqlens, S_Q * H_Q, 1, num_sm_parts=PARTS)
        return flash_mla_with_kvcache(
            QuantizedQ(q_content, q_rope, q_scale), kv_cache, block_table, cache_seqlens, 512, meta, splits,
            causal=True,
        )

    inputs = [a[k] for k in ("q_content", "q_rope", "q_scale", "kv_cache", "block_table", "cache_seqlens")]
    gm = make_fx(step, tracing_mode="fake")(*inputs)
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert "snapmla.get_mla_metadata.default" in targets and "snapmla.decode_fp8.default" in targets
    outs = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    out_meta, lse_meta = (o.meta["val"] for o in outs)
    assert out_meta.shape == (B, S_Q, H_Q, 512) and out_meta.dtype == torch.bfloat16
    assert lse_meta.shape == (B, H_Q, S_Q) and lse_meta.dtype == torch.float32


def test_fake_impls_trace_bf16_q(requires_ext):
    """A BF16 q goes to the one op that quantizes, decodes and combines (decode_fp8_bf16q): traced with fake CUDA
    tensors (no GPU needed), the graph holds that op and no separate quantize_q."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    def step(q, kv_cache, block_table, cache_seqlens):
        meta, splits = get_mla_metadata(cache_seqlens, S_Q * H_Q, 1, num_sm_parts=PARTS)
        return flash_mla_with_kvcache(q, kv_cache, block_table, cache_seqlens, 512, meta, splits, causal=True)

    with FakeTensorMode():
        inputs = (
            torch.empty(B, S_Q, H_Q, L.D_QK, dtype=torch.bfloat16, device="cuda"),
            torch.empty(NUM_BLOCKS, L.PAGE_BYTES, dtype=torch.uint8, device="cuda"),
            torch.empty(B, MAX_PAGES, dtype=torch.int32, device="cuda"),
            torch.empty(B, dtype=torch.int32, device="cuda"),
        )
    gm = make_fx(step, tracing_mode="fake")(*inputs)
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert "snapmla.decode_fp8_bf16q.default" in targets and "snapmla.quantize_q.default" not in targets
    outs = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    out_meta, lse_meta = (o.meta["val"] for o in outs)
    assert out_meta.shape == (B, S_Q, H_Q, 512) and out_meta.dtype == torch.bfloat16
    assert lse_meta.shape == (B, H_Q, S_Q) and lse_meta.dtype == torch.float32


# ---- decode_fp8_bf16q (BF16 q: Fused-Q-Quant's checks on q, then the checks above on the rest) ----


@pytest.mark.parametrize(
    "q,message",
    [
        (torch.zeros(B, S_Q, H_Q, L.D_QK), r"q must have dtype BFloat16, got Float"),
        (torch.zeros(B, H_Q, L.D_QK, dtype=torch.bfloat16), r"q must have 4 dimensions, got 3"),
        (torch.zeros(B, S_Q, H_Q, 512, dtype=torch.bfloat16), r"q.shape\[3\] must be 576, got 512"),
        (torch.zeros(B, S_Q, H_Q, L.D_QK, dtype=torch.bfloat16), r"q must be a CUDA tensor, got a tensor on cpu"),
    ],
    ids=["dtype", "dims", "head_dim", "device"],
)
def test_bf16q_entry_checks_q(requires_ext, q, message):
    a = valid_args()
    with pytest.raises(RuntimeError, match=message):
        requires_ext.decode_fp8_bf16q(q, a["kv_cache"], a["block_table"], a["cache_seqlens"],
                                      a["tile_scheduler_metadata"], a["num_splits"], a["softmax_scale"], a["causal"])


@pytest.mark.parametrize("name", ["descale_q", "descale_k"])
def test_per_tensor_descale_rejected(name):
    with pytest.raises(ValueError, match=f"{name} must be None, got a Tensor: snapmla_ext quantizes q per row"):
        flash_mla_with_kvcache(**wrapper_args(**{name: torch.ones(1)}))


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_q_rejected_with_advice(dtype):
    q = torch.zeros(B, S_Q, H_Q, 576).to(dtype)
    with pytest.raises(ValueError, match=f"got {dtype}: a per-tensor FP8 q cannot be used .* pass the BF16 q"):
        flash_mla_with_kvcache(**wrapper_args(q=q))


@pytest.mark.parametrize(
    "out, got",
    [(torch.zeros(B, S_Q, H_Q, 512), "torch.float32"), (torch.zeros(B, S_Q, H_Q, 576, dtype=torch.bfloat16), "576")],
)
def test_out_checked(out, got):
    with pytest.raises(ValueError, match=rf"out must be a torch.bfloat16 tensor of shape \(3, 2, 16, 512\), got .*{got}"):
        flash_mla_with_kvcache(**wrapper_args(out=out))


@pytest.mark.parametrize("shape", [(5, 41216), (5, 64, 644), (5, 64, 1, 644), (5, 1, 41216)])
def test_engine_cache_views_accepted(shape):
    from snapmla_ext.cache import as_cache_tensor

    data = torch.zeros(shape, dtype=torch.uint8)
    flat = as_cache_tensor(data)
    assert flat.shape == (5, 41216) and flat.data_ptr() == data.data_ptr()


@pytest.mark.parametrize(
    "bad", [torch.zeros(5, 64, 645, dtype=torch.uint8), torch.zeros(5, 64, 2, 644, dtype=torch.uint8)[:, :, :1]]
)
def test_engine_cache_views_rejected(bad):
    from snapmla_ext.cache import as_cache_tensor

    with pytest.raises(ValueError, match=r"k_cache must have shape \(num_blocks, 41216\) or be a contiguous view"):
        as_cache_tensor(bad)
