"""Decode-serving benchmark: tokens/s per GPU of a DeepSeek-V3 MLA attention stack at a fixed KV memory budget,
the SnapMLA FP8 cache (644 B/token) against a BF16 cache (1152 B/token, FlashMLA BF16's page layout).

Question: at the same KV memory, how many more decode tokens per second does the FP8 cache serve? It holds
1152 / 644 = 1.79x more tokens, so more requests run at once, and its kernel is faster per request. Two
comparisons per case (h_q, s_q, context):
- same budget: `fp8` against `bf16` (FlashMLA BF16) and `fa3` (FlashAttention-3's MLA path on the BF16 cache),
  each with the pages the budget buys in its own format;
- same batch: `fp8_same_batch`, our cache with the BF16 side's page count: the same admissions, so exactly the
  BF16 side's batches step by step, and the difference is the kernel's (and KV write's) share alone.

What runs (bench/serving/): --layers MLA attention blocks with real shapes and random BF16 weights (model.py), a
cache per layer, continuous batching over a seeded request stream shared by all sides (allocator.py): prompts
uniform in [0.75, 1.25] x context already in the cache (prefill not timed: every page is filled once with random
latents through the side's own KV write), outputs uniform in [0.5, 1.5] x --output-tokens, first-come first-served
admission reserving prompt + whole output, retirement and refill every step, at most --max-batch requests. The
first batch starts part-way through its outputs (steady state from step 0). NOT modelled: the MoE / FFN, the MTP
draft module, communication (o_proj's all-reduce), prefill; the attention block's time split per layer is
reported so a whole model can be projected.

KV budget: --kv-gib is spread over --budget-layers equal per-layer caches (default 61, DeepSeek-V3's layers), of
which --layers are allocated and run: the batch sizes are those of the full model on one GPU, the run stays short.
--budget-layers equal to --layers gives every run layer budget / L instead.

Per rank: h_q = 16 (TP8), 64 (TP2), 128 (DP attention). tok/s/GPU = the batch's accepted tokens per second / TP
(TP = 128 / h_q: the ranks of one TP group share the batch, the latent cache is replicated over them).

MTP (--mtp, s_q = 2): each step verifies 1 token + 1 draft per request and writes 2 KV rows; the draft is accepted
with probability --mtp-accept (default 0.7, seeded per request, the same on every side); the cache length
advances by the accepted count and tokens/s counts accepted tokens only (1 + p per step on average).

Step: hidden states (b * s_q, 7168) -> L blocks, b padded up to a CUDA-graph bucket (GRAPH_BUCKETS; one graph per
bucket, captured on first use, outside the timing). Padding rows have length s_q on the scratch page and KV slot
-1. Persistent buffers: lengths, an active mask and the block table (rows written at admission, moved at
retirement); slots and positions are computed inside the graph. The FlashMLA-2025-style metadata is computed
once per step, eagerly, and copied into the graph's buffers (as SGLang does).

Timing (CUDA events on the GPU stream, the stream synchronised after every step): one step = the metadata + the
graph replay; the lengths' host-to-device copies and block-table row updates are enqueued before the start
event; a GPU sleep enqueued before the start event keeps the GPU busy while the CPU enqueues the step, so host
launch time is not timed. tokens/s = accepted tokens of the timed steps / the sum of their step times; "wall"
tokens/s divides by the host's wall time instead (scheduling in Python and per-step syncs included, captures
excluded). Phase split (last round): the projections (in and out, all layers), the KV writes (all layers) and the
metadata + decode (all layers) of the last step's batch, each captured as its own graph, replayed --phase-reps
times, median; their sum differs from the step by launch gaps and overlap between phases. Sides alternate in
rounds (order reversed every round), one side's cache allocated at a time; each side keeps its fastest round.

    python3 bench/bench_serving.py [--heads 16,64,128] [--mtp] [--contexts 16384,32768,65536,131072] [--layers 4]
        [--kv-gib 60] [--budget-layers 61] [--steps N] [--quick] [--out DIR] [--backend auto|reference] [--capacity]
    python3 bench/bench_serving.py --capacity        (anywhere: the capacity table, then exit)
    python3 bench/bench_serving.py --backend reference  (CPU smoke run, tiny model dims; JSON only with --out)
    python3 bench/bench_serving.py --plot RESULT.json   (anywhere: PNG of tokens/s vs context)
JSON (GPU runs) goes to bench/results/ and --out; the PNG next to each JSON.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Callable, Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import harness as H  # noqa: E402
from bench.serving import backends as B  # noqa: E402
from bench.serving import capacity as C  # noqa: E402
from bench.serving.allocator import (  # noqa: E402
    Batcher,
    PagePool,
    apply_row_ops,
    max_request_tokens,
    pages_for,
    request_stream,
    step_tokens,
    SCRATCH_PAGE,
)
from bench.serving.model import DEEPSEEK_V3, TINY, MLAAttention, MLADims  # noqa: E402
from snapmla_ext import layout as L  # noqa: E402

GRAPH_BUCKETS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 160, 192, 256)
SLEEP_CYCLES = 400_000  # ~0.2 ms GPU sleep before a timed step: covers the host's enqueue of metadata + replay

NOTES = {
    "modelled": "attention stack only: per layer q_a/q_b projections with RMSNorm, absorbed W_UK and W_UV, RoPE, "
                "kv_a projection with RMSNorm, the KV write, the decode, o_proj with the residual add. Not modelled: "
                "MoE/FFN, the MTP draft module, communication (o_proj all-reduce), prefill.",
    "per_gpu": "tok/s/GPU = accepted tokens/s of the batch / TP, TP = 128 / h_q; projected_61 = tok/s/GPU x L / 61 "
               "(the attention stack of the full model, FFN excluded)",
    "admission": "FCFS, no overtaking; a request reserves pages for prompt + whole output (+ s_q - 1) at admission; "
                 "retired requests return their pages at once; refill every step; the first batch starts part-way "
                 "through its outputs (uniform progress)",
    "mtp": "s_q = 2: 1 token + 1 draft verified per step, 2 KV rows written; the draft is accepted with probability "
           "mtp_accept (per-request seeded draws); the cache advances by the accepted count; tokens/s counts "
           "accepted tokens only",
    "padding": "batch padded to a graph bucket; padding rows: length s_q on the scratch page (page 0), KV slot -1 "
               "(skipped by append_kv, redirected into the scratch page by the BF16 write)",
    "timing": "CUDA events around metadata + graph replay of one step (GPU sleep before the start event so host "
              "enqueue is not timed; stream synced every step); phase split: per-phase graphs of the last step's "
              "batch, median of replays",
    "prefill": "not timed: every page of every layer's cache is filled once with random latents N(0, 1) through the "
               "side's own KV write; a new request's prompt is whatever its pages hold",
}


@dataclass(frozen=True)
class Settings:
    dims: MLADims
    layers: int
    budget_layers: int
    kv_bytes: int
    steps: int
    warmup: int
    rounds: int
    output_tokens: int
    max_batch: int
    accept_p: float
    seed: int
    graphs: bool
    phase_reps: int
    device: str


@dataclass(frozen=True)
class Case:
    h_q: int
    s_q: int
    context: int

    @property
    def name(self) -> str:
        return f"h{self.h_q}_sq{self.s_q}_ctx{self.context}"


@dataclass(frozen=True)
class Side:
    name: str  # fp8, bf16, fa3, fp8_same_batch
    make: Callable[[], B.Backend]
    sizing_token_bytes: int  # pages per layer = budget / (budget_layers * 64 * this)


def graph_buckets(max_batch: int) -> list[int]:
    """GRAPH_BUCKETS below max_batch, then max_batch; past 256 every 64 more."""
    extra = list(range(320, max_batch, 64)) if max_batch > 256 else []
    return [b for b in GRAPH_BUCKETS if b < max_batch] + extra + [max_batch]


def bucket_for(b: int, buckets: list[int]) -> int:
    return min(x for x in buckets if x >= b)


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100.0 * len(ordered)) - 1)]


def time_ms(fn: Callable[[], object], device: torch.device) -> float:
    """One call of fn: CUDA events on the current stream (synchronised after), else the host clock."""
    if device.type != "cuda":
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(SLEEP_CYCLES)  # the GPU waits here, not after `start`, while the host enqueues fn's work
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


class StepRunner:
    """The decode step of an engine: persistent buffers for max_batch rows, one CUDA graph per bucket.

    hidden (max_batch * s_q, hidden) bf16 (the same random inputs every step), seqlens (max_batch,) int32 (decode
    lengths; padding rows s_q), active (max_batch,) bool, block_table (max_batch, width) int32 (SCRATCH_PAGE past
    a request's pages)."""

    def __init__(self, model: MLAAttention, backend: B.Backend, case: Case, settings: Settings, width: int):
        dev, mb = model.device, settings.max_batch
        self.model, self.backend, self.s_q, self.h_q = model, backend, case.s_q, case.h_q
        gen = torch.Generator(device=dev).manual_seed(settings.seed + 7)
        self.hidden = torch.randn(mb * case.s_q, model.dims.hidden, generator=gen, device=dev, dtype=torch.bfloat16)
        self.seqlens = torch.full((mb,), case.s_q, dtype=torch.int32, device=dev)
        self.active = torch.zeros(mb, dtype=torch.bool, device=dev)
        self.block_table = torch.full((mb, width), SCRATCH_PAGE, dtype=torch.int32, device=dev)
        self.use_graphs = settings.graphs and dev.type == "cuda"
        self.pool = torch.cuda.graph_pool_handle() if self.use_graphs else None  # one pool for all buckets
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        self.record: Optional[list] = None  # eager runs: collects each layer's attention output
        self.last: Optional[torch.Tensor] = None
        backend.setup_step(mb, case.s_q, case.h_q, causal=case.s_q > 1, softmax_scale=model.dims.softmax_scale)

    def set_batch(self, lens: list[int], bucket: int) -> None:
        """Rows 0 .. n-1 get the requests' lengths, rows n .. bucket-1 are padding."""
        n = len(lens)
        host_lens = torch.full((bucket,), self.s_q, dtype=torch.int32)
        host_lens[:n] = torch.tensor(lens, dtype=torch.int32)
        host_active = torch.zeros(bucket, dtype=torch.bool)
        host_active[:n] = True
        self.seqlens[:bucket].copy_(host_lens)
        self.active[:bucket].copy_(host_active)

    def forward(self, b: int) -> torch.Tensor:
        """The step of a b-row (padded) batch: (b * s_q, hidden) out. No host sync (captured as is)."""
        seqlens, table = self.seqlens[:b], self.block_table[:b]
        positions, slots = step_tokens(seqlens, self.active[:b], table, self.s_q)
        self.backend.begin_step(seqlens, table)
        x = self.hidden[: b * self.s_q]
        for layer in range(self.model.num_layers):
            x, o = self.model.forward_layer(layer, x, positions, slots, self.backend, b, self.s_q)
            if self.record is not None:
                self.record.append(o.clone())
        return x

    def _capture(self, fn: Callable[[], object]):
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()  # warm-up outside the graph (lazy init, allocator)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = fn()
        return graph, out

    def capture(self, b: int) -> None:
        self.backend.plan(self.seqlens[:b])
        self.graphs[b], self.outputs[b] = self._capture(lambda: self.forward(b))

    def step(self, b: int) -> None:
        self.backend.plan(self.seqlens[:b])
        if self.use_graphs:
            self.graphs[b].replay()
            self.last = self.outputs[b]
        else:
            self.last = self.forward(b)

    def phase_split(self, b: int, reps: int) -> dict[str, float]:
        """Median ms per step of each phase, all layers, on the current batch (see the module docstring)."""
        dev, s_q = self.model.device, self.s_q
        seqlens, table = self.seqlens[:b], self.block_table[:b]
        positions, slots = step_tokens(seqlens, self.active[:b], table, s_q)
        x = self.hidden[: b * s_q]
        q, kv_c, k_pe = self.model.project_in(0, x, positions)  # inputs of realistic scale for the phases
        q = q.view(b, s_q, self.h_q, L.D_QK)
        o = q[..., : L.D_CONTENT].reshape(b * s_q, self.h_q, L.D_CONTENT).contiguous()
        layers = range(self.model.num_layers)

        def projections():
            y = x
            for layer in layers:
                self.model.project_in(layer, y, positions)
                y = self.model.project_out(layer, o, y)
            return y

        def cache_write():
            for layer in layers:
                self.backend.write_kv(layer, kv_c, k_pe, slots)

        def attention():
            self.backend.begin_step(seqlens, table)
            return [self.backend.attend(layer, q) for layer in layers]

        result = {}
        for name, fn, planned in (("projections", projections, False), ("cache_write", cache_write, False),
                                  ("attention", attention, True)):
            if planned:
                self.backend.plan(seqlens)
            graph = self._capture(fn)[0] if self.use_graphs else None

            def run(fn=fn, graph=graph, planned=planned):
                if planned:
                    self.backend.plan(seqlens)
                if graph is not None:
                    graph.replay()
                else:
                    fn()

            run()
            result[name] = statistics.median(time_ms(run, dev) for _ in range(reps))
            del graph
        return result


def run_side(case: Case, side: Side, model: MLAAttention, settings: Settings,
             record_step: Optional[int] = None, phases: bool = True) -> dict:
    """One side of one case: fill the cache, serve warmup + steps decode steps, measure. With record_step (eager
    runs only) the summary carries that step's attention outputs per layer ("recorded")."""
    dev = model.device
    num_pages = C.pages_per_layer(settings.kv_bytes, settings.budget_layers, side.sizing_token_bytes)
    width = pages_for(max_request_tokens(case.context, settings.output_tokens, case.s_q))
    backend = side.make()
    runner = None
    try:
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        backend.allocate(settings.layers, num_pages, dev)
        backend.fill(settings.seed)
        pool = PagePool(num_pages)
        batcher = Batcher(pool, request_stream(settings.seed, case.context, settings.output_tokens),
                          max_batch=settings.max_batch, s_q=case.s_q, accept_p=settings.accept_p,
                          table_width=width, seed=settings.seed)
        batcher.admit()
        runner = StepRunner(model, backend, case, settings, width)
        buckets = graph_buckets(settings.max_batch)
        step_ms, batch, kv_tokens, reserved, recorded = [], [], [], [], None
        tokens, capture_s, wall0 = 0, 0.0, 0.0
        for step in range(settings.warmup + settings.steps):
            if step == settings.warmup:
                wall0, capture_s = time.perf_counter(), 0.0
            apply_row_ops(runner.block_table, batcher.take_row_ops())
            lens = batcher.seqlens()
            bucket = bucket_for(len(lens), buckets)
            runner.set_batch(lens, bucket)
            if runner.use_graphs and bucket not in runner.graphs:
                t0 = time.perf_counter()
                runner.capture(bucket)
                capture_s += time.perf_counter() - t0
            runner.record = [] if step == record_step and not runner.use_graphs else None
            ms = time_ms(functools.partial(runner.step, bucket), dev)
            if runner.record is not None:
                recorded = dict(attention=runner.record, rows=len(lens), output=runner.last.clone())
                runner.record = None
            held = batcher.reserved_pages()  # this step's batch, before retirements return pages
            accepted = batcher.finish_step()
            if step >= settings.warmup:
                step_ms.append(ms)
                batch.append(len(lens))
                tokens += accepted
                kv_tokens.append(sum(lens))
                reserved.append(held)
        wall_s = time.perf_counter() - wall0 - capture_s
        finite = bool(torch.isfinite(runner.last).all())
        split = runner.phase_split(bucket, settings.phase_reps) if phases and settings.phase_reps > 0 else None
        peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else None
        clock = H.sm_clock_mhz() if dev.type == "cuda" else None
        total_s = sum(step_ms) / 1e3
        tp = max(model.dims.model_heads // case.h_q, 1)
        tok_rank = tokens / total_s if total_s else 0.0
        mean_ms = statistics.fmean(step_ms)
        kv_read = statistics.fmean(kv_tokens) * backend.token_bytes * settings.layers
        summary = dict(
            side=side.name, backend=backend.name, kv_format=backend.kv_format, h_q=case.h_q, s_q=case.s_q,
            context=case.context, tp=tp, layers=settings.layers, pages_per_layer=num_pages,
            kv_bytes_allocated=backend.cache_bytes(), kv_gib_allocated=backend.cache_bytes() / 2**30,
            batch_mean=statistics.fmean(batch), batch_max=max(batch), batch_min=min(batch),
            step_ms_mean=mean_ms, step_ms_p50=percentile(step_ms, 50), step_ms_p99=percentile(step_ms, 99),
            steps=len(step_ms), tokens=tokens, tok_s_rank=tok_rank, tok_s_gpu=tok_rank / tp,
            tok_s_gpu_projected_61=tok_rank / tp * settings.layers / model.dims.model_layers,
            wall_tok_s_rank=tokens / wall_s if wall_s > 0 else None,
            kv_tokens_mean=statistics.fmean(kv_tokens), kv_read_gbps=kv_read / mean_ms / 1e6,
            pages_in_use_mean=statistics.fmean(reserved), pool_pages=pool.capacity,
            admitted=len(batcher.admitted), retired=len(batcher.retired),
            graph_buckets=sorted(runner.graphs), output_finite=finite,
            phases_ms=split, phases_us_per_layer={k: v * 1e3 / settings.layers for k, v in split.items()} if split
            else None, phase_sum_over_step=sum(split.values()) / mean_ms if split else None,
            peak_gib=peak / 2**30 if peak is not None else None, sm_clock_mhz_after=clock,
        )
        if recorded is not None:
            summary["recorded"] = recorded
        return summary
    finally:
        runner = None  # its graphs and buffers go before the cache, then the allocator's cache
        backend.free()
        gc.collect()
        if dev.type == "cuda":
            torch.cuda.empty_cache()


def measure_case(case: Case, sides: list[Side], model: MLAAttention, settings: Settings) -> tuple[dict, dict]:
    """All sides of one case in alternating rounds (order reversed every round). Returns ({side: its fastest
    round's summary, with every round's tok/s and the phase split of the last round}, {side: why skipped})."""
    runs: dict[str, list[dict]] = {}
    skipped: dict[str, str] = {}
    for r in range(settings.rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        for side in order:
            if side.name in skipped:
                continue
            try:
                s = run_side(case, side, model, settings, phases=(r == settings.rounds - 1))
            except Exception as exc:  # an optional backend failing mid-run (e.g. under graph capture)
                skipped[side.name] = f"{type(exc).__name__}: {exc}"
                print(f"  {case.name} {side.name}: skipped ({skipped[side.name]})", flush=True)
                continue
            runs.setdefault(side.name, []).append(s)
    best = {}
    for name, summaries in runs.items():
        keep = dict(max(summaries, key=lambda s: s["tok_s_rank"]))
        last = summaries[-1]  # the round that measured the phase split (its own step time is the ratio's base)
        for key in ("phases_ms", "phases_us_per_layer", "phase_sum_over_step"):
            keep[key] = last[key]
        keep["rounds_tok_s_rank"] = [s["tok_s_rank"] for s in summaries]
        keep["rounds_sm_clock_mhz_after"] = [s["sm_clock_mhz_after"] for s in summaries]
        best[name] = keep
    ref = best.get("bf16")
    for s in best.values():
        s["vs_bf16"] = s["tok_s_rank"] / ref["tok_s_rank"] if ref and ref["tok_s_rank"] else None
    return best, skipped


def make_sides(backend: str, names: Optional[list[str]]) -> tuple[list[Side], dict]:
    """The sides to run and {side: why not} for those that cannot run here."""
    fp8_bytes, bf16_bytes = L.TOKEN_BYTES, L.BF16_TOKEN_BYTES
    sides, skipped = [], {}
    if backend == "reference":
        sides = [Side("fp8", B.ReferenceFp8, fp8_bytes), Side("bf16", B.ReferenceBf16, bf16_bytes),
                 Side("fp8_same_batch", B.ReferenceFp8, bf16_bytes)]
    else:
        why = B.probe_snapmla()
        if why is None:
            sides += [Side("fp8", B.SnapMLAFp8, fp8_bytes), Side("fp8_same_batch", B.SnapMLAFp8, bf16_bytes)]
        else:
            skipped["fp8"] = skipped["fp8_same_batch"] = why
        for name, probe in (("bf16", B.probe_flashmla), ("fa3", B.probe_fa3)):
            factory, why = probe()
            if factory is not None:
                sides.append(Side(name, factory, bf16_bytes))
            else:
                skipped[name] = why
        order = ["fp8", "bf16", "fp8_same_batch", "fa3"]
        sides.sort(key=lambda s: order.index(s.name))
    if names:
        sides = [s for s in sides if s.name in names]
        skipped = {k: v for k, v in skipped.items() if k in names}
    return sides, skipped


def print_header() -> None:
    print(f"{'case':<20} {'side':<15} {'batch':>9} {'step ms':>8} {'p99 ms':>8} {'tok/s rank':>11} "
          f"{'tok/s/GPU':>10} {'proj.61':>8} {'vs bf16':>8}  us/layer proj/write/attn")


def print_line(case: Case, s: dict) -> None:
    vs = f"{s['vs_bf16']:.2f}x" if s.get("vs_bf16") else "-"
    ph = s.get("phases_us_per_layer")
    split = f"{ph['projections']:.0f}/{ph['cache_write']:.0f}/{ph['attention']:.0f}" if ph else "-"
    batch = f"{s['batch_mean']:.0f}/{s['batch_max']}"
    print(f"{case.name:<20} {s['side']:<15} {batch:>9} {s['step_ms_mean']:8.3f} {s['step_ms_p99']:8.3f} "
          f"{s['tok_s_rank']:11.0f} {s['tok_s_gpu']:10.0f} {s['tok_s_gpu_projected_61']:8.0f} {vs:>8}  {split}",
          flush=True)


def _git(args: list[str]) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=20, cwd=H.REPO).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def environment() -> dict:
    """harness.environment() on a GPU; on the CPU (reference runs) the same keys without the GPU's."""
    if torch.cuda.is_available():
        return H.environment()
    return {"git_revision": os.environ.get("SNAPMLA_GIT_REV") or _git(["rev-parse", "--verify", "-q", "HEAD"])
            or "unknown", "gpu": None, "torch": torch.__version__, "host": platform.node(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def write_json(results: list[H.Result], extra: dict, out_dirs: list[str]) -> list[str]:
    """harness.write_json's payload and file name, with environment() above (CPU runs too)."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    payload = {"bench": "bench_serving", "environment": environment(), **extra,
               "results": [asdict(r) for r in results]}
    paths = []
    for d in dict.fromkeys(out_dirs):
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"bench_serving_{stamp}.json")
        with open(path, "w") as f:
            json.dump(payload, f, indent=2)
        paths.append(path)
    return paths


def plot_throughput(json_path: str, png_path: Optional[str] = None) -> Optional[str]:
    """PNG of tok/s/GPU vs context, one panel per s_q, one colour per head count, FP8 solid, BF16 (FlashMLA)
    dashed, FA3 dotted, each labelled with the backend that ran. Reads only the JSON."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot (run `bench_serving.py --plot JSON` where it is)")
        return None
    with open(json_path) as f:
        data = json.load(f)
    series: dict[tuple, list] = {}
    for r in data["results"]:
        p = r["params"]
        if p["side"] in ("fp8", "bf16", "fa3"):
            series.setdefault((p["s_q"], p["h_q"], p["side"], p["backend"]), []).append((p["context"], p["tok_s_gpu"]))
    if not series:
        print(f"{json_path}: no results to plot")
        return None
    panels = sorted({k[0] for k in series})
    heads = sorted({k[1] for k in series})
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 4.5), squeeze=False)
    style = {"fp8": ("-", "o"), "bf16": ("--", "s"), "fa3": (":", "^")}
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, s_q in zip(axes[0], panels):
        for (sq, h_q, side, backend), pts in sorted(series.items()):
            if sq != s_q:
                continue
            pts.sort()
            ls, mk = style[side]
            ax.plot([x for x, _ in pts], [y for _, y in pts], ls=ls, marker=mk,
                    color=colours[heads.index(h_q) % len(colours)], label=f"h_q {h_q}, {backend}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("target context (tokens)")
        ax.set_ylabel(f"decode tok/s per GPU ({data['settings']['layers']} attention layers, no FFN)")
        ax.set_title(f"s_q = {s_q}, {data['settings']['kv_gib']:g} GiB KV / {data['settings']['budget_layers']} "
                     f"layers ({(data['environment'] or {}).get('gpu') or 'CPU'})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    png_path = png_path or os.path.splitext(json_path)[0] + "_throughput.png"
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)
    return png_path


PRESETS = {
    "full": dict(heads="16,64,128", contexts="16384,32768,65536,131072", layers=4, budget_layers=61, kv_gib=60.0,
                 steps=200, warmup=20, rounds=2, output_tokens=2048, max_batch=256, phase_reps=20),
    "quick": dict(heads="16,128", contexts="16384,65536", layers=2, steps=60, warmup=10),
    # CPU smoke run: tiny model dims, ~100-token contexts, a budget of ~20 BF16 / ~39 FP8 pages per layer.
    "reference": dict(heads="4", contexts="96,160", layers=2, budget_layers=2, kv_gib=0.003, steps=3, warmup=1,
                      rounds=1, output_tokens=16, max_batch=8, phase_reps=1),
}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", help="h_q per rank, comma-separated (default 16,64,128; quick 16,128)")
    ap.add_argument("--mtp", action="store_true", help="also run s_q = 2 (MTP: one draft token per step)")
    ap.add_argument("--mtp-accept", type=float, default=0.7, help="probability that the draft is accepted (0.7)")
    ap.add_argument("--contexts", help="target contexts (default 16384,32768,65536,131072; quick 16384,65536)")
    ap.add_argument("--layers", type=int, help="attention layers run, each with its own cache (default 4; quick 2)")
    ap.add_argument("--budget-layers", type=int, help="layers the KV budget is spread over (default 61)")
    ap.add_argument("--kv-gib", type=float, help="KV budget in GiB (default 60)")
    ap.add_argument("--steps", type=int, help="timed decode steps per run (default 200; quick 60)")
    ap.add_argument("--warmup", type=int, help="untimed steps before them (default 20; quick 10)")
    ap.add_argument("--rounds", type=int, help="alternating rounds of all sides (default 2)")
    ap.add_argument("--output-tokens", type=int, help="mean output length (default 2048)")
    ap.add_argument("--max-batch", type=int, help="concurrent requests at most (default 256)")
    ap.add_argument("--phase-reps", type=int, help="replays per phase of the phase split, 0 = none (default 20)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", default=os.environ.get("SNAPMLA_BENCH_QUICK") == "1",
                    help="a few-minute set (h_q 16/128, 16k/64k, L = 2, 60 steps; also SNAPMLA_BENCH_QUICK=1)")
    ap.add_argument("--backend", choices=("auto", "reference"), default="auto",
                    help="auto: the GPU backends that can run; reference: the CPU smoke run (tiny dims)")
    ap.add_argument("--sides", help="only these sides, comma-separated (fp8,bf16,fp8_same_batch,fa3)")
    ap.add_argument("--dims", choices=("deepseek", "tiny"), help="model dims (default deepseek; reference: tiny)")
    ap.add_argument("--no-graphs", action="store_true", help="eager steps (no CUDA graphs)")
    ap.add_argument("--capacity", action="store_true", help="print the capacity table and exit (no GPU needed)")
    ap.add_argument("--out", help="also write the JSON (and PNG) into this directory")
    ap.add_argument("--plot", metavar="JSON", help="only draw the PNG of an earlier run's JSON")

    args = ap.parse_args(argv)
    preset = dict(PRESETS["full"])
    if args.quick:
        preset.update(PRESETS["quick"])
    if args.backend == "reference":
        preset.update(PRESETS["reference"])
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.dims is None:
        args.dims = "tiny" if args.backend == "reference" else "deepseek"
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.plot:
        print(plot_throughput(args.plot))
        return 0
    heads = [int(x) for x in args.heads.split(",")]
    contexts = [int(x) for x in args.contexts.split(",")]
    kv_bytes = int(args.kv_gib * 2**30)
    if args.steps < 1 or args.warmup < 0 or args.layers < 1:
        print(f"need --steps >= 1, --warmup >= 0, --layers >= 1; got {args.steps}, {args.warmup}, {args.layers}")
        return 2
    if args.layers > args.budget_layers:
        print(f"--layers {args.layers} > --budget-layers {args.budget_layers}: the caches would exceed the budget")
        return 2
    cap = C.capacity_table(kv_bytes, args.budget_layers, sorted(set(C.CONTEXTS) | set(contexts)))
    if args.capacity:
        print(C.format_capacity_table(cap, kv_bytes, args.budget_layers))
        return 0
    if args.backend == "auto" and not torch.cuda.is_available():
        print("no CUDA GPU: run `--backend reference` for the CPU smoke run, or `--capacity`")
        return 2
    graphs = not args.no_graphs
    if graphs and os.environ.get("SNAPMLA_DEBUG_CHECKS") == "1":
        print("SNAPMLA_DEBUG_CHECKS=1 syncs the host in every call: CUDA graphs off")
        graphs = False
    settings = Settings(
        dims=TINY if args.dims == "tiny" else DEEPSEEK_V3, layers=args.layers, budget_layers=args.budget_layers,
        kv_bytes=kv_bytes, steps=args.steps, warmup=args.warmup, rounds=max(args.rounds, 1),
        output_tokens=args.output_tokens, max_batch=args.max_batch, accept_p=args.mtp_accept, seed=args.seed,
        graphs=graphs, phase_reps=args.phase_reps, device="cpu" if args.backend == "reference" else "cuda")
    sides, skipped = make_sides(args.backend, args.sides.split(",") if args.sides else None)
    device = torch.device(settings.device)
    print(f"device: {torch.cuda.get_device_name(0) if device.type == 'cuda' else 'CPU (reference backends)'}; "
          f"sides: {', '.join(s.name for s in sides) or 'none'}; graphs: {settings.graphs and device.type == 'cuda'}")
    for name, why in skipped.items():
        print(f"skipped {name}: {why}")
    for key, note in NOTES.items():
        print(f"note ({key}): {note}")
    print(f"note (budget): {args.kv_gib:g} GiB over {args.budget_layers} per-layer caches, {args.layers} of them run")
    print(C.format_capacity_table(cap, kv_bytes, args.budget_layers))
    if not sides:
        print("nothing to run")
        return 2
    s_qs = [1, 2] if args.mtp else [1]
    results, case_skips, summaries = [], {}, []
    print_header()
    for h_q in heads:
        model = MLAAttention(settings.dims, h_q, settings.layers, device, seed=args.seed)
        for s_q in s_qs:
            for context in contexts:
                case = Case(h_q, s_q, context)
                best, skips = measure_case(case, sides, model, settings)
                if skips:
                    case_skips[case.name] = skips
                for s in best.values():
                    print_line(case, s)
                    summaries.append(s)
                    bytes_read = int(s["kv_tokens_mean"] * L.TOKEN_BYTES if s["kv_format"] == "fp8"
                                     else s["kv_tokens_mean"] * L.BF16_TOKEN_BYTES) * settings.layers
                    us = s["step_ms_mean"] * 1e3
                    results.append(H.Result(name=f"{case.name}_{s['side']}", us=us, bytes_moved=bytes_read,
                                            gbps=bytes_read / us / 1e3, pct_copy=None, l2="n/a", params=s))
        del model
        gc.collect()
    extra = {
        "settings": dict(asdict(settings), dims=asdict(settings.dims), kv_gib=args.kv_gib, heads=heads,
                         contexts=contexts, s_q=s_qs),
        "notes": NOTES, "capacity": cap, "skipped_sides": skipped, "skipped_in_cases": case_skips,
    }
    dirs = ([H.RESULTS_DIR] if device.type == "cuda" else []) + ([args.out] if args.out else [])
    for path in write_json(results, extra, dirs):
        print("wrote", path)
        png = plot_throughput(path)
        if png:
            print("wrote", png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
