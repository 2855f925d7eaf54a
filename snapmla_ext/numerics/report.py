"""Terminal tables and the JSON file of a study's results (the dict study.run_study returns)."""

from __future__ import annotations

import json
import math
from pathlib import Path


def _fmt(x: float) -> str:
    return "nan" if math.isnan(x) else f"{x:.2e}"


def _ratio(entry: dict, base: dict) -> float:
    """Geometric mean over layers of rel_l2 / base's rel_l2, over the layers where both are finite."""
    logs = [
        math.log(m["rel_l2"] / b["rel_l2"])
        for m, b in zip(entry["layers"], base["layers"])
        if all(isinstance(x, float) and math.isfinite(x) and x > 0 for x in (m["rel_l2"], b["rel_l2"]))
    ]
    return math.exp(sum(logs) / len(logs)) if logs else float("nan")


def scheme_table(table: dict[str, dict], baseline: str = "snapmla") -> str:
    """One line per scheme: layer-mean and worst-layer errors, rel_l2 relative to `baseline` (geometric mean of
    the per-layer ratios), and the number of layers whose output had NaN or inf (left out of the other columns)."""
    head = (
        f"{'scheme':<40} {'rel_l2 mean':>11} {'rel_l2 max':>11} {'1-cos mean':>11} {'rmse mean':>11} "
        f"{'|dlse| max':>11} {'x ' + baseline:>10} {'bad layers':>10}"
    )
    lines = [head, "-" * len(head)]
    for entry in table.values():
        s = entry["summary"]
        ratio = _ratio(entry, table[baseline]) if baseline in table else float("nan")
        lines.append(
            f"{entry['label']:<40} {_fmt(s['rel_l2_mean']):>11} {_fmt(s['rel_l2_max']):>11} "
            f"{_fmt(s['cos_diff_mean']):>11} {_fmt(s['rmse_mean']):>11} {_fmt(s['lse_max_max']):>11} "
            f"{ratio:>10.2f} {s['nonfinite_layers']:>10}"
        )
    return "\n".join(lines)


def sweep_table(sweep: dict) -> str:
    """rel_l2 of each scheme (rows) at each value of the swept knob (columns)."""
    head = f"{'scheme':<40} " + " ".join(f"{v:>9.0e}" for v in sweep["values"])
    lines = [f"rel_l2 against {sweep['knob']} (synthetic layer {sweep['layer']})", head, "-" * len(head)]
    for entry in sweep["schemes"].values():
        lines.append(f"{entry['label']:<40} " + " ".join(f"{_fmt(x):>9}" for x in entry["rel_l2"]))
    return "\n".join(lines)


def render(results: dict) -> str:
    """The whole study as text for the terminal."""
    meta = results["meta"]
    parts = [
        f"SnapMLA numerics study: {meta['source']}, backend {meta['backend']}, "
        f"softmax_scale {meta['softmax_scale']:.5f}",
        "errors of o (and lse) against float64 attention over the BF16 inputs; mean / max over layers",
        "",
        scheme_table(results["schemes"]),
    ]
    if "ablations" in results:
        parts += ["", "ablations (SnapMLA variants)", scheme_table(results["ablations"])]
    for key in ("rope_sweep", "content_sweep"):
        if key in results:
            parts += ["", sweep_table(results[key])]
    if "page_order" in results:
        parts += ["", "page order / split (max |difference|; 0 = bit-identical)"]
        for name, d in results["page_order"].items():
            parts.append(f"  {name:<45} o {d['o_max_abs']:.3g}   lse {d['lse_max_abs']:.3g}")
    if "kernel_check" in results:
        kc = results["kernel_check"]
        worst = ", ".join(f"{k} {v:.2e} (tol {kc['tolerance'][k]:.0e})" for k, v in kc["worst"].items())
        parts += ["", f"kernel vs emulation: {'PASS' if kc['pass'] else 'FAIL'}: worst {worst}"]
    parts += ["", f"runtime {meta['runtime_s']:.1f} s"]
    return "\n".join(parts)


def _json_safe(x):
    """NaN and inf are not JSON: write them as null (the nonfinite counts say what happened)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def write_json(results: dict, path: str | Path) -> None:
    Path(path).write_text(json.dumps(_json_safe(results), indent=1) + "\n")
