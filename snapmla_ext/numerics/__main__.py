"""python -m snapmla_ext.numerics: run the numerical fidelity study and write the table, JSON and plots.

Examples:
    python -m snapmla_ext.numerics                          # synthetic 16-layer stack, results in ./numerics_results
    python -m snapmla_ext.numerics --out docs/numerics      # refresh the committed results
    python -m snapmla_ext.numerics --dump my_model.safetensors --no-sweeps   # your own dump (format: data.py)
    python -m snapmla_ext.numerics --layers 2 --seqlen 256 --heads 8 --no-plots   # a quick smoke run
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from snapmla_ext.numerics.data import SyntheticConfig, load_dump, synthetic_layers
from snapmla_ext.numerics.report import render, write_json
from snapmla_ext.numerics.schemes import SCHEMES, by_name
from snapmla_ext.numerics.study import StudyOptions, kernel_backend, run_study


def _parser() -> argparse.ArgumentParser:
    d = SyntheticConfig()
    p = argparse.ArgumentParser(prog="python -m snapmla_ext.numerics", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("numerics_results"), help="folder for results.json and the PNGs")
    p.add_argument("--dump", type=Path, help="a .pt or .safetensors dump of your own layers instead of synthetic data")
    p.add_argument("--layers", type=int, default=d.num_layers, help="synthetic layers")
    p.add_argument("--seqlen", type=int, default=d.seqlen, help="synthetic tokens per layer")
    p.add_argument("--queries", type=int, default=d.num_queries, help="synthetic query tokens per layer")
    p.add_argument("--heads", type=int, default=d.num_heads, help="synthetic query heads")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--schemes", default=",".join(s.name for s in SCHEMES), help="comma-separated scheme names")
    p.add_argument("--backend", choices=("auto", "emulation", "kernel"), default="auto",
                   help="auto: the compiled kernel for SnapMLA when a GPU and the extension are present")
    p.add_argument("--no-ablations", action="store_true")
    p.add_argument("--no-sweeps", action="store_true")
    p.add_argument("--no-page-order", action="store_true")
    p.add_argument("--no-plots", action="store_true")
    return p


def main(argv=None) -> dict:
    parser = _parser()
    args = parser.parse_args(argv)
    schemes = tuple(s for s in args.schemes.split(",") if s)
    try:  # the user's own choices fail here with a message, not a traceback
        by_name(list(schemes))
        kernel_backend(args.backend)
    except (ValueError, RuntimeError) as exc:
        parser.error(str(exc))
    if args.dump is not None:
        layers, softmax_scale = load_dump(args.dump)
        source = {"kind": "dump", "path": str(args.dump), "layers": len(layers)}
    else:
        cfg = SyntheticConfig(
            num_layers=args.layers, seqlen=args.seqlen, num_queries=args.queries, num_heads=args.heads, seed=args.seed
        )
        layers, softmax_scale = synthetic_layers(cfg), cfg.softmax_scale
        source = {"kind": "synthetic", "layers": cfg.num_layers, "seqlen": cfg.seqlen, "queries": cfg.num_queries,
                  "heads": cfg.num_heads, "seed": cfg.seed}
    options = StudyOptions(
        schemes=schemes,
        ablations=not args.no_ablations,
        sweeps=not args.no_sweeps,
        page_order=not args.no_page_order,
        backend=args.backend,
        seed=args.seed,
    )
    results = run_study(layers, softmax_scale, source, options)
    print(render(results))
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(results, args.out / "results.json")
    written = [args.out / "results.json"]
    if not args.no_plots:
        from snapmla_ext.numerics.plots import write_plots

        written += write_plots(results, args.out)
    print("wrote " + ", ".join(str(p) for p in written))
    return results


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main(sys.argv[1:])
