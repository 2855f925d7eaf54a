"""Pure-PyTorch reference of every SnapMLA op (CPU or CUDA): the oracle the kernels are tested against.

- quantize_rows / quantize_q / dequantize_q: SPEC sections 2-3, bit-exact definitions.
- append_kv / fetch_dequant: the paged cache ops.
"""

from snapmla_ext.reference.cache_ops import append_kv, fetch_dequant
from snapmla_ext.reference.quant import dequantize_q, e4m3, quantize_q, quantize_rows

__all__ = ["append_kv", "fetch_dequant", "dequantize_q", "e4m3", "quantize_q", "quantize_rows"]
