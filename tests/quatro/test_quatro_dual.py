"""solve_dual against a dense grid of g(lambda), the KL = delta property, and bad input."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.quatro.dual import dual_objective, group_advantages, solve_dual, tilt_kl


def _binary_groups(q, g, seed):
    rng = np.random.default_rng(seed)
    r = torch.tensor(rng.integers(0, 2, size=(q, g)), dtype=torch.float64)
    return r - r.mean(1, keepdim=True)


@pytest.mark.parametrize("delta", [0.01, 0.05, 0.2])
def test_kl_of_tilt_equals_delta_when_binding(delta):
    adv = torch.randn(64, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    lam = solve_dual(adv, delta)
    assert (lam > 0).all()
    kl = tilt_kl(adv, lam)
    assert torch.allclose(kl, torch.full_like(kl, delta), atol=1e-8, rtol=0)


def test_dual_root_matches_dense_grid():
    adv = _binary_groups(16, 8, 0)
    adv = adv[(adv.abs().sum(1) > 0)]
    delta = 0.05
    lam = solve_dual(adv, delta)
    grid = torch.logspace(-4, 3, 20001, dtype=torch.float64)
    for a, l_star in zip(adv, lam, strict=True):
        g = dual_objective(a.expand(len(grid), -1), grid, delta)
        l_grid = grid[g.argmin()]
        assert abs(math.log(l_grid / l_star)) < 2e-3  # grid step is 8e-4 in log space
        g_star = dual_objective(a[None], l_star[None], delta)
        assert g_star <= g.min() + 1e-12


def test_equal_rewards_and_nonbinding_give_zero():
    adv = torch.zeros(3, 4, dtype=torch.float64)
    assert torch.equal(solve_dual(adv, 0.05), torch.zeros(3, dtype=torch.float64))
    # G=2 with one winner: KL(lambda->0) = log 2 = 0.693 < delta -> constraint cannot bind
    adv2 = torch.tensor([[0.5, -0.5]], dtype=torch.float64)
    assert solve_dual(adv2, 1.0).item() == 0.0
    assert solve_dual(adv2, 0.5).item() > 0.0


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.005, 0.3))
def test_permutation_within_group_invariant(seed, delta):
    adv = _binary_groups(8, 6, seed) * 0.7
    perm = torch.randperm(6, generator=torch.Generator().manual_seed(seed))
    assert torch.allclose(
        solve_dual(adv, delta), solve_dual(adv[:, perm], delta), rtol=1e-7, atol=0
    )


def test_lambda_scales_with_advantages():
    adv = torch.randn(10, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    assert torch.allclose(solve_dual(3.0 * adv, 0.05), 3.0 * solve_dual(adv, 0.05), rtol=1e-9)


def test_flat_input_and_errors():
    adv = torch.randn(16, dtype=torch.float64)
    assert solve_dual(adv, 0.05, group_size=8).shape == (2,)
    with pytest.raises(ValueError, match="not a multiple of group_size=6"):
        solve_dual(adv, 0.05, group_size=6)
    with pytest.raises(ValueError, match="delta"):
        solve_dual(adv, 0.0, group_size=8)
    with pytest.raises(ValueError, match="G must be >= 2"):
        solve_dual(adv, 0.05, group_size=1)
    with pytest.raises(ValueError, match="non-finite"):
        group_advantages(torch.tensor([1.0, float("nan")]), 2)


def test_group_advantages():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    a = group_advantages(r, 3)
    assert torch.allclose(a, torch.tensor([2 / 3, -1 / 3, -1 / 3, -2 / 3, 1 / 3, 1 / 3]))
    s = group_advantages(r, 3, scale=True, eps=0.0)
    assert torch.allclose(s.view(2, 3).std(1), torch.ones(2))


def _bisect_reference(adv, delta, steps=200):
    """log-lambda bisection on tilt_kl, float64, per query (KL decreases in lambda)."""
    lo = torch.full((adv.shape[0],), -30.0, dtype=torch.float64)
    hi = torch.full((adv.shape[0],), 30.0, dtype=torch.float64)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        up = tilt_kl(adv, mid.exp()) > delta
        lo, hi = torch.where(up, mid, lo), torch.where(up, hi, mid)
    return (0.5 * (lo + hi)).exp()


@pytest.mark.parametrize("delta", [0.01, 0.05, 0.2, 1.0])
def test_default_newton_steps_from_the_moment_start_reach_the_root(delta):
    """Issue 36: no bisection phase; the moment start, the Hoeffding bracket and damped Newton
    on log KL converge in the default 8 steps on Gaussian, binary, one-outlier and heavy-tailed groups,
    including delta near KL(lambda -> 0) where lambda is small; more steps do not move it."""
    g = torch.Generator().manual_seed(0)
    binary = torch.randint(0, 2, (256, 8), generator=g).double()
    outlier = torch.zeros(64, 16, dtype=torch.float64)
    outlier[:, 0] = 1.0
    heavy = torch.distributions.StudentT(1.5).sample((256, 8)).double()
    for adv in (torch.randn(256, 8, generator=g, dtype=torch.float64),
                binary - binary.mean(1, keepdim=True), outlier - outlier.mean(1, keepdim=True),
                heavy):
        lam = solve_dual(adv, delta)
        bind = lam > 0
        ref = _bisect_reference(adv[bind], delta)
        assert torch.allclose(lam[bind], ref, rtol=1e-9, atol=0)
        assert torch.equal(bind, solve_dual(adv, delta, bisect=30) > 0)
        assert torch.allclose(solve_dual(adv, delta, iters=40), lam, rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="damp"):
        solve_dual(adv, delta, damp=0.0)
