"""The narrow decode kernel's swap-AB PV data path, emulated on the CPU (tests/utils/wgmma_emulation.py).

The softmax stores P^T byte by byte at the k positions that match the V^T fragments (narrow/qk_softmax.cuh
store_pt: token tau0 = 16 warp + r of column c at position 16 warp + 4 (r >> 1) + (r & 1), tau0 + 8 two bytes
further, in 16-B chunk `warp` XOR (c >> 1) & 3); the V^T fragments come from ldmatrix.trans + PRMT
(narrow/pv.cuh); the epilogue reads dims back by the fragment map (merge_store.cuh). Composed, they must give
V^T . P^T exactly, with the tokens past the sequence zeroed. This mirrors the kernel's index formulas (the
GPU tests check the kernel itself; this pins the reasoning, and fails on a wrong selector, swizzle or map).
"""

import numpy as np
import pytest

from utils.wgmma_emulation import BLOCK, check_dims_map, content_tiles, pv_tile


def store_pt(p: np.ndarray, n_rows: int) -> np.ndarray:
    """store_pt: thread (warp, lane) holds S^T tokens tau0 = 16 warp + r and tau0 + 8 of columns 8i + 2t + e."""
    buf = np.zeros(n_rows * BLOCK, np.uint8)
    for warp in range(4):
        for lane in range(32):
            r, t = lane // 4, lane % 4
            kap0 = 4 * (r >> 1) + (r & 1)
            tau0 = 16 * warp + r
            for i in range(n_rows // 8):
                for e in range(2):
                    c = 8 * i + 2 * t + e
                    addr = c * BLOCK + ((warp ^ ((c >> 1) & 3)) << 4) + kap0
                    buf[addr] = p[c, tau0]
                    buf[addr + 2] = p[c, tau0 + 8]
    return buf


@pytest.mark.parametrize("n_valid", [64, 23])
def test_narrow_pv_layouts_compose_to_vt_pt(n_valid):
    n_rows = 16
    rng = np.random.default_rng(n_valid)
    v = rng.integers(1, 120, size=(BLOCK, 512)).astype(np.uint8)
    p = rng.integers(0, 120, size=(n_rows, BLOCK)).astype(np.uint8)
    tiles, pt = content_tiles(v), store_pt(p, n_rows)
    v_eff = v.astype(np.int64)
    v_eff[n_valid:] = 0
    want = v_eff.T @ p.astype(np.int64).T  # O^T (512 dims x n_rows)
    for mt in range(8):
        check_dims_map(pv_tile(tiles, pt, n_rows, mt, n_valid), want, mt, n_rows)


def test_emulation_catches_a_wrong_k_order():
    # Storing the two tokens of a thread one byte apart instead of two breaks the composition.
    n_rows = 16
    rng = np.random.default_rng(3)
    v = rng.integers(1, 120, size=(BLOCK, 512)).astype(np.uint8)
    p = rng.integers(1, 120, size=(n_rows, BLOCK)).astype(np.uint8)
    pt = store_pt(p, n_rows)
    swapped = pt.copy()
    swapped[0::4], swapped[1::4] = pt[1::4], pt[0::4]
    want = v.astype(np.int64).T @ p.astype(np.int64).T
    with pytest.raises(AssertionError):
        check_dims_map(pv_tile(content_tiles(v), swapped, n_rows, 0, 64), want, 0, n_rows)
