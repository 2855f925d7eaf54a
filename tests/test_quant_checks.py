"""Argument checks of the quantization operators (csrc/api/quant_api.cpp), one test per message, on CPU tensors.

The C++ entry points check dtype -> shape -> layout -> device, so every message but the device ones fires on a
CPU tensor; a CPU tensor that passes everything else gets "<arg> must be a CUDA tensor". Needs the compiled
extension (`requires_ext`), not a GPU. Also: the fake impls (shapes for torch.compile) and the CPU path of
snapmla_ext.quant_ops (the reference).
"""

import pytest
import torch

from snapmla_ext import layout as L
from snapmla_ext import quant_ops, reference

PAGE = L.PAGE_BYTES


def _q(*shape, dtype=torch.bfloat16):
    return torch.zeros(*shape, dtype=dtype)


def _cache(num_blocks=2, dtype=torch.uint8):
    return torch.zeros(num_blocks, PAGE, dtype=dtype)


def _kv(n=3):
    return torch.zeros(n, L.D_QK, dtype=torch.bfloat16)


def _slots(n=3, dtype=torch.int32):
    return torch.zeros(n, dtype=dtype)


def _raises(match, fn, *args):
    with pytest.raises(RuntimeError, match=match):
        fn(*args)


# ---- quantize_q ----
def test_quantize_q_dtype(requires_ext):
    _raises(r"q must have dtype BFloat16, got Float", requires_ext.quantize_q, _q(2, 1, 3, 576, dtype=torch.float32))


def test_quantize_q_dims(requires_ext):
    _raises(r"q must have 4 dimensions, got 3", requires_ext.quantize_q, _q(2, 3, 576))


def test_quantize_q_head_dim(requires_ext):
    _raises(r"q.shape\[3\] must be 576, got 512", requires_ext.quantize_q, _q(2, 1, 3, 512))


def test_quantize_q_last_dim_stride(requires_ext):
    q = _q(2, 1, 576, 3).transpose(2, 3)
    _raises(r"q must be contiguous in its last dimension", requires_ext.quantize_q, q)


def test_quantize_q_row_alignment(requires_ext):
    q = _q(2, 1, 3, 580)[..., 1:577]  # rows start 2 B past a 16-B boundary
    _raises(r"q: data pointer must be 16-byte aligned \(16-byte loads\)", requires_ext.quantize_q, q)


def test_quantize_q_row_stride(requires_ext):
    q = _q(1, 1, 3, 581)[..., :576]  # head stride 581 elements (size-1 dims are ignored)
    _raises(r"q: stride\(2\) = \d+ elements must be a multiple of 16 bytes", requires_ext.quantize_q, q)


def test_quantize_q_device(requires_ext):
    _raises(r"q must be a CUDA tensor, got a tensor on cpu", requires_ext.quantize_q, _q(2, 1, 3, 576))


# ---- append_kv ----
def test_append_cache_dtype(requires_ext):
    _raises(r"kv_cache must have dtype Byte, got Char", requires_ext.append_kv, _cache(dtype=torch.int8), _kv(), _slots())


def test_append_cache_dims(requires_ext):
    _raises(r"kv_cache must have 2 dimensions, got 1", requires_ext.append_kv, torch.zeros(PAGE, dtype=torch.uint8), _kv(), _slots())


def test_append_cache_page_bytes(requires_ext):
    bad = torch.zeros(2, 1024, dtype=torch.uint8)
    _raises(rf"kv_cache.shape\[1\] must be {PAGE}, got 1024", requires_ext.append_kv, bad, _kv(), _slots())


def test_append_kv_dtype(requires_ext):
    _raises(r"kv must have dtype BFloat16, got Half", requires_ext.append_kv, _cache(), _kv().half(), _slots())


def test_append_slots_dtype(requires_ext):
    _raises(r"slots must have dtype Int or Long, got Float", requires_ext.append_kv, _cache(), _kv(), _slots(dtype=torch.float32))


def test_append_kv_dims(requires_ext):
    _raises(r"kv must have 2 dimensions, got 3", requires_ext.append_kv, _cache(), _kv().unsqueeze(0), _slots())


def test_append_kv_width(requires_ext):
    _raises(r"kv.shape\[1\] must be 576, got 512", requires_ext.append_kv, _cache(), _kv()[:, :512], _slots())


def test_append_slots_dims(requires_ext):
    _raises(r"slots must have 1 dimensions, got 2", requires_ext.append_kv, _cache(), _kv(), _slots().view(1, 3))


def test_append_slots_length(requires_ext):
    _raises(r"slots must have one entry per row of kv \(3\), got 4", requires_ext.append_kv, _cache(), _kv(), _slots(4))


def test_append_cache_contiguous(requires_ext):
    cache = torch.zeros(4, PAGE, dtype=torch.uint8)[::2]
    _raises(r"kv_cache must be contiguous", requires_ext.append_kv, cache, _kv(), _slots())


def test_append_kv_last_dim_stride(requires_ext):
    kv = torch.zeros(576, 3, dtype=torch.bfloat16).t()
    _raises(r"kv must be contiguous in its last dimension", requires_ext.append_kv, _cache(), kv, _slots())


def test_append_kv_row_stride(requires_ext):
    kv = torch.zeros(3, 579, dtype=torch.bfloat16)[:, :576]
    _raises(r"kv: stride\(0\) = \d+ elements must be a multiple of 16 bytes", requires_ext.append_kv, _cache(), kv, _slots())


def test_append_slots_contiguous(requires_ext):
    _raises(r"slots must be contiguous", requires_ext.append_kv, _cache(), _kv(), _slots(6)[::2])


def test_append_device(requires_ext):
    _raises(r"kv_cache must be a CUDA tensor, got a tensor on cpu", requires_ext.append_kv, _cache(), _kv(), _slots())


def _kv_c(n=3):
    return torch.zeros(n, L.D_CONTENT, dtype=torch.bfloat16)


def _k_pe(n=3):
    return torch.zeros(n, L.D_ROPE, dtype=torch.bfloat16)


@pytest.mark.parametrize("match,args", [
    (r"kv_cache must have dtype Byte, got Char", lambda: (_cache(dtype=torch.int8), _kv_c(), _k_pe(), _slots())),
    (rf"kv_cache.shape\[1\] must be {PAGE}, got 1024",
     lambda: (torch.zeros(2, 1024, dtype=torch.uint8), _kv_c(), _k_pe(), _slots())),
    (r"slots must have dtype Int or Long, got Float", lambda: (_cache(), _kv_c(), _k_pe(), _slots(dtype=torch.float32))),
    (r"kv_c must have dtype BFloat16, got Half", lambda: (_cache(), _kv_c().half(), _k_pe(), _slots())),
    (r"kv_c.shape\[1\] must be 512, got 576", lambda: (_cache(), _kv(), _k_pe(), _slots())),
    (r"kv_c must have 2 dimensions, got 3", lambda: (_cache(), _kv_c().unsqueeze(1), _k_pe(), _slots())),
    (r"k_pe must have dtype BFloat16, got Float", lambda: (_cache(), _kv_c(), _k_pe().float(), _slots())),
    (r"k_pe.shape\[1\] must be 64, got 32", lambda: (_cache(), _kv_c(), _k_pe()[:, :32], _slots())),
    (r"k_pe must be contiguous in its last dimension",
     lambda: (_cache(), _kv_c(), torch.zeros(64, 3, dtype=torch.bfloat16).t(), _slots())),
    (r"k_pe: stride\(0\) = \d+ elements must be a multiple of 16 bytes",
     lambda: (_cache(), _kv_c(), torch.zeros(3, 67, dtype=torch.bfloat16)[:, :64], _slots())),
    (r"k_pe must have one row per row of kv_c \(3\), got 4", lambda: (_cache(), _kv_c(), _k_pe(4), _slots())),
    (r"slots must have one entry per row of kv_c \(3\), got 5", lambda: (_cache(), _kv_c(), _k_pe(), _slots(5))),
    (r"kv_cache must be a CUDA tensor, got a tensor on cpu", lambda: (_cache(), _kv_c(), _k_pe(), _slots())),
])
def test_append_kv_parts_checks(requires_ext, match, args):
    """append_kv_parts (an engine's kv_c and k_pe): each message names its argument."""
    _raises(match, requires_ext.append_kv_parts, *args())


def test_append_kv_parts_cpu_matches_append_kv():
    """The CPU path of quant_ops.append_kv_parts (the reference) writes what append_kv writes for the
    concatenated rows, with vLLM's (n, 1, 64) k_pe and -1 slots skipped."""
    g = torch.Generator().manual_seed(3)
    kv = (torch.randn(5, L.D_QK, generator=g) * 3).to(torch.bfloat16)
    slots = torch.tensor([3, -1, 64, 127, 0], dtype=torch.int64)
    a, b = _cache(), _cache()
    quant_ops.append_kv(a, kv[slots >= 0], slots[slots >= 0])
    quant_ops.append_kv_parts(b, kv[:, : L.D_CONTENT], kv[:, L.D_CONTENT :].unsqueeze(1), slots)
    assert torch.equal(a, b)


# ---- fetch_dequant_slots ----
def test_fetch_slots_cache_page_bytes(requires_ext):
    bad = torch.zeros(2, 64, dtype=torch.uint8)
    _raises(rf"kv_cache.shape\[1\] must be {PAGE}, got 64", requires_ext.fetch_dequant_slots, bad, _slots())


def test_fetch_slots_dtype(requires_ext):
    _raises(r"slots must have dtype Int or Long, got Short", requires_ext.fetch_dequant_slots, _cache(), _slots(dtype=torch.int16))


def test_fetch_slots_dims(requires_ext):
    _raises(r"slots must have 1 dimensions, got 0", requires_ext.fetch_dequant_slots, _cache(), torch.tensor(3, dtype=torch.int32))


def test_fetch_slots_device(requires_ext):
    _raises(r"kv_cache must be a CUDA tensor", requires_ext.fetch_dequant_slots, _cache(), _slots())


# ---- fetch_dequant_paged ----
def _bt(b=3, pages=4, dtype=torch.int32):
    return torch.zeros(b, pages, dtype=dtype)


def test_fetch_paged_block_table_dtype(requires_ext):
    _raises(r"block_table must have dtype Int, got Long", requires_ext.fetch_dequant_paged, _cache(), _bt(dtype=torch.int64), _slots(), 0)


def test_fetch_paged_seqlens_dtype(requires_ext):
    _raises(r"seqlens must have dtype Int, got Long", requires_ext.fetch_dequant_paged, _cache(), _bt(), _slots(dtype=torch.int64), 0)


def test_fetch_paged_block_table_dims(requires_ext):
    _raises(r"block_table must have 2 dimensions, got 1", requires_ext.fetch_dequant_paged, _cache(), _slots(), _slots(), 0)


def test_fetch_paged_seqlens_dims(requires_ext):
    _raises(r"seqlens must have 1 dimensions, got 2", requires_ext.fetch_dequant_paged, _cache(), _bt(), _bt(), 0)


def test_fetch_paged_seqlens_length(requires_ext):
    _raises(r"seqlens must have one entry per row of block_table \(3\), got 2", requires_ext.fetch_dequant_paged, _cache(), _bt(), _slots(2), 0)


def test_fetch_paged_too_many_requests(requires_ext):
    b = 48 * 1024 + 1
    _raises(r"block_table.shape\[0\] \(requests\) must be <= 49152, got 49153", requires_ext.fetch_dequant_paged,
            _cache(), _bt(b, 0), _slots(b), 0)


def test_fetch_paged_num_tokens_negative(requires_ext):
    _raises(r"num_tokens must be >= 0, got -1", requires_ext.fetch_dequant_paged, _cache(), _bt(), _slots(), -1)


def test_fetch_paged_num_tokens_int32(requires_ext):
    _raises(r"num_tokens must fit in int32", requires_ext.fetch_dequant_paged, _cache(), _bt(), _slots(), 2**31)


def test_fetch_paged_block_table_last_dim_stride(requires_ext):
    _raises(r"block_table must be contiguous in its last dimension", requires_ext.fetch_dequant_paged, _cache(), _bt(4, 3).t(), _slots(), 0)


def test_fetch_paged_seqlens_contiguous(requires_ext):
    _raises(r"seqlens must be contiguous", requires_ext.fetch_dequant_paged, _cache(), _bt(), _slots(6)[::2], 0)


def test_fetch_paged_device(requires_ext):
    _raises(r"kv_cache must be a CUDA tensor", requires_ext.fetch_dequant_paged, _cache(), _bt(), _slots(), 0)


# ---- fake impls (torch.compile tracing) ----
def test_fake_impls_shapes(requires_ext):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(3, 2, 16, L.D_QK, dtype=torch.bfloat16, device="cuda")
        content, rope, scale = torch.ops.snapmla.quantize_q(q)
        assert (content.shape, content.dtype) == ((3, 2, 16, 512), torch.float8_e4m3fn)
        assert (rope.shape, rope.dtype) == ((3, 2, 16, 64), torch.bfloat16)
        assert (scale.shape, scale.dtype) == ((3, 2, 16), torch.float32)
        cache = torch.empty(4, PAGE, dtype=torch.uint8, device="cuda")
        slots = torch.empty(7, dtype=torch.int64, device="cuda")
        torch.ops.snapmla.append_kv(cache, torch.empty(7, L.D_QK, dtype=torch.bfloat16, device="cuda"), slots)
        out = torch.ops.snapmla.fetch_dequant_slots(cache, slots)
        assert (out.shape, out.dtype) == ((7, 576), torch.bfloat16)
        bt = torch.empty(2, 3, dtype=torch.int32, device="cuda")
        out = torch.ops.snapmla.fetch_dequant_paged(cache, bt, torch.empty(2, dtype=torch.int32, device="cuda"), 11)
        assert (out.shape, out.dtype) == ((11, 576), torch.bfloat16)


# ---- the Python wrappers send CPU tensors to the reference, never to the compiled ops ----
def test_wrappers_dispatch_cpu_tensors_to_the_reference(monkeypatch):
    calls = []
    for name in ("quantize_q", "append_kv", "fetch_dequant"):
        monkeypatch.setattr(reference, name, lambda *a, _name=name, **k: calls.append(_name) or _name)

    def no_kernels():
        raise AssertionError("a CPU tensor reached the compiled operators")

    monkeypatch.setattr(quant_ops, "load_ops", no_kernels)
    cache = torch.zeros(2, PAGE, dtype=torch.uint8)
    assert quant_ops.quantize_q(torch.zeros(1, 1, 2, L.D_QK, dtype=torch.bfloat16)) == "quantize_q"
    assert quant_ops.append_kv(cache, torch.zeros(3, L.D_QK, dtype=torch.bfloat16), torch.arange(3)) is None
    assert quant_ops.fetch_dequant(cache, torch.arange(3)) == "fetch_dequant"
    assert calls == ["quantize_q", "append_kv", "fetch_dequant"]


def test_wrapper_fetch_needs_one_form():
    with pytest.raises(ValueError, match="exactly one of the two forms"):
        quant_ops.fetch_dequant(torch.zeros(1, PAGE, dtype=torch.uint8))
