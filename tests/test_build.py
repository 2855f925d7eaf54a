"""The extension's loading: the CI contract (when the build scripts built it, SNAPMLA_REQUIRE_EXT=1, it must
load) and the error every entry point raises without it, eager and under torch.compile."""

import os

import pytest
import torch

import snapmla_ext
from snapmla_ext import _ext, decode_ops, flash_mla_2026

MISSING = "snapmla_ext._C (the compiled CUDA extension) is not available"


@pytest.mark.skipif(os.environ.get("SNAPMLA_REQUIRE_EXT") != "1", reason="extension build not required here")
def test_extension_was_built_and_loads():
    ops = _ext.load_ops()
    assert ops.layout_constant("PAGE_BYTES") == snapmla_ext.layout.PAGE_BYTES


def test_failed_load_says_what_is_missing():
    reason = _ext._load_library("/nonexistent/_C.so")
    assert reason.startswith(MISSING) and "/nonexistent/_C.so" in reason and "snapmla_ext.reference" in reason


@pytest.fixture
def without_extension(monkeypatch):
    """The state of a process whose import of snapmla_ext._C failed; CPU tensors pass the device check, as CUDA
    tensors would on a GPU machine without the build."""
    monkeypatch.setattr(_ext, "_LOAD_ERROR", _ext._load_library("/nonexistent/_C.so"))
    monkeypatch.setattr(decode_ops, "require_cuda_tensor", lambda name, t: None)
    assert not snapmla_ext.extension_available()


def _decode_call(q, cache, block_table, seqlens):
    sched_meta, _ = flash_mla_2026.get_mla_metadata()
    return flash_mla_2026.flash_mla_with_kvcache(q, cache, block_table, seqlens, 512, sched_meta, causal=True)


def _decode_inputs():
    q = torch.zeros(2, 1, 16, 576, dtype=torch.bfloat16)
    cache = torch.zeros(3, snapmla_ext.layout.PAGE_BYTES, dtype=torch.uint8)
    return q, cache, torch.zeros(2, 2, dtype=torch.int32), torch.tensor([10, 70], dtype=torch.int32)


def test_eager_call_without_extension(without_extension):
    with pytest.raises(snapmla_ext.ExtensionUnavailableError, match="compiled CUDA extension"):
        _decode_call(*_decode_inputs())
    with pytest.raises(snapmla_ext.ExtensionUnavailableError, match="compiled CUDA extension"):
        decode_ops.decode_kernel(16)


def test_compiled_call_without_extension(without_extension):
    """torch.compile with graph breaks allowed runs the failing call eagerly: the same exception type."""
    torch._dynamo.reset()
    with pytest.raises(snapmla_ext.ExtensionUnavailableError, match="compiled CUDA extension"):
        torch.compile(_decode_call)(*_decode_inputs())


def test_fullgraph_call_without_extension(without_extension):
    """fullgraph=True: PyTorch reports every exception raised in traced code as its own Unsupported error; the
    message (and the chained cause) must still be ours, not an AttributeError from tracing a library load."""
    torch._dynamo.reset()
    with pytest.raises(Exception) as info:
        torch.compile(_decode_call, fullgraph=True)(*_decode_inputs())
    chain, exc = [], info.value
    while exc is not None:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    assert any(MISSING in str(e) for e in chain), [f"{type(e).__name__}: {e}" for e in chain]
    assert not any(isinstance(e, AttributeError) for e in chain)
