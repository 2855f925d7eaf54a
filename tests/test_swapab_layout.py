"""The swap-AB PV data path of the wide decode kernel, emulated on the CPU (branch wide-swapab-exp).

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

BLOCK = 64  # tokens per page, tile rows
D_V = 512


def swizzle128(row: int, byte: int) -> int:
    """Byte offset in a 64-row x 128-B Swizzle-128B tile (TMA): 16-B chunk index XOR row % 8."""
    return row * 128 + ((((byte >> 4) ^ (row % 8)) << 4) | (byte & 15))


def swizzle64(row: int, byte: int) -> int:
    """Byte offset in a K-major Swizzle-64B operand with 64-B rows: 16-B chunk XOR (row >> 1) & 3."""
    return row * 64 + ((((byte >> 4) ^ ((row >> 1) & 3)) << 4) | (byte & 15))


def content_tiles(v: np.ndarray) -> list[np.ndarray]:
    """The page's content (64 tokens x 512 dims, one byte each) as the 4 Swizzle-128B tiles TMA writes."""
    tiles = []
    for t in range(4):
        buf = np.zeros(BLOCK * 128, np.uint8)
        for tok in range(BLOCK):
            for b in range(128):
                buf[swizzle128(tok, b)] = v[tok, 128 * t + b]
        tiles.append(buf)
    return tiles


def ldsm_x4_trans(tile: np.ndarray, row_addr: list[int]) -> list[list[int]]:
    """ldmatrix.sync.aligned.m8n8.x4.trans.b16: lanes 8k .. 8k + 7 give the 16-B rows of matrix k; lane
    (r = lane / 4, q = lane % 4) gets, of each matrix, b16 column r of rows 2q and 2q + 1 (low half first)."""
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


def v_fragments(tiles, mt: int, warp: int, n_valid: int):
    """narrow/pv.cuh load_v_frags for one warp: a[lane][g][0..3] words."""
    chunk = (mt % 2) * 4 + warp
    tile = tiles[mt // 2]
    frags = [[None, None] for _ in range(32)]
    for g in range(2):
        addr = []
        for lane in range(32):
            k, i = lane // 8, lane % 8
            tok = 32 * g + 8 * k + i
            addr.append(tok * 128 + ((chunk ^ i) << 4))  # the kernel's address: row tok, chunk XOR tok % 8
        x = ldsm_x4_trans(tile, addr)
        for lane in range(32):
            q = lane % 4

            def keep(lim):
                return sum(0xFF << (8 * j) for j, d in enumerate((0, 1, 8, 9)) if lim > d)

            lo = keep(n_valid - 32 * g - 2 * q)
            hi = keep(n_valid - 32 * g - 2 * q - 16)
            w = x[lane]
            frags[lane][g] = [prmt(w[0], w[1], 0x6420) & lo, prmt(w[0], w[1], 0x7531) & lo,
                              prmt(w[2], w[3], 0x6420) & hi, prmt(w[2], w[3], 0x7531) & hi]
    return frags


def a_matrix(frags_by_warp, g: int) -> np.ndarray:
    """The 64 x 32 A operand of k-step g from the 8-bit register fragment layout (wgmma.cuh): a[0] = row
    16w + l/4 at k = 4(l%4) + j, a[1] = row + 8, a[2] / a[3] the same rows at k + 16."""
    a = np.zeros((64, 32), np.int64)
    for w in range(4):
        for lane in range(32):
            row, kq = 16 * w + lane // 4, 4 * (lane % 4)
            words = frags_by_warp[w][lane][g]
            for idx, (dr, dk) in enumerate(((0, 0), (8, 0), (0, 16), (8, 16))):
                for j in range(4):
                    a[row + dr, kq + dk + j] = (words[idx] >> (8 * j)) & 0xFF
    return a


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


def b_matrix(pt: np.ndarray, g: int) -> np.ndarray:
    """The N x K = 64 x 32 B operand of k-step g as the hardware reads a K-major Swizzle-64B descriptor
    (start address + 32 g bytes, SBO 512 = 8 rows of 64 B)."""
    return np.array([[pt[swizzle64(n, 32 * g + k)] for k in range(32)] for n in range(64)], np.int64)


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
    for wg in range(2):
        for mt in range(4):
            mt_g = 4 * wg + mt
            frags = [v_fragments(tiles, mt_g, warp, n_valid) for warp in range(4)]
            # D (64 x 64) = sum over k-steps of A (64 x 32) . B (64 x 32)^T
            d = sum(a_matrix(frags, g) @ b_matrix(pt, g).T for g in range(2))
            # epilogue.cuh: accumulator index 4i + 2rr + e of thread (warp, lane) is dim
            # 64 mt_g + 16 warp + 2r + rr, tile row 8i + 2t + e; its value is D[16 warp + r + 8 rr, 8i + 2t + e].
            for warp in range(4):
                for lane in range(32):
                    r, t = lane // 4, lane % 4
                    for i in range(8):
                        for rr in range(2):
                            for e in range(2):
                                got = d[16 * warp + r + 8 * rr, 8 * i + 2 * t + e]
                                dim, col = 64 * mt_g + 16 * warp + 2 * r + rr, 8 * i + 2 * t + e
                                assert got == want[dim, col], (wg, mt, warp, lane, i, rr, e, got, want[dim, col])
