"""The reference runs on CUDA tensors too, with the same bits as on the CPU where bits are the contract.

The kernels are compared with the reference on whichever device a test picks, so the quantizers and cache ops must
give identical bits on both (IEEE division, RNE casts), and the decode emulation must agree to fp32 rounding.
Needs only a CUDA device, not the compiled extension.
"""

import pytest
import torch

from snapmla_ext.reference import attention_fp64, decode, fetch_dequant, quantize_q, quantize_rows
from utils.compare import assert_bitwise_equal, assert_close_report
from utils.data import make_kv_rows, make_paged_inputs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def test_quantize_rows_same_bits_on_cuda():
    x = make_kv_rows(1001, seed=40, content_std=0.5, rope_std=30.0, clip=None)
    x[3, 7] = float("nan")
    x[5, 9] = float("inf")
    x[6] = 0
    x[8, 520] = -float("inf")
    for got, want, name in zip(quantize_rows(x.cuda()), quantize_rows(x), ("c8", "rope", "scale")):
        assert_bitwise_equal(got.cpu(), want, name)


def test_cache_ops_same_bits_on_cuda():
    p_cpu = make_paged_inputs(3, 2, 8, [70, 0, 129], seed=41)
    p_gpu = make_paged_inputs(3, 2, 8, [70, 0, 129], seed=41, device="cuda")
    assert_bitwise_equal(p_gpu.cache.data.cpu(), p_cpu.cache.data, "cache bytes", nan_equal=False)
    got = fetch_dequant(p_gpu.cache.data, block_table=p_gpu.block_table, seqlens=p_gpu.cache_seqlens)
    want = fetch_dequant(p_cpu.cache.data, block_table=p_cpu.block_table, seqlens=p_cpu.cache_seqlens)
    assert_bitwise_equal(got.cpu(), want, "fetched rows")
    qq_gpu, qq_cpu = quantize_q(p_gpu.q), quantize_q(p_cpu.q)
    for a, b, name in zip(qq_gpu, qq_cpu, ("content", "rope", "scale")):
        assert_bitwise_equal(a.cpu(), b, name)


def test_decode_on_cuda_matches_cpu():
    p_cpu = make_paged_inputs(3, 2, 16, [200, 77, 333], seed=42)
    p_gpu = make_paged_inputs(3, 2, 16, [200, 77, 333], seed=42, device="cuda")
    o, lse = decode(p_gpu.q, p_gpu.cache, p_gpu.block_table, p_gpu.cache_seqlens, causal=True)
    o_ref, lse_ref = decode(p_cpu.q, p_cpu.cache, p_cpu.block_table, p_cpu.cache_seqlens, causal=True)
    # Only the fp32 summation order differs; a rare e4m3 rounding flip of one p8 moves o by ~1e-4.
    assert_close_report(o.cpu(), o_ref, name="o", rel_l2_tol=1e-3, cos_tol=1e-6)
    assert_close_report(lse.cpu(), lse_ref, name="lse", atol=1e-5)
    o64, _ = attention_fp64(p_gpu.q, p_gpu.kv, p_gpu.seqlens, causal=True)
    o64_ref, _ = attention_fp64(p_cpu.q, p_cpu.kv, p_cpu.seqlens, causal=True)
    assert_close_report(o64.cpu(), o64_ref, name="o fp64", rel_l2_tol=1e-12)
