"""Schedule rows taken at run time (csrc/kernels/sm90/decode_fp8/row_queue.cuh), GPU.

With more metadata rows than the grid has CTAs per m-tile column (sm_count / m-tiles), each CTA walks its own
row and then takes further rows from a counter in the metadata as it finishes. Which CTA runs a row must not
change a bit of the result, the counters must be back at 0 after every call (the next call, a graph replay or
another layer reuses the metadata), and rows with no work (more rows than blocks) must not confuse the walk.
SNAPMLA_STATIC_ROWS=1 gives every row its own CTA, the layout before the row queue: the comparison baseline.
The CUDA-graph replay with taken rows is test_decode_graph_gpu.py's forced_split case (300 rows, 66 CTAs).
"""

import pytest
import torch

from snapmla_ext import layout as L
from snapmla_ext import reference
from snapmla_ext.decode_ops import SCHED_META_INTS, flash_mla_with_kvcache, get_mla_metadata
from utils.compare import assert_same_decode_bits, max_abs, rel_l2
from utils.data import make_paged_inputs

pytestmark = pytest.mark.gpu

ROWS_TAKEN, CTAS_DONE = 5, 6  # csrc/kernels/sched/sched_meta.h


def _sm_count():
    return torch.cuda.get_device_properties(0).multi_processor_count


# (name, kernel, s_q, h_q, seqlens, causal, rows as a multiple of the CTAs per column + an odd extra)
CASES = [
    ("narrow_h16_varlen", "narrow", 1, 16, [9000, 0, 3000, 64 * 70 + 1, 200, 1], False, (3, 7)),
    ("narrow_h8_causal", "narrow", 2, 8, [5000, 130, 64], True, (2, 1)),
    ("wide_h64", "wide", 1, 64, [12000, 64, 0, 7777, 4096], False, (3, 5)),
    ("wide_h128_sq2_causal", "wide", 2, 128, [6000, 1, 3333], True, (4, 3)),
    # More rows than blocks: most rows hold overhead only (BEGIN_REQ > END_REQ) and the walk skips them.
    ("wide_h32_empty_rows", "wide", 1, 32, [100, 0, 64], False, (4, 0)),
]


def _call(p, s_q, h_q, causal, rows):
    meta, splits = get_mla_metadata(p.cache_seqlens, s_q * h_q, 1, num_sm_parts=rows)
    out, lse = flash_mla_with_kvcache(p.q, p.cache, p.block_table, p.cache_seqlens, L.D_CONTENT, meta, splits,
                                      causal=causal)
    torch.cuda.synchronize()
    return (out, lse), meta


@pytest.mark.parametrize("name,kernel,s_q,h_q,seqlens,causal,rows", CASES, ids=[c[0] for c in CASES])
def test_taken_rows_match_static_rows(monkeypatch, name, kernel, s_q, h_q, seqlens, causal, rows):
    monkeypatch.setenv("SNAPMLA_DECODE_KERNEL", kernel)
    monkeypatch.delenv("SNAPMLA_STATIC_ROWS", raising=False)
    m_tiles = -(-s_q * h_q // 64)
    n_rows = rows[0] * max(_sm_count() // m_tiles, 1) + rows[1]
    p = make_paged_inputs(len(seqlens), s_q, h_q, seqlens, seed=sum(map(ord, name)), device="cuda")

    taken, meta = _call(p, s_q, h_q, causal, n_rows)
    assert meta.shape == (n_rows, SCHED_META_INTS)
    assert int(meta[:, ROWS_TAKEN:CTAS_DONE + 1].abs().sum()) == 0, "row counters not reset after the call"
    # The same metadata tensor again (as the next layer would): the counters started from 0, so every row ran.
    meta_again_out, lse_again = flash_mla_with_kvcache(p.q, p.cache, p.block_table, p.cache_seqlens, L.D_CONTENT,
                                                       meta, get_mla_metadata(p.cache_seqlens, s_q * h_q, 1,
                                                                              num_sm_parts=n_rows)[1], causal=causal)
    torch.cuda.synchronize()
    assert_same_decode_bits(taken, (meta_again_out, lse_again))
    assert int(meta[:, ROWS_TAKEN:CTAS_DONE + 1].abs().sum()) == 0

    monkeypatch.setenv("SNAPMLA_STATIC_ROWS", "1")
    static, _ = _call(p, s_q, h_q, causal, n_rows)
    assert_same_decode_bits(taken, static)

    ref_out, ref_lse = reference.decode(p.q, p.cache, p.block_table, p.cache_seqlens, causal=causal)
    o_err, lse_err = rel_l2(taken[0].float(), ref_out.float()), max_abs(taken[1], ref_lse)
    print(f"\n{name}: {n_rows} rows, o rel_l2 {o_err:.3e} | lse max_abs {lse_err:.3e}")
    assert torch.equal(torch.isinf(taken[1]), torch.isinf(ref_lse))
    assert o_err <= 3e-3 and lse_err <= 1e-3  # SPEC section 7, as test_decode_kernel_gpu.py


def test_static_rows_env_is_read_per_call(monkeypatch):
    """SNAPMLA_STATIC_ROWS=1 and unset give the same bits (the A/B switch of the benchmarks)."""
    monkeypatch.setenv("SNAPMLA_DECODE_KERNEL", "narrow")
    p = make_paged_inputs(2, 1, 16, [20000, 5000], seed=5, device="cuda")
    rows = 2 * _sm_count() + 1
    monkeypatch.setenv("SNAPMLA_STATIC_ROWS", "1")
    a, _ = _call(p, 1, 16, False, rows)
    monkeypatch.delenv("SNAPMLA_STATIC_ROWS")
    b, _ = _call(p, 1, 16, False, rows)
    assert_same_decode_bits(a, b)
