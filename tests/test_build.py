"""Guards the CI contract: when the build scripts built the extension (SNAPMLA_REQUIRE_EXT=1), it must load."""

import os

import pytest

import snapmla_ext


@pytest.mark.skipif(os.environ.get("SNAPMLA_REQUIRE_EXT") != "1", reason="extension build not required here")
def test_extension_was_built_and_loads():
    from snapmla_ext._ext import load_extension

    ops = load_extension()
    assert ops.layout_constant("PAGE_BYTES") == snapmla_ext.layout.PAGE_BYTES


def test_import_without_extension_says_what_is_missing(monkeypatch):
    from snapmla_ext import _ext

    _ext.load_extension.cache_clear()
    monkeypatch.setenv("SNAPMLA_EXT_PATH", "/nonexistent/_C.so")
    try:
        with pytest.raises(snapmla_ext.ExtensionUnavailableError, match="compiled CUDA extension"):
            _ext.load_extension()
        assert not snapmla_ext.extension_available()
    finally:
        _ext.load_extension.cache_clear()
