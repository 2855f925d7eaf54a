"""CPU model of the wide kernel's softmax reordering in docs/experiments/wide_block_local_exp.patch.

SPEC section 4 takes each block's exponentials relative to the running max m_n; the patch takes them relative
to the block's own row max mx_n and folds g_n = 2^(mx_n - m_n) into per-row scalars, so that everything but
those scalars can run before the other warpgroup's hand-off arrives (softmax.cuh in the patch). This script runs
both recurrences for one query row in float32 (base 2, P8 through torch's float8_e4m3fn, the same per-block
scale floor P_FLOOR) over blocks whose maxima wander far below the running max, with masked tails and blocks
that see nothing, and prints how far the two results are apart. tests/test_block_local_softmax_model.py runs
it on fixed seeds.

    python3 scripts/block_local_softmax_model.py [seed]
"""

from __future__ import annotations

import math
import sys

import torch

FP8_MAX = 448.0
P_FLOOR = 2.0 ** -60  # csrc/kv_layout.h
BLOCK = 64


def e4m3(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).to(torch.float32)


def _blocks(x2, visible):
    """Per 64-token block: its slice, the logits (-inf where masked) and their max (-inf: nothing visible)."""
    for n in range(x2.shape[0] // BLOCK):
        sl = slice(n * BLOCK, (n + 1) * BLOCK)
        x = torch.where(visible[sl], x2[sl], torch.tensor(-math.inf))
        yield sl, x, float(x.max())


def _exps(x, vis, s_v, ref):
    """e_j = 2^(x_j - ref) (ref = -inf counts as 0, the kernel's m_use) and p'_j = e_j * s_j, 0 where masked."""
    e = torch.exp2(x - (0.0 if ref == -math.inf else ref))
    return e, torch.where(vis, e * s_v, torch.tensor(0.0))


def spec_recurrence(x2, s_v, v, visible):
    """SPEC section 4 as the kernel runs it before the patch (softmax.cuh softmax_probs): per block, state
    {m, inv, l} and O~ updated only when the row sees a token of the block."""
    m, inv, l = -math.inf, 1.0, torch.tensor(0.0)
    o = torch.zeros(v.shape[1])
    for sl, x, mx in _blocks(x2, visible):
        m_new = max(m, mx)
        e, p = _exps(x, visible[sl], s_v[sl], m_new)
        pmax = float(p.max())
        if pmax <= 0.0:
            continue  # no visible token: the state and O~ stay
        inv_new = FP8_MAX / max(pmax, P_FLOOR)
        scale = 0.0 if m == -math.inf else 2.0 ** (m - m_new) * inv_new / inv
        o = o * scale + e4m3(p * inv_new) @ v[sl]
        l = l * scale + e.sum() * inv_new
        m, inv = m_new, inv_new
    return o, l, m, inv


def block_local_recurrence(x2, s_v, v, visible, fold_g: bool = True):
    """The patch: exponentials, pmax, esum and P8 relative to the block's own max (softmax_local, pack_p), the
    running state folded in by scalars afterwards (softmax_fold). fold_g=False drops g_n from the fold (a wrong
    kernel, for the test that the data can tell)."""
    m, inv, l = -math.inf, 1.0, torch.tensor(0.0)
    o = torch.zeros(v.shape[1])
    for sl, x, mx in _blocks(x2, visible):
        e, p = _exps(x, visible[sl], s_v[sl], mx)
        pmax = float(p.max())
        p8 = e4m3(p * (FP8_MAX / max(pmax, P_FLOOR)))  # state-free: packed before the hand-off
        if pmax <= 0.0:
            continue
        m_new = max(m, mx)
        g = 2.0 ** (mx - m_new) if fold_g else 1.0
        inv_new = FP8_MAX / max(g * pmax, P_FLOOR)
        scale = 0.0 if m == -math.inf else 2.0 ** (m - m_new) * inv_new / inv
        o = o * scale + p8 @ v[sl]
        l = l * scale + g * e.sum() * inv_new
        m, inv = m_new, inv_new
    return o, l, m, inv


def make_row(seed: int, n_blocks: int = 24):
    """Logits in base 2 whose block maxima drift by a few doublings (two blocks 45 and 90 below), per-token
    scales ~1e-4, V ~ N(0, 1) (e4m3 content), a masked tail and one block that sees nothing."""
    gen = torch.Generator().manual_seed(seed)
    n = n_blocks * BLOCK
    offsets = torch.randn(n_blocks, generator=gen) * 2.0  # several blocks weigh in, so g_n matters
    offsets[n_blocks // 3] -= 90.0  # below P_FLOOR relative to the running max
    offsets[n_blocks // 2] -= 45.0
    x2 = torch.randn(n, generator=gen) * 4.0 + offsets.repeat_interleave(BLOCK)
    s_v = (torch.rand(n, generator=gen) + 0.5) * 2e-4
    v = e4m3(torch.randn(n, 32, generator=gen))
    visible = torch.ones(n, dtype=torch.bool)
    visible[n - 37:] = False  # masked tail of the last block
    visible[5 * BLOCK:6 * BLOCK] = False  # a block the row does not see
    return x2, s_v, v, visible


def compare(seed: int, fold_g: bool = True) -> tuple[float, float]:
    """(relative L2 of o, |lse2| difference) between the two recurrences."""
    args = make_row(seed)
    o_a, l_a, m_a, inv_a = spec_recurrence(*args)
    o_b, l_b, m_b, inv_b = block_local_recurrence(*args, fold_g=fold_g)
    out_a, out_b = o_a / l_a, o_b / l_b
    rel = float((out_a - out_b).norm() / out_a.norm())
    lse_a = m_a + math.log2(float(l_a) / inv_a)
    lse_b = m_b + math.log2(float(l_b) / inv_b)
    return rel, abs(lse_a - lse_b)


if __name__ == "__main__":
    seeds = [int(sys.argv[1])] if len(sys.argv) > 1 else range(8)
    for seed in seeds:
        rel, dlse = compare(seed)
        print(f"seed {seed}: o rel L2 {rel:.2e}, |lse2 difference| {dlse:.2e}")
