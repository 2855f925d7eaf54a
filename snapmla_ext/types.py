"""Small shared types."""

from typing import NamedTuple

import torch


class QuantizedQ(NamedTuple):
    """A query quantized per (request, query token, head) as docs/numerics_contract.md section 3 says (Fused-Q-Quant's output).

    content: (b, s_q, h_q, 512) float8_e4m3fn, q_c * inv rounded to nearest even, saturated at +-448
    rope:    (b, s_q, h_q, 64) bfloat16, q_r * inv (pre-scaled into the content's domain)
    (inv = 448 / max(amax|q_c|, AMAX_FLOOR), one IEEE division per row; docs/kv_cache_format.md)
    scale:   (b, s_q, h_q) float32, max(amax|q_c|, AMAX_FLOOR) / 448
    """

    content: torch.Tensor
    rope: torch.Tensor
    scale: torch.Tensor
