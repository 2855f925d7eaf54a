"""snapmla_ext.reference quantizers (docs/numerics_contract.md sections 2-3): exact definitions, edge cases and non-finite inputs.

The CUDA quant kernels are tested bit for bit against these functions, so here the functions are checked against
independent float64 arithmetic and an e4m3 value table, not against themselves.
"""

import pytest
import torch

from snapmla_ext import layout as L
from snapmla_ext.reference import dequantize_q, e4m3, quantize_q, quantize_rows
from utils.compare import assert_bitwise_equal
from utils.data import make_kv_rows, make_q

NAN, INF = float("nan"), float("inf")


def _e4m3_table() -> torch.Tensor:
    """The finite non-negative e4m3fn values by code 0..126 (code 127 is NaN), decoded from the bit fields."""
    codes = torch.arange(127)
    exp, man = codes >> 3, (codes & 7).double()
    normal = (1 + man / 8) * torch.pow(2.0, exp.double() - 7)
    return torch.where(exp == 0, man / 8 * 2.0**-6, normal)


def _round_e4m3_independent(x: torch.Tensor) -> torch.Tensor:
    """Nearest e4m3 value of |x| <= 448 (float64 in, float64 out), ties to the even code, sign kept."""
    table = _e4m3_table()
    a = x.abs().double().unsqueeze(-1)
    dist = (table - a).abs()
    best = dist.min(dim=-1, keepdim=True).values
    candidates = dist == best
    # Of two equally near codes, take the even one (mantissa LSB 0); otherwise the single nearest.
    even = candidates & (torch.arange(127) % 2 == 0)
    code = torch.where(even.any(-1), even.double().argmax(-1), candidates.double().argmax(-1))
    return table[code] * torch.where(x < 0, -1.0, 1.0).double()


def _row(content, rope=None) -> torch.Tensor:
    """One (1, 576) fp32 row from given content (512) and rope (64) values (zeros where not given)."""
    x = torch.zeros(1, L.D_QK)
    x[0, : L.D_CONTENT] = torch.as_tensor(content, dtype=torch.float32)
    if rope is not None:
        x[0, L.D_CONTENT :] = torch.as_tensor(rope, dtype=torch.float32)
    return x


def test_e4m3_cast_rounds_to_nearest_even_at_every_midpoint():
    table = _e4m3_table().float()
    mids = (table[1:] + table[:-1]) / 2  # exact in fp32: e4m3 values have 4 significant bits
    x = torch.cat([table, mids, -mids, torch.rand(4001, generator=torch.Generator().manual_seed(1)) * 900 - 450])
    x = x.clamp(-448, 448)
    assert_bitwise_equal(e4m3(x).double(), _round_e4m3_independent(x), "e4m3(x)")


def test_e4m3_clamps_before_the_cast():
    got = e4m3(torch.tensor([448.0, 449.0, 464.0, 500.0, 1e30, INF, -INF, -1e30, NAN]))
    # 0x7E / 0xFE are +-448; 0x7F is e4m3fn's NaN (the fn format has no inf).
    assert got.view(torch.uint8).tolist() == [0x7E] * 6 + [0xFE] * 2 + [0x7F]


def test_quantize_rows_matches_float64_definition():
    x = make_kv_rows(37, seed=2, content_std=0.3, rope_std=2.0, clip=None)
    c8, rope, scale = quantize_rows(x)
    assert c8.shape == (37, 512) and c8.dtype == torch.float8_e4m3fn
    assert rope.shape == (37, 64) and rope.dtype == torch.bfloat16
    assert scale.shape == (37,) and scale.dtype == torch.float32

    x64 = x.double()
    amax = x64[:, :512].abs().amax(-1)
    # A float64 quotient of two fp32 values rounded to fp32 is the correctly rounded fp32 quotient (53 >= 2 * 24
    # + 2, so the double rounding is innocuous): these are the IEEE fp32 divisions the definition asks for.
    scale64 = (amax.clamp(L.AMAX_FLOOR, L.CONTENT_MAX) / 448).float()
    assert_bitwise_equal(scale, scale64, "scale")
    inv = (448 / amax.clamp(L.AMAX_FLOOR, L.CONTENT_MAX)).float().double().unsqueeze(-1)
    # A product of two fp32 values is exact in float64 (48 <= 53 bits), so rounding it to fp32 gives the
    # correctly rounded fp32 product. The e4m3 rounding is checked against the value table, not torch's cast.
    q32 = (x64[:, :512] * inv).float().clamp(-448, 448)
    assert_bitwise_equal(c8.double(), _round_e4m3_independent(q32), "c8")
    r32 = (x64[:, 512:].clamp(-L.ROPE_MAX, L.ROPE_MAX) * inv).float()
    assert_bitwise_equal(rope, r32.to(torch.bfloat16), "rope")


def test_quantize_rows_all_zero_token_uses_the_floor():
    c8, rope, scale = quantize_rows(_row(torch.zeros(512), torch.full((64,), 1e-3)))
    assert scale.item() == torch.tensor(L.AMAX_FLOOR / 448, dtype=torch.float32).item()
    assert (c8.float() == 0).all()
    inv = torch.tensor(448.0) / torch.tensor(L.AMAX_FLOOR)
    want = (torch.full((64,), 1e-3) * inv).to(torch.bfloat16)
    assert_bitwise_equal(rope[0], want, "rope of an all-zero token")


def test_quantize_rows_amax_element_saturates_to_448():
    content = torch.linspace(-0.37, 0.37, 512)
    c8, _, _ = quantize_rows(_row(content))
    assert c8[0, 0].float().item() == -448.0 and c8[0, -1].float().item() == 448.0
    assert (c8.float().abs() <= 448).all()


def test_quantize_rows_subnormal_e4m3_outputs_round_to_even():
    # amax = 448 gives scale 1 exactly, so c8 = e4m3(c): the e4m3 subnormal grid is k * 2^-9.
    sub = 2.0**-9
    values = [448.0, sub, 1.5 * sub, 2.5 * sub, 0.5 * sub, 0.4 * sub, 7 * sub, 7.5 * sub, -3 * sub]
    want = [448.0, sub, 2 * sub, 2 * sub, 0.0, 0.0, 7 * sub, 8 * sub, -3 * sub]
    c8, _, scale = quantize_rows(_row(values + [0.0] * (512 - len(values))))
    assert scale.item() == 1.0
    assert c8[0, : len(values)].float().tolist() == want


def test_quantize_rows_bf16_subnormal_inputs():
    tiny = torch.tensor(2.0**-130, dtype=torch.bfloat16)  # a bf16 subnormal
    x = _row([tiny.item()] * 512, [tiny.item()] * 64).to(torch.bfloat16)
    c8, rope, scale = quantize_rows(x)
    floor_scale = torch.tensor(L.AMAX_FLOOR / 448, dtype=torch.float32)
    assert scale.item() == floor_scale.item()
    assert (c8.float() == 0).all()  # 2^-130 / (2^-14 / 448) = 448 * 2^-116, far below e4m3's 2^-9
    assert_bitwise_equal(rope[0], (torch.full((64,), 2.0**-130) / floor_scale).to(torch.bfloat16), "rope")
    assert (rope.float() > 0).all()


def test_quantize_rows_nan_in_content_makes_the_whole_token_nan():
    content = torch.full((512,), 0.25)
    content[300] = NAN
    c8, rope, scale = quantize_rows(_row(content, torch.ones(64)))
    assert scale.isnan().all() and c8.float().isnan().all() and rope.float().isnan().all()


def test_quantize_rows_inf_in_content_saturates_at_the_input_range():
    content = torch.full((512,), 0.25)
    content[3], content[4] = INF, -INF
    rope = torch.ones(64)
    rope[7] = -INF
    c8, r, scale = quantize_rows(_row(content, rope))
    assert scale.item() == torch.tensor(L.CONTENT_MAX / 448, dtype=torch.float32).item()
    c = c8[0].float()
    assert c[3] == 448 and c[4] == -448  # +-2^16 once dequantized
    inv = torch.tensor(448.0) / torch.tensor(L.CONTENT_MAX)
    others = torch.cat([c[:3], c[5:]])
    assert (others == (torch.tensor(0.25) * inv).to(torch.float8_e4m3fn).float()).all()
    assert r[0, 7].float() == (-L.ROPE_MAX * inv).to(torch.bfloat16).float()
    assert (torch.cat([r[0, :7], r[0, 8:]]).float() == inv.to(torch.bfloat16).float()).all()


def test_quantize_rows_saturate_at_the_input_range():
    """|content| above CONTENT_MAX = 2^16 and |RoPE| above ROPE_MAX = 2^32 quantize as the edge itself; NaN in
    RoPE stays NaN."""
    over_c, over_r = 65792.0, 4311744512.0  # the next bf16 above 2^16 and above 2^32
    content = torch.full((512,), 3.0)
    content[0], content[1] = over_c, -3.0e38
    rope = torch.full((64,), 2.0)
    rope[0], rope[1], rope[2], rope[3] = over_r, -3.0e38, L.ROPE_MAX, NAN
    c8, r, scale = quantize_rows(_row(content, rope).to(torch.bfloat16))
    edge_c = torch.cat([torch.tensor([L.CONTENT_MAX, -L.CONTENT_MAX]), content[2:]])
    edge_r = torch.cat([torch.tensor([L.ROPE_MAX, -L.ROPE_MAX, L.ROPE_MAX, NAN]), rope[4:]])
    edge_c8, edge_rope, edge_scale = quantize_rows(_row(edge_c, edge_r).to(torch.bfloat16))
    assert scale.item() == edge_scale.item() == torch.tensor(L.CONTENT_MAX / 448, dtype=torch.float32).item()
    assert_bitwise_equal(c8, edge_c8, "content beyond the range")
    assert r[0, 3].float().isnan()
    keep = [i for i in range(64) if i != 3]
    assert_bitwise_equal(r[:, keep], edge_rope[:, keep], "rope beyond the range")
    assert float(r[0, 0]) * float(scale) == pytest.approx(L.ROPE_MAX, rel=2**-8)
    assert float(c8[0, 0]) * float(scale) == pytest.approx(L.CONTENT_MAX, rel=2**-20)


def test_quantize_rows_nonfinite_rope_saturates_or_stays_and_spares_the_rest():
    content = torch.linspace(-1, 1, 512)
    rope = torch.full((64,), 0.5)
    rope[0], rope[1], rope[2] = INF, -INF, NAN
    c8, r, scale = quantize_rows(_row(content, rope))
    c8_ref, r_ref, scale_ref = quantize_rows(_row(content, torch.full((64,), 0.5)))
    assert_bitwise_equal(scale, scale_ref, "scale")
    assert_bitwise_equal(c8, c8_ref, "c8")
    inv = torch.tensor(448.0)  # amax = 1: +-inf saturates to +-2^32, then takes the row's 448 / amax
    assert r[0, 0].item() == (torch.tensor(L.ROPE_MAX) * inv).to(torch.bfloat16).item() == -r[0, 1].item()
    assert r[0, 2].float().isnan()
    assert_bitwise_equal(r[0, 3:], r_ref[0, 3:], "finite rope")


def test_quantize_rows_accepts_leading_dims_and_fp32():
    x = make_q(2, 3, 5, seed=3)
    c8, rope, scale = quantize_rows(x)
    c8f, ropef, scalef = quantize_rows(x.float().reshape(-1, 576))
    assert c8.shape == (2, 3, 5, 512) and scale.shape == (2, 3, 5)
    assert_bitwise_equal(c8.reshape(-1, 512), c8f, "c8")
    assert_bitwise_equal(rope.reshape(-1, 64), ropef, "rope")
    assert_bitwise_equal(scale.reshape(-1), scalef, "scale")


def test_quantize_q_and_dequantize_q():
    q = make_q(3, 2, 7, seed=4)
    qq = quantize_q(q)
    c8, rope, scale = quantize_rows(q)
    assert_bitwise_equal(qq.content, c8, "content")
    assert_bitwise_equal(qq.rope, rope, "rope")
    assert_bitwise_equal(qq.scale, scale, "scale")
    deq = dequantize_q(qq)
    assert deq.dtype == torch.float32 and deq.shape == (3, 2, 7, 576)
    want = torch.cat([c8.float() * scale[..., None], rope.float() * scale[..., None]], dim=-1)
    assert_bitwise_equal(deq, want, "dequantized q")
    err = ((deq - q.float()).norm() / q.float().norm()).item()
    assert err < 0.03, f"Q quantization rel L2 {err:.3e}"  # e4m3 has 3 mantissa bits: ~2e-2 on gaussian data


def test_quantize_rows_rejects_wrong_last_dim():
    with pytest.raises(ValueError, match=r"x must have last dimension 576"):
        quantize_rows(torch.zeros(3, 512))


def test_quantize_rows_rejects_integer_input():
    with pytest.raises(ValueError, match=r"x must be a floating-point tensor"):
        quantize_rows(torch.zeros(3, 576, dtype=torch.int32))


def test_quantize_q_rejects_wrong_rank():
    with pytest.raises(ValueError, match=r"q must have shape \(b, s_q, h_q, 576\)"):
        quantize_q(torch.zeros(3, 576, dtype=torch.bfloat16))
