"""Host-side fuzz (CPU, in CI): the scheduler plan of random batches replayed block by block (every block of
every request in exactly one piece, parts balanced), the fuzz configurations' own invariants, and random
malformed arguments of the decode op and of the engine-generation modules' calls (flash_mla_2025 / 2026: q, its
QuantizedQ parts, k_cache, the index tensors, head_dim_v, sparse arguments), each raising an error that names the
argument it broke. Shared helpers: tests/utils/decode_args.py, tests/utils/sched_plan.py."""

import random

import pytest
import torch

from snapmla_ext import flash_mla_2025, flash_mla_2026
from snapmla_ext import layout as L
from snapmla_ext.types import QuantizedQ
from utils.decode_args import call, valid_args
from utils.fuzz import ELEMENT_BUDGET, MAX_SEQLEN, TOKEN_BUDGET, draw_config
from utils.sched_plan import check_plan

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


# ---- the engine-generation modules (what vLLM and SGLang import), random malformed arguments ----

ENGINE_ERRORS = (TypeError, ValueError, RuntimeError, NotImplementedError)


def _engine_args(module):
    """Valid CPU arguments of module.flash_mla_with_kvcache (a QuantizedQ: no Q-quant on the CPU), metadata from the
    module's own get_mla_metadata."""
    a = valid_args()
    if module is flash_mla_2026:
        meta, splits = module.get_mla_metadata()
    else:
        meta, splits = a["tile_scheduler_metadata"], a["num_splits"]
    return dict(q=QuantizedQ(a["q_content"], a["q_rope"], a["q_scale"]), k_cache=a["kv_cache"],
                block_table=a["block_table"], cache_seqlens=a["cache_seqlens"], head_dim_v=L.D_CONTENT,
                tile_scheduler_metadata=meta, num_splits=splits)


def _engine_mutation(rng, args):
    """(the argument's name as an error must say it, replaced arguments): one argument broken at random."""
    q = args["q"]
    choices = [
        ("q", dict(q=rng.choice([[1, 2], q.content.float(), torch.zeros(2, 2, dtype=torch.bfloat16)]))),
        ("q_content", dict(q=QuantizedQ(MUTATIONS[rng.choice(list(MUTATIONS))](rng, q.content), q.rope, q.scale))),
        ("q_rope", dict(q=QuantizedQ(q.content, MUTATIONS[rng.choice(list(MUTATIONS))](rng, q.rope), q.scale))),
        ("q_scale", dict(q=QuantizedQ(q.content, q.rope, MUTATIONS[rng.choice(("dtype", "dims"))](rng, q.scale)))),
        ("k_cache", dict(k_cache=rng.choice([args["k_cache"].to(torch.int8), args["k_cache"][:, : 1 + rng.randrange(L.PAGE_BYTES - 1)]]))),
        ("head_dim_v", dict(head_dim_v=rng.choice([576, 128, 0, -512, 511]))),
        ("indices", dict(indices=torch.zeros(3, 2, 64, dtype=torch.int32))),
    ]
    for name in ("block_table", "cache_seqlens"):
        t = args[name]
        choices.append((name, {name: rng.choice([t.tolist(), _bad_dtype(rng, t), _bad_dims(rng, t)])}))
    name, change = rng.choice(choices)
    return name, dict(args, **change)


@pytest.mark.parametrize("generation", ["2025", "2026"])
@pytest.mark.parametrize("seed", range(N_CASES // 2))
def test_random_malformed_engine_call_is_named(requires_ext, generation, seed):
    module = flash_mla_2025 if generation == "2025" else flash_mla_2026
    rng = random.Random(seed)
    name, args = _engine_mutation(rng, _engine_args(module))
    with pytest.raises(ENGINE_ERRORS) as info:
        module.flash_mla_with_kvcache(**args)
    message = str(info.value)
    assert name in message and "must be a CUDA tensor" not in message, f"{name}: {message}"
