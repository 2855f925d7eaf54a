"""The two FlashMLA API generations (snapmla_ext.flash_mla_2026 / flash_mla_2025) on the CPU: what each
get_mla_metadata returns for the engines' call styles, and the reuse check of the 2026 metadata."""

import pytest
import torch

from snapmla_ext import flash_mla_2025, flash_mla_2026
from snapmla_ext.decode_ops import SnapMLASchedMeta, _metadata_from_sched_meta


@pytest.mark.parametrize(
    "args, kwargs",
    [((), {}), ((torch.full((4,), 100, dtype=torch.int32), 16, 1), {"is_fp8_kvcache": True})],
    ids=["no_args", "vllm_2026_style"],
)
def test_2026_always_returns_sched_meta(args, kwargs):
    meta, none = flash_mla_2026.get_mla_metadata(*args, **kwargs)
    assert isinstance(meta, SnapMLASchedMeta) and none is None and not meta.have_initialized


def test_2026_num_sm_parts_kept():
    meta, _ = flash_mla_2026.get_mla_metadata(num_sm_parts=7)
    assert meta.num_sm_parts == 7


def test_2025_returns_tensors_on_cpu_plan():
    meta, splits = flash_mla_2025.get_mla_metadata(torch.tensor([100, 0, 5000], dtype=torch.int32), 32, 1)
    assert meta.dtype == torch.int32 and meta.shape[1] == 8 and splits.shape == (4,)
    assert int(splits[0]) == 0 and int(splits[-1]) >= 3


@pytest.mark.parametrize(
    "other", [((2, 1, 16), False), ((3, 2, 16), False), ((3, 1, 64), False), ((3, 1, 16), True)],
    ids=["b", "s_q", "h_q", "causal"],
)
def test_2026_reuse_checked(other):
    meta = SnapMLASchedMeta()
    meta.have_initialized = True
    meta.config = SnapMLASchedMeta.Config(3, 1, 16, False, 132, torch.device("cpu"))
    meta.tile_scheduler_metadata, meta.num_splits = torch.zeros(132, 8, dtype=torch.int32), torch.zeros(4)
    shape, causal = other
    with pytest.raises(ValueError, match="metadata reused with other shapes: it was filled for \\(b=3, s_q=1, h_q=16, causal=False"):
        _metadata_from_sched_meta(meta, shape, torch.zeros(shape[0], dtype=torch.int32), causal)
