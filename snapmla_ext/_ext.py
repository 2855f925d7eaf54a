"""Loads the compiled extension when snapmla_ext is imported; `import snapmla_ext` works without it and without a
GPU, and the kernel entry points then raise ExtensionUnavailableError saying why."""

import os
from typing import Optional

import torch


class ExtensionUnavailableError(RuntimeError):
    """The compiled snapmla_ext._C is missing or no CUDA device is present."""


def _load_library(path: Optional[str]) -> Optional[str]:
    """Load the compiled library (which registers the torch.ops.snapmla operators): None, or why it failed."""
    try:
        if path:
            torch.ops.load_library(path)
        else:
            from snapmla_ext import _C  # noqa: F401
    except (ImportError, OSError) as exc:
        return (
            "snapmla_ext._C (the compiled CUDA extension) is not available: build it with "
            "`pip install --no-build-isolation -e .` on a machine with nvcc >= 12.3 and CUDA torch. "
            f"Import error: {exc}. The pure-PyTorch reference is in snapmla_ext.reference."
        )
    return None


# Loaded once, when snapmla_ext is imported, never on first use: torch.compile traces the entry points, and
# Dynamo cannot trace a library load (it reports an unrelated AttributeError in place of the reason). Traced code
# only reads this string. SNAPMLA_EXT_PATH: load a _C built elsewhere (`setup.py build_ext --build-lib DIR`).
_LOAD_ERROR: Optional[str] = _load_library(os.environ.get("SNAPMLA_EXT_PATH"))


def load_ops():
    """torch.ops.snapmla, its fake implementations registered; ExtensionUnavailableError when it did not load.

    Under torch.compile(fullgraph=True) PyTorch reports any exception raised while tracing as
    torch._dynamo.exc.Unsupported; its message carries this one."""
    if _LOAD_ERROR is not None:
        raise ExtensionUnavailableError(_LOAD_ERROR)
    return torch.ops.snapmla


def extension_available() -> bool:
    return _LOAD_ERROR is None


def require_cuda_tensor(name: str, t: torch.Tensor) -> None:
    """Raise a clear error when a kernel entry point gets a tensor that is not on a CUDA device."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cuda":
        raise ExtensionUnavailableError(
            f"{name} is on {t.device}, but the snapmla kernels need a CUDA device (sm_90a). "
            "Use snapmla_ext.reference for the CPU path."
        )


if _LOAD_ERROR is None:
    # The fake (meta) implementations for torch.compile need the schemas the library defines (and the helpers
    # above: they import snapmla_ext.decode_ops).
    from snapmla_ext import _fake_decode, _fake_quant  # noqa: E402,F401  (register on import)
