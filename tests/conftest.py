"""Shared test fixtures: the `gpu` marker skips cleanly without a GPU or without the compiled extension."""

import pytest
import torch

from snapmla_ext._ext import extension_available


def _gpu_skip_reason():
    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return f"needs sm_90 (Hopper), found sm_{major}{minor}"
    if not extension_available():
        return "snapmla_ext._C (compiled extension) is not importable"
    return None


def pytest_addoption(parser):
    group = parser.getgroup("snapmla fuzz (tests/test_fuzz_gpu.py)")
    group.addoption("--fuzz-seed", type=int, default=0, help="base seed of the random decode configurations")
    group.addoption("--fuzz-count", type=int, default=500, help="number of configurations")
    group.addoption("--fuzz-first", type=int, default=0, help="index of the first configuration (to replay one)")


def pytest_collection_modifyitems(config, items):
    reason = _gpu_skip_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def requires_ext():
    """For CPU tests of the compiled operators' argument checks: skip when the extension is not built."""
    if not extension_available():
        pytest.skip("snapmla_ext._C (compiled extension) is not importable")
    return torch.ops.snapmla


@pytest.fixture(autouse=True)
def reset_decode_kernel():
    """A test that forces a decode kernel (utils.kernel_choice.force_kernel) leaves the choice to auto again."""
    yield
    if extension_available():
        torch.ops.snapmla.set_decode_kernel("auto")
