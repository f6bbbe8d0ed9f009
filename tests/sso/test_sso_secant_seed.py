"""The secant-seeded λ bracket: the same root to within tol, fewer msign calls, safe fallbacks."""

import pytest
import torch

from icml26.sso import SSO
from icml26.sso.spectral import msign_exact, power_iteration, solve_lambda, tangent_inner


def _batch(seed, b=4, m=12, n=20):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(b, m, n, generator=g, dtype=torch.float64)
    grad = torch.randn(b, m, n, generator=g, dtype=torch.float64)
    grad = grad / torch.linalg.matrix_norm(grad, keepdim=True)
    _, u, v = power_iteration(w, None, steps=200)
    return grad, u, v


def _h(g, u, v, lam):
    theta = u.unsqueeze(-1) * v.unsqueeze(-2)
    return tangent_inner(u, msign_exact(g + lam.view(-1, 1, 1) * theta), v)


@pytest.mark.parametrize("method", ["bisect", "illinois"])
def test_secant_seed_finds_the_same_root_in_fewer_calls_after_a_drift(method):
    g, u, v = _batch(0)
    tol = 1e-7
    first = solve_lambda(g, u, v, torch.zeros(4, dtype=torch.float64), tol=tol, max_iter=60,
                         msign_fn=msign_exact, method=method)
    assert first.converged.all()
    # the slope handed on is the secant of h near the root: compare with a central difference
    d = 1e-4
    fd = (_h(g, u, v, first.lam + d) - _h(g, u, v, first.lam - d)) / (2 * d)
    assert (first.slope > 0).all()
    assert ((first.slope / fd) - 1).abs().max() < 0.5
    # the next step: the momentum drifts a little, λ is warm-started
    noise = torch.randn(g.shape, generator=torch.Generator().manual_seed(1), dtype=g.dtype)
    g2 = g + 0.02 * noise / torch.linalg.matrix_norm(noise, keepdim=True)
    g2 = g2 / torch.linalg.matrix_norm(g2, keepdim=True)
    kw = dict(tol=tol, max_iter=60, msign_fn=msign_exact, method=method)
    fixed = solve_lambda(g2, u, v, first.lam, **kw)
    secant = solve_lambda(g2, u, v, first.lam, slope0=first.slope, **kw)
    assert fixed.converged.all() and secant.converged.all()
    assert (secant.h.abs() <= tol).all()
    # h' >= 0.1 near these roots (checked above), so |h| <= tol puts λ within 10·tol of the root
    assert (secant.lam - fixed.lam).abs().max() < 20 * tol / float(fd.min())
    # bisection halves the bracket either way (its width, not its start, sets the count);
    # false position from a probe next to the root needs few calls
    if method == "illinois":
        assert secant.iterations < fixed.iterations
    else:
        assert secant.iterations <= fixed.iterations


def test_invalid_slopes_fall_back_to_the_fixed_bracket_bit_for_bit():
    g, u, v = _batch(2)
    lam0 = torch.full((4,), 0.3, dtype=torch.float64)
    ref = solve_lambda(g, u, v, lam0, msign_fn=msign_exact)
    bad = torch.tensor([float("nan"), 0.0, -1.0, float("inf")], dtype=torch.float64)
    sol = solve_lambda(g, u, v, lam0, msign_fn=msign_exact, slope0=bad)
    assert torch.equal(sol.lam, ref.lam)
    assert torch.equal(sol.phi, ref.phi)
    assert sol.iterations == ref.iterations


def test_a_matrix_that_converges_at_its_warm_start_keeps_its_slope():
    g, u, v = _batch(3)
    first = solve_lambda(g, u, v, torch.zeros(4, dtype=torch.float64), tol=1e-9, max_iter=80,
                         msign_fn=msign_exact)
    again = solve_lambda(g, u, v, first.lam, tol=1e-6, msign_fn=msign_exact, slope0=first.slope)
    assert again.iterations == 1  # every |h(λ₀)| ≤ tol: nothing moved
    assert torch.equal(again.slope, first.slope)


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 24, bias=False), torch.nn.Tanh(),
                               torch.nn.Linear(24, 16, bias=False), torch.nn.Tanh(),
                               torch.nn.Linear(16, 8, bias=False))


def _train(seed_mode, steps=12):
    model = _model()
    opt = SSO(model.parameters(), lr=0.05, solver="illinois", solver_seed=seed_mode)
    g = torch.Generator().manual_seed(5)
    calls, hs = 0, []
    for _ in range(steps):
        x = torch.randn(32, 16, generator=g)
        y = torch.randn(32, 8, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        calls += int(opt.last_stats["evals"].sum())
        hs.append(float(opt.last_stats["h"].abs().max()))
    return model, opt, calls, max(hs)


def test_optimizer_secant_seed_keeps_tangency_and_the_trajectory_and_saves_calls():
    m_fixed, _, calls_fixed, h_fixed = _train("fixed")
    m_sec, opt, calls_sec, h_sec = _train("secant")
    assert h_fixed <= 2e-4 and h_sec <= 2e-4
    assert calls_sec < calls_fixed
    # the same root to within tol at every step: the weights stay close after 12 steps
    for a, b in zip(m_fixed.parameters(), m_sec.parameters(), strict=True):
        assert (a - b).norm() / a.norm() < 2e-2
    st = opt.state[next(iter(m_sec.parameters()))]
    assert st["slope"].shape == (1,) and bool(torch.isfinite(st["slope"]).all())


def test_checkpoint_without_slope_loads_and_steps():
    model, opt, _, _ = _train("secant", steps=3)
    sd = opt.state_dict()
    for st in sd["state"].values():
        st.pop("slope", None)  # a checkpoint written before the secant seed existed
    opt2 = SSO(model.parameters(), lr=0.05, solver="illinois")
    opt2.load_state_dict(sd)
    x = torch.randn(8, 16)
    torch.nn.functional.mse_loss(model(x), torch.zeros(8, 8)).backward()
    opt2.step()
    assert float(opt2.last_stats["h"].abs().max()) <= 2e-4
    assert "slope" in opt2.state[next(iter(model.parameters()))]


def test_bad_solver_seed_names_the_value_and_the_group():
    model = _model()
    with pytest.raises(ValueError, match="solver_seed must be one of .*'newton'"):
        SSO(model.parameters(), solver_seed="newton")
    with pytest.raises(ValueError, match="param group 0: solver_seed .*'newton'"):
        SSO([{"params": list(model.parameters()), "solver_seed": "newton"}])
    with pytest.raises(ValueError, match="param group 0: solver must be .*'brent'"):
        SSO([{"params": list(model.parameters()), "solver": "brent"}])
