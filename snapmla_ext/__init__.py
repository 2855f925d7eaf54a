"""snapmla_ext: FP8 MLA decode for Hopper (SnapMLA, arXiv 2602.10718), a drop-in for FlashMLA's decode.

Importing needs neither a GPU nor the compiled extension; kernel entry points raise
snapmla_ext.ExtensionUnavailableError saying what is missing. snapmla_ext.reference is pure PyTorch.
"""

from snapmla_ext import layout
from snapmla_ext._ext import ExtensionUnavailableError, extension_available
from snapmla_ext.cache import SnapMLAKVCache

__all__ = ["layout", "ExtensionUnavailableError", "extension_available", "SnapMLAKVCache"]
__version__ = "0.1.0"
