"""The swap-AB PV data path of the wide decode kernel, emulated on the CPU.

The kernel computes O^T = V^T . P^T with two hand-made layouts that must agree with each other and with the
hardware's operand formats: the owner's packed P words stored whole into a K-major Swizzle-64B P^T
(exchange.cuh publish_block, softmax.cuh pack_p), and the V^T A fragments built by ldmatrix.trans + PRMT from
the page's Swizzle-128B content tiles (narrow/pv.cuh load_v_frags), read back by the epilogue's dim / row map
(epilogue.cuh). This test replays those index formulas lane by lane (ldmatrix .trans, PRMT and the WGMMA
fragment layouts as the PTX ISA defines them, wgmma.cuh) and checks the result against V^T . P^T computed
directly, including the zeroing of tokens past the sequence. A wrong selector, swizzle or map fails here
without a GPU.
"""

import numpy as np
import pytest

from utils.wgmma_emulation import BLOCK, check_dims_map, content_tiles, pv_tile

D_V = 512


def pack_p_words(p: np.ndarray, warp: int, lane: int) -> list[int]:
    """softmax.cuh pack_p: word 4g + 2h + r of thread (row0 = 16 warp + lane / 4, t = lane % 4) = row row0 + 8r,
    tokens 8 i0 + 2t + {0, 1}, 8 (i0 + 1) + 2t + {0, 1} with i0 = 4g + 2h (the accumulator columns it owns)."""
    row0, t = 16 * warp + lane // 4, lane % 4
    words = [0] * 8
    for g in range(2):
        for h in range(2):
            for r in range(2):
                i0 = 4 * g + 2 * h
                toks = (8 * i0 + 2 * t, 8 * i0 + 2 * t + 1, 8 * (i0 + 1) + 2 * t, 8 * (i0 + 1) + 2 * t + 1)
                words[4 * g + 2 * h + r] = sum(int(p[row0 + 8 * r, tok]) << (8 * j) for j, tok in enumerate(toks))
    return words


def publish_pt(p: np.ndarray) -> np.ndarray:
    """exchange.cuh publish_block: each word to row row0 + 8r, chunk (2g + h) XOR (row >> 1) & 3, byte 4t."""
    buf = np.zeros(BLOCK * 64, np.uint8)
    for warp in range(4):
        for lane in range(32):
            row0, t = 16 * warp + lane // 4, lane % 4
            words = pack_p_words(p, warp, lane)
            for g in range(2):
                for h in range(2):
                    for r in range(2):
                        row = row0 + 8 * r
                        addr = row * 64 + (((2 * g + h) ^ ((row >> 1) & 3)) << 4) + 4 * t
                        for j in range(4):
                            buf[addr + j] = (words[4 * g + 2 * h + r] >> (8 * j)) & 0xFF
    return buf


@pytest.mark.parametrize("n_valid", [64, 37, 1])
def test_swapab_pv_layouts_compose_to_vt_pt(n_valid):
    rng = np.random.default_rng(n_valid)
    v = rng.integers(1, 120, size=(BLOCK, D_V), dtype=np.int64).astype(np.uint8)  # byte values as integers
    p = rng.integers(0, 120, size=(BLOCK, BLOCK), dtype=np.int64).astype(np.uint8)
    tiles, pt = content_tiles(v), publish_pt(p)
    # The kernel zeroes V past the sequence; P there is 0 as well (masked), but V may be NaN in the cache.
    v_eff = v.astype(np.int64).copy()
    v_eff[n_valid:] = 0
    want = v_eff.T @ p.astype(np.int64).T  # O^T (512 dims x 64 tile rows), exact integers
    for mt in range(8):  # warpgroup wg runs m-tiles 4wg .. 4wg + 3
        check_dims_map(pv_tile(tiles, pt, BLOCK, mt, n_valid), want, mt, BLOCK)
