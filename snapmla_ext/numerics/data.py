"""Inputs of the fidelity study: a synthetic MLA layer stack and a loader for a user's own dump.

A layer is one latent KV sequence kv (n, 576) and the queries that attend to all of it, q (m, h_q, 576), both
BF16 (the "original inputs" every scheme starts from and the float64 reference is computed on).

Synthetic statistics follow the SnapMLA paper's description of real MLA caches (arXiv 2602.10718):
- content (512 dims) concentrated near zero, with a per-token spread (log-normal token rms) and a few outlier
  channels that reach about +-10;
- RoPE (64 dims) heavy-tailed, with an absolute maximum that grows with depth from about 1e2 to about 1e3.
Each layer drifts: the content rms, the number of outlier channels and the RoPE amplitude change with depth.
RoPE rows are real rotary pairs (angle = position * theta_i, base 10000), so the RoPE logits carry the positional
pattern a model's do. Queries are rescaled per head so that the logits have a chosen spread (between 1 and 3
nats of standard deviation, split at random between content and RoPE): attention is neither uniform nor
one-hot, which a plain Gaussian q of the same amplitudes would give.

Dump format (load_dump / save_dump), a .pt (torch.save of a dict) or .safetensors file with flat keys:
    layers.{i}.kv   (n_i, 576)        latent KV of layer i: 512 content then 64 RoPE, RoPE already applied
    layers.{i}.q    (m_i, h_q, 576)   absorbed queries of layer i (q_nope @ W_UK then q_pe), RoPE applied
    softmax_scale   () optional       the model's softmax scale (default 576 ** -0.5, FlashMLA's)
Layers are numbered 0..L-1 without gaps; every query attends to all n_i tokens of its layer. Values are cast
to BF16 on load (the cache's input dtype).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Optional

import torch

from snapmla_ext import layout as L

DEFAULT_SOFTMAX_SCALE = L.D_QK**-0.5  # FlashMLA's default, q.shape[-1] ** -0.5
ROPE_BASE = 10000.0
_LAYER_KEY = re.compile(r"^layers\.(\d+)\.(kv|q)$")


class Layer(NamedTuple):
    """One layer's inputs.

    kv: (n, 576) bfloat16, latent KV rows (content 512 | RoPE 64)
    q:  (m, h_q, 576) bfloat16, queries; each of the m * h_q rows attends to all n tokens
    name: label used in tables and plots
    """

    kv: torch.Tensor
    q: torch.Tensor
    name: str


@dataclass(frozen=True)
class SyntheticConfig:
    """Knobs of the synthetic generator. Per-layer values interpolate linearly in depth t = l / (layers - 1).

    content_rms: token rms of the bulk content channels at t = 0 and t = 1 (log-normal spread around it)
    token_spread: standard deviation of log(token rms)
    outlier_channels: number of outlier content channels at t = 0 and t = 1
    outlier_amax: target absolute maximum of the content outlier channels
    rope_amax: absolute maximum of the RoPE part at t = 0 and t = 1 (interpolated in log space)
    logit_std: range of the per-head logit standard deviation (nats) the queries are scaled to
    """

    num_layers: int = 16
    seqlen: int = 8192
    num_queries: int = 2
    num_heads: int = 64
    seed: int = 0
    content_rms: tuple[float, float] = (0.1, 0.3)
    token_spread: float = 0.4
    outlier_channels: tuple[int, int] = (4, 12)
    outlier_amax: float = 10.0
    rope_amax: tuple[float, float] = (1e2, 1e3)
    logit_std: tuple[float, float] = (1.0, 3.0)
    softmax_scale: float = DEFAULT_SOFTMAX_SCALE


def _lerp(pair: tuple[float, float], t: float) -> float:
    return pair[0] + (pair[1] - pair[0]) * t


def _rotary(amplitude: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Pairs (..., 32) of amplitude and angle -> (..., 64) RoPE rows, laid out as DeepSeek's [x_0..x_31 | y_0..y_31]."""
    return torch.cat([amplitude * torch.cos(angle), amplitude * torch.sin(angle)], dim=-1)


def _content(n: int, rms: float, spread: float, outliers: torch.Tensor, outlier_amax: float, g) -> torch.Tensor:
    """(n, 512) float64 content: Gaussian bulk of rms `rms`, a few outlier channels with a consistent sign (as
    massive activation channels in LLMs tend to have), and a log-normal per-token magnitude applied to the whole row.
    The outlier channels are scaled so that the largest value of the layer is outlier_amax."""
    c = rms * torch.randn(n, L.D_CONTENT, generator=g, dtype=torch.float64)
    if outliers.numel():
        sign = torch.where(torch.rand(outliers.numel(), generator=g) < 0.5, -1.0, 1.0).double()
        raw = sign * (1.0 + 0.5 * torch.randn(n, outliers.numel(), generator=g, dtype=torch.float64).abs())
        c[:, outliers] = raw
    c *= torch.exp(spread * torch.randn(n, 1, generator=g, dtype=torch.float64))
    if outliers.numel():
        c[:, outliers] *= outlier_amax / c[:, outliers].abs().max()
    return c


def _rope_pair_amplitudes(g, heavy: int) -> torch.Tensor:
    """(32,) float64 pair amplitudes: log-normal bulk plus `heavy` low-frequency pairs 10-30x larger (heavy tail)."""
    amp = torch.exp(0.5 * torch.randn(L.D_ROPE // 2, generator=g, dtype=torch.float64))
    idx = torch.randperm(8, generator=g)[:heavy] + (L.D_ROPE // 2 - 8)  # low frequencies carry the large norms
    amp[idx] *= 10.0 + 20.0 * torch.rand(heavy, generator=g, dtype=torch.float64)
    return amp


def synthetic_layer(
    cfg: SyntheticConfig, layer: int, *, rope_amax: Optional[float] = None, content_gain: float = 1.0
) -> Layer:
    """Generate layer `layer` of the stack (seeded by cfg.seed and layer, so any layer is reproducible alone).

    rope_amax overrides the depth-interpolated RoPE maximum; content_gain multiplies the whole content (bulk and
    outliers). The sweeps and tests use both; the queries are rescaled afterwards, so the attention pattern stays
    the same and only the dynamic ranges move.
    Returns Layer(kv (seqlen, 576) bf16, q (num_queries, num_heads, 576) bf16).
    """
    g = torch.Generator().manual_seed(1_000_003 * cfg.seed + layer)
    t = layer / max(cfg.num_layers - 1, 1)
    n, m, h = cfg.seqlen, cfg.num_queries, cfg.num_heads
    rms = _lerp(cfg.content_rms, t)
    amax_r = rope_amax if rope_amax is not None else math.exp(_lerp(tuple(map(math.log, cfg.rope_amax)), t))
    num_out = round(_lerp(cfg.outlier_channels, t))
    outliers = torch.randperm(L.D_CONTENT, generator=g)[:num_out]

    theta = ROPE_BASE ** (-torch.arange(L.D_ROPE // 2, dtype=torch.float64) / (L.D_ROPE // 2))
    pos_k = torch.arange(n, dtype=torch.float64).unsqueeze(1)
    pos_q = (n + torch.arange(m, dtype=torch.float64)).view(m, 1, 1)  # decode steps right after the context

    k_c = _content(n, rms, cfg.token_spread, outliers, cfg.outlier_amax, g) * content_gain
    k_amp = _rope_pair_amplitudes(g, heavy=3)
    # Per-token amplitude: log-normal jitter times a Pareto(4) tail (u^-1/4): 1% of tokens are 3x above the
    # bulk and the largest of 8192 about 10x.
    jitter = torch.exp(0.3 * torch.randn(n, 1, generator=g, dtype=torch.float64))
    tail = torch.rand(n, 1, generator=g, dtype=torch.float64) ** -0.25
    k_phase = 2 * math.pi * torch.rand(L.D_ROPE // 2, generator=g, dtype=torch.float64)
    k_r = _rotary(k_amp * jitter * tail, pos_k * theta + k_phase)
    k_r *= amax_r / k_r.abs().max()

    q_c = torch.randn(m, h, L.D_CONTENT, generator=g, dtype=torch.float64)
    q_amp = _rope_pair_amplitudes(g, heavy=3) * torch.exp(0.3 * torch.randn(h, 1, generator=g, dtype=torch.float64))
    q_phase = 2 * math.pi * torch.rand(h, L.D_ROPE // 2, generator=g, dtype=torch.float64)
    q_r = _rotary(q_amp.expand(m, h, -1), pos_q * theta + q_phase)

    # Scale each head so that its logits (softmax_scale included) have a chosen spread over the context.
    std_target = cfg.logit_std[0] + (cfg.logit_std[1] - cfg.logit_std[0]) * torch.rand(h, generator=g).double()
    rope_share = 0.2 + 0.6 * torch.rand(h, generator=g, dtype=torch.float64)  # fraction of logit variance from RoPE
    std_c = torch.einsum("mhd,nd->mhn", q_c, k_c).std(dim=-1).mean(dim=0) * cfg.softmax_scale
    std_r = torch.einsum("mhd,nd->mhn", q_r, k_r).std(dim=-1).mean(dim=0) * cfg.softmax_scale
    q_c *= (std_target * (1 - rope_share).sqrt() / std_c).view(1, h, 1)
    q_r *= (std_target * rope_share.sqrt() / std_r).view(1, h, 1)

    kv = torch.cat([k_c, k_r], dim=-1).to(torch.bfloat16)
    q = torch.cat([q_c, q_r], dim=-1).to(torch.bfloat16)
    return Layer(kv=kv, q=q, name=f"L{layer:02d}")


def synthetic_layers(cfg: SyntheticConfig) -> list[Layer]:
    """The whole synthetic stack: cfg.num_layers layers with drifting statistics."""
    return [synthetic_layer(cfg, i) for i in range(cfg.num_layers)]


def _check_layer(i: int, kv: torch.Tensor, q: torch.Tensor) -> None:
    if kv.dim() != 2 or kv.shape[1] != L.D_QK:
        raise ValueError(f"layers.{i}.kv must have shape (n, {L.D_QK}), got {tuple(kv.shape)}")
    if q.dim() != 3 or q.shape[2] != L.D_QK:
        raise ValueError(f"layers.{i}.q must have shape (m, h_q, {L.D_QK}), got {tuple(q.shape)}")
    if kv.shape[0] == 0 or q.shape[0] * q.shape[1] == 0:
        raise ValueError(f"layer {i} is empty: kv {tuple(kv.shape)}, q {tuple(q.shape)}")


def load_dump(path: str | Path) -> tuple[list[Layer], float]:
    """Read a dump (format in the module docstring). Returns (layers, softmax_scale); tensors become CPU BF16."""
    path = Path(path)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        flat = load_file(str(path))
    else:
        flat = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(flat, dict):
            raise ValueError(f"{path}: expected a dict of tensors, got {type(flat).__name__}")
    parts: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in flat.items():
        match = _LAYER_KEY.match(key)
        if match:
            parts.setdefault(int(match.group(1)), {})[match.group(2)] = value
        elif key != "softmax_scale":
            raise ValueError(f"{path}: unexpected key {key!r} (expected layers.<i>.kv, layers.<i>.q, softmax_scale)")
    if not parts:
        raise ValueError(f"{path}: no layers.<i>.kv / layers.<i>.q keys found")
    if sorted(parts) != list(range(len(parts))):
        raise ValueError(f"{path}: layer indices must be 0..{len(parts) - 1} without gaps, got {sorted(parts)}")
    layers = []
    for i in range(len(parts)):
        if set(parts[i]) != {"kv", "q"}:
            raise ValueError(f"{path}: layer {i} needs both layers.{i}.kv and layers.{i}.q, got {sorted(parts[i])}")
        kv, q = parts[i]["kv"], parts[i]["q"]
        _check_layer(i, kv, q)
        layers.append(Layer(kv=kv.to(torch.bfloat16), q=q.to(torch.bfloat16), name=f"L{i:02d}"))
    scale = float(flat["softmax_scale"]) if "softmax_scale" in flat else DEFAULT_SOFTMAX_SCALE
    return layers, scale


def save_dump(path: str | Path, layers: list[Layer], softmax_scale: Optional[float] = None) -> None:
    """Write layers in the dump format (.safetensors by suffix, torch.save otherwise)."""
    flat = {}
    for i, layer in enumerate(layers):
        flat[f"layers.{i}.kv"] = layer.kv.contiguous()
        flat[f"layers.{i}.q"] = layer.q.contiguous()
    if softmax_scale is not None:
        flat["softmax_scale"] = torch.tensor(float(softmax_scale), dtype=torch.float32)
    if str(path).endswith(".safetensors"):
        from safetensors.torch import save_file

        save_file(flat, str(path))
    else:
        torch.save(flat, path)
