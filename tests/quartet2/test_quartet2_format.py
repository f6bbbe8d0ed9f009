"""NVFP4 format: E2M1 and E4M3 against closed forms and exhaustive enumeration; RTN, SR, 4/6."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.core.errors import UserError
from icml26.quartet2.nvfp4 import (
    E2M1_GRID,
    e2m1_decode,
    e2m1_rtn,
    e2m1_sr,
    e4m3_rtn,
    e4m3_sr,
    fake_quant,
    quantize_nvfp4,
)


def e2m1_closed_form(code: int) -> float:
    """sign | exp(2) | mantissa(1), bias 1; exp 0 is subnormal (0.5 * m)."""
    sign = -1.0 if code & 8 else 1.0
    e, m = (code >> 1) & 3, code & 1
    return sign * (0.5 * m if e == 0 else 2.0 ** (e - 1) * (1 + 0.5 * m))


def e4m3_closed_form(byte: int) -> float:
    """float8_e4m3fn: bias 7, subnormals m/8 * 2^-6, S.1111.111 is NaN, no infinities."""
    sign = -1.0 if byte & 0x80 else 1.0
    e, m = (byte >> 3) & 15, byte & 7
    if e == 15 and m == 7:
        return math.nan
    return sign * (m / 8 * 2.0 ** -6 if e == 0 else 2.0 ** (e - 7) * (1 + m / 8))


E4M3_POS = sorted({e4m3_closed_form(b) for b in range(0x7F)})  # 0 .. 448


def nearest_even(x: float, values: list[float], code_of) -> float:
    """Brute-force nearest of |x| in ``values``; ties to the value with an even code."""
    best = min(abs(abs(x) - v) for v in values)
    cands = [v for v in values if abs(abs(x) - v) == best]
    if len(cands) > 1:
        cands = [v for v in cands if code_of(v) % 2 == 0]
    return math.copysign(cands[0], x)


def test_e2m1_decode_matches_closed_form_for_all_16_codes():
    codes = torch.arange(16, dtype=torch.uint8)
    got = e2m1_decode(codes).tolist()
    assert got == [e2m1_closed_form(c) for c in range(16)]


def test_e2m1_ties_to_even_at_every_midpoint():
    grid = list(E2M1_GRID)
    mids = [(a + b) / 2 for a, b in zip(grid, grid[1:], strict=False)]
    expected = [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0]  # even codes 0, 2, 2, 4, 4, 6, 6
    for sign in (1.0, -1.0):
        u = torch.tensor([sign * m for m in mids])
        got = e2m1_decode(e2m1_rtn(u)).tolist()
        assert got == [sign * e for e in expected]
        assert all(int(c) & 1 == 0 for c in e2m1_rtn(u) & 7)


def test_e2m1_rtn_matches_brute_force_and_saturates():
    g = torch.Generator().manual_seed(0)
    u = torch.cat([torch.randn(5000, generator=g) * 3, torch.tensor([6.0, 7.0, 1e9, -1e9, 0.0])])
    got = e2m1_decode(e2m1_rtn(u)).tolist()
    grid = list(E2M1_GRID)
    want = [nearest_even(x, grid, grid.index) if abs(x) <= 6 else math.copysign(6.0, x)
            for x in u.tolist()]
    assert got == want


def test_e4m3_decode_and_rtn_match_enumeration_below_448_and_saturate_above():
    b = torch.arange(256, dtype=torch.int16).to(torch.uint8)
    dec = b.view(torch.float8_e4m3fn).float().tolist()
    for byte, v in enumerate(dec):
        ref = e4m3_closed_form(byte)
        assert (math.isnan(v) and math.isnan(ref)) or v == ref
    # midpoints between consecutive values (ties) plus random values: nearest, ties to even mantissa
    pos = E4M3_POS
    mids = [(a + c) / 2 for a, c in zip(pos, pos[1:], strict=False)]
    g = torch.Generator().manual_seed(1)
    rand = (torch.rand(3000, generator=g) * 448).tolist()
    xs = torch.tensor(mids + rand + [-m for m in mids[:50]], dtype=torch.float32)
    got = e4m3_rtn(xs).float().tolist()
    code_of = {v: i for i, v in enumerate(pos)}.__getitem__  # index parity = mantissa parity
    want = [nearest_even(x, pos, code_of) for x in xs.tolist()]
    assert got == want
    # torch's own cast agrees below 448; ours saturates where torch CPU gives NaN
    below = xs[xs.abs() < 448]
    assert torch.equal(e4m3_rtn(below).view(torch.uint8), below.to(torch.float8_e4m3fn).view(torch.uint8))
    big = torch.tensor([448.0, 449.0, 479.0, 480.0, 1e6, float("inf"), -500.0])
    assert e4m3_rtn(big).float().tolist() == [448.0] * 6 + [-448.0]


def brute_force_nvfp4(x: torch.Tensor, scales_max: float = 448.0, v_max: float = 6.0):
    """float64 reference with enumerated grids; returns (values, scales) per 1x16 block."""
    grid = list(E2M1_GRID)
    xs = x.double().reshape(-1, 16)
    amax = float(xs.abs().max())
    s_t = float(torch.tensor(amax / (scales_max * v_max), dtype=torch.float32)) if amax > 0 else 1.0
    vals, scales = [], []
    for row in xs.tolist():
        gmax = max(abs(v) for v in row)
        pre = float(torch.tensor(gmax, dtype=torch.float32) / v_max / torch.tensor(s_t))
        sb = nearest_even(min(pre, 448.0), E4M3_POS, {v: i for i, v in enumerate(E4M3_POS)}.__getitem__)
        sb = sb if sb != 0 else 1.0
        denom = float(torch.tensor(sb, dtype=torch.float32) * torch.tensor(s_t, dtype=torch.float32))
        for v in row:
            u = float(torch.tensor(v, dtype=torch.float32) / torch.tensor(denom, dtype=torch.float32))
            vals.append(nearest_even(u, grid, grid.index) if abs(u) <= 6 else math.copysign(6.0, u))
        scales.append(sb)
    return vals, scales, s_t


def test_nvfp4_rtn_matches_brute_force_bit_for_bit():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(8, 64, generator=g) * torch.exp2(torch.rand(8, 1, generator=g) * 12 - 6)
    q = quantize_nvfp4(x)
    vals, scales, s_t = brute_force_nvfp4(x)
    assert e2m1_decode(q.codes).reshape(-1).tolist() == vals
    assert q.scales.float().reshape(-1).tolist() == scales
    assert float(q.tensor_scale) == s_t
    assert q.codes.dtype == torch.uint8 and q.scales.dtype == torch.float8_e4m3fn
    assert torch.equal(q.packed()[..., 0] & 15, q.codes[..., 0])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-1e4, 1e4, allow_nan=False, width=32), min_size=16, max_size=16),
       st.integers(1, 3))
def test_rtn_properties(values, reps):
    x = torch.tensor(values * reps, dtype=torch.float32).reshape(reps, 16)
    deq = fake_quant(x)
    # sign never flips; the block max is reproduced within E4M3 + E2M1 rounding
    assert bool(((deq * x) >= 0).all())
    amax = float(x.abs().max())
    assert float(deq.abs().max()) <= amax * (1 + 1 / 16) * (1 + 1e-6) + 1e-30
    assert bool(torch.isfinite(deq).all())


def test_sr_is_unbiased_per_element():
    g = torch.Generator().manual_seed(3)
    u = torch.tensor([0.1, 0.3, 0.74, 1.2, 1.6, 2.2, 2.9, 3.3, 4.5, 5.9, -0.6, -2.5, -5.0, 6.0, 0.0, 1.0])
    n = 50_000
    draws = e2m1_decode(e2m1_sr(u.expand(n, 16), torch.rand(n, 16, generator=g)))
    mean = draws.double().mean(0)
    var = draws.double().var(0)
    tol = 4 * torch.sqrt(var / n) + 1e-12
    assert bool(((mean - u.double()).abs() <= tol).all())
    # only the two neighbours ever appear
    grid = torch.tensor(E2M1_GRID)
    lo = torch.stack([grid[grid <= float(a)].max() for a in u.abs()])
    hi = torch.stack([grid[grid >= float(a)].min() for a in u.abs()])
    mag = draws.abs()
    assert bool(((mag == lo) | (mag == hi)).all())


def test_e4m3_sr_unbiased_with_neighbours_and_edges():
    g = torch.Generator().manual_seed(4)
    x = torch.tensor([0.0, 0.0007, 0.003, 0.9, 1.03, 17.3, 300.0, 447.0, 448.0, 500.0])
    n = 100_000
    d = e4m3_sr(x.expand(n, -1), torch.rand(n, x.numel(), generator=g)).float().double()
    want = x.clamp(max=448).double()
    tol = 4 * torch.sqrt(d.var(0) / n) + 1e-12
    assert bool(((d.mean(0) - want).abs() <= tol).all())
    assert bool(torch.isfinite(d).all()) and float(d.max()) == 448.0


def test_four_over_six_never_worse_than_rtn_on_any_block():
    x = torch.randn(256, 64, generator=torch.Generator().manual_seed(5)) ** 3
    q46 = fake_quant(x, mode="four_over_six")
    q6 = fake_quant(x, mode="rtn", scales_max=256.0)  # same tensor scale
    e46 = ((q46 - x) ** 2).reshape(-1, 16).sum(1)
    e6 = ((q6 - x) ** 2).reshape(-1, 16).sum(1)
    assert bool((e46 <= e6).all())
    assert float(e46.sum()) < float(e6.sum())


def test_16x16_tiles_share_one_scale_per_tile():
    x = torch.randn(32, 48, generator=torch.Generator().manual_seed(6))
    q = quantize_nvfp4(x, block=(16, 16))
    assert q.scales.shape == (2, 3)
    # a tile's scale comes from the tile's max
    tile = x[16:32, 16:32]
    assert float(q.scales[1, 1].float()) == float(e4m3_rtn(tile.abs().max() / 6 / q.tensor_scale).float())


def test_zero_and_nonfinite_inputs():
    z = torch.zeros(4, 32)
    assert torch.equal(fake_quant(z), z)
    assert torch.equal(fake_quant(z, mode="sr", generator=torch.Generator().manual_seed(0)), z)
    x = torch.randn(2, 32)
    x[0, 3], x[1, 7] = float("nan"), float("inf")
    q = fake_quant(x)
    assert math.isnan(float(q[0, 3])) and float(q[1, 7]) == math.inf
    finite = torch.isfinite(x)
    assert bool(torch.isfinite(q[finite]).all())
    with pytest.raises(UserError, match="activations has 2 non-finite"):
        quantize_nvfp4(x, check_finite=True, name="activations")


def test_bad_arguments():
    with pytest.raises(UserError, match="multiple of 16"):
        quantize_nvfp4(torch.randn(4, 20))
    with pytest.raises(ValueError, match="scales_max"):
        quantize_nvfp4(torch.randn(4, 16), scales_max=500)
    with pytest.raises(ValueError, match="mode"):
        quantize_nvfp4(torch.randn(4, 16), mode="floor")
    with pytest.raises(UserError, match="rows divisible by 16"):
        quantize_nvfp4(torch.randn(4, 16), block=(16, 16))


def test_subnormal_amax_does_not_divide_by_zero():
    x = torch.zeros(1, 16)
    x[0, -1] = 1.401298464324817e-45  # the smallest float32 subnormal: its tensor scale underflows
    deq = fake_quant(x)
    assert bool(torch.isfinite(deq).all()) and bool((deq * x >= 0).all())


def test_scale_division_is_true_division_bit_for_bit():
    # tensor_scale/block_scales_rtn divide by a 0-dim device tensor so that CUDA does not turn the
    # division into x * (1/d) (a last-bit difference for ~1/3 of inputs, issue 33): on CPU the
    # result must stay the plain division, and it is not the reciprocal product
    from icml26.quartet2.nvfp4 import _div

    x = torch.rand(4096, generator=torch.Generator().manual_seed(0), dtype=torch.float32) * 100
    for d in (6.0, 448.0 * 6.0, 6.0 / ((17 / 16) * 0.93), 4.0):
        assert torch.equal(_div(x, d), x / d)
    recip = x * torch.tensor(1 / 6.0, dtype=torch.float32)
    assert not torch.equal(_div(x, 6.0), recip)  # the CUDA shortcut would change these bits
