"""The linear algebra of SSO against float64 references: msign, power iteration, the λ solver."""

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.sso.spectral import (
    POLAR_EXPRESS,
    msign,
    msign_exact,
    power_iteration,
    solve_lambda,
    tangent_inner,
)


def _rand(shape, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


def _with_spectrum(m, n, s, seed):
    """A float64 (m, n) matrix with singular values s (descending)."""
    q1, _ = torch.linalg.qr(_rand((m, m), seed))
    q2, _ = torch.linalg.qr(_rand((n, n), seed + 1))
    r = len(s)
    return q1[:, :r] @ torch.diag(torch.tensor(s, dtype=torch.float64)) @ q2[:, :r].T


def test_polar_express_schedule_has_eight_steps_and_safety_factor():
    assert len(POLAR_EXPRESS) == 8
    a, b, c = POLAR_EXPRESS[0]
    assert a == pytest.approx(8.28721201814563 / 1.01)
    assert c == pytest.approx(17.300387312530933 / 1.01**5)
    assert POLAR_EXPRESS[-1] == (1.875, -1.25, 0.375)
    # the last quintic fixes 1: p(1) = a + b + c = 1
    assert sum(POLAR_EXPRESS[-1]) == pytest.approx(1.0)


@pytest.mark.parametrize("shape", [(40, 24), (24, 40), (32, 32), (3, 16, 48), (3, 48, 16)])
def test_msign_matches_exact_polar_factor(shape):
    # condition number 100 after normalization: inside Polar Express's design interval [1e-3, 1]
    if len(shape) == 2:
        m, n = shape
        x = _with_spectrum(m, n, torch.logspace(0, -2, min(m, n)).tolist(), 0)
    else:
        x = torch.stack([_with_spectrum(shape[1], shape[2], torch.logspace(0, -2, min(shape[1:])).tolist(), i)
                         for i in range(shape[0])])
    y = msign(x, 8)
    assert y.shape == x.shape and y.dtype == x.dtype
    sv = torch.linalg.svdvals(y)
    assert (sv - 1).abs().max() < 1e-2  # the schedule's bound for σ ∈ [1e-3, 1]
    torch.testing.assert_close(y, msign_exact(x), atol=1e-2, rtol=0)
    y32 = msign(x.float(), 8)
    assert y32.dtype == torch.float32
    assert (torch.linalg.svdvals(y32.double()) - 1).abs().max() < 1e-2


def test_msign_well_conditioned_is_exact_to_round_off():
    x = _rand((64, 32), 3)
    torch.testing.assert_close(msign(x), msign_exact(x), atol=1e-10, rtol=0)


def test_msign_rejects_vectors():
    with pytest.raises(ValueError, match="matrix"):
        msign(torch.ones(4))


def test_power_iteration_warm_start_matches_spectral_norm():
    w = torch.stack([_with_spectrum(24, 16, [3.0, 2.0, 1.0, 0.5], s) for s in range(4)]).float()
    w = w + 0.01 * _rand((4, 24, 16), 9).float()
    exact = torch.linalg.matrix_norm(w.double(), ord=2)
    sig, u, v = power_iteration(w, None, steps=5)
    # warm start: a second call from the cached v (as at the next optimizer step)
    sig2, u2, v2 = power_iteration(w, v, steps=5)
    assert ((sig2.double() - exact).abs() / exact).max() < 1e-3
    # σ = uᵀ W v and u, v unit
    torch.testing.assert_close(u2.norm(dim=-1), torch.ones(4), atol=1e-5, rtol=0)
    torch.testing.assert_close(tangent_inner(u2, w, v2), sig2)
    assert (sig2 <= exact.float() * (1 + 1e-5)).all()  # a Rayleigh quotient never overshoots


def _problem(seed, m=6, n=4):
    w = _rand((m, n), seed)
    u_, _, vh = torch.linalg.svd(w)
    g = _rand((m, n), seed + 100)
    g = g / g.norm()
    return g, u_[:, 0], vh[0]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), a=st.floats(-3, 3), b=st.floats(-3, 3))
def test_h_is_monotone(seed, a, b):
    g, u, v = _problem(seed)
    theta = torch.outer(u, v)
    lo, hi = min(a, b), max(a, b)
    h_lo = float(u @ msign_exact(g + lo * theta) @ v)
    h_hi = float(u @ msign_exact(g + hi * theta) @ v)
    assert h_lo <= h_hi + 1e-9
    assert -1 - 1e-9 <= h_lo <= 1 + 1e-9


@functools.cache
def _dense_grid_root(seed):
    g, u, v = _problem(seed)
    theta = torch.outer(u, v)
    grid = torch.linspace(-2, 2, 2001, dtype=torch.float64)  # step 2e-3
    hs = torch.tensor([float(u @ msign_exact(g + x * theta) @ v) for x in grid])
    assert hs[0] < 0 < hs[-1]
    i = int(torch.nonzero(hs >= 0)[0])
    # linear interpolation between the bracketing grid points
    x0, x1, h0, h1 = grid[i - 1], grid[i], hs[i - 1], hs[i]
    return float(x0 - h0 * (x1 - x0) / (h1 - h0))


@pytest.mark.parametrize("method", ["bisect", "illinois"])
@pytest.mark.parametrize("early_exit", [True, False])
def test_solver_root_matches_dense_grid(method, early_exit):
    probs = [_problem(s) for s in range(3)]
    g = torch.stack([p[0] for p in probs])
    u = torch.stack([p[1] for p in probs])
    v = torch.stack([p[2] for p in probs])
    tol = 1e-6
    sol = solve_lambda(g, u, v, torch.zeros(3, dtype=torch.float64), tol=tol, max_iter=60,
                       msign_fn=msign_exact, method=method, early_exit=early_exit)
    assert sol.converged.all()
    assert (sol.h.abs() <= tol).all()
    # Φ is msign(G + λΘ) at the returned λ, and it is tangent: |⟨Θ, Φ⟩| ≤ tol
    theta = u.unsqueeze(-1) * v.unsqueeze(-2)
    torch.testing.assert_close(sol.phi, msign_exact(g + sol.lam.view(-1, 1, 1) * theta))
    for i in range(3):
        assert sol.lam[i].item() == pytest.approx(_dense_grid_root(i), abs=1e-3)


def test_solver_with_polar_express_reaches_tolerance_and_falls_back_to_wide_bracket():
    w = _rand((3, 16, 24), 7).float()
    g = _rand((3, 16, 24), 8).float()
    g = g / torch.linalg.matrix_norm(g, keepdim=True)
    _, u, v = power_iteration(w, None, steps=100)
    ref = solve_lambda(g.double(), u.double(), v.double(), torch.zeros(3, dtype=torch.float64),
                       tol=1e-10, max_iter=80, msign_fn=msign_exact)
    for lam0 in (0.0, -50.0):  # -50: the doubling bracket (≤ 1.02) fails, the 2‖M̂‖_* bound holds
        for method in ("bisect", "illinois"):
            sol = solve_lambda(g, u, v, torch.full((3,), lam0), tol=2e-4, method=method)
            assert (sol.h.abs() <= 2e-4).all(), (lam0, method)
            assert (sol.lam.double() - ref.lam).abs().max() < 1e-3
    fixed = solve_lambda(g, u, v, torch.zeros(3), early_exit=False, max_expand=10, max_iter=20)
    assert fixed.iterations == 31
