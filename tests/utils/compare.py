"""Error metrics and assertions that say where and by how much two tensors differ.

All metrics are computed in float64 over the finite positions that both tensors share; the non-finite positions
are checked separately (assert_same_nonfinite), because a kernel must reproduce +-inf / NaN exactly where the
reference has them (e.g. lse = +inf for a row that sees no token).
"""

from __future__ import annotations

from typing import Optional

import torch


def _finite_pair(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    keep = torch.isfinite(a) & torch.isfinite(b)
    return a[keep], b[keep]


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b||_2 / ||b||_2 over the finite positions (0 when both are all zero)."""
    a, b = _finite_pair(a, b)
    den = b.norm().item()
    num = (a - b).norm().item()
    return num / den if den > 0 else (0.0 if num == 0 else float("inf"))


def cos_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """1 - 2<a, b> / (|a|^2 + |b|^2): 0 for identical tensors, sensitive to both direction and magnitude."""
    a, b = _finite_pair(a, b)
    den = (a * a + b * b).sum().item()
    return 1.0 - 2.0 * (a * b).sum().item() / den if den > 0 else 0.0


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest |a - b| over the finite positions."""
    a, b = _finite_pair(a, b)
    return (a - b).abs().max().item() if a.numel() else 0.0


def _first(mask: torch.Tensor) -> Optional[tuple[int, ...]]:
    idx = mask.nonzero()
    return tuple(idx[0].tolist()) if idx.numel() else None


def assert_same_nonfinite(actual: torch.Tensor, expected: torch.Tensor, name: str) -> None:
    """NaN, +inf and -inf at exactly the same coordinates; reports the first coordinate that differs."""
    if actual.shape != expected.shape:
        raise AssertionError(f"{name}: shape {tuple(actual.shape)} != expected {tuple(expected.shape)}")
    a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
    kinds = (("NaN", torch.isnan), ("+inf", lambda t: t == float("inf")), ("-inf", lambda t: t == -float("inf")))
    for label, fn in kinds:
        where = _first(fn(a) != fn(e))
        if where is not None:
            raise AssertionError(
                f"{name}: {label} positions differ ({int(fn(a).sum())} vs {int(fn(e).sum())} expected); first at "
                f"{where}: actual {a[where].item()}, expected {e[where].item()}"
            )


def assert_close_report(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    name: str = "tensor",
    rel_l2_tol: Optional[float] = None,
    cos_tol: Optional[float] = None,
    atol: Optional[float] = None,
) -> dict:
    """Same non-finite positions, then each given bound on the finite part; returns the measured metrics.

    rel_l2_tol bounds rel_l2, cos_tol bounds cos_diff, atol bounds the largest absolute difference (its first
    coordinate is reported when it fails).
    """
    assert_same_nonfinite(actual, expected, name)
    metrics = {fn.__name__: fn(actual, expected) for fn in (rel_l2, cos_diff, max_abs)}
    failures = []
    if rel_l2_tol is not None and not metrics["rel_l2"] <= rel_l2_tol:
        failures.append(f"rel_l2 {metrics['rel_l2']:.3e} > {rel_l2_tol:.1e}")
    if cos_tol is not None and not metrics["cos_diff"] <= cos_tol:
        failures.append(f"cos_diff {metrics['cos_diff']:.3e} > {cos_tol:.1e}")
    if atol is not None and not metrics["max_abs"] <= atol:
        a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
        diff = torch.where(torch.isfinite(a) & torch.isfinite(e), (a - e).abs(), torch.zeros_like(a))
        where = _first(diff > atol)
        failures.append(
            f"max |diff| {metrics['max_abs']:.3e} > {atol:.1e}, "
            f"first at {where}: {a[where].item()} vs {e[where].item()}"
        )
    if failures:
        raise AssertionError(f"{name}: " + "; ".join(failures))
    return metrics


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Integer view of the raw bits (same element size), so NaN payloads and -0.0 compare exactly."""
    int_of_size = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.detach().contiguous().view(int_of_size[t.element_size()]).cpu()


def assert_bitwise_equal(actual: torch.Tensor, expected: torch.Tensor, name: str, *, nan_equal: bool = True) -> None:
    """Identical dtype, shape and bits; reports the number of mismatches and the first one by coordinate.

    nan_equal: a NaN matches any NaN of the same dtype. The sign and payload of a NaN are not portable (x86 makes
    inf / inf a negative NaN, CUDA a positive one, and casts carry the sign on), so they are not part of the
    contract; set False to compare NaN bits too.
    """
    if actual.dtype != expected.dtype:
        raise AssertionError(f"{name}: dtype {actual.dtype} != expected {expected.dtype}")
    if actual.shape != expected.shape:
        raise AssertionError(f"{name}: shape {tuple(actual.shape)} != expected {tuple(expected.shape)}")
    a, e = _bits(actual), _bits(expected)
    diff = a != e
    if nan_equal and actual.dtype.is_floating_point:
        diff &= ~(actual.detach().float().isnan().cpu() & expected.detach().float().isnan().cpu())
    where = _first(diff)
    if where is not None:
        av, ev = actual.detach().cpu()[where], expected.detach().cpu()[where]
        if av.dtype.is_floating_point:
            av, ev = av.float(), ev.float()
        raise AssertionError(
            f"{name}: {int(diff.sum())} of {diff.numel()} elements differ; first at {where}: "
            f"actual {av.item()} (bits {a[where].item():#x}), expected {ev.item()} (bits {e[where].item():#x})"
        )


def assert_same_decode_bits(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]) -> None:
    """Two (out bf16, lse fp32) results of the decode call are bit-identical (NaN payloads and -0 included)."""
    assert torch.equal(a[0].view(torch.int16), b[0].view(torch.int16)), "out differs"
    assert torch.equal(a[1].view(torch.int32), b[1].view(torch.int32)), "lse differs"
