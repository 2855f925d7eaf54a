"""Error metrics of an attention output against the float64 reference, all computed in float64.

rmse:      sqrt(mean((o - o_ref)^2)) over every element of o
cos_diff:  1 - <o, o_ref> / (|o| |o_ref|), o flattened (one number per layer, as FlashMLA's tests do)
rel_l2:    |o - o_ref| / |o_ref|, o flattened
lse_max / lse_mean: max and mean of |lse - lse_ref| over the query rows (natural log)
nonfinite: number of NaN or inf elements in o (a scheme that overflows shows here; its o metrics are then NaN/inf)
"""

from __future__ import annotations

import math

import torch

METRICS = ("rmse", "cos_diff", "rel_l2", "lse_max", "lse_mean")


def error_metrics(o: torch.Tensor, lse: torch.Tensor, o_ref: torch.Tensor, lse_ref: torch.Tensor) -> dict[str, float]:
    """o, o_ref (R, 512) and lse, lse_ref (R,), any float dtype -> dict of the metrics above (Python floats)."""
    o, o_ref = o.double().flatten(), o_ref.double().flatten()
    lse_err = (lse.double() - lse_ref.double()).abs()
    diff = o - o_ref
    ref_norm = o_ref.norm().item()
    return {
        "rmse": diff.pow(2).mean().sqrt().item(),
        "cos_diff": 1.0 - (o @ o_ref).item() / (o.norm().item() * ref_norm),
        "rel_l2": diff.norm().item() / ref_norm,
        "lse_max": lse_err.max().item(),
        "lse_mean": lse_err.mean().item(),
        "nonfinite": int((~torch.isfinite(o)).sum().item()),
    }


def summarize(per_layer: list[dict[str, float]]) -> dict[str, float]:
    """Per-layer metrics -> {metric_mean, metric_max} over the layers where the metric is finite, and
    nonfinite_layers: how many layers had a non-finite o (NaN or inf); they are left out of the means."""
    out: dict[str, float] = {}
    for key in METRICS:
        values = [m[key] for m in per_layer if math.isfinite(m[key])]
        out[f"{key}_mean"] = sum(values) / len(values) if values else float("nan")
        out[f"{key}_max"] = max(values) if values else float("nan")
    out["nonfinite_layers"] = sum(1 for m in per_layer if m["nonfinite"])
    return out
