"""The fused quantization kernels against snapmla_ext.reference, bit for bit (docs/numerics_contract.md section 7).

Each kernel runs first, on NaN-poisoned memory where it can (the cache starts as 0xFF bytes; the allocator is
handed a NaN block of the output's size just before a fetch), then the reference is computed. Quantization is
always checked against the reference run on the CPU, the oracle itself (device-independent numerics are the
reference's job: see div_ieee there); the fetch references (products only) run on the GPU for the large cases.
Non-finite inputs follow the formulas of snapmla_ext/reference/quant.py; NaN payload bits are not part of the
contract (the CPU and the GPU spell NaN differently), so those cases compare NaN positions plus the bits of
every other element.
"""

import math

import pytest
import torch

from snapmla_ext import layout as L
from snapmla_ext import quant_ops, reference
from snapmla_ext._ext import load_ops
from snapmla_ext.cache import SnapMLAKVCache, read_part, scale_view
from tests.utils.compare import assert_bitwise_equal, assert_same_nonfinite
from tests.utils.data import make_kv_rows, make_paged_inputs, make_q

pytestmark = pytest.mark.gpu
DEVICE = "cuda"
SLOT_DTYPES = [torch.int32, torch.int64]


def ops():
    return load_ops()


# ---------------------------------------------------------------- helpers
def _bits(t: torch.Tensor) -> torch.Tensor:
    int_of_size = {1: torch.uint8, 2: torch.int16, 4: torch.int32}
    return t.detach().cpu().contiguous().view(int_of_size[t.element_size()])


def assert_bits_equal_nan_any(actual: torch.Tensor, expected: torch.Tensor, name: str) -> None:
    """Same NaN / +-inf positions and the same bits everywhere else (NaN payloads may differ)."""
    assert actual.dtype == expected.dtype, f"{name}: dtype {actual.dtype} != {expected.dtype}"
    assert_same_nonfinite(actual.float(), expected.float(), name)
    nan = torch.isnan(expected.detach().cpu().float())
    a, e = _bits(actual), _bits(expected)
    assert_bitwise_equal(a.masked_fill(nan, 0), e.masked_fill(nan, 0), name)


def assert_quantized_equal(got, want, name, nan_any=False):
    check = assert_bits_equal_nan_any if nan_any else assert_bitwise_equal
    for part, g, w in zip(("content", "rope", "scale"), got, want):
        assert g.is_contiguous(), f"{name}.{part} is not contiguous"
        check(g.cpu(), w.cpu(), f"{name}.{part}")


def assert_cache_equal(got: torch.Tensor, want: torch.Tensor, name: str) -> None:
    """Whole caches, untouched (0xFF) bytes included; NaN payloads free (poisoned bytes are NaN in every part)."""
    got, want = got.cpu(), want.cpu()
    for part in ("content", "rope", "scale"):
        g, w = (scale_view(x) if part == "scale" else read_part(x, part) for x in (got, want))
        # read_part reads both caches through layout.py's byte map: a kernel byte off its place shows here.
        assert_bits_equal_nan_any(g, w, f"{name}.{part}")


def edge_rows() -> torch.Tensor:
    """(26, 576) bf16 rows with the values that break quantizers: zeros, +-448, huge, tiny, subnormal, ties,
    NaN / inf in the content or the RoPE part, -0."""
    gen = torch.Generator().manual_seed(7)
    rows = []

    def row(content, rope=None):
        r = torch.zeros(L.D_QK)
        r[: L.D_CONTENT] = content
        r[L.D_CONTENT :] = torch.randn(L.D_ROPE, generator=gen) * 0.1 if rope is None else rope
        rows.append(r)

    rnd = lambda scale=1.0: torch.randn(L.D_CONTENT, generator=gen) * scale  # noqa: E731
    row(torch.zeros(L.D_CONTENT), torch.zeros(L.D_ROPE))                      # all zero: s = floor / 448
    row(-torch.zeros(L.D_CONTENT), -torch.zeros(L.D_ROPE))                    # -0
    c = rnd(100.0); c[3], c[9] = 448.0, -448.0; row(c)                         # exact +-448
    row(rnd(1e37), torch.randn(L.D_ROPE, generator=gen) * 1e37)               # near the bf16 max
    row(torch.full((L.D_CONTENT,), 3.3e38))                                   # all at the bf16 max
    row(rnd(1e-30))                                                           # amax below the floor
    row(rnd(1e-39))                                                           # bf16 subnormals
    row(rnd(1e-6), torch.randn(L.D_ROPE, generator=gen) * 1e3)                # RoPE-heavy (r' large)
    row(rnd(1e-30), torch.full((L.D_ROPE,), 3e38))                            # RoPE saturates at 2^32
    c = rnd(); c[11] = L.CONTENT_MAX; row(c, torch.full((L.D_ROPE,), -L.ROPE_MAX))  # the input range's edges
    c = rnd(); c[12] = -65792.0; row(c, torch.full((L.D_ROPE,), 4311744512.0))  # one bf16 step past: saturates
    c = torch.arange(L.D_CONTENT, dtype=torch.float32) * 2.0**-10; c[0] = 448.0; row(c)  # e4m3 subnormal ties
    c = torch.linspace(-448, 448, L.D_CONTENT); row(c)                        # every e4m3 binade, ties
    c = rnd(); c[5] = float("nan"); row(c)                                    # NaN in content: all NaN
    c = rnd(); c[7] = float("inf"); row(c)                                    # +inf saturates at 2^16
    c = rnd(); c[1], c[2] = float("-inf"), float("inf"); row(c)               # both infinities
    r = torch.randn(L.D_ROPE, generator=gen); r[4] = float("nan"); row(rnd(), r)   # NaN only in RoPE
    r = torch.randn(L.D_ROPE, generator=gen); r[0], r[63] = float("inf"), float("-inf"); row(rnd(), r)
    c = rnd(); c[100] = float("nan"); c[101] = float("inf"); row(c)           # NaN wins over inf
    for k in range(7):                                                        # plain rows of many scales
        row(rnd(10.0 ** (k - 3)))
    return torch.stack(rows).to(torch.bfloat16)


def _poison_allocator(numel: int, dtype=torch.bfloat16) -> None:
    """Hand the caching allocator a NaN block of this size, so an output the kernel fails to write shows NaN."""
    block = torch.full((numel,), float("nan"), dtype=dtype, device=DEVICE)
    del block


def _slots_for(n: int, num_slots: int, *, seed: int, dtype, negatives=True, out_of_range=True) -> torch.Tensor:
    """n distinct slots in [0, num_slots), then every 5th negative and every 7th past the cache (incl. huge)."""
    gen = torch.Generator().manual_seed(seed)
    slots = torch.randperm(num_slots, generator=gen)[:n].long()
    if negatives:
        slots[2::5] = -1 - torch.arange(len(slots[2::5]))
    if out_of_range:
        slots[3::7] = num_slots + torch.arange(len(slots[3::7]))
        if n > 10:
            slots[10] = torch.iinfo(dtype).max
    return slots.to(dtype)


def _valid(slots: torch.Tensor, num_slots: int) -> torch.Tensor:
    return (slots >= 0) & (slots < num_slots)


# ---------------------------------------------------------------- Fused-Q-Quant
@pytest.mark.parametrize("h_q", [1, 16, 128])
@pytest.mark.parametrize("s_q", [1, 2])
def test_quantize_q_bitwise(s_q, h_q):
    q = make_q(3, s_q, h_q, seed=100 + 10 * s_q + h_q, device=DEVICE)
    got = ops().quantize_q(q)
    assert_quantized_equal(got, reference.quantize_q(q.cpu()), f"q(3,{s_q},{h_q})")


def test_quantize_q_production_shape():
    q = make_q(128, 1, 128, seed=101, device=DEVICE)
    got = ops().quantize_q(q)
    assert_quantized_equal(got, reference.quantize_q(q.cpu()), "q(128,1,128)")


def test_quantize_q_strided():
    """(b, h, s, 640) storage viewed as (b, s, h, 576): every stride but the last is non-contiguous."""
    base = make_q(3, 16, 2, seed=102, device=DEVICE)
    wide = torch.full((3, 16, 2, 640), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    wide[..., : L.D_QK] = base
    q = wide[..., : L.D_QK].transpose(1, 2)
    assert q.shape == (3, 2, 16, 576) and not q.is_contiguous()
    got = ops().quantize_q(q)
    assert_quantized_equal(got, reference.quantize_q(q.cpu().contiguous()), "q strided")


def test_quantize_q_edge_values():
    rows = edge_rows()
    q = rows.view(2, 1, rows.shape[0] // 2, L.D_QK).to(DEVICE)
    got = ops().quantize_q(q)
    assert_quantized_equal(got, reference.quantize_q(q.cpu()), "q edge", nan_any=True)


def test_quantize_q_empty():
    content, rope, scale = ops().quantize_q(torch.empty(0, 1, 16, L.D_QK, dtype=torch.bfloat16, device=DEVICE))
    assert content.shape == (0, 1, 16, 512) and rope.shape == (0, 1, 16, 64) and scale.shape == (0, 1, 16)


# ---------------------------------------------------------------- Fused-K-Append
def _append_case(kv: torch.Tensor, slots: torch.Tensor, num_blocks: int):
    """Kernel into a poisoned cache, then the CPU reference (valid slots only) into another poisoned cache."""
    cache = SnapMLAKVCache(num_blocks, device=DEVICE)
    ops().append_kv(cache.data, kv.to(DEVICE), slots.to(DEVICE))
    ref = SnapMLAKVCache(num_blocks)
    kv, slots = kv.cpu(), slots.cpu()
    keep = _valid(slots, num_blocks * L.PAGE_BLOCK_SIZE)
    reference.append_kv(ref.data, kv[keep], slots[keep])
    return cache.data, ref.data


@pytest.mark.parametrize("slot_dtype", SLOT_DTYPES)
@pytest.mark.parametrize("n", [1, 7, 1000])
def test_append_bitwise(n, slot_dtype):
    """Random distinct slots, some negative (skipped), some past the cache (never written)."""
    num_blocks = math.ceil(n / L.PAGE_BLOCK_SIZE) + 3
    kv = make_kv_rows(n, seed=200 + n)
    slots = _slots_for(n, num_blocks * L.PAGE_BLOCK_SIZE, seed=201 + n, dtype=slot_dtype)
    got, want = _append_case(kv, slots, num_blocks)
    assert_cache_equal(got, want, f"append n={n} {slot_dtype}")


def test_append_large():
    n = 1_000_003
    num_blocks = math.ceil(n / L.PAGE_BLOCK_SIZE) + 2
    kv = make_kv_rows(n, seed=202, device=DEVICE)
    slots = _slots_for(n, num_blocks * L.PAGE_BLOCK_SIZE, seed=203, dtype=torch.int64).to(DEVICE)
    got, want = _append_case(kv, slots, num_blocks)
    got = got.cpu()
    assert torch.equal(got, want), f"append n={n}: {int((got != want).sum())} bytes differ"


@pytest.mark.parametrize("kind", ["wide_rows", "every_other_row"])
def test_append_strided_kv(kind):
    n, num_blocks = 333, 8
    kv = make_kv_rows(n, seed=204)
    if kind == "wide_rows":
        storage = torch.full((n, 640), float("nan"), dtype=torch.bfloat16)
        storage[:, : L.D_QK] = kv
        strided = storage.to(DEVICE)[:, : L.D_QK]
    else:
        storage = torch.full((2 * n, L.D_QK), float("nan"), dtype=torch.bfloat16)
        storage[::2] = kv
        strided = storage.to(DEVICE)[::2]
    assert not strided.is_contiguous()
    slots = _slots_for(n, num_blocks * L.PAGE_BLOCK_SIZE, seed=205, dtype=torch.int64)
    cache = SnapMLAKVCache(num_blocks, device=DEVICE)
    ops().append_kv(cache.data, strided, slots.to(DEVICE))
    _, want = _append_case(kv, slots, num_blocks)
    assert_cache_equal(cache.data, want, f"append {kind}")


def test_append_edge_values():
    rows = edge_rows()
    num_blocks = 2
    slots = torch.randperm(num_blocks * L.PAGE_BLOCK_SIZE, generator=torch.Generator().manual_seed(206))[: rows.shape[0]]
    got, want = _append_case(rows, slots, num_blocks)
    assert_cache_equal(got, want, "append edge")


def test_append_all_skipped_and_empty():
    cache = SnapMLAKVCache(2, device=DEVICE)
    before = cache.data.clone()
    ops().append_kv(cache.data, make_kv_rows(4, seed=207, device=DEVICE),
                    torch.tensor([-1, -5, 128, 2**31 - 1], dtype=torch.int32, device=DEVICE))
    ops().append_kv(cache.data, torch.empty(0, L.D_QK, dtype=torch.bfloat16, device=DEVICE),
                    torch.empty(0, dtype=torch.int64, device=DEVICE))
    torch.cuda.synchronize()
    assert torch.equal(cache.data, before)


@pytest.mark.parametrize("slot_dtype", SLOT_DTYPES)
@pytest.mark.parametrize("layout", ["split_of_one_row", "separate", "k_pe_with_head_dim"])
def test_append_kv_parts_equals_append_kv(slot_dtype, layout):
    """vLLM's inputs (kv_c (n, 512), k_pe (n, 64) or (n, 1, 64), slot_mapping with -1 = skip) write the same
    bytes as append_kv of the concatenated rows, into a NaN-poisoned cache; the split form reads both halves
    of one (n, 576) tensor through their strides, as vLLM's kv_lora.split([512, 64], -1) hands them over."""
    n, num_blocks = 301, 7
    kv = make_kv_rows(n, seed=230).to(DEVICE)
    slots = _slots_for(n, num_blocks * L.PAGE_BLOCK_SIZE, seed=231, dtype=slot_dtype).to(DEVICE)
    slots[::17] = -1
    if layout == "split_of_one_row":
        kv_c, k_pe = kv.split([L.D_CONTENT, L.D_ROPE], dim=-1)
    else:
        kv_c, k_pe = kv[:, : L.D_CONTENT].contiguous(), kv[:, L.D_CONTENT :].contiguous()
        if layout == "k_pe_with_head_dim":
            k_pe = k_pe.unsqueeze(1)
    got, want = SnapMLAKVCache(num_blocks, device=DEVICE), SnapMLAKVCache(num_blocks, device=DEVICE)
    got.data.fill_(0xFF)
    want.data.fill_(0xFF)  # 0xFF bytes: NaN in every part
    ops().append_kv(want.data, kv, slots)
    quant_ops.append_kv_parts(got.data, kv_c, k_pe, slots)
    torch.cuda.synchronize()
    assert_cache_equal(got.data, want.data, f"append_kv_parts {layout} {slot_dtype}")


def test_append_via_cache_object():
    cache = SnapMLAKVCache(3, device=DEVICE)
    kv = make_kv_rows(50, seed=211)
    slots = _slots_for(50, 192, seed=212, dtype=torch.int32, out_of_range=False)
    quant_ops.append_kv(cache, kv.to(DEVICE), slots.to(DEVICE))
    ref = SnapMLAKVCache(3)
    keep = slots >= 0
    reference.append_kv(ref.data, kv[keep], slots[keep])
    assert_cache_equal(cache.data, ref.data, "append via SnapMLAKVCache")


# ---------------------------------------------------------------- Fused-Fetch-Dequant
def _filled_cache(num_blocks: int, num_written: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A CPU cache with num_written random tokens written by the reference; the rest stays 0xFF (NaN)."""
    cache = SnapMLAKVCache(num_blocks)
    slots = torch.randperm(num_blocks * L.PAGE_BLOCK_SIZE, generator=torch.Generator().manual_seed(seed))[:num_written]
    reference.append_kv(cache.data, make_kv_rows(num_written, seed=seed + 1), slots)
    return cache.data, slots


def _fetch_slots_expected(cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """The kernel's rule: a slot outside [0, num_slots) gives a zero row (the reference gives it for < 0)."""
    clean = torch.where(_valid(slots, cache.shape[0] * L.PAGE_BLOCK_SIZE), slots.long(), -1)
    return reference.fetch_dequant(cache, clean)


@pytest.mark.parametrize("slot_dtype", SLOT_DTYPES)
@pytest.mark.parametrize("n", [1, 7, 1000])
def test_fetch_slots_bitwise(n, slot_dtype):
    """Written slots (repeats allowed), never-written NaN slots, negative and out-of-range slots."""
    num_blocks = 20
    cache, written = _filled_cache(num_blocks, 700, seed=300 + n)
    gen = torch.Generator().manual_seed(301 + n)
    slots = written[torch.randint(0, written.numel(), (n,), generator=gen)].clone()
    slots[1::9] = torch.randint(0, num_blocks * L.PAGE_BLOCK_SIZE, (len(slots[1::9]),), generator=gen)  # maybe NaN
    slots[2::5] = -3
    slots[3::7] = num_blocks * L.PAGE_BLOCK_SIZE + 5
    if n > 10:
        slots[10] = torch.iinfo(slot_dtype).max
    slots = slots.to(slot_dtype)
    cache_dev = cache.to(DEVICE)
    _poison_allocator(n * L.D_QK)
    got = ops().fetch_dequant_slots(cache_dev, slots.to(DEVICE))
    assert_bits_equal_nan_any(got, _fetch_slots_expected(cache, slots), f"fetch slots n={n} {slot_dtype}")


def test_fetch_slots_large():
    n = 1_000_003
    num_blocks = math.ceil(n / L.PAGE_BLOCK_SIZE) + 2
    cache = SnapMLAKVCache(num_blocks, device=DEVICE)
    slots = _slots_for(n, num_blocks * L.PAGE_BLOCK_SIZE, seed=302, dtype=torch.int64, out_of_range=False).to(DEVICE)
    ops().append_kv(cache.data, make_kv_rows(n, seed=303, device=DEVICE), slots)
    fetch = slots.flip(0)
    got = ops().fetch_dequant_slots(cache.data, fetch)
    want = reference.fetch_dequant(cache.data, fetch)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16)), "fetch slots n=1000003 differs"


def test_fetch_slots_empty():
    out = ops().fetch_dequant_slots(SnapMLAKVCache(1, device=DEVICE).data, torch.empty(0, dtype=torch.int32, device=DEVICE))
    assert out.shape == (0, L.D_QK) and out.dtype == torch.bfloat16


def _kernel_append(cache_data, kv, slots):
    ops().append_kv(cache_data, kv, slots)


PAGED_CASES = {
    "one_token": [1],
    "mixed": [0, 5, 64, 65, 130, 0, 1],
    "all_empty": [0, 0, 0],
    "b300": torch.randint(0, 200, (300,), generator=torch.Generator().manual_seed(9)).tolist(),  # > 256: multi-chunk scan
}


@pytest.mark.parametrize("case", list(PAGED_CASES))
@pytest.mark.parametrize("give_num_tokens", [True, False])
def test_fetch_paged_bitwise(case, give_num_tokens):
    """Pages in random order, a sentinel block id past each request's pages, unused pages NaN."""
    seqlens = PAGED_CASES[case]
    inp = make_paged_inputs(len(seqlens), 1, 1, seqlens, seed=400 + len(seqlens), device=DEVICE, append=_kernel_append)
    total = sum(seqlens)
    _poison_allocator(max(total, 1) * L.D_QK)
    if give_num_tokens:
        got = ops().fetch_dequant_paged(inp.cache.data, inp.block_table, inp.cache_seqlens, total)
    else:
        got = quant_ops.fetch_dequant(inp.cache, block_table=inp.block_table, seqlens=inp.cache_seqlens)
    want = reference.fetch_dequant(inp.cache.data.cpu(), block_table=inp.block_table.cpu(), seqlens=inp.cache_seqlens.cpu())
    assert_bits_equal_nan_any(got, want, f"fetch paged {case}")


def test_fetch_paged_num_tokens_past_and_short_of_total():
    seqlens = [3, 70, 0, 9]
    inp = make_paged_inputs(4, 1, 1, seqlens, seed=401, device=DEVICE, append=_kernel_append)
    want = reference.fetch_dequant(inp.cache.data.cpu(), block_table=inp.block_table.cpu(), seqlens=inp.cache_seqlens.cpu())
    _poison_allocator((82 + 5) * L.D_QK)
    longer = ops().fetch_dequant_paged(inp.cache.data, inp.block_table, inp.cache_seqlens, 82 + 5)
    assert_bitwise_equal(longer[:82].cpu(), want, "rows up to sum(seqlens)")
    assert_bitwise_equal(longer[82:].cpu(), torch.zeros(5, L.D_QK, dtype=torch.bfloat16), "rows past sum(seqlens)")
    shorter = ops().fetch_dequant_paged(inp.cache.data, inp.block_table, inp.cache_seqlens, 40)
    assert_bitwise_equal(shorter.cpu(), want[:40], "num_tokens < sum(seqlens)")


def test_fetch_paged_narrow_view_reads_rows_through_their_stride():
    """A block-table view narrower than the lengths (as engines' captured graphs pass it) reaches the pages past
    its width through the row stride, up to the end of the table's storage, like the decode: the same bits as
    the full table. The last row's reach ends with the storage: its length is clamped there."""
    seqlens = [300, 65, 190]
    inp = make_paged_inputs(3, 1, 1, seqlens, seed=403, device=DEVICE, append=_kernel_append)
    full = inp.block_table  # (3, 6): 5 pages for the longest request, then a sentinel
    want = ops().fetch_dequant_paged(inp.cache.data, full, inp.cache_seqlens, sum(seqlens))
    for width in (1, 2):
        got = ops().fetch_dequant_paged(inp.cache.data, full[:, :width], inp.cache_seqlens, sum(seqlens))
        assert_bitwise_equal(got, want, f"view of width {width}")
    # A view of rows 1..2 only: row 2 (the view's last) may reach the storage's end, 6 entries, no further.
    tail = full[1:]
    lens = torch.tensor([65, 6 * 64 + 100], dtype=torch.int32, device=DEVICE)
    full[2, 3:] = 0  # pages past the request's own 3 now point at page 0 (valid ids), to be read up to the clamp
    got = ops().fetch_dequant_paged(inp.cache.data, tail[:, :1], lens, 65 + 6 * 64 + 100)
    ref = reference.fetch_dequant(inp.cache.data, block_table=tail, seqlens=torch.tensor([65, 6 * 64],
                                  dtype=torch.int32, device=DEVICE))
    assert_bits_equal_nan_any(got[: 65 + 6 * 64], ref, "rows up to the storage's end")
    assert_bitwise_equal(got[65 + 6 * 64 :], torch.zeros(100, L.D_QK, dtype=torch.bfloat16, device=DEVICE),
                         "rows past the storage's end (clamped: zero)")


def test_fetch_paged_large():
    seqlens = [40_000 + 977 * i for i in range(9)]  # ~ 395k tokens, odd lengths
    inp = make_paged_inputs(len(seqlens), 1, 1, seqlens, seed=402, device=DEVICE, append=_kernel_append)
    total = sum(seqlens)
    got = ops().fetch_dequant_paged(inp.cache.data, inp.block_table, inp.cache_seqlens, total)
    want = reference.fetch_dequant(inp.cache.data, block_table=inp.block_table, seqlens=inp.cache_seqlens)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16)), f"fetch paged {total} tokens differs"


def test_quantize_compiles():
    """The fake impls let torch.compile trace through the ops (fullgraph)."""
    @torch.compile(fullgraph=True, backend="aot_eager")  # functionalizes append_kv; needs no Triton
    def f(q, cache, kv, slots):
        content, rope, scale = torch.ops.snapmla.quantize_q(q)
        torch.ops.snapmla.append_kv(cache, kv, slots)
        return content.float().sum() + scale.sum(), torch.ops.snapmla.fetch_dequant_slots(cache, slots)

    ops()
    q = make_q(2, 1, 16, seed=500, device=DEVICE)
    cache = SnapMLAKVCache(1, device=DEVICE).data
    kv = make_kv_rows(3, seed=501, device=DEVICE)
    slots = torch.tensor([0, 5, 9], device=DEVICE)
    _, out = f(q, cache, kv, slots)
    assert_bitwise_equal(out.cpu(), reference.fetch_dequant(cache.cpu(), slots.cpu()), "compiled roundtrip")


# ---------------------------------------------------------------- error paths on the GPU
# Last in the file: on the H200 run of 2026-11-29 the first TORCH_CHECK failure raised from the CUDA key
# (test_append_checked_mode) ended the pytest process with a segfault, so these must not hide the tests above.
def test_append_checked_mode(monkeypatch):
    monkeypatch.setenv("SNAPMLA_CHECK_SLOTS", "1")
    cache = SnapMLAKVCache(2, device=DEVICE)
    kv = make_kv_rows(2, seed=208, device=DEVICE)
    ops().append_kv(cache.data, kv, torch.tensor([0, 127], device=DEVICE))
    with pytest.raises(RuntimeError, match=r"slots must be < num_blocks \* 64 = 128 .* got a slot 128"):
        ops().append_kv(cache.data, kv, torch.tensor([0, 128], device=DEVICE))


def test_append_kv_on_cpu():
    cache = SnapMLAKVCache(2, device=DEVICE)
    with pytest.raises(RuntimeError, match="kv must be a CUDA tensor"):
        ops().append_kv(cache.data, make_kv_rows(2, seed=209), torch.tensor([0, 1], device=DEVICE))


def test_append_slots_on_cpu():
    cache = SnapMLAKVCache(2, device=DEVICE)
    with pytest.raises(RuntimeError, match="slots must be a CUDA tensor"):
        ops().append_kv(cache.data, make_kv_rows(2, seed=210, device=DEVICE), torch.tensor([0, 1]))


def test_fetch_slots_on_cpu():
    with pytest.raises(RuntimeError, match="slots must be a CUDA tensor"):
        ops().fetch_dequant_slots(SnapMLAKVCache(1, device=DEVICE).data, torch.tensor([0]))


def test_fetch_paged_seqlens_on_cpu():
    cache = SnapMLAKVCache(1, device=DEVICE).data
    bt = torch.zeros(1, 1, dtype=torch.int32, device=DEVICE)
    with pytest.raises(RuntimeError, match="seqlens must be a CUDA tensor"):
        ops().fetch_dequant_paged(cache, bt, torch.tensor([1], dtype=torch.int32), 1)
