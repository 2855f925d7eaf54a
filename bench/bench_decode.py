"""Benchmark of the FP8 SnapMLA decode call against the other MLA decoders on Hopper (shapes of docs/anchors.md and
of the compute-bound regime: h_q 64-128, MTP s_q 2-4).

Question: how much faster than the faster BF16 decoder (FlashMLA BF16 or FlashAttention-3's MLA path, vLLM's
default on Hopper) and than vLLM's per-tensor FP8 FlashMLA kernel is the whole decode call (Fused-Q-Quant +
decode + combine, with the scheduler metadata computed once per step, as an engine shares it across layers), and
how close to the roofline does it run? The peers (bench/peers.py) run in the same process, in alternating rounds
with ours, each on its own cache, when they are importable. One line per case:
  us | equivalent TFLOPS = 2 b s_q h_q (576 + 512) mean(seqlen) / t (FlashMLA's formula) | KV GB/s at 644 B per
  token | % of roofline | speedup over FlashMLA BF16, then over each other peer | [q pre-quantized: our call
  with q quantized before it, as vLLM's FP8 kernel is timed, and that peer over it]
Roofline time = max(KV bytes / copy ceiling measured in this run, FP8 FLOPs / 1258 TFLOP/s + BF16 RoPE FLOPs /
679 TFLOP/s) (the measured matmul ceilings of docs/anchors.md). The baseline is FlashMLA run in the same process
when `flash_mla` is importable ("measured"), else the time from docs/anchors.md ("anchor"; none for some shapes).
Timing: bench/harness.py, each side's call captured once in a CUDA graph and replayed, as engines run decode steps
(--no-graphs: eager calls; a side whose capture fails runs eager and says so), L2 flushed before every call (the
data is >> L2 anyway; --flush read leaves it clean instead of dirty, bench/harness.py), median.

    python3 bench/bench_decode.py [--quick] [--out DIR]      (GPU; SNAPMLA_BENCH_QUICK=1 means --quick)
    python3 bench/bench_decode.py --cases sk8192 --pdl-ab     (also plain launches vs PDL, common/pdl.h)
    python3 bench/bench_decode.py --plot RESULT.json          (anywhere: PNG of speedup vs context length)
    python3 bench/bench_decode.py --table RESULT.json         (anywhere: README's markdown table of that run)
    python3 bench/bench_decode.py --fit RESULT.json           (anywhere: each side's time as fixed part + slope)
JSON goes to bench/results/ and to --out; the PNG next to each JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass
from typing import Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from snapmla_ext import layout as L  # noqa: E402
from snapmla_ext.decode_ops import decode_kernel, forced_decode_kernel  # noqa: E402

FP8_TFLOPS, BF16_TFLOPS = 1258.0, 679.0  # docs/anchors.md, measured matmul ceilings of the project's H200


@dataclass(frozen=True)
class Case:
    b: int
    s_q: int
    h_q: int
    s_k: int
    varlen: bool = False
    anchor_us: Optional[float] = None  # FlashMLA BF16 on the project's H200 (docs/anchors.md)

    @property
    def name(self) -> str:
        return f"b{self.b}_sq{self.s_q}_h{self.h_q}_sk{self.s_k}" + ("_varlen" if self.varlen else "")


ANCHOR_CASES = [
    Case(64, 1, 16, 16384, anchor_us=320), Case(64, 1, 16, 32768, anchor_us=616),
    Case(64, 1, 16, 65536, anchor_us=1192), Case(64, 1, 16, 131072, anchor_us=2462),
    Case(64, 1, 64, 16384, anchor_us=334), Case(64, 1, 64, 32768, anchor_us=646),
    Case(64, 1, 64, 65536, anchor_us=1267), Case(64, 1, 64, 131072, anchor_us=2565),
    Case(64, 1, 128, 16384, anchor_us=509), Case(64, 1, 128, 32768, anchor_us=1010),
    Case(64, 1, 128, 65536, anchor_us=2035), Case(64, 1, 128, 131072, anchor_us=4166),
    Case(64, 2, 16, 32768, anchor_us=622), Case(64, 2, 64, 32768, anchor_us=999),
    Case(64, 2, 128, 32768, anchor_us=1972),
    Case(128, 1, 128, 4096, anchor_us=264), Case(128, 1, 16, 4096, anchor_us=169),
    Case(64, 1, 128, 32768, varlen=True, anchor_us=1073),
]
SMALL_BATCH_CASES = [Case(b, 1, h, 8192) for b in (1, 4, 16) for h in (16, 64, 128)]
# One request with a long context: ~16 blocks per part at the default 132 parts (8k: ~1 block), so the kernels'
# per-block speed counts there, not only their fixed costs (which kernel to pick at b = 1: docs/design.md).
LONG_SINGLE_CASES = [Case(1, 1, h, 131072) for h in (64, 128)]
# One token short of a whole block: every request's last block runs the kernels' masked variants (the masked
# softmax and V tail), code that the whole-block cases above never run and that a CTA fetches cold at each
# request end (docs/design.md). Side by side with the cases above they give its cost.
PARTIAL_BLOCK_CASES = [Case(16, 1, h, 8191) for h in (16, 64, 128)] + [Case(64, 1, 16, 16383)]
# MTP with 3 draft tokens at DP attention (s_q 4, all 128 heads) and at TP2: the compute-bound goals of the design
# (docs/design.md section 4).
MTP_CASES = [Case(32, 4, 128, 16384), Case(32, 4, 64, 16384)]
# b = 128 at 4k with 64 heads (TP2), next to the anchors' b = 128 shapes at h_q 16 and 128: 128 requests over 132
# parts, most of which run two pieces (248 in all), so the split-KV plan's per-piece costs weigh most here.
BATCH_128_CASES = [Case(128, 1, 64, 4096)]
ALL_CASES = ANCHOR_CASES + SMALL_BATCH_CASES + PARTIAL_BLOCK_CASES + LONG_SINGLE_CASES + MTP_CASES + BATCH_128_CASES
QUICK_CASES = [Case(64, 1, 16, 32768, anchor_us=616), Case(64, 1, 128, 32768, anchor_us=1010),
               Case(4, 1, 64, 8192), Case(128, 1, 128, 4096, anchor_us=264)]


def seqlens_of(case: Case, gen: torch.Generator) -> torch.Tensor:
    if not case.varlen:
        return torch.full((case.b,), case.s_k, dtype=torch.int32)
    # docs/anchors.md: N(32768, 16384^2), clipped to [1, 2 * s_k].
    lens = torch.randn(case.b, generator=gen) * (case.s_k / 2) + case.s_k
    return lens.round().clamp(1, 2 * case.s_k).to(torch.int32)


def random_snapmla_cache(num_blocks: int, seed: int) -> torch.Tensor:
    """(num_blocks, 41216) uint8 filled with valid random tokens (content ~ N(0, 0.1^2) in e4m3 after scaling,
    RoPE bf16, scales ~0.1 / 448), written page chunk by page chunk to bound the temporaries."""
    from snapmla_ext.cache import scale_view, write_tokens

    data = torch.empty(num_blocks, L.PAGE_BYTES, dtype=torch.uint8, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    chunk = 1024  # pages per step: 1024 * 64 * 512 fp32 values and int64 byte positions, 128 + 256 MiB
    for p0 in range(0, num_blocks, chunk):
        sl = slice(p0, min(num_blocks, p0 + chunk))
        n = sl.stop - sl.start
        c = torch.randn(n * L.PAGE_BLOCK_SIZE, L.D_CONTENT, device="cuda", generator=gen).mul_(100.0).clamp_(-448, 448)
        r = torch.randn(n * L.PAGE_BLOCK_SIZE, L.D_ROPE, device="cuda", generator=gen).mul_(100.0)
        token = torch.arange(n * L.PAGE_BLOCK_SIZE, device="cuda")
        write_tokens(data[sl], token // L.PAGE_BLOCK_SIZE, token % L.PAGE_BLOCK_SIZE, c8=c.to(torch.float8_e4m3fn),
                     rope=r.to(torch.bfloat16))
        scale_view(data[sl]).fill_(0.1 / L.FP8_E4M3_MAX)
    return data


def timing_call(fn, H, graphs: bool):
    """(the callable to time, how it runs): fn captured in a CUDA graph (H.graphed) when graphs, else fn eagerly.
    A capture fixes the launch's choices (kernel override, PDL), so each setting gets its own capture."""
    return H.graphed(fn) if graphs else (fn, "eager")


def time_peer(peer, x, H, NV, graphs: bool) -> tuple[float, Optional[dict], str]:
    """A peer's time (bench/peers.py), NVML's summary of its timed calls only (NV: bench/nvml_sampler.py; its
    cache's allocation and fill, up to 9.7 GB for a BF16 cache, stay outside the sampled window), and how it ran."""
    call, mode = timing_call(peer.prepare(x), H, graphs)
    us, during = NV.timed_round(lambda: H.time_cold(call))
    del call  # frees the peer's cache (and its graph)
    return us, during, mode


def time_with_env(fn, H, name: str, value: str, graphs: bool) -> float:
    """fn timed with os.environ[name] = value (the launcher reads SNAPMLA_PDL per launch, so a graph is captured
    under it), restored after."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        return H.time_cold(timing_call(fn, H, graphs)[0])
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def case_inputs(case: Case):
    """The case's seqlens (CPU), its block table of pages in random order (CUDA), the page count and q (CUDA)."""
    gen = torch.Generator().manual_seed(case.b * 7 + case.s_k)
    seqlens_cpu = seqlens_of(case, gen)
    pages = [math.ceil(int(n) / L.PAGE_BLOCK_SIZE) for n in seqlens_cpu]
    max_pages = max(pages)
    num_blocks = sum(pages)
    # Pages in random order, as a block allocator hands them out.
    order = torch.randperm(num_blocks, generator=gen).to(torch.int32)
    block_table = torch.zeros(case.b, max_pages, dtype=torch.int32)
    start = 0
    for i, n in enumerate(pages):
        block_table[i, :n] = order[start : start + n]
        start += n
    q = (torch.randn(case.b, case.s_q, case.h_q, L.D_QK, device="cuda") * 0.1).to(torch.bfloat16)
    return seqlens_cpu, block_table.cuda(), num_blocks, q


def run_case(case: Case, peers: list, ceiling_gbps: float, H, pdl_ab: bool = False, ab_rounds: int = 2,
             ours_round_count: Optional[int] = None, alloc_between: bool = False, graphs: bool = True) -> H.Result:
    from bench.peers import PeerInputs
    from snapmla_ext.decode_ops import flash_mla_with_kvcache, get_mla_metadata

    seqlens_cpu, block_table, num_blocks, q = case_inputs(case)
    seqlens = seqlens_cpu.cuda()
    x = PeerInputs(q=q, block_table=block_table, seqlens=seqlens, seqlens_cpu=seqlens_cpu, num_blocks=num_blocks)
    cache = random_snapmla_cache(num_blocks, seed=case.s_k)
    meta, splits = get_mla_metadata(seqlens, case.s_q * case.h_q, 1)
    fn = lambda: flash_mla_with_kvcache(q, cache, block_table, seqlens, L.D_CONTENT, meta, splits)  # noqa: E731
    call, ours_mode = timing_call(fn, H, graphs)
    # With peers importable, ours and each peer's call alternate for `ab_rounds` rounds and each side keeps its
    # fastest: timed once each, ours came right after the previous case's FlashMLA run and was up to 17 % slower
    # than in a run without it (b64 h128 16k, H200, 2026-12-01).
    # Each round is followed by the SM clock it left (harness.sm_clock_mhz): in a measured table our
    # second round ran up to 20 % slower than the first at h_q 64 / 128 while FlashMLA's two agreed within 3 %.
    # ours_round_count (--ours-rounds) sets the count with or without FlashMLA: our rounds alone tell whether
    # the spread between our rounds comes from the FlashMLA round between them (Next steps
    # b). alloc_between (--alloc-between-rounds, without FlashMLA): FlashMLA's allocation of its BF16 cache, and
    # the emptied cache after it, between our rounds without its kernel, to tell the allocation from the kernel.
    # Each round is also sampled from NVML while it runs (bench/nvml_sampler.py: the SM clock, power, temperature
    # and clock-event reasons during the round; None where NVML is missing), since the clock after a round did
    # not track our spread.
    from bench import nvml_sampler as NV

    rounds = ours_round_count if ours_round_count is not None else (ab_rounds if peers else 1)
    ours_rounds, ours_mhz, ours_nvml = [], [], []
    peer_rounds = {peer.name: dict(us=[], sm_mhz=[], nvml=[], mode=None) for peer in peers}
    for _ in range(rounds):
        t, during = NV.timed_round(lambda: H.time_cold(call))
        ours_rounds.append(t)
        ours_nvml.append(during)
        ours_mhz.append(H.sm_clock_mhz())
        for peer in peers:
            t, during, mode = time_peer(peer, x, H, NV, graphs)
            pr = peer_rounds[peer.name]
            pr["mode"] = mode
            pr["us"].append(t)
            pr["nvml"].append(during)
            pr["sm_mhz"].append(H.sm_clock_mhz())
            torch.cuda.empty_cache()
        if not peers and alloc_between:
            k_cache = torch.randn(num_blocks, L.PAGE_BLOCK_SIZE, 1, L.D_QK, device="cuda", dtype=torch.bfloat16)
            del k_cache
            torch.cuda.empty_cache()
    us = min(ours_rounds)
    # The call above let the launcher choose (kernel_choice.h); where the narrow kernel runs, it and the wide one
    # are also timed forced, on the same inputs in the same run, for the side-by-side ratio.
    forced = {}
    # (an extension without the choice ops, e.g. an older build timed by tools/device/bench_variants.sh: skipped)
    if hasattr(torch.ops.snapmla, "decode_kernel") and decode_kernel(case.s_q * case.h_q) == "narrow":
        for kernel in ("narrow", "wide"):
            with forced_decode_kernel(kernel):
                forced[kernel] = H.time_cold(timing_call(fn, H, graphs)[0])
    # The same call with q already quantized (quantize_q once, outside the timed call), as vLLM's FP8 kernel is
    # timed (its q is quantized before its call): the like-for-like time against it, and (us - this) is what
    # Fused-Q-Quant costs inside our call. Neighbouring timing, not in the alternating rounds.
    from snapmla_ext.quant_ops import quantize_q

    qq = quantize_q(q)
    fn_pre = lambda: flash_mla_with_kvcache(qq, cache, block_table, seqlens, L.D_CONTENT, meta, splits)  # noqa: E731
    prequant_us = H.time_cold(timing_call(fn_pre, H, graphs)[0])
    # --pdl-ab: the same call with plain launches (SNAPMLA_PDL=0) and with PDL (SNAPMLA_PDL=1; common/pdl.h),
    # neighbouring timings of one process.
    plain_us = pdl_us = None
    if pdl_ab:
        plain_us = time_with_env(fn, H, "SNAPMLA_PDL", "0", graphs)
        pdl_us = time_with_env(fn, H, "SNAPMLA_PDL", "1", graphs)
    del call, cache
    torch.cuda.empty_cache()

    # Per peer: its fastest round and ours over it. "speedup" stays FlashMLA BF16's (measured, else the anchor
    # of docs/anchors.md); the goals compare with the faster BF16 peer and with the FP8 peer.
    peer_params = {}
    for peer in peers:
        pr = peer_rounds[peer.name]
        peer_params[peer.name] = dict(label=peer.label, precision=peer.precision, note=peer.note, mode=pr["mode"],
                                      us=min(pr["us"]),
                                      speedup=min(pr["us"]) / us, rounds_us=pr["us"], rounds_sm_mhz=pr["sm_mhz"],
                                      rounds_nvml=pr["nvml"])
    bf16 = {n: v for n, v in peer_params.items() if v["precision"] == "bf16"}
    best_bf16 = min(bf16, key=lambda n: bf16[n]["us"]) if bf16 else None
    fm = peer_params.get("flashmla_bf16")
    baseline_us, baseline_kind = None, None
    if fm is not None:
        baseline_us, baseline_kind = fm["us"], "measured"
    elif case.anchor_us is not None:
        baseline_us, baseline_kind = case.anchor_us, "anchor"

    total_tokens = int(seqlens_cpu.sum())
    mean_seqlen = total_tokens / case.b
    rows = case.b * case.s_q * case.h_q
    tflops = 2 * rows * (L.D_QK + L.D_CONTENT) * mean_seqlen / us / 1e6
    kv_bytes = total_tokens * L.TOKEN_BYTES
    kv_gbps = kv_bytes / us / 1e3
    fp8_flops = 2 * rows * total_tokens / case.b * (2 * L.D_CONTENT)
    bf16_flops = 2 * rows * total_tokens / case.b * L.D_ROPE
    roof_us = max(kv_bytes / ceiling_gbps / 1e3, (fp8_flops / FP8_TFLOPS + bf16_flops / BF16_TFLOPS) / 1e6)
    params = dict(
        b=case.b, s_q=case.s_q, h_q=case.h_q, s_k=case.s_k, varlen=case.varlen, mean_seqlen=mean_seqlen,
        num_sm_parts=int(meta.shape[0]), total_splits=int(splits[-1]), tflops=tflops, kv_gbps=kv_gbps,
        pct_roofline=100.0 * roof_us / us, baseline_us=baseline_us, baseline=baseline_kind,
        speedup=(baseline_us / us) if baseline_us else None,
        narrow_kernel_us=forced.get("narrow"), wide_kernel_us=forced.get("wide"),
        narrow_vs_wide=(forced["wide"] / forced["narrow"]) if forced else None,
        plain_launch_us=plain_us, pdl_launch_us=pdl_us, pdl_speedup=(plain_us / pdl_us) if plain_us else None,
        ours_rounds_us=ours_rounds, baseline_rounds_us=fm["rounds_us"] if fm else None,
        ours_rounds_sm_mhz=ours_mhz, baseline_rounds_sm_mhz=fm["rounds_sm_mhz"] if fm else None,
        ours_rounds_nvml=ours_nvml, baseline_rounds_nvml=fm["rounds_nvml"] if fm else None,
        timing=ours_mode, peers=peer_params or None, best_bf16_peer=best_bf16,
        speedup_vs_best_bf16=bf16[best_bf16]["speedup"] if best_bf16 else None,
        prequant_q_us=prequant_us,
        vllm_fp8_vs_prequant=(peer_params["vllm_fp8"]["us"] / prequant_us) if "vllm_fp8" in peer_params else None,
    )
    q_bytes = rows * L.D_QK * 2
    out_bytes = rows * (L.D_CONTENT * 2 + 4)
    res = H.Result(name=case.name, us=us, bytes_moved=kv_bytes + q_bytes + out_bytes,
                   gbps=(kv_bytes + q_bytes + out_bytes) / us / 1e3,
                   pct_copy=100.0 * (kv_bytes + q_bytes + out_bytes) / us / 1e3 / ceiling_gbps, l2="cold",
                   params=params)
    return res


def print_line(r) -> None:
    p = r.params
    speed = f"{p['speedup']:.2f}x ({p['baseline']})" if p["speedup"] else "-"
    # The other peers' ratios (FlashMLA's is `speed`), then ours over the faster BF16 peer.
    others = {n: v for n, v in (p.get("peers") or {}).items() if n != "flashmla_bf16"}
    for v in others.values():
        speed += f" | {v['label']} {v['speedup']:.2f}x"
    eager = [v["label"] for v in (p.get("peers") or {}).values() if v.get("mode", "graph") != "graph"]
    if p.get("timing", "graph") != "graph":
        eager.insert(0, "ours")
    if eager:
        speed += f" [eager: {', '.join(eager)}]"
    if p.get("best_bf16_peer") and len([v for v in (p.get("peers") or {}).values() if v["precision"] == "bf16"]) > 1:
        speed += f" | best BF16 {p['speedup_vs_best_bf16']:.2f}x"
    wide = (f"  [forced: narrow {p['narrow_kernel_us']:.1f} us, wide {p['wide_kernel_us']:.1f} us, "
            f"narrow {p['narrow_vs_wide']:.2f}x]" if p.get("wide_kernel_us") else "")
    pdl = (f"  [plain launch {p['plain_launch_us']:.1f} us, PDL {p['pdl_launch_us']:.1f} us, {p['pdl_speedup']:.3f}x]"
           if p.get("plain_launch_us") else "")
    if p.get("prequant_q_us"):
        vs = f", vLLM FP8 {p['vllm_fp8_vs_prequant']:.2f}x" if p.get("vllm_fp8_vs_prequant") else ""
        pdl += f"  [q pre-quantized: {p['prequant_q_us']:.1f} us{vs}]"
    # Rounds, when there is more than one (ours, and FlashMLA's when measured), each with the SM clock: NVML's
    # median during the round where it was sampled (with its clock-event reasons other than idle), else the
    # clock after the round.
    rounds = ""
    if len(p["ours_rounds_us"]) > 1:
        def sampled(key: str) -> bool:  # every round of this side has a clock from NVML
            d = p.get(f"{key}_nvml")
            return bool(d) and all(x and x.get("sm_mhz_median") is not None for x in d)

        nvml_on = sampled("ours_rounds") and (not p.get("baseline_rounds_us") or sampled("baseline_rounds"))

        def side(key: str) -> str:
            if not nvml_on:
                return "/".join(f"{t:.1f}@{f:.0f}" for t, f in zip(p[f"{key}_us"], p[f"{key}_sm_mhz"]))
            why = lambda d: f"({','.join(d['reasons'])})" if d.get("reasons") else ""  # noqa: E731
            rounds = zip(p[f"{key}_us"], p[f"{key}_nvml"])
            return "/".join(f"{t:.1f}@{d['sm_mhz_median']:.0f}{why(d)}" for t, d in rounds)

        theirs = f", FlashMLA {side('baseline_rounds')}" if p.get("baseline_rounds_us") else ""
        for v in others.values():  # the other peers' rounds, with the clock after each
            theirs += ", " + v["label"] + " " + "/".join(f"{t:.1f}@{f:.0f}" for t, f in zip(v["rounds_us"],
                                                                                         v["rounds_sm_mhz"]))
        label = "us@MHz during (NVML)" if nvml_on else "us@MHz after"
        rounds = f"  [rounds {label}: ours {side('ours_rounds')}{theirs}]"
    print(f"{r.name:<34} {r.us:10.1f} {p['tflops']:9.1f} {p['kv_gbps']:9.1f} {p['pct_roofline']:7.1f}%  {speed}{wide}{pdl}"
          f"{rounds}", flush=True)


def kilo_tokens(tokens: int) -> str:
    """32768 -> "32k"; a length that is not whole kilo-tokens as is."""
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else str(tokens)


def markdown_table(json_path: str) -> str:
    """README's table from an earlier run's JSON: per case our time, each peer's time (in the order of the run's
    "peers"), ours over the faster BF16 peer and over each FP8 peer, as run_case recorded them. Reads only the
    JSON (any machine)."""
    with open(json_path) as f:
        data = json.load(f)
    peers = data.get("peers") or {}
    bf16 = [n for n, v in peers.items() if v["precision"] == "bf16"]
    fp8 = [n for n, v in peers.items() if v["precision"] != "bf16"]
    head = ["b, s_q, h_q, s_k", "ours (us)"] + [f"{peers[n]['label']} (us)" for n in peers]
    head += (["ours vs faster BF16"] if bf16 else []) + [f"ours vs {peers[n]['label']}" for n in fp8]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]

    for r in data["results"]:
        p, got = r["params"], (r["params"].get("peers") or {})
        shape = f"{p['b']}, {p['s_q']}, {p['h_q']}, {kilo_tokens(p['s_k'])}" + (" (varlen)" if p["varlen"] else "")
        row = [shape, f"{r['us']:.1f}"] + [f"{got[n]['us']:.1f}" if n in got else "-" for n in peers]
        # The ratios and the faster BF16 peer as run_case recorded them (one place decides which is faster).
        best = p.get("best_bf16_peer")
        if bf16:
            row.append(f"{p['speedup_vs_best_bf16']:.2f}x ({peers[best]['label'].split()[0]})" if best else "-")
        row += [f"{got[n]['speedup']:.2f}x" if n in got else "-" for n in fp8]
        lines.append("| " + " | ".join(row) + " |")
    env = data.get("environment", {})
    lines.append(f"\n{env.get('gpu', '?')}, torch {env.get('torch', '?')}, commit {env.get('git_revision', '?')}, "
                 f"{env.get('date', '?')} ({os.path.basename(json_path)})")
    return "\n".join(lines)


def line_fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least-squares t = fixed + slope * x over two or more distinct x: (fixed, slope, largest |residual|)."""
    if len(set(xs)) < 2:
        raise ValueError(f"a line needs two or more distinct lengths, got {xs}")
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    fixed = my - slope * mx
    return fixed, slope, max(abs(y - fixed - slope * x) for x, y in zip(xs, ys))


def length_fit(json_path: str) -> str:
    """Each side's time over context length as a fixed part and a slope, from an earlier run's JSON (any machine).

    For every (b, s_q, h_q) series of uniform whole-page lengths spanning a factor of two or more, and for ours, our
    call with q quantized before it and each peer timed at every length of the series: t = F + slope * s_k by least
    squares. F (us) is what a call costs apart from its stream: the extra kernels, the decode's start and tail, the
    pieces' epilogues. The slope (us per 1k tokens) is the stream: a side's slope over ours is the speedup that long
    contexts approach, and ours gives the marginal KV rate at 644 B per token. The largest residual says how well
    a line fits (none with two lengths, which a line always fits)."""
    with open(json_path) as f:
        data = json.load(f)
    peers = data.get("peers") or {}
    series: dict[tuple[int, int, int], list[dict]] = {}
    for r in data["results"]:
        p = r["params"]
        if not p["varlen"]:
            series.setdefault((p["b"], p["s_q"], p["h_q"]), []).append(r)
    head = ["b, s_q, h_q", "lengths", "side", "F (us)", "us per 1k tokens", "largest residual (us)",
            "slope over ours"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for (b, s_q, h_q), rs in sorted(series.items()):
        # Whole pages only: a partial last page runs the masked code, a cost of its own (PARTIAL_BLOCK_CASES).
        rs = sorted((r for r in rs if r["params"]["s_k"] % L.PAGE_BLOCK_SIZE == 0), key=lambda r: r["params"]["s_k"])
        lengths = [r["params"]["s_k"] for r in rs]
        if not lengths or lengths[-1] < 2 * lengths[0]:
            continue
        sides = {"ours": [r["us"] for r in rs], "ours, q pre-quantized": [r["params"].get("prequant_q_us")
                                                                           for r in rs]}
        for name, info in peers.items():
            sides[info["label"]] = [(r["params"].get("peers") or {}).get(name, {}).get("us") for r in rs]
        ours_slope = None
        for side, ts in sides.items():
            if any(t is None for t in ts):
                continue  # not timed at every length of the series
            fixed, slope, res = line_fit([x / 1000 for x in lengths], ts)
            if side == "ours":
                ours_slope = slope
                kv_tbps = b * 1000 * L.TOKEN_BYTES / (slope * 1e-6) / 1e12
                rel = f"1.00x ({kv_tbps:.2f} TB/s of KV)"
            else:
                rel = f"{slope / ours_slope:.2f}x" if ours_slope else "-"
            span = ", ".join(kilo_tokens(x) for x in lengths)
            fit = f"{res:.1f}" if len(lengths) > 2 else "-"
            lines.append(f"| {b}, {s_q}, {h_q} | {span} | {side} | {fixed:.1f} | {slope:.2f} | {fit} | {rel} |")
    env = data.get("environment", {})
    # A result file without "l2_flush" was flushed by zeroing (the harness's default).
    lines.append(f"\n{env.get('gpu', '?')}, commit {env.get('git_revision', '?')}, {env.get('date', '?')}, L2 flush "
                 f"by {data.get('l2_flush', 'write')} ({os.path.basename(json_path)})")
    return "\n".join(lines)


def plot_speedup(json_path: str, png_path: Optional[str] = None) -> Optional[str]:
    """PNG of speedup over FlashMLA BF16 vs context length, one line per head count (b = 64, s_q = 1, fixed
    whole-block lengths). Reads only the JSON, so it runs on any machine with matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot (run `bench_decode.py --plot JSON` where it is)")
        return None
    with open(json_path) as f:
        data = json.load(f)
    series: dict[int, list[tuple[int, float, str]]] = {}
    for r in data["results"]:
        p = r["params"]
        # Whole-block lengths only: PARTIAL_BLOCK_CASES (s_k = 16383) would sit on top of the 16384 point.
        if p["b"] == 64 and p["s_q"] == 1 and not p["varlen"] and p["s_k"] % 64 == 0 and p.get("speedup"):
            series.setdefault(p["h_q"], []).append((p["s_k"], p["speedup"], p["baseline"]))
    if not series:
        print(f"{json_path}: no b = 64, s_q = 1 case with a baseline: no plot")
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for h_q, pts in sorted(series.items()):
        pts.sort()
        ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], marker="o", label=f"h_q = {h_q} ({pts[0][2]})")
    ax.set_xscale("log", base=2)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("context length s_k (tokens)")
    ax.set_ylabel("speedup over FlashMLA BF16")
    ax.set_title(f"SnapMLA FP8 decode, b = 64, s_q = 1 ({data['environment'].get('gpu', '?')})")
    ax.legend()
    ax.grid(alpha=0.3)
    png_path = png_path or os.path.splitext(json_path)[0] + "_speedup.png"
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)
    return png_path


def main() -> None:
    from bench import harness as H

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="also write the JSON (and PNG) into this directory")
    ap.add_argument("--quick", action="store_true", default=os.environ.get("SNAPMLA_BENCH_QUICK") == "1",
                    help="four representative shapes only (also SNAPMLA_BENCH_QUICK=1, for tools/device/gpu_check.sh)")
    ap.add_argument("--plot", default=None, metavar="JSON", help="only draw the PNG of an earlier run's JSON")
    ap.add_argument("--table", default=None, metavar="JSON",
                    help="only print README's markdown table of an earlier run's JSON (times and ratios per peer)")
    ap.add_argument("--fit", default=None, metavar="JSON",
                    help="only print each side's time over context length as fixed part + slope (earlier run)")
    ap.add_argument("--cases", default=None, metavar="SUBSTR",
                    help="only the cases whose name contains SUBSTR, or any of a comma-separated list "
                         "(e.g. b64_sq1_h16_sk32768 for ncu, sk8192,sk4096 for the small and short cases)")
    ap.add_argument("--ab-rounds", type=int, default=2, metavar="N",
                    help="with peers importable: rounds of ours then each peer per case, fastest of each (default 2)")
    ap.add_argument("--ours-rounds", type=int, default=None, metavar="N",
                    help="rounds of our call per case, with or without peers "
                         "(default: --ab-rounds with them, 1 without)")
    ap.add_argument("--peers", default=None, metavar="NAMES",
                    help="comma-separated peers to time (bench/peers.py: flashmla_bf16, fa3_bf16, vllm_fp8; "
                         "default: every importable one)")
    ap.add_argument("--no-graphs", action="store_true",
                    help="time eager calls instead of CUDA-graph replays (every side; default: graphs, as engines)")
    ap.add_argument("--alloc-between-rounds", action="store_true",
                    help="without peers: allocate and free a BF16 cache between our rounds (no peer kernel)")
    ap.add_argument("--flush", default="write", choices=H.FLUSH_MODES,
                    help="how the L2 is flushed before each timed call: zero a 256 MB buffer (write, default; it "
                         "leaves dirty lines that the call writes back) or read it (read; clean lines)")
    ap.add_argument("--pdl-ab", action="store_true",
                    help="also time every case with plain launches (SNAPMLA_PDL=0) and PDL (=1), and report the ratio")
    args = ap.parse_args()
    if args.plot:
        print(plot_speedup(args.plot))
        return
    if args.table:
        print(markdown_table(args.table))
        return
    if args.fit:
        print(length_fit(args.fit))
        return

    from bench.peers import available_peers

    H.set_flush_mode(args.flush)

    peers, missing = available_peers(args.peers.split(",") if args.peers else None)
    ceiling = H.copy_ceiling_gbps()
    have_fm = any(p.name == "flashmla_bf16" for p in peers)
    print(f"device: {torch.cuda.get_device_name(0)}; copy ceiling: {ceiling:.1f} GB/s; baseline: "
          f"{'FlashMLA measured in this run' if have_fm else 'docs/anchors.md times (flash_mla not importable)'}")
    for p in peers:
        print(f"peer {p.name}: {p.label} ({p.note})" if p.note else f"peer {p.name}: {p.label}")
    for name, why in missing.items():
        print(f"peer {name} skipped: {why}")
    print(f"{'case':<34} {'us':>10} {'TFLOPS':>9} {'KV GB/s':>9} {'roof':>8}  speedup")
    cases = QUICK_CASES if args.quick else ALL_CASES
    if args.cases:
        cases = [c for c in ALL_CASES if any(s in c.name for s in args.cases.split(","))]
    results = []
    for c in cases:
        results.append(run_case(c, peers, ceiling, H, pdl_ab=args.pdl_ab, ab_rounds=max(args.ab_rounds, 1),
                                ours_round_count=None if args.ours_rounds is None else max(args.ours_rounds, 1),
                                alloc_between=args.alloc_between_rounds, graphs=not args.no_graphs))
        print_line(results[-1])
    dirs = [H.RESULTS_DIR] + ([args.out] if args.out else [])
    extra = {"copy_ceiling_gbps": ceiling, "l2_flush": H.flush_mode(),
             "baseline": "flash_mla measured" if have_fm else "docs/anchors.md",
             "peers": {p.name: dict(label=p.label, precision=p.precision, note=p.note) for p in peers},
             "peers_skipped": missing}
    for path in H.write_json("bench_decode", results, extra, dirs):
        print("wrote", path)
        png = plot_speedup(path)
        if png:
            print("wrote", png)


if __name__ == "__main__":
    main()
