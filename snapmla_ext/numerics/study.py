"""The fidelity study: every scheme on every layer against float64 attention, plus ablations, sweeps and checks.

All results are plain dicts of Python numbers (report.py prints and saves them, plots.py draws them):
    meta         what ran: data source, sizes, softmax_scale, backend, versions, runtime
    data         per-layer statistics of the inputs (dynamic ranges the schemes must cope with)
    schemes      {name: {label, layers: [metrics per layer], summary}} for the main comparison
    ablations    the same for SnapMLA's variants (P quantization and its scale, BF16 Q, P block size)
    rope_sweep   rel_l2 against the RoPE amplitude (one synthetic layer, content fixed)
    content_sweep rel_l2 against a gain on the content (per-tensor static's overflow and underflow)
    page_order   sequential vs random block table (and one split) through the paged path: differences
    kernel_check compiled kernel vs emulation per layer (only when the kernel ran)
The emulation always runs on the CPU in fp32, so the numbers do not depend on whether a GPU is present (BLAS
differences between CPUs may move the last digits).
"""

from __future__ import annotations

import datetime
import math
import subprocess
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Optional

import torch

from snapmla_ext import layout as L
from snapmla_ext._ext import extension_available
from snapmla_ext.numerics import paged
from snapmla_ext.numerics.data import Layer, SyntheticConfig, synthetic_layer
from snapmla_ext.numerics.metrics import error_metrics, summarize
from snapmla_ext.numerics.schemes import ABLATIONS, SCHEMES, Scheme, by_name
from snapmla_ext.reference import attention_fp64, decode_dense

SWEEP_SCHEMES = ("snapmla", "config_a", "config_b", "engine_pt", "bf16")
ROPE_AMAX_SWEEP = (1e1, 1e2, 1e3, 1e4, 1e5, 1e6)
CONTENT_GAIN_SWEEP = (1e-3, 1e-2, 1e-1, 1.0, 1e1, 1e2)
# docs/numerics_contract.md section 7: decode kernel against the exact emulation on the same quantized inputs.
KERNEL_TOLERANCE = {"rel_l2": 3e-3, "cos_diff": 1e-5, "lse_max": 1e-3}


@dataclass(frozen=True)
class StudyOptions:
    """What to run. backend: "auto" (kernel when kernel_ready()), "emulation" or "kernel" (error if unavailable).

    sweep_data: the synthetic setting of the sweeps (one layer, index sweep_layer, smaller than the main stack).
    """

    schemes: tuple[str, ...] = tuple(s.name for s in SCHEMES)
    ablations: bool = True
    sweeps: bool = True
    page_order: bool = True
    backend: str = "auto"
    seed: int = 0
    sweep_data: SyntheticConfig = field(default_factory=lambda: SyntheticConfig(seqlen=4096, num_heads=32))
    sweep_layer: int = 8


def reference(layer: Layer, softmax_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 attention over the original BF16 rows: o (R, 512) f64 and lse (R,) f64, row = s * h_q + h."""
    out, lse = attention_fp64(layer.q.unsqueeze(0), layer.kv.unsqueeze(0), [layer.kv.shape[0]], softmax_scale)
    return out[0].reshape(-1, L.D_CONTENT), lse[0].transpose(0, 1).reshape(-1)


def emulate(scheme: Scheme, layer: Layer, softmax_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The scheme through reference.decode_dense. Returns o (R, 512) bf16 (every kernel returns BF16) and lse (R,)."""
    d = scheme.prepare(layer.q, layer.kv)
    visible = torch.ones(1, d.q_c.shape[1], d.k_c.shape[1], dtype=torch.bool)
    o, lse = decode_dense(
        d.q_c, d.q_r, d.q_scale, d.k_c, d.k_r, d.k_scale, visible, softmax_scale * d.logit_scale,
        p_block=scheme.p_block, p_quant=scheme.p_quant, p_ref=scheme.p_ref,
    )
    return (o[0] * d.out_scale).to(torch.bfloat16), lse[0]


def layer_stats(layer: Layer) -> dict[str, float]:
    """Dynamic ranges of one layer's inputs (what decides which scheme fails)."""
    kv, q = layer.kv.float(), layer.q.float()
    c, r = kv[:, : L.D_CONTENT].abs(), kv[:, L.D_CONTENT :].abs()
    return {
        "tokens": kv.shape[0],
        "rows": q.shape[0] * q.shape[1],
        "content_amax": c.max().item(),
        "content_median": c.median().item(),
        "content_token_amax_median": c.amax(dim=1).median().item(),
        "rope_amax": r.max().item(),
        "rope_token_amax_median": r.amax(dim=1).median().item(),
        "q_content_amax": q[..., : L.D_CONTENT].abs().max().item(),
        "q_rope_amax": q[..., L.D_CONTENT :].abs().max().item(),
    }


def _metric_table(results: dict[str, list[dict]], pool: list[Scheme]) -> dict[str, dict]:
    return {s.name: {"label": s.label, "layers": results[s.name], "summary": summarize(results[s.name])} for s in pool}


def compare_schemes(
    layers: list[Layer],
    refs: list[tuple[torch.Tensor, torch.Tensor]],
    schemes: list[Scheme],
    softmax_scale: float,
    kernel_out: Optional[list[dict]] = None,
) -> dict[str, dict]:
    """Metrics of each scheme on each layer against refs[i] = reference(layers[i]).

    kernel_out (per layer {"o", "lse"}) replaces SnapMLA's emulated output by the compiled kernel's.
    """
    results: dict[str, list[dict]] = {s.name: [] for s in schemes}
    for i, (layer, (o_ref, lse_ref)) in enumerate(zip(layers, refs)):
        for scheme in schemes:
            if kernel_out is not None and scheme.name == "snapmla":
                o, lse = kernel_out[i]["o"], kernel_out[i]["lse"]
            else:
                o, lse = emulate(scheme, layer, softmax_scale)
            results[scheme.name].append(error_metrics(o, lse, o_ref, lse_ref))
    return _metric_table(results, schemes)


def sweep(
    cfg: SyntheticConfig, layer_index: int, schemes: list[Scheme], *, rope_amax=None, content_gain=None
) -> dict:
    """rel_l2 and lse_max of each scheme as one knob of synthetic_layer moves (rope_amax or content_gain values)."""
    knob, values = ("rope_amax", rope_amax) if rope_amax is not None else ("content_gain", content_gain)
    out = {"knob": knob, "values": list(values), "layer": layer_index, "schemes": {}}
    per = {s.name: {"label": s.label, "rel_l2": [], "lse_max": []} for s in schemes}
    for v in values:
        layer = synthetic_layer(cfg, layer_index, **{knob: v})
        o_ref, lse_ref = reference(layer, cfg.softmax_scale)
        for s in schemes:
            m = error_metrics(*emulate(s, layer, cfg.softmax_scale), o_ref, lse_ref)
            per[s.name]["rel_l2"].append(m["rel_l2"])
            per[s.name]["lse_max"].append(m["lse_max"])
    out["schemes"] = per
    return out


def page_order_check(layer: Layer, softmax_scale: float, seed: int, use_kernel: bool) -> dict:
    """Does the page order of the block table change the output? Compares, through the paged path, a sequential
    and a random block table (and, in the emulation, a 2-way split-KV run), and the paged emulation with the dense
    SnapMLA scheme. Reports max |difference| of o and of lse for each pair (0.0 means bit-identical)."""

    def diff(a, b):
        o_diff = (a[0].float() - b[0].float()).abs().max().item()
        return {"o_max_abs": o_diff, "lse_max_abs": (a[1] - b[1]).abs().max().item()}

    seq = paged.emulate_paged(layer, softmax_scale, "sequential", seed)
    rnd = paged.emulate_paged(layer, softmax_scale, "random", seed)
    pages = math.ceil(layer.kv.shape[0] / L.PAGE_BLOCK_SIZE)
    split = paged.emulate_paged(layer, softmax_scale, "random", seed, split_blocks=[[0, pages // 2, pages]])
    dense = emulate(by_name(["snapmla"])[0], layer, softmax_scale)
    out = {
        "emulation: random vs sequential pages": diff(rnd, seq),
        "emulation: paged vs dense (decode_dense)": diff(seq, dense),
        "emulation: 2-way split-KV vs no split": diff(split, seq),
    }
    if use_kernel:
        k_seq = paged.kernel_paged(layer, softmax_scale, "sequential", seed)
        k_rnd = paged.kernel_paged(layer, softmax_scale, "random", seed)
        out["kernel: random vs sequential pages"] = diff((k_rnd["o"], k_rnd["lse"]), (k_seq["o"], k_seq["lse"]))
    return out


def kernel_agreement(kernel_out: list[dict]) -> dict:
    """Kernel against the emulation on the same cache, per layer, and whether docs/numerics_contract.md section 7 holds: the same
    NaN/inf positions, and the tolerances on the rows where both are finite."""
    per_layer = []
    for k in kernel_out:
        o, o_emu = k["o"].double(), k["o_emu"].double()
        same = torch.equal(torch.isnan(o), torch.isnan(o_emu)) and torch.equal(torch.isinf(o), torch.isinf(o_emu))
        rows = torch.isfinite(o).all(dim=-1) & torch.isfinite(o_emu).all(dim=-1)
        m = error_metrics(o[rows], k["lse"][rows], o_emu[rows], k["lse_emu"][rows].double())
        per_layer.append(dict(m, same_nonfinite_positions=same, rows_compared=int(rows.sum())))
    worst = {key: max(m[key] for m in per_layer) for key in KERNEL_TOLERANCE}
    passed = all(m["same_nonfinite_positions"] for m in per_layer) and all(
        worst[k] <= tol for k, tol in KERNEL_TOLERANCE.items()
    )
    return {"tolerance": KERNEL_TOLERANCE, "layers": per_layer, "worst": worst, "pass": passed}


def _git_revision() -> str:
    """Short revision of the checkout this package runs from, or "unknown" (an installed copy has none)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=str(Path(__file__).parent),
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def kernel_backend(backend: str) -> bool:
    """Whether the SnapMLA row comes from the compiled kernel; raises for an unknown backend or an unusable kernel."""
    if backend not in ("auto", "emulation", "kernel"):
        raise ValueError(f"backend must be auto, emulation or kernel, got {backend!r}")
    ready = paged.kernel_ready()
    if backend == "kernel" and not ready:
        raise RuntimeError(
            "backend 'kernel' needs a CUDA GPU and the compiled snapmla_ext._C "
            f"(CUDA available: {torch.cuda.is_available()}, extension importable: {extension_available()})"
        )
    return backend == "kernel" or (backend == "auto" and ready)


def run_study(layers: list[Layer], softmax_scale: float, source: dict, options: StudyOptions = StudyOptions()) -> dict:
    """Run everything the options ask for. source: how the layers were obtained (recorded in meta)."""
    t0 = time.perf_counter()
    use_kernel = kernel_backend(options.backend)
    kernel_out = (
        [paged.kernel_paged(layer, softmax_scale, "random", options.seed) for layer in layers] if use_kernel else None
    )
    results = {
        "meta": {
            "source": source,
            "softmax_scale": softmax_scale,
            "backend": "kernel (SnapMLA row) + emulation" if use_kernel else "emulation (CPU, fp32)",
            "options": asdict(options),
            "torch": torch.__version__,
            "git_revision": _git_revision(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name() if use_kernel else "cpu",
        },
        "data": [dict(name=layer.name, **layer_stats(layer)) for layer in layers],
    }
    refs = [reference(layer, softmax_scale) for layer in layers]
    results["schemes"] = compare_schemes(layers, refs, by_name(list(options.schemes)), softmax_scale, kernel_out)
    if options.ablations:
        results["ablations"] = compare_schemes(layers, refs, list(ABLATIONS), softmax_scale)
    if options.sweeps:
        cfg = replace(options.sweep_data, seed=options.seed)
        pool = by_name(list(SWEEP_SCHEMES))
        results["rope_sweep"] = sweep(cfg, options.sweep_layer, pool, rope_amax=ROPE_AMAX_SWEEP)
        results["content_sweep"] = sweep(cfg, options.sweep_layer, pool, content_gain=CONTENT_GAIN_SWEEP)
    if options.page_order:
        results["page_order"] = page_order_check(layers[len(layers) // 2], softmax_scale, options.seed, use_kernel)
    if kernel_out is not None:
        results["kernel_check"] = kernel_agreement(kernel_out)
    results["meta"]["runtime_s"] = time.perf_counter() - t0
    return results
