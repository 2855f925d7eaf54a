"""DeepSeek-V3's MLA attention block in its absorbed (decode) form, with random BF16 weights, for one rank.

Per layer, for T = b * s_q new tokens with hidden states x (T, hidden):

    h        = RMSNorm(x)                                     input layernorm
    q_a      = RMSNorm(h @ W_q_a^T)                           (T, q_lora_rank 1536)
    q        = q_a @ W_q_b^T -> (T, h_q, qk_nope 128 + qk_rope 64)
    q_latent = q_nope @ W_UK[h]   per head                    (T, h_q, 512)   W_UK absorbed into the query
    q_pe     = RoPE(q_pe, positions)                          (T, h_q, 64)
    kv       = h @ W_kv_a^T -> kv_c = RMSNorm(kv[:, :512]), k_pe = RoPE(kv[:, 512:], positions)
    cache write of (kv_c, k_pe) at the step's slots           backend.write_kv
    o_latent = attention(q = [q_latent | q_pe] (b, s_q, h_q, 576), the layer's cache)   backend.attend, (.., 512)
    out      = x + (o_latent @ W_UV[h] per head -> (T, h_q * 128)) @ W_o^T           W_UV absorbed into the output

softmax_scale = (qk_nope + qk_rope) ** -0.5 = 192 ** -0.5, as DeepSeek computes it (YaRN's mscale is left out).
RoPE pairs neighbouring dims (x[2i], x[2i+1]) as DeepSeek's reference code does, theta 10000, no YaRN scaling:
the cost is the same. The rank's share under tensor parallelism: q_a, kv_a (and the norms) are replicated,
q_b, W_UK, W_UV and o_proj hold the rank's h_q of DeepSeek-V3's 128 heads; o_proj's all-reduce is not modelled.
Not modelled at all: the MoE / dense FFN, the MTP draft module, communication, prefill. An engine's integration
of the cache is in bench/serving/backends.py; the step (CUDA graphs, persistent buffers) in bench/bench_serving.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from snapmla_ext import layout as L


@dataclass(frozen=True)
class MLADims:
    hidden: int = 7168
    q_lora_rank: int = 1536
    kv_lora_rank: int = 512  # fixed by the cache format (the latent content, = head_dim_v of the decode)
    qk_nope: int = 128
    qk_rope: int = 64  # fixed by the cache format
    v_head: int = 128
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    model_heads: int = 128  # DeepSeek-V3's attention heads: h_q = 128 / TP per rank
    model_layers: int = 61  # DeepSeek-V3's layers (the projections of the benchmark scale to these)

    def __post_init__(self):
        if self.kv_lora_rank != L.D_CONTENT or self.qk_rope != L.D_ROPE:
            raise ValueError(f"kv_lora_rank and qk_rope must be {L.D_CONTENT} and {L.D_ROPE} (the cache's latent "
                             f"and RoPE dims), got {self.kv_lora_rank} and {self.qk_rope}")

    @property
    def softmax_scale(self) -> float:
        return float(self.qk_nope + self.qk_rope) ** -0.5


DEEPSEEK_V3 = MLADims()
TINY = MLADims(hidden=256, q_lora_rank=64, qk_nope=32, v_head=32)  # CPU smoke runs (the latent dims stay)


@dataclass
class LayerWeights:
    input_norm: torch.Tensor  # (hidden,)
    w_q_a: torch.Tensor  # (q_lora_rank, hidden)
    q_a_norm: torch.Tensor  # (q_lora_rank,)
    w_q_b: torch.Tensor  # (h_q * (qk_nope + qk_rope), q_lora_rank)
    w_uk: torch.Tensor  # (h_q, qk_nope, 512): q_nope -> latent, per head
    w_kv_a: torch.Tensor  # (512 + 64, hidden)
    kv_a_norm: torch.Tensor  # (512,)
    w_uv: torch.Tensor  # (h_q, 512, v_head): latent -> v, per head
    w_o: torch.Tensor  # (hidden, h_q * v_head)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) of x (T, ..., 64) by positions (T,) * inv_freq (32,); bf16 out. The angles
    are computed in fp32 per call, as an engine's cos/sin cache would hold them."""
    angle = positions.float()[:, None] * inv_freq[None, :]  # (T, 32)
    shape = (angle.shape[0],) + (1,) * (x.dim() - 2) + (angle.shape[1],)
    cos, sin = angle.cos().view(shape), angle.sin().view(shape)
    x1, x2 = x[..., 0::2].float(), x[..., 1::2].float()
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2).to(x.dtype)


class MLAAttention:
    """`num_layers` MLA attention blocks of one rank (h_q heads) with random weights.

    Weights ~ N(0, 1 / fan_in) so activations stay ~unit scale through the layers (norm weights 1)."""

    def __init__(self, dims: MLADims, h_q: int, num_layers: int, device="cuda", seed: int = 0):
        self.dims, self.h_q, self.num_layers = dims, h_q, num_layers
        self.device = torch.device(device)
        gen = torch.Generator(device=self.device).manual_seed(seed)
        d = dims

        def rand(*shape: int) -> torch.Tensor:
            w = torch.randn(*shape, generator=gen, device=self.device, dtype=torch.float32)
            return w.mul_(shape[-2] ** -0.5 if len(shape) == 3 else shape[-1] ** -0.5).to(torch.bfloat16)

        def ones(n: int) -> torch.Tensor:
            return torch.ones(n, dtype=torch.bfloat16, device=self.device)

        self.layers = [
            LayerWeights(
                input_norm=ones(d.hidden),
                w_q_a=rand(d.q_lora_rank, d.hidden),
                q_a_norm=ones(d.q_lora_rank),
                w_q_b=rand(h_q * (d.qk_nope + d.qk_rope), d.q_lora_rank),
                w_uk=rand(h_q, d.qk_nope, d.kv_lora_rank),
                w_kv_a=rand(d.kv_lora_rank + d.qk_rope, d.hidden),
                kv_a_norm=ones(d.kv_lora_rank),
                w_uv=rand(h_q, d.kv_lora_rank, d.v_head),
                w_o=rand(d.hidden, h_q * d.v_head),
            )
            for _ in range(num_layers)
        ]
        half = torch.arange(0, d.qk_rope, 2, dtype=torch.float64, device=self.device) / d.qk_rope
        self.inv_freq = (d.rope_theta ** -half).float()  # (32,)

    def weight_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for w in self.layers for t in vars(w).values())

    def project_in(self, layer: int, x: torch.Tensor, positions: torch.Tensor):
        """x (T, hidden) bf16, positions (T,) int64 -> q (T, h_q, 576), kv_c (T, 512), k_pe (T, 64), all bf16."""
        d, w = self.dims, self.layers[layer]
        T = x.shape[0]
        h = rms_norm(x, w.input_norm, d.rms_eps)
        q_a = rms_norm(F.linear(h, w.w_q_a), w.q_a_norm, d.rms_eps)  # (T, q_lora_rank)
        q = F.linear(q_a, w.w_q_b).view(T, self.h_q, d.qk_nope + d.qk_rope)
        q_nope, q_pe = q.split([d.qk_nope, d.qk_rope], dim=-1)
        # Absorbed W_UK: one batched GEMM over heads, (h_q, T, 128) @ (h_q, 128, 512) -> (h_q, T, 512).
        q_latent = torch.bmm(q_nope.transpose(0, 1), w.w_uk).transpose(0, 1)  # (T, h_q, 512)
        q_pe = apply_rope(q_pe, positions, self.inv_freq)  # (T, h_q, 64)
        kv = F.linear(h, w.w_kv_a)  # (T, 576)
        kv_c = rms_norm(kv[:, : d.kv_lora_rank], w.kv_a_norm, d.rms_eps)  # (T, 512)
        k_pe = apply_rope(kv[:, d.kv_lora_rank :], positions, self.inv_freq)  # (T, 64)
        return torch.cat([q_latent, q_pe], dim=-1), kv_c, k_pe

    def project_out(self, layer: int, o_latent: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """o_latent (T, h_q, 512) bf16, residual (T, hidden) -> residual + o_proj(W_UV o) (T, hidden) bf16."""
        w = self.layers[layer]
        T = o_latent.shape[0]
        # Absorbed W_UV: (h_q, T, 512) @ (h_q, 512, 128) -> (h_q, T, 128), then heads side by side for o_proj.
        v = torch.bmm(o_latent.transpose(0, 1), w.w_uv).transpose(0, 1).reshape(T, self.h_q * self.dims.v_head)
        return residual + F.linear(v, w.w_o)

    def forward_layer(self, layer: int, x: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, backend,
                      b: int, s_q: int):
        """One block: x (T = b * s_q, hidden) -> (T, hidden), and the attention output (b, s_q, h_q, 512)."""
        q, kv_c, k_pe = self.project_in(layer, x, positions)
        backend.write_kv(layer, kv_c, k_pe, slots)
        o = backend.attend(layer, q.view(b, s_q, self.h_q, L.D_QK))
        return self.project_out(layer, o.reshape(b * s_q, self.h_q, L.D_CONTENT), x), o
