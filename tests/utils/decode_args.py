"""Valid CPU arguments of the decode op torch.ops.snapmla.decode_fp8 and a call with some replaced: shared by
tests/test_decode_checks.py (one test per message) and tests/test_fuzz_host.py (random malformed arguments)."""

import torch

from snapmla_ext import layout as L

B, S_Q, H_Q, NUM_BLOCKS, MAX_PAGES, PARTS = 3, 2, 16, 5, 2, 4


def valid_args():
    """Valid CPU arguments of decode_fp8 (values are irrelevant: only metadata is checked)."""
    return dict(
        q_content=torch.zeros(B, S_Q, H_Q, L.D_CONTENT, dtype=torch.float8_e4m3fn),
        q_rope=torch.zeros(B, S_Q, H_Q, L.D_ROPE, dtype=torch.bfloat16),
        q_scale=torch.ones(B, S_Q, H_Q),
        kv_cache=torch.zeros(NUM_BLOCKS, L.PAGE_BYTES, dtype=torch.uint8),
        block_table=torch.zeros(B, MAX_PAGES, dtype=torch.int32),
        cache_seqlens=torch.full((B,), 70, dtype=torch.int32),
        tile_scheduler_metadata=torch.zeros(PARTS, 8, dtype=torch.int32),
        num_splits=torch.zeros(B + 1, dtype=torch.int32),
        softmax_scale=L.D_QK**-0.5,
        causal=False,
    )


def call(ops, **override):
    args = valid_args()
    args.update(override)
    return ops.decode_fp8(*args.values())


def misaligned(shape, dtype, offset_elems):
    """A contiguous tensor whose data pointer sits offset_elems elements past a 64-B aligned allocation."""
    n = 1
    for s in shape:
        n *= s
    return torch.zeros(n + offset_elems, dtype=dtype)[offset_elems:].view(shape)
