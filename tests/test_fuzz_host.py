"""Host-side fuzz (CPU, in CI): the scheduler plan of random batches replayed block by block (every block of
every request in exactly one piece, parts balanced), the fuzz configurations' own invariants, and random
malformed arguments of the decode op, each raising an error that names the argument it broke."""

import random

import pytest
import torch

from snapmla_ext import layout as L
from test_decode_checks import call, valid_args
from test_sched import check_plan
from utils.fuzz import ELEMENT_BUDGET, MAX_SEQLEN, TOKEN_BUDGET, draw_config

N_CASES = 200


@pytest.mark.parametrize("seed", range(N_CASES // 4))
def test_random_plans_cover_every_block_once(requires_ext, seed):
    rng = random.Random(seed)
    b = rng.randint(1, 300)
    seqlens = [0 if rng.random() < 0.1 else rng.choice((1, 63, 64, 65, rng.randint(1, 70_000))) for _ in range(b)]
    check_plan(seqlens, rng.choice((1, 2, rng.randint(1, 400), 132)))


def test_fuzz_configurations_stay_within_their_budgets():
    for seed in range(N_CASES * 5):
        cfg = draw_config(seed)
        n_max = -(-max(cfg.seqlens) // 64) * 64
        assert 1 <= cfg.b <= 300 and 1 <= cfg.s_q <= 8 and 1 <= cfg.h_q <= 128, cfg
        assert all(0 <= n <= MAX_SEQLEN + 8 for n in cfg.seqlens), cfg
        assert cfg.b * n_max <= TOKEN_BUDGET + 64 * cfg.b + 8, cfg
        assert cfg.b * cfg.q_rows * n_max <= ELEMENT_BUDGET + 64 * cfg.b * cfg.q_rows, cfg
        assert cfg.kernel != "narrow" or cfg.q_rows <= 16, cfg
        assert draw_config(seed) == cfg  # a seed replays its configuration


DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8, torch.float64)


def _bad_dtype(rng, t):
    return t.to(rng.choice([d for d in DTYPES if d != t.dtype]))


def _bad_dims(rng, t):
    return t.unsqueeze(0) if t.dim() < 2 or rng.random() < 0.5 else t.flatten()


def _bad_last_stride(rng, t):
    """The same shape with a last dim of stride 2 (every kernel operand needs stride 1 there)."""
    wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
    return wide[..., ::2]


MUTATIONS = {"dtype": _bad_dtype, "dims": _bad_dims, "last_stride": _bad_last_stride}
TENSOR_ARGS = ("q_content", "q_rope", "q_scale", "kv_cache", "block_table", "cache_seqlens",
               "tile_scheduler_metadata", "num_splits")


@pytest.mark.parametrize("seed", range(N_CASES))
def test_random_malformed_argument_is_named(requires_ext, seed):
    rng = random.Random(seed)
    name, kind = rng.choice(TENSOR_ARGS), rng.choice(list(MUTATIONS))
    bad = MUTATIONS[kind](rng, valid_args()[name])
    with pytest.raises(RuntimeError) as info:
        call(requires_ext, **{name: bad})
    message = str(info.value)
    assert name in message and "must be a CUDA tensor" not in message, f"{kind} of {name}: {message}"
