"""Small shared types."""

from typing import NamedTuple

import torch


class QuantizedQ(NamedTuple):
    """A query quantized per (request, query token, head) as docs/numerics_contract.md section 3 says (Fused-Q-Quant's output).

    content: (b, s_q, h_q, 512) float8_e4m3fn, q_c * inv rounded to nearest even, saturated at +-448
    rope:    (b, s_q, h_q, 64) bfloat16, clamp(q_r, +-2^32) * inv (pre-scaled into the content's domain)
    (inv = 448 / a, a = min(max(amax|q_c|, AMAX_FLOOR), 2^16), one IEEE division per row)
    scale:   (b, s_q, h_q) float32, a / 448, in (0, 2^16 / 448]: a caller-made scale outside that range is outside
             the contract's input range (SNAPMLA_DEBUG_CHECKS=1 rejects it)
    """

    content: torch.Tensor
    rope: torch.Tensor
    scale: torch.Tensor
