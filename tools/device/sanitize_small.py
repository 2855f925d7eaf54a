"""A few small decode calls (and the fused quant kernels) for compute-sanitizer memcheck / racecheck.

    compute-sanitizer --tool memcheck  python3 tools/device/sanitize_small.py
    compute-sanitizer --tool racecheck python3 tools/device/sanitize_small.py
    compute-sanitizer --tool synccheck python3 tools/device/sanitize_small.py   (barrier misuse: divergent bar.sync)

Shapes are small on purpose (sanitizers slow kernels down ~100x): varlen with a zero length, causal MTP, forced
split and no split, NaN-poisoned unused pages and sentinel block ids (tests/utils/data.py). Prints the max error
against the reference so a wrong result under the sanitizer shows too.
"""

import os
import sys

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from utils.data import make_paged_inputs  # noqa: E402

from snapmla_ext import ops, reference  # noqa: E402

CASES = [  # (b, s_q, h_q, seqlens, causal, num_sm_parts, forced decode kernel)
    (3, 1, 16, [130, 0, 64], False, None, "wide"),
    (3, 1, 16, [130, 0, 64], False, None, "narrow"),
    (2, 2, 64, [65, 200], True, 8, "auto"),  # q_rows >= 64: the warp-specialised kernel (kernel_choice.h WS_MIN_Q_ROWS)
    (1, 1, 128, [257], False, 3, "auto"),
    # The ws kernel's masked block loop on a block that is not the piece's last (causal s_q 3: the shortest row sees
    # 127 of 129 tokens, so block 1 runs masked with block 2's QK in flight), 3 m-tiles.
    (1, 3, 64, [129], True, None, "auto"),
    # The narrow kernel (q_rows <= 16), causal, forced split, both warpgroups. Forced, so that the case stays on
    # it whatever the automatic choice (kernel_choice.h).
    (3, 2, 8, [200, 1, 0], True, 4, "narrow"),
    # The combine's fan-out layout (combine/layout.h choose_combine_layout): 64 rows as 2 CTAs per row, 2 sets over
    # ~25 pieces; 2 x 32 rows as 2 CTAs per row, 1 set over ~16.
    (1, 1, 64, [2000], False, 24, "auto"),
    (2, 1, 32, [1500, 900], False, 30, "auto"),
    # 71 pieces per CTA in both kernels (past the 64 output rows that
    # an out-row prefetch variant stages in shared memory); request 70 (5000 tokens) is split
    # between piece 70 of part 0 and piece 0 of part 1.
    (141, 1, 64, [1, 0, 65, 7, 64] * 14 + [5000] + [1, 0, 65, 7, 64] * 14, False, 2, "auto"),
    (141, 1, 16, [1, 0, 65, 7, 64] * 14 + [5000] + [1, 0, 65, 7, 64] * 14, False, 2, "narrow"),
    # The wide kernel where auto now takes the ws one (q_rows >= 64): causal MTP with splits, 2 m-tiles.
    (2, 2, 64, [65, 200], True, 8, "wide"),
    (1, 1, 128, [257], False, 3, "wide"),
    # Cases 8 and 9 at a size racecheck finishes (they take minutes under it): 11 pieces in each of 2 CTAs, so the
    # narrow kernel's merge mbarriers and both kernels' query buffers turn through several phases; request 10
    # (900 tokens) is split between the two parts.
    (21, 1, 16, [1, 0, 65, 7, 64] * 2 + [900] + [1, 0, 65, 7, 64] * 2, False, 2, "narrow"),
    (21, 1, 64, [1, 0, 65, 7, 64] * 2 + [900] + [1, 0, 65, 7, 64] * 2, False, 2, "auto"),
]


def main():
    # SNAPMLA_SANITIZE_CASES="4 5": only those case indices (one hazard report per case).
    only = [int(x) for x in os.environ.get("SNAPMLA_SANITIZE_CASES", "").split()]
    for i, (b, s_q, h_q, seqlens, causal, parts, kernel) in enumerate(CASES):
        if only and i not in only:
            continue
        torch.ops.snapmla.set_decode_kernel(kernel)
        inp = make_paged_inputs(b, s_q, h_q, seqlens, seed=900 + i, device="cuda", append=ops.append_kv)
        kw = {} if parts is None else {"num_sm_parts": parts}
        meta, splits = ops.get_mla_metadata(inp.cache_seqlens, s_q * h_q, 1, **kw)
        out, lse = ops.flash_mla_with_kvcache(inp.q, inp.cache, inp.block_table, inp.cache_seqlens, 512, meta,
                                              splits, causal=causal)
        rows = ops.fetch_dequant(inp.cache, block_table=inp.block_table, seqlens=inp.cache_seqlens,
                                 num_tokens=sum(seqlens))
        torch.cuda.synchronize()
        ref_out, ref_lse = reference.decode(inp.q, inp.cache, inp.block_table, inp.cache_seqlens, causal=causal)
        err = (out.float() - ref_out.float()).norm() / ref_out.float().norm().clamp_min(1e-30)
        lens = seqlens if len(seqlens) <= 8 else f"<{len(seqlens)} lengths>"
        print(f"case {i}: b={b} s_q={s_q} h_q={h_q} seqlens={lens} causal={causal} parts={parts} {kernel}: "
              f"rel L2 vs reference {err.item():.2e}, fetched {tuple(rows.shape)}")


if __name__ == "__main__":
    main()
