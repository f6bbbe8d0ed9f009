"""Hadamard transforms and MS-EDEN: orthonormality, the EDEN correction's closed form,
unbiased scale rounding and 1/sqrt(K) convergence of the mean over rotations."""

import math

import numpy as np
import pytest
import torch

from icml26.quartet2.analysis import bits_slope, effective_bits, gemm_bias_curve, relative_mse
from icml26.quartet2.eden import (
    fwht,
    hadamard_matrix,
    inverse_rht,
    ms_eden,
    quantized_matmul,
    random_signs,
    rht,
)
from icml26.quartet2.nvfp4 import E2M1_MAX, e2m1_decode


@pytest.mark.parametrize("h", [16, 32, 128])
def test_hadamard_orthonormal_and_fwht_equals_dense(h):
    H = hadamard_matrix(h, dtype=torch.float64)
    assert torch.allclose(H @ H.T, torch.eye(h, dtype=torch.float64), atol=1e-12)
    x = torch.randn(5, 3 * h, dtype=torch.float64)
    dense = (x.reshape(5, 3, h) @ H).reshape(5, 3 * h)
    assert torch.allclose(fwht(x.reshape(5, 3, h)).reshape(5, 3 * h), dense, atol=1e-12)
    s = random_signs(h, torch.Generator().manual_seed(h))
    y = rht(x.float(), s)
    assert torch.allclose(inverse_rht(y, s), x.float(), atol=1e-5)
    # a GEMM is unchanged when both operands get the same rotation
    b = torch.randn(4, 3 * h)
    assert torch.allclose(rht(x.float(), s) @ rht(b, s).T, x.float() @ b.T, rtol=1e-4, atol=1e-3)


def test_bad_hadamard_dims():
    with pytest.raises(ValueError, match="power of two >= 16"):
        ms_eden(torch.randn(2, 24), torch.ones(24))
    with pytest.raises(ValueError, match="power of two >= 16"):
        ms_eden(torch.randn(2, 16), torch.ones(8))
    with pytest.raises(ValueError, match="multiple of the Hadamard size"):
        rht(torch.randn(2, 48), torch.ones(32))


def test_eden_correction_matches_closed_form():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 256, generator=g) * torch.exp2(torch.rand(6, 1, generator=g) * 6)
    s = random_signs(128, g)
    out = ms_eden(x, s, generator=g)
    # recompute u and q in float64 from the definition
    xr = rht(x, s).double().reshape(-1, 16)
    v_max = E2M1_MAX / ((17 / 16) * 0.93)
    s_t = float(xr.abs().max()) / (255.99 * v_max)
    sb = ((xr.abs().amax(1, keepdim=True) / v_max / s_t).float().clamp(max=448)
          .to(torch.float8_e4m3fn).double())
    u = (xr / (sb * s_t)).reshape(-1, 128)
    q = e2m1_decode(out.q.codes).double().reshape(-1, 128)
    c = (u * u).sum(1) / (u * q).sum(1)
    assert torch.allclose(out.correction.reshape(-1).double(), c, rtol=1e-5)
    # EDEN's defining property: <u, c q> = ||u||^2 in every rotation group
    assert torch.allclose((u * (c[:, None] * q)).sum(1), (u * u).sum(1), rtol=1e-9)
    # the stored scales are E4M3 neighbours of the corrected scales
    corrected = (sb.reshape(-1, 8) * c[:, None]).reshape(-1)
    got = out.q.scales.double().reshape(-1)
    assert bool(((got - corrected).abs() <= corrected * 2 ** -3 + 1e-12).all())


def test_scale_stochastic_rounding_unbiased():
    """Over the scales' rounding noise, E[output] = RTN values * corrected scales * tensor scale."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 128, generator=g)
    s = random_signs(128, g)
    n = 20_000  # replicas share amax, codes and c; each draws its own scale noise
    d = ms_eden(x.repeat(n, 1), s, generator=g).dequantize().double().reshape(n, 2, 128)
    ref = ms_eden(x, s, generator=g)
    v_max = E2M1_MAX / ((17 / 16) * 0.93)
    s_t = float(ref.q.tensor_scale)
    xr = rht(x, s).double()
    sb = ((xr.reshape(-1, 16).abs().amax(1, keepdim=True) / v_max / s_t).float()
          .to(torch.float8_e4m3fn).double())
    corr = ref.correction.double().reshape(-1, 1).repeat_interleave(8, 0)
    expect = (e2m1_decode(ref.q.codes).double().reshape(-1, 16) * sb * corr * s_t).reshape(2, 128)
    tol = 4 * torch.sqrt(d.var(0) / n) + 1e-9
    assert bool(((d.mean(0) - expect).abs() <= tol).all())


def test_mean_over_rotations_converges_as_inverse_sqrt_k():
    x = torch.randn(32, 256, generator=torch.Generator().manual_seed(2)) ** 3
    g = torch.Generator().manual_seed(3)
    ks, errs = [2, 8, 32, 128], []
    acc = torch.zeros_like(x, dtype=torch.float64)
    for k in range(1, ks[-1] + 1):
        acc += ms_eden(x, random_signs(128, g), generator=g).dequantize(rotated=False).double()
        if k in ks:
            errs.append(math.sqrt(relative_mse(acc / k, x)))
    slope = np.polyfit(np.log(ks), np.log(errs), 1)[0]
    assert -0.6 < slope < -0.4, (slope, errs)


def test_gemm_bits_grow_one_per_4x_for_unbiased_and_plateau_for_rtn():
    g = torch.Generator().manual_seed(4)
    a = torch.randn(16, 256, generator=g) * torch.exp2(torch.rand(16, 1, generator=g) * 4)
    b = torch.randn(16, 256, generator=g)
    ks = [1, 4, 16, 64]
    eden = gemm_bias_curve(a, b, "ms_eden", ks, seed=0)
    sr = gemm_bias_curve(a, b, "sr", ks, seed=0)
    assert 0.75 < bits_slope(ks, eden) < 1.25
    assert 0.75 < bits_slope(ks, sr) < 1.25
    assert eden[0] > sr[0] + 0.3  # lower error per draw
    # without rotations RTN is deterministic: averaging gains nothing (a pure bias floor) ...
    rtn = gemm_bias_curve(a, b, "rtn", [1, 16], hadamard_dim=None, seed=0)
    assert abs(rtn[1] - rtn[0]) < 1e-9
    # ... while elementwise SR stays unbiased without them
    sr_plain = gemm_bias_curve(a, b, "sr", [1, 16], hadamard_dim=None, seed=0)
    assert sr_plain[1] - sr_plain[0] > 1.5


def test_zero_input_gives_zeros_and_padding_is_exact():
    z = ms_eden(torch.zeros(3, 128), torch.ones(128)).dequantize()
    assert torch.equal(z, torch.zeros(3, 128))
    a, b = torch.randn(8, 100), torch.randn(6, 100)
    assert torch.allclose(quantized_matmul(a, b, "none"), a @ b.T, atol=1e-5)
    out = quantized_matmul(a, b, "ms_eden", generator=torch.Generator().manual_seed(0))
    assert out.shape == (8, 6) and effective_bits(relative_mse(out, a @ b.T)) > 1.5
