"""The algebra of docs/experiments/wide_block_local_exp.patch on the CPU (scripts/block_local_softmax_model.py):
exponentials relative to each block's own row max, with the running max folded in by per-row scalars, give
SPEC section 4's result to float32 rounding, also across blocks ~45 and ~90 doublings below the running max
(the second under the P_FLOOR clamp), a block the row does not see and a masked tail."""

import importlib.util
import pathlib

import pytest

_PATH = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "block_local_softmax_model.py"
_spec = importlib.util.spec_from_file_location("block_local_softmax_model", _PATH)
model = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(model)


@pytest.mark.parametrize("seed", range(6))
def test_block_local_fold_matches_spec(seed):
    rel, dlse = model.compare(seed)
    assert rel <= 1e-5 and dlse <= 1e-5, (rel, dlse)


@pytest.mark.parametrize("seed", range(3))
def test_a_fold_without_g_is_caught(seed):
    """The data has blocks below the running max, so leaving g_n out of L~ is visible."""
    rel, dlse = model.compare(seed, fold_g=False)
    assert dlse > 1e-2, (rel, dlse)
