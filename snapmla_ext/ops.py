"""Public operator API of snapmla_ext: FlashMLA's decode entry points plus the fused cache/quantization ops.

    from snapmla_ext.ops import get_mla_metadata, flash_mla_with_kvcache   # drop-in for flash_mla
    from snapmla_ext.ops import quantize_q, append_kv, append_kv_parts, fetch_dequant  # Fused-Q-Quant / K-Append / Fetch-Dequant

Shapes, dtypes and semantics are documented on each function (snapmla_ext.decode_ops, snapmla_ext.quant_ops).
"""

from snapmla_ext.decode_ops import (
    SnapMLASchedMeta,
    default_num_sm_parts,
    flash_mla_with_kvcache,
    get_mla_metadata,
)
from snapmla_ext.quant_ops import append_kv, append_kv_parts, fetch_dequant, quantize_q

__all__ = [
    "SnapMLASchedMeta",
    "append_kv",
    "append_kv_parts",
    "default_num_sm_parts",
    "fetch_dequant",
    "flash_mla_with_kvcache",
    "get_mla_metadata",
    "quantize_q",
]
