"""Forcing a decode kernel inside a test: the extension's process-wide override (csrc/kernels/sm90/decode_fp8/
launch.cu). tests/conftest.py puts it back to "auto" after every test."""

import torch


def force_kernel(choice: str) -> None:
    """Calls from here on run `choice` (auto, narrow, wide, ws) where it can run the rows."""
    torch.ops.snapmla.set_decode_kernel(choice)
