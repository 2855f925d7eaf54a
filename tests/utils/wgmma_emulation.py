"""Lane-by-lane emulation of the shared-memory and register layouts the decode kernels' swap-AB PV uses, for CPU
tests of their index formulas (tests/test_narrow_layout.py and tests/test_swapab_layout.py).

Hardware semantics, as the PTX ISA defines them:
- TMA Swizzle-128B tiles of 128-B rows: 16-B chunk index XOR row % 8;
- K-major Swizzle-64B WGMMA operands of 64-B rows: 16-B chunk index XOR (row >> 1) & 3;
- ldmatrix.x4.trans (b16): lanes 8k .. 8k + 7 address the rows of matrix k; lane (r = lane / 4, q = lane % 4)
  gets b16 column r of rows 2q and 2q + 1 of each matrix;
- PRMT byte selection;
- the 8-bit WGMMA A register fragment (wgmma.cuh): a[0] = row 16w + l/4 at k = 4(l%4) + j, a[1] = row + 8,
  a[2] / a[3] the same rows at k + 16.
Byte values stand in for e4m3 codes: products are exact integers, so layout errors cannot hide in rounding.
"""

from __future__ import annotations

import numpy as np

BLOCK = 64  # tokens per page


def swizzle128(row: int, byte: int) -> int:
    return row * 128 + ((((byte >> 4) ^ (row % 8)) << 4) | (byte & 15))


def swizzle64(row: int, byte: int) -> int:
    return row * 64 + ((((byte >> 4) ^ ((row >> 1) & 3)) << 4) | (byte & 15))


def content_tiles(v: np.ndarray) -> list[np.ndarray]:
    """A page's content (64 tokens x 512 dims) as the 4 Swizzle-128B tiles TMA writes."""
    tiles = []
    for t in range(4):
        buf = np.zeros(BLOCK * 128, np.uint8)
        for tok in range(BLOCK):
            for b in range(128):
                buf[swizzle128(tok, b)] = v[tok, 128 * t + b]
        tiles.append(buf)
    return tiles


def ldsm_x4_trans(tile: np.ndarray, row_addr: list[int]) -> list[list[int]]:
    out = []
    for lane in range(32):
        r, q = lane // 4, lane % 4
        words = []
        for k in range(4):
            rows = [tile[row_addr[8 * k + i] : row_addr[8 * k + i] + 16] for i in range(8)]
            b = [rows[2 * q][2 * r], rows[2 * q][2 * r + 1], rows[2 * q + 1][2 * r], rows[2 * q + 1][2 * r + 1]]
            words.append(int(b[0]) | int(b[1]) << 8 | int(b[2]) << 16 | int(b[3]) << 24)
        out.append(words)
    return out


def prmt(a: int, b: int, sel: int) -> int:
    src = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    return sum(src[(sel >> (4 * j)) & 7] << (8 * j) for j in range(4))


def v_fragments(tiles: list[np.ndarray], mt: int, warp: int, n_valid: int) -> list[list[list[int]]]:
    """narrow/pv.cuh load_v_frags for one warp: frags[lane][g] = the 4 A words of k-step g, m-tile mt."""
    chunk = (mt % 2) * 4 + warp
    tile = tiles[mt // 2]
    frags = [[None, None] for _ in range(32)]
    for g in range(2):
        addr = []
        for lane in range(32):
            k, i = lane // 8, lane % 8
            addr.append((32 * g + 8 * k + i) * 128 + ((chunk ^ i) << 4))
        x = ldsm_x4_trans(tile, addr)
        for lane in range(32):
            q = lane % 4

            def keep(lim: int) -> int:
                return sum(0xFF << (8 * j) for j, d in enumerate((0, 1, 8, 9)) if lim > d)

            lo, hi = keep(n_valid - 32 * g - 2 * q), keep(n_valid - 32 * g - 2 * q - 16)
            w = x[lane]
            frags[lane][g] = [prmt(w[0], w[1], 0x6420) & lo, prmt(w[0], w[1], 0x7531) & lo,
                              prmt(w[2], w[3], 0x6420) & hi, prmt(w[2], w[3], 0x7531) & hi]
    return frags


def a_matrix(frags_by_warp: list, g: int) -> np.ndarray:
    """The 64 x 32 A operand of k-step g from the 4 warps' register fragments."""
    a = np.zeros((64, 32), np.int64)
    for w in range(4):
        for lane in range(32):
            row, kq = 16 * w + lane // 4, 4 * (lane % 4)
            words = frags_by_warp[w][lane][g]
            for idx, (dr, dk) in enumerate(((0, 0), (8, 0), (0, 16), (8, 16))):
                for j in range(4):
                    a[row + dr, kq + dk + j] = (words[idx] >> (8 * j)) & 0xFF
    return a


def b_matrix(pt: np.ndarray, n_rows: int, g: int) -> np.ndarray:
    """The n_rows x 32 B operand of k-step g from a K-major Swizzle-64B buffer (start + 32 g bytes)."""
    return np.array([[pt[swizzle64(n, 32 * g + k)] for k in range(32)] for n in range(n_rows)], np.int64)


def pv_tile(tiles: list[np.ndarray], pt: np.ndarray, n_rows: int, mt: int, n_valid: int) -> np.ndarray:
    """D (64 x n_rows) of m-tile mt: the sum over both k-steps of A . B^T."""
    frags = [v_fragments(tiles, mt, warp, n_valid) for warp in range(4)]
    return sum(a_matrix(frags, g) @ b_matrix(pt, n_rows, g).T for g in range(2))


def check_dims_map(d: np.ndarray, want: np.ndarray, mt: int, n_rows: int) -> None:
    """The epilogues' map: accumulator index 4i + 2rr + e of thread (warp, lane) holds D[16 warp + r + 8 rr,
    8i + 2t + e] and is dim 64 mt + 16 warp + 2r + rr of tile row 8i + 2t + e (r = lane / 4, t = lane % 4)."""
    for warp in range(4):
        for lane in range(32):
            r, t = lane // 4, lane % 4
            for i in range(n_rows // 8):
                for rr in range(2):
                    for e in range(2):
                        got = d[16 * warp + r + 8 * rr, 8 * i + 2 * t + e]
                        dim, col = 64 * mt + 16 * warp + 2 * r + rr, 8 * i + 2 * t + e
                        assert got == want[dim, col], (mt, warp, lane, i, rr, e, int(got), int(want[dim, col]))
