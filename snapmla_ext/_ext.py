"""Loads the compiled extension on demand, so that `import snapmla_ext` works without it and without a GPU."""

import functools
import os

import torch


class ExtensionUnavailableError(RuntimeError):
    """The compiled snapmla_ext._C is missing or no CUDA device is present."""


@functools.lru_cache(maxsize=None)
def load_extension():
    """Import snapmla_ext._C (which registers the torch.ops.snapmla operators) or raise a clear error."""
    # SNAPMLA_EXT_PATH: load a _C built elsewhere (e.g. `setup.py build_ext --build-lib DIR`), for development.
    path = os.environ.get("SNAPMLA_EXT_PATH")
    try:
        if path:
            torch.ops.load_library(path)
        else:
            from snapmla_ext import _C  # noqa: F401
    except (ImportError, OSError) as exc:
        raise ExtensionUnavailableError(
            "snapmla_ext._C (the compiled CUDA extension) is not available: build it with "
            "`pip install --no-build-isolation -e .` on a machine with nvcc >= 12.3 and CUDA torch. "
            f"Import error: {exc}. The pure-PyTorch reference is in snapmla_ext.reference."
        ) from exc
    return torch.ops.snapmla


@functools.lru_cache(maxsize=None)
def load_ops():
    """torch.ops.snapmla with every fake (meta) implementation registered, for torch.compile tracing.

    The fakes need the schemas, which the compiled library defines, so they are imported after it loads.
    """
    ops = load_extension()
    from snapmla_ext import _fake_decode, _fake_quant  # noqa: F401  (register on import)

    return ops


def extension_available() -> bool:
    try:
        load_extension()
    except ExtensionUnavailableError:
        return False
    return True


def require_cuda_tensor(name: str, t: torch.Tensor) -> None:
    """Raise a clear error when a kernel entry point gets a tensor that is not on a CUDA device."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cuda":
        raise ExtensionUnavailableError(
            f"{name} is on {t.device}, but the snapmla kernels need a CUDA device (sm_90a). "
            "Use snapmla_ext.reference for the CPU path."
        )
