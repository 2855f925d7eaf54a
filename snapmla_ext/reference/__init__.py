"""Pure-PyTorch reference of every SnapMLA op (CPU or CUDA): the oracle the kernels are tested against.

- quant:     quantize_rows / quantize_q / dequantize_q (docs/numerics_contract.md sections 2-3, bit-exact definitions), e4m3
- cache_ops: append_kv / fetch_dequant (Fused-K-Append, Fused-Fetch-Dequant over the paged byte map)
- dense:     decode_dense, docs/numerics_contract.md section 4 on dense batched inputs (also the building block of the numerics study)
- decode:    decode, the exact emulation of the decode kernel over the paged cache, with split-KV and combine
- fp64:      attention_fp64 / attention_fp64_dequant, float64 ground truth
"""

from snapmla_ext.reference.cache_ops import append_kv, fetch_dequant
from snapmla_ext.reference.decode import combine_splits, decode
from snapmla_ext.reference.dense import decode_dense
from snapmla_ext.reference.fp64 import attention_fp64, attention_fp64_dequant
from snapmla_ext.reference.quant import dequantize_q, e4m3, quantize_q, quantize_rows

__all__ = [
    "append_kv",
    "attention_fp64",
    "attention_fp64_dequant",
    "combine_splits",
    "decode",
    "decode_dense",
    "dequantize_q",
    "e4m3",
    "fetch_dequant",
    "quantize_q",
    "quantize_rows",
]
