"""The FP8 decode kernel end to end (GPU): flash_mla_with_kvcache = Fused-Q-Quant + scheduler + decode + combine.

Against snapmla_ext.reference.decode (the exact emulation of docs/numerics_contract.md section 4) on the same quantized inputs, with
docs/numerics_contract.md section 7's tolerances: rel L2 of o <= 3e-3, 1 - cos <= 1e-5, |lse error| <= 1e-3, the same +-inf / NaN
positions. Inputs come from tests/utils/data.make_paged_inputs: random page order, NaN in every unused slot and
page, sentinel block ids past each request's pages. Every case runs with SNAPMLA_DEBUG_CHECKS=1, which pre-fills
out, lse and the split workspaces with NaN, so an element the kernels leave unwritten fails the NaN check.
The kernel runs (and is synchronised) before the reference allocates anything.
"""

import zlib

import pytest
import torch

from snapmla_ext import layout as L
from snapmla_ext import quant_ops, reference
from snapmla_ext.decode_ops import flash_mla_with_kvcache, get_mla_metadata
from snapmla_ext.reference import attention_fp64, attention_fp64_dequant, decode_dense, e4m3
from utils.compare import assert_bitwise_equal, assert_close_report, assert_same_nonfinite, rel_l2
from utils.data import make_paged_inputs
from utils.kernel_choice import force_kernel
from utils.sched_plan import split_blocks

pytestmark = pytest.mark.gpu

O_REL_L2, O_COS, LSE_ATOL = 3e-3, 1e-5, 1e-3
FORCE = 397  # num_sm_parts far above the SM count: most requests split into many pieces


@pytest.fixture(autouse=True)
def poison_outputs(monkeypatch):
    monkeypatch.setenv("SNAPMLA_DEBUG_CHECKS", "1")
    # Every case with q_rows <= 16 on the narrow kernel, forced, so that the case runs it whatever the automatic
    # choice would pick. tests/test_decode_kernel_gpu.py runs the wide kernel on q_rows <= 16 against the narrow
    # one.
    force_kernel("narrow")
    monkeypatch.delenv("SNAPMLA_FORCE_SPLIT", raising=False)


def varlen(b: int, s_k: int, seed: int, zeros: bool = True) -> list[int]:
    """b lengths in [s_k / 2, s_k], the first = s_k, every 7th 0 when zeros (deterministic per seed)."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(max(1, s_k // 2), s_k + 1, (b,), generator=g).tolist()
    lens[0] = s_k
    if zeros:
        for i in range(3, b, 7):
            lens[i] = 0
    return lens


def inputs(b, s_q, h_q, seqlens, causal, seed):
    """make_paged_inputs on the GPU. Causal lengths whose last page would hold no visible token for some query
    row (seqlen > 64, seqlen % 64 in [1, s_q)) are moved past it: the reference emulation overflows there (the
    docs/numerics_contract.md section 4 hazard, see tests/test_reference_decode.py), while the kernel leaves the row's state alone;
    test_causal_empty_last_block_stays_finite covers that case against float64."""
    if causal:
        seqlens = [n + s_q if n > 64 and 0 < n % 64 < s_q else n for n in seqlens]
    return make_paged_inputs(b, s_q, h_q, seqlens, seed=seed, device="cuda")


def run_kernel(p, s_q, h_q, causal, parts):
    meta, splits = get_mla_metadata(p.cache_seqlens, s_q * h_q, 1, num_sm_parts=parts)
    out, lse = flash_mla_with_kvcache(p.q, p.cache, p.block_table, p.cache_seqlens, L.D_CONTENT, meta, splits,
                                      causal=causal)
    torch.cuda.synchronize()
    return out, lse, meta, splits


def check_against_reference(out, lse, p, causal, pieces=None):
    """pieces: the plan's split_blocks, so that the emulation splits and rounds the partial outputs as the kernels do
    (None: one piece per request, for calls whose plan splits nothing)."""
    ref_out, ref_lse = reference.decode(p.q, p.cache, p.block_table, p.cache_seqlens, causal=causal,
                                        split_blocks=pieces)
    assert out.shape == ref_out.shape and out.dtype == torch.bfloat16
    assert lse.shape == ref_lse.shape and lse.dtype == torch.float32
    m_o = assert_close_report(out.float(), ref_out.float(), name="o", rel_l2_tol=O_REL_L2, cos_tol=O_COS)
    m_l = assert_close_report(lse, ref_lse, name="lse", atol=LSE_ATOL)
    print(f"o: rel_l2 {m_o['rel_l2']:.3e} cos_diff {m_o['cos_diff']:.3e}; lse: max_abs {m_l['max_abs']:.3e}")
    return m_o, m_l


def test_device_plan_matches_host_plan():
    seqlens = varlen(200, 70000, 42)
    for parts in (1, 66, 132, FORCE):
        dev = get_mla_metadata(torch.tensor(seqlens, dtype=torch.int32, device="cuda"), 64, 1, num_sm_parts=parts)
        host = get_mla_metadata(torch.tensor(seqlens, dtype=torch.int32), 64, 1, num_sm_parts=parts)
        assert torch.equal(dev[0].cpu(), host[0]), f"metadata differs for {parts} parts"
        assert torch.equal(dev[1].cpu(), host[1]), f"num_splits differs for {parts} parts"


# (b, s_q, h_q, seqlens, causal, num_sm_parts); None = the default plan, 1 = no split, FORCE = forced split.
CASES = [
    ("b1_single_token", 1, 1, 16, [1], False, None),
    ("b3_varlen_zero_causal", 3, 2, 20, [0, 77, 1000], True, None),
    ("b3_varlen_zero_causal_forced", 3, 2, 20, [0, 77, 1000], True, FORCE),
    ("b3_all_empty", 3, 1, 16, [0, 0, 0], False, None),
    ("b4_causal_shorter_than_s_q", 4, 4, 100, [1, 2, 3, 0], True, None),
    ("b74_h128", 74, 1, 128, varlen(74, 2048, 1), False, None),
    ("b132_sq4_h8_causal_forced", 132, 4, 8, varlen(132, 1024, 2), True, FORCE),
    ("b200_h64_nosplit", 200, 1, 64, varlen(200, 512, 3), False, 1),
    ("b1_h1_64k", 1, 1, 1, [65536], False, None),
    ("b1_h128_sq2_32k_causal_forced", 1, 2, 128, [32768], True, FORCE),
    ("b16_h32_8k", 16, 1, 32, varlen(16, 8192, 4), False, None),
    # s_q = 8 (docs/numerics_contract.md section 5: s_q from 1 to at least 8), added: 1024 query
    # rows in 16 m-tiles with a split, and 128 rows of h_q = 16 with a request shorter than s_q.
    ("b3_sq8_h128_causal_forced", 3, 8, 128, [900, 64, 2000], True, FORCE),
    ("b2_sq8_h16_causal", 2, 8, 16, [700, 5], True, None),
]


@pytest.mark.parametrize("name,b,s_q,h_q,seqlens,causal,parts", CASES, ids=[c[0] for c in CASES])
def test_decode_matches_reference(name, b, s_q, h_q, seqlens, causal, parts):
    p = inputs(b, s_q, h_q, seqlens, causal, zlib.crc32(name.encode()) % 10_000)
    out, lse, meta, _ = run_kernel(p, s_q, h_q, causal, parts)
    check_against_reference(out, lse, p, causal, pieces=split_blocks(meta, p.seqlens))


def test_forced_split_matches_reference_with_the_same_pieces():
    """The combine, exactly: the reference splits where the plan splits and merges with the same formula."""
    b, s_q, h_q, seqlens = 5, 2, 32, [3000, 0, 64, 65, 1500]
    p = inputs(b, s_q, h_q, seqlens, True, 31)
    out, lse, meta, splits = run_kernel(p, s_q, h_q, True, 50)
    assert (splits[1:] - splits[:-1]).max().item() > 1, "the plan must split something"
    check_against_reference(out, lse, p, True, pieces=split_blocks(meta, p.seqlens))


def test_deterministic():
    b, s_q, h_q = 8, 2, 64
    p = inputs(b, s_q, h_q, varlen(b, 5000, 40), True, 40)
    first = run_kernel(p, s_q, h_q, True, FORCE)
    second = run_kernel(p, s_q, h_q, True, FORCE)
    assert_bitwise_equal(second[0], first[0], "out")
    assert_bitwise_equal(second[1], first[1], "lse")


def test_split_and_unsplit_agree():
    b, s_q, h_q = 4, 1, 128
    p = make_paged_inputs(b, s_q, h_q, varlen(b, 20000, 41, zeros=False), seed=41, device="cuda")
    one = run_kernel(p, s_q, h_q, False, 1)
    many = run_kernel(p, s_q, h_q, False, FORCE)
    # The reference changes only by fp32 rounding when split (the p'/sigma ratios do not depend on the running
    # max), so the kernel's two plans must agree within the kernel's own tolerance against the reference.
    assert_close_report(many[0].float(), one[0].float(), name="o", rel_l2_tol=O_REL_L2, cos_tol=O_COS)
    assert_close_report(many[1], one[1], name="lse", atol=LSE_ATOL)


def test_quantized_q_path_is_identical():
    b, s_q, h_q = 3, 2, 64
    p = inputs(b, s_q, h_q, [700, 64, 5], True, 43)
    out, lse, meta, splits = run_kernel(p, s_q, h_q, True, None)
    qq = quant_ops.quantize_q(p.q)
    out_q, lse_q = flash_mla_with_kvcache(qq, p.cache.data, p.block_table, p.cache_seqlens, 512, meta, splits,
                                          causal=True)
    assert_bitwise_equal(out_q, out, "out")
    assert_bitwise_equal(lse_q, lse, "lse")


def test_new_style_metadata_is_filled_and_reused():
    b, s_q, h_q = 3, 1, 16
    p = make_paged_inputs(b, s_q, h_q, [100, 200, 300], seed=44, device="cuda")
    sched_meta, none = get_mla_metadata()
    out1, lse1 = flash_mla_with_kvcache(p.q, p.cache, p.block_table, p.cache_seqlens, 512, sched_meta)
    assert sched_meta.have_initialized and sched_meta.tile_scheduler_metadata.is_cuda
    out2, lse2 = flash_mla_with_kvcache(p.q, p.cache, p.block_table, p.cache_seqlens, 512, sched_meta)
    assert_bitwise_equal(out2, out1, "out")
    check_against_reference(out1, lse1, p, False, pieces=split_blocks(sched_meta.tile_scheduler_metadata, p.seqlens))


def test_seqlens_beyond_block_table_are_clamped(monkeypatch):
    """Without SNAPMLA_DEBUG_CHECKS nothing is checked on the host: the kernel clamps to the table's capacity."""
    monkeypatch.delenv("SNAPMLA_DEBUG_CHECKS")
    b, s_q, h_q = 2, 1, 16
    p = inputs(b, s_q, h_q, [100, 64], False, 48)
    capacity = p.block_table.shape[1] * L.PAGE_BLOCK_SIZE
    clamped = p.cache_seqlens.clone()
    clamped[1] = capacity
    # Request 1's sentinel pages are now inside its length: point them at a full, NaN-free page.
    p.block_table[1, 1:] = p.block_table[0, 0]
    beyond = clamped.clone()
    beyond[1] = capacity + 1000
    outs = []
    for seqlens in (clamped, beyond):
        meta, splits = get_mla_metadata(seqlens, s_q * h_q, 1, num_sm_parts=1)
        outs.append(flash_mla_with_kvcache(p.q, p.cache, p.block_table, seqlens, 512, meta, splits))
    assert_bitwise_equal(outs[1][0], outs[0][0], "out")
    assert_bitwise_equal(outs[1][1], outs[0][1], "lse")


def test_debug_check_seqlens_within_block_table():
    b, s_q, h_q = 2, 1, 16
    p = inputs(b, s_q, h_q, [100, 64], False, 49)
    seqlens = p.cache_seqlens.clone()
    seqlens[1] = p.block_table.shape[1] * L.PAGE_BLOCK_SIZE + 1  # 3 pages -> capacity 192
    meta, splits = get_mla_metadata(seqlens, s_q * h_q, 1)
    with pytest.raises(RuntimeError, match=r"cache_seqlens\[1\] must be in \[0, 192\] .*got 193"):
        flash_mla_with_kvcache(p.q, p.cache, p.block_table, seqlens, 512, meta, splits)


def test_debug_check_page_ids():
    """A page id outside the cache inside a request's pages: SNAPMLA_DEBUG_CHECKS=1 names the entry."""
    b, s_q, h_q = 2, 1, 16
    p = inputs(b, s_q, h_q, [100, 64], False, 51)
    num_blocks = p.cache.data.shape[0]
    meta, splits = get_mla_metadata(p.cache_seqlens, s_q * h_q, 1)
    for bad in (num_blocks, -1, 2147480000):
        table = p.block_table.clone()
        table[0, 1] = bad  # request 0 (100 tokens) uses pages 0 and 1
        msg = rf"block_table\[0, 1\] = {bad} is not a page of the cache \(num_blocks = {num_blocks}\)"
        with pytest.raises(RuntimeError, match=msg):
            flash_mla_with_kvcache(p.q, p.cache, table, p.cache_seqlens, 512, meta, splits)


def test_out_of_range_page_ids_read_page_zero(monkeypatch):
    """Without the debug checks nothing is checked on the host (no sync): a page id outside [0, num_blocks)
    inside a request's pages reads page 0 (the pages are bulk copies, which have no bounds; tma_producer.cuh
    page_bytes), never memory past the cache. The same call with those ids set to 0 gives the same bits."""
    monkeypatch.delenv("SNAPMLA_DEBUG_CHECKS")
    for kernel, h_q in (("narrow", 16), ("wide", 64), ("ws", 64)):
        force_kernel(kernel)
        p = inputs(3, 1, h_q, [200, 64, 130], False, 52)
        p.cache.data[0] = p.cache.data[p.block_table[1, 0]]  # page 0 := a full page of request 1 (no NaN)
        bad, zero = p.block_table.clone(), p.block_table.clone()
        for r, pg, v in ((0, 2, p.cache.data.shape[0]), (1, 0, -7), (2, 1, 2147480000)):
            bad[r, pg], zero[r, pg] = v, 0
        outs = []
        for table in (bad, zero):
            meta, splits = get_mla_metadata(p.cache_seqlens, h_q, 1, num_sm_parts=4)
            outs.append(flash_mla_with_kvcache(p.q, p.cache, table, p.cache_seqlens, 512, meta, splits))
        torch.cuda.synchronize()
        assert outs[1][0].isfinite().all(), kernel
        assert_bitwise_equal(outs[0][0], outs[1][0], f"{kernel} out")
        assert_bitwise_equal(outs[0][1], outs[1][1], f"{kernel} lse")


def test_debug_check_total_pieces():
    b, s_q, h_q = 2, 1, 16
    p = inputs(b, s_q, h_q, [100, 64], False, 50)
    meta, splits = get_mla_metadata(p.cache_seqlens, s_q * h_q, 1, num_sm_parts=4)
    splits = splits.clone()
    splits[-1] = 1000  # as if planned for another batch
    with pytest.raises(RuntimeError, match=r"num_splits\[-1\] \(total pieces\) must be in \[0, 6\].*got 1000"):
        flash_mla_with_kvcache(p.q, p.cache, p.block_table, p.cache_seqlens, 512, meta, splits)


def test_causal_empty_last_block_stays_finite():
    """Causal, last page shorter than s_q: query token 0 sees no token of the last block (token 64)."""
    b, s_q, h_q = 1, 2, 4
    p = make_paged_inputs(b, s_q, h_q, [65], seed=47, device="cuda")
    out, lse, _, _ = run_kernel(p, s_q, h_q, True, None)
    assert out.isfinite().all() and lse.isfinite().all()
    o64, lse64 = attention_fp64_dequant(quant_ops.quantize_q(p.q), p.cache, p.block_table, p.cache_seqlens,
                                        causal=True)
    assert_close_report(out.double(), o64, name="o", rel_l2_tol=4e-2)
    assert_close_report(lse.double(), lse64, name="lse", atol=1e-3)


def test_against_fp64_on_raw_data():
    """FP8's own error against float64 attention on the original BF16 rows (docs/numerics_contract.md section 7: near 3.7e-2)."""
    b, s_q, h_q = 4, 1, 64
    p = make_paged_inputs(b, s_q, h_q, varlen(b, 4096, 45, zeros=False), seed=45, device="cuda")
    out, lse, _, _ = run_kernel(p, s_q, h_q, False, None)
    o64, lse64 = attention_fp64(p.q, p.kv, p.cache_seqlens)
    err = rel_l2(out, o64)
    print(f"rel L2 vs fp64 on raw data: {err:.3e}")
    assert err <= 6e-2, f"rel L2 against float64 {err:.3e} > 6e-2"
    assert_same_nonfinite(lse, lse64.float(), "lse")


def _rope_unaware_values(x: torch.Tensor):
    """A RoPE-unaware per-token scheme: one e4m3 scale over the whole 576-dim row, RoPE quantized too."""
    xf = x.float()
    s = torch.clamp_min(xf.abs().amax(-1), L.AMAX_FLOOR) / L.FP8_E4M3_MAX
    x8 = e4m3(xf / s[..., None]).float()
    return x8[..., : L.D_CONTENT], x8[..., L.D_CONTENT :], s


def test_rope_sensitivity():
    """RoPE ~1e3 next to content ~1e-2: keeping RoPE in BF16 must beat quantizing it (docs/numerics_contract.md section 7)."""
    b, s_q, h_q, seqlens = 2, 1, 16, [150, 77]
    p = make_paged_inputs(b, s_q, h_q, seqlens, seed=46, device="cuda", content_std=1e-2, rope_std=1e3, clip=None)
    q = p.q.float()
    q[..., L.D_CONTENT :] *= 1e-2  # keeps the logits O(1)
    q = q.to(torch.bfloat16)
    meta, splits = get_mla_metadata(p.cache_seqlens, s_q * h_q, 1)
    out, _ = flash_mla_with_kvcache(q, p.cache, p.block_table, p.cache_seqlens, 512, meta, splits)
    torch.cuda.synchronize()
    o64, _ = attention_fp64(q, p.kv, p.seqlens)
    err_kernel = rel_l2(out, o64)

    n = p.kv.shape[1]
    k_c, k_r, k_s = _rope_unaware_values(torch.nan_to_num(p.kv))
    q_c, q_r, q_s = _rope_unaware_values(q.reshape(b, s_q * h_q, L.D_QK))
    visible = (torch.arange(n, device="cuda")[None, None, :] < p.cache_seqlens.long()[:, None, None]).expand(
        b, s_q * h_q, n)
    o_unaware, _ = decode_dense(q_c, q_r, q_s, k_c, k_r, k_s, visible, L.D_QK**-0.5)
    err_unaware = rel_l2(o_unaware.reshape(b, s_q, h_q, L.D_CONTENT), o64)
    print(f"rel L2 vs fp64: kernel (RoPE-aware) {err_kernel:.3e}, RoPE-unaware {err_unaware:.3e}")
    assert err_unaware > 3 * err_kernel, f"RoPE-unaware {err_unaware:.3e} not clearly worse than {err_kernel:.3e}"


def _sweep():
    cases = []
    heads = [16, 32, 64, 128, 1, 8, 20, 100]
    for bi, b in enumerate([1, 3, 74, 132, 200]):
        s_k = min(65536, (1 << 20) // b)  # about 1M cached tokens per case keeps the reference in memory and time
        for hi, h_q in enumerate(heads):
            i = bi * len(heads) + hi
            s_q = (1, 2, 4)[i % 3]
            causal = i % 2 == 1
            parts = (None, 1, FORCE)[(i // 2) % 3]
            cases.append((f"b{b}_sq{s_q}_h{h_q}_sk{s_k}_{'causal' if causal else 'full'}_{parts}", b, s_q, h_q,
                          s_k, causal, parts, i))
    return cases


@pytest.mark.slow
@pytest.mark.parametrize("name,b,s_q,h_q,s_k,causal,parts,seed", _sweep(), ids=[c[0] for c in _sweep()])
def test_decode_sweep(name, b, s_q, h_q, s_k, causal, parts, seed):
    p = inputs(b, s_q, h_q, varlen(b, s_k, seed), causal, seed)
    out, lse, meta, _ = run_kernel(p, s_q, h_q, causal, parts)
    check_against_reference(out, lse, p, causal, pieces=split_blocks(meta, p.seqlens))
