"""Matplotlib PNGs of a study's results (the dict study.run_study returns). Needs matplotlib (imported here only).

error_per_layer.png   rel L2 of o per layer for each scheme, log scale, with an inset (linear scale) that separates
                      the schemes within CLOSE_FACTOR of SnapMLA, which the log scale would stack on one line
metrics_per_layer.png the four metrics per layer (rel L2, 1 - cos, RMSE, max |lse error|), log scale
ablations.png         rel L2 per layer for SnapMLA's variants, same layout as error_per_layer.png
sweeps.png            rel L2 against the RoPE amplitude and against a gain on the content
data.png              the per-layer dynamic ranges of the inputs
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display needed (CI, ssh)
import matplotlib.pyplot as plt  # noqa: E402

CLOSE_FACTOR = 1.25  # schemes whose mean rel L2 is within this factor of SnapMLA's go into the inset
_MARKERS = "osD^v<>ph*"


def _style(names: list[str]) -> dict[str, dict]:
    cmap = plt.get_cmap("tab10")
    return {n: {"color": cmap(i % 10), "marker": _MARKERS[i % len(_MARKERS)]} for i, n in enumerate(names)}


def _value(x) -> float:
    """A metric from the in-memory results (float, maybe NaN/inf) or from results.json (None for those)."""
    return float("nan") if x is None else float(x)


def _per_layer(ax, table: dict, metric: str, names: list[str], style: dict, layers: list[str]) -> bool:
    """One line per scheme; a layer whose value is NaN or inf gets an x at the top edge. Returns whether any did."""
    any_bad = False
    for n in names:
        ys = [_value(m[metric]) for m in table[n]["layers"]]
        ax.plot(range(len(layers)), ys, label=table[n]["label"], markersize=4, linewidth=1.2, **style[n])
        bad = [i for i, y in enumerate(ys) if not math.isfinite(y)]
        if bad:
            any_bad = True
            ax.plot(bad, [0.97] * len(bad), linestyle="none", marker="x", markersize=9, color=style[n]["color"],
                    transform=ax.get_xaxis_transform(), clip_on=False)
    return any_bad


_BAD_NOTE = "x at the top edge: that layer's output had NaN or inf"


def _layer_axis(ax, layers: list[str], label: str = "layer") -> None:
    step = max(1, len(layers) // 8)
    ax.set_xticks(range(0, len(layers), step))
    ax.set_xticklabels(layers[::step])
    ax.set_xlabel(label)


def _close_names(table: dict, baseline: str) -> list[str]:
    if baseline not in table:
        return []
    base = _value(table[baseline]["summary"]["rel_l2_mean"])
    means = {n: _value(e["summary"]["rel_l2_mean"]) for n, e in table.items() if n != "bf16"}
    return [n for n, v in means.items() if math.isfinite(v) and v <= CLOSE_FACTOR * base]


def _free_band(ax, margin: float = 0.02) -> tuple[float, float]:
    """(bottom, height) in axes fractions of the widest horizontal band of a log-y axis that no plotted point
    falls in, so the inset hides no data; the lower 40% of the axes if no band is at least 22% tall."""
    lo, hi = (math.log10(v) for v in ax.get_ylim())
    ys = sorted(
        (math.log10(y) - lo) / (hi - lo)
        for line in ax.get_lines() for y in line.get_ydata() if math.isfinite(y) and y > 0
    )
    edges = [0.0] + [y for y in ys if 0.0 <= y <= 1.0] + [1.0]
    gap, bottom = max((b - a, a) for a, b in zip(edges, edges[1:]))
    if gap - 2 * margin < 0.22:
        return 0.06, 0.4
    return bottom + margin, gap - 2 * margin


def plot_with_inset(table: dict, layers: list[str], title: str, path: Path, baseline: str = "snapmla") -> None:
    """rel L2 per layer, log y, all schemes of `table`; inset with the ones close to `baseline` on a linear y."""
    names = list(table)
    style = _style(names)
    fig, ax = plt.subplots(figsize=(10, 5.5))
    if _per_layer(ax, table, "rel_l2", names, style, layers):
        ax.set_xlabel(f"layer ({_BAD_NOTE})")
    ax.set_yscale("log")
    ax.set_ylabel("relative L2 error of o vs float64")
    ax.set_title(title)
    _layer_axis(ax, layers, ax.get_xlabel() or "layer")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    close = _close_names(table, baseline)
    if len(close) >= 2:
        y0, height = _free_band(ax)
        inset = ax.inset_axes([0.5, y0, 0.48, height])
        _per_layer(inset, table, "rel_l2", close, style, layers)
        inset.set_title(f"within {CLOSE_FACTOR}x of {baseline} (linear)", fontsize=7)
        inset.tick_params(labelsize=6)
        inset.set_xticks([])
        inset.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_metrics_grid(table: dict, layers: list[str], path: Path) -> None:
    """Four panels, one per metric, every scheme, log y."""
    names = list(table)
    style = _style(names)
    fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharex=True)
    panels = [("rel_l2", "relative L2 of o"), ("cos_diff", "1 - cos(o, o_ref)"), ("rmse", "RMSE of o"),
              ("lse_max", "max |lse - lse_ref| (nats)")]
    any_bad = False
    for ax, (metric, label) in zip(axes.flat, panels):
        any_bad |= _per_layer(ax, table, metric, names, style, layers)
        ax.set_yscale("log")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        _layer_axis(ax, layers)
    axes[0, 0].legend(fontsize=7)
    title = "error per layer against float64 attention over the BF16 inputs"
    fig.suptitle(title + (f"\n({_BAD_NOTE})" if any_bad else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_sweeps(results: dict, path: Path) -> None:
    """rel L2 against the RoPE amplitude (left) and the content gain (right), log-log."""
    sweeps = [results[k] for k in ("rope_sweep", "content_sweep") if k in results]
    fig, axes = plt.subplots(1, len(sweeps), figsize=(6 * len(sweeps), 4.5), squeeze=False)
    xlabel = {"rope_amax": "max |RoPE| of the layer", "content_gain": "gain on the content (1 = stack's layer)"}
    for ax, sw in zip(axes[0], sweeps):
        style = _style(list(sw["schemes"]))
        for n, e in sw["schemes"].items():
            ys = [_value(v) for v in e["rel_l2"]]
            ax.plot(sw["values"], ys, label=e["label"], markersize=4, **style[n])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel[sw["knob"]])
        ax.set_ylabel("relative L2 error of o")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_data(results: dict, path: Path) -> None:
    """Per-layer dynamic ranges of the inputs, log y."""
    data = results["data"]
    layers = [d["name"] for d in data]
    fig, ax = plt.subplots(figsize=(8, 4))
    series = [
        ("rope_amax", "max |RoPE|"),
        ("rope_token_amax_median", "median per-token max |RoPE|"),
        ("content_amax", "max |content|"),
        ("content_token_amax_median", "median per-token max |content|"),
        ("content_median", "median |content|"),
    ]
    for key, label in series:
        ax.plot(range(len(layers)), [d[key] for d in data], marker="o", markersize=3, label=label)
    ax.set_yscale("log")
    _layer_axis(ax, layers)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("dynamic ranges of the KV inputs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plots(results: dict, out_dir: Path) -> list[Path]:
    """Every figure the results allow, into out_dir. Returns the paths written."""
    layers = [d["name"] for d in results["data"]]
    written = []

    def target(name: str) -> Path:
        written.append(out_dir / name)
        return written[-1]

    plot_with_inset(results["schemes"], layers, "SnapMLA vs other FP8 schemes", target("error_per_layer.png"))
    plot_metrics_grid(results["schemes"], layers, target("metrics_per_layer.png"))
    if "ablations" in results:
        plot_with_inset(results["ablations"], layers, "SnapMLA ablations", target("ablations.png"))
    if "rope_sweep" in results or "content_sweep" in results:
        plot_sweeps(results, target("sweeps.png"))
    plot_data(results, target("data.png"))
    return written
