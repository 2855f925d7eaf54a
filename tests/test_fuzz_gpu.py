"""Randomized decode sweep (GPU, slow): --fuzz-count configurations (default 500) from --fuzz-seed, each drawn
by tests/utils/fuzz.draw_config: b 1-300, s_q 1-8, h_q 1-128, per-request lengths 0-70k with page edges
(1, 63, 64, 65, ...) and zeros, causal or not, num_sm_parts default / 1 / random, random page order, shared
pages, NaN bytes in every unused slot and page, sentinel block ids (2147480000, -1, num_blocks) past each
request's pages, a BF16 or a pre-quantized q, the decode-kernel override, and the three call styles
(snapmla_ext.ops, flash_mla_2026 with keywords and an engine cache view, flash_mla_2025).

Each result against the exact emulation (snapmla_ext.reference.decode) with the contract's tolerances (rel L2
of o <= 3e-3, 1 - cos <= 1e-5, |lse error| <= 1e-3, the same +-inf / NaN positions) and against float64
attention over the dequantized cache (the kernel's own error: rel L2 <= 4e-2, 1 - cos <= 1e-3, lse 1e-3).
SNAPMLA_DEBUG_CHECKS=1 fills out, lse and the split workspaces with NaN first, so anything left unwritten fails.

    pytest tests/test_fuzz_gpu.py --fuzz-seed 0 --fuzz-count 500      # the sweep
    pytest tests/test_fuzz_gpu.py --fuzz-seed S --fuzz-first I --fuzz-count 1   # replay configuration I
"""

import pytest
import torch

import snapmla_ext.flash_mla_2025 as flash_mla_2025
import snapmla_ext.flash_mla_2026 as flash_mla_2026
from snapmla_ext import decode_ops, quant_ops, reference
from snapmla_ext import layout as L
from snapmla_ext.reference import attention_fp64_dequant
from utils.compare import assert_close_report
from utils.fuzz import build_case, draw_config
from utils.kernel_choice import force_kernel
from utils.sched_plan import split_blocks

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

O_REL_L2, O_COS, LSE_ATOL = 3e-3, 1e-5, 1e-3  # against the emulation (docs/numerics_contract.md section 7)
FP64_REL_L2, FP64_COS = 4e-2, 1e-3  # against float64 over the dequantized cache: P in FP8 is the kernel's own


def config_seed(base: int, index: int) -> int:
    return base * 1_000_003 + index


def pytest_generate_tests(metafunc):
    if "fuzz_index" in metafunc.fixturenames:
        opt = metafunc.config.getoption
        first, count = opt("fuzz_first"), opt("fuzz_count")
        metafunc.parametrize("fuzz_index", range(first, first + count), ids=lambda i: f"cfg{i}")


@pytest.fixture(autouse=True)
def poison_outputs(monkeypatch):
    monkeypatch.setenv("SNAPMLA_DEBUG_CHECKS", "1")
    monkeypatch.delenv("SNAPMLA_FORCE_SPLIT", raising=False)


def run_kernel(cfg, case):
    """(out, lse, the plan's tile_scheduler_metadata) through the configuration's API."""
    q = quant_ops.quantize_q(case.q) if cfg.quantized_q else case.q
    n = cfg.q_rows
    if cfg.api == "ops":
        meta, splits = decode_ops.get_mla_metadata(case.cache_seqlens, n, 1, num_sm_parts=cfg.num_sm_parts)
        return (*decode_ops.flash_mla_with_kvcache(q, case.cache, case.block_table, case.cache_seqlens, L.D_CONTENT,
                                                   meta, splits, causal=cfg.causal), meta)
    if cfg.api == "flash_mla_2026":
        sched_meta, _ = flash_mla_2026.get_mla_metadata(case.cache_seqlens, n, 1, is_fp8_kvcache=True,
                                                        num_sm_parts=cfg.num_sm_parts)
        out, lse = flash_mla_2026.flash_mla_with_kvcache(
            q=q, k_cache=case.cache.data.view(-1, L.PAGE_BLOCK_SIZE, 1, L.TOKEN_BYTES),
            block_table=case.block_table, cache_seqlens=case.cache_seqlens, head_dim_v=L.D_CONTENT,
            tile_scheduler_metadata=sched_meta, causal=cfg.causal, descale_q=None, descale_k=None)
        return out, lse, sched_meta.tile_scheduler_metadata
    meta, splits = flash_mla_2025.get_mla_metadata(case.cache_seqlens, n, 1, num_sm_parts=cfg.num_sm_parts)
    out, lse = flash_mla_2025.flash_mla_with_kvcache(q, case.cache.data.view(-1, L.PAGE_BLOCK_SIZE, L.TOKEN_BYTES),
                                                     case.block_table, case.cache_seqlens, L.D_CONTENT, meta, splits,
                                                     causal=cfg.causal)
    return out, lse, meta


def test_fuzz(request, fuzz_index):
    base = request.config.getoption("fuzz_seed")
    cfg = draw_config(config_seed(base, fuzz_index))
    replay = (f"replay: pytest tests/test_fuzz_gpu.py --fuzz-seed {base} --fuzz-first {fuzz_index} --fuzz-count 1"
              f"\nconfiguration: {cfg}")
    try:
        force_kernel(cfg.kernel)
        case = build_case(cfg, "cuda", quant_ops.append_kv)
        out, lse, meta = run_kernel(cfg, case)
        torch.cuda.synchronize()
        assert out.shape == (cfg.b, cfg.s_q, cfg.h_q, L.D_CONTENT) and lse.shape == (cfg.b, cfg.h_q, cfg.s_q)
        # The plan's pieces: the emulation splits and rounds the partial outputs as the kernels do.
        ref_out, ref_lse = reference.decode(case.q, case.cache, case.block_table, case.cache_seqlens,
                                            causal=cfg.causal,
                                            split_blocks=split_blocks(meta, case.cache_seqlens.tolist()))
        m = assert_close_report(out.float(), ref_out.float(), name="o vs emulation", rel_l2_tol=O_REL_L2,
                                cos_tol=O_COS)
        assert_close_report(lse, ref_lse, name="lse vs emulation", atol=LSE_ATOL)
        del ref_out, ref_lse
        o64, lse64 = attention_fp64_dequant(quant_ops.quantize_q(case.q), case.cache, case.block_table,
                                            case.cache_seqlens, causal=cfg.causal)
        m64 = assert_close_report(out.double(), o64, name="o vs float64", rel_l2_tol=FP64_REL_L2, cos_tol=FP64_COS)
        assert_close_report(lse.double(), lse64, name="lse vs float64", atol=LSE_ATOL)
    except Exception as exc:
        raise AssertionError(f"{type(exc).__name__}: {exc}\n{replay}") from exc
    print(f"{cfg.short()}: rel L2 {m['rel_l2']:.2e} (emulation), {m64['rel_l2']:.2e} (float64)")
