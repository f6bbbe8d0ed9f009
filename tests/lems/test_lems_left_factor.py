"""The left factor against a float64 brute-force optimum of the K-FAC-weighted error.

The K-FAC error of a rank-r approximation is ``tr((W - LR)^T G (W - LR) A)`` with the shrunk
factors A and G. Its minimum is found here without any SVD of a whitened matrix: alternating
least squares (each half-step is the exact minimiser in L or in R) from several random starts,
run to convergence in float64. ``"transpose"`` (L_G^T) must reach it; ``"official"`` (L_G) may
not beat it; ``"identity"`` is SVD-LLM on KFAC's shrunk A.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.lems.compress import CompressConfig
from icml26.lems.factorize import LEFT_FACTORS, factorize_weight, shrink


def _spd(n, gen, cond=30.0):
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    lam = torch.logspace(0, torch.log10(torch.tensor(cond)).item(), n, dtype=torch.float64)
    return q @ torch.diag(lam) @ q.T


def _err(dw, a, g):
    return float(torch.trace(dw.T @ g @ dw @ a))


def _brute_force(w, a, g, r, gen, starts=2, iters=4000):
    """min over rank-r L R of the K-FAC error: alternating exact least squares, best of ``starts``.

    For fixed R the minimiser is ``L = W A R^T (R A R^T)^-1`` (G cancels); for fixed L it is
    ``R = (L^T G L)^-1 L^T G W`` (A cancels)."""
    best = float("inf")
    for _ in range(starts):
        rr = torch.randn(r, w.shape[1], generator=gen, dtype=torch.float64)
        last = float("inf")
        for i in range(iters):
            ll = torch.linalg.solve(rr @ a @ rr.T, (w @ a @ rr.T).T).T
            rr = torch.linalg.solve(ll.T @ g @ ll, ll.T @ g @ w)
            if i % 25 == 24:  # converged (monotone descent): stop
                err = _err(w - ll @ rr, a, g)
                if last - err <= 1e-15 * err:
                    break
                last = err
        best = min(best, _err(w - ll @ rr, a, g))
    return best


@settings(max_examples=4, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([(6, 4), (4, 6), (5, 5)]))
def test_transpose_is_the_brute_force_optimum_and_official_is_not_better(seed, shape):
    gen = torch.Generator().manual_seed(seed)
    n_out, n_in = shape
    w = torch.randn(n_out, n_in, generator=gen, dtype=torch.float64)
    a, g = _spd(n_in, gen), _spd(n_out, gen)
    sa, sg = shrink(a, 0.1), shrink(g, 0.3)  # the K-FAC norm the factors whiten
    lt, rt, st_, _ = factorize_weight(w, method="kfac", a=a, g=g, left_factor="transpose")
    lo, ro, _, _ = factorize_weight(w, method="kfac", a=a, g=g, left_factor="official")
    for r in range(1, min(shape)):
        brute = _brute_force(w, sa, sg, r, gen)
        err_t = _err(w - lt[:, :r] @ rt[:r], sa, sg)
        err_o = _err(w - lo[:, :r] @ ro[:r], sa, sg)
        assert err_t == pytest.approx(brute, rel=1e-10, abs=1e-12)
        assert err_t == pytest.approx(float((st_[r:] ** 2).sum()), rel=1e-10)  # Eckart-Young
        assert err_o >= brute * (1 - 1e-10)


def test_official_is_strictly_worse_on_a_skewed_g():
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(8, 6, generator=gen, dtype=torch.float64)
    a, g = _spd(6, gen), _spd(8, gen, cond=1e3)
    sa, sg = shrink(a, 0.1), shrink(g, 0.3)
    lt, rt, _, _ = factorize_weight(w, method="kfac", a=a, g=g, left_factor="transpose")
    lo, ro, _, _ = factorize_weight(w, method="kfac", a=a, g=g, left_factor="official")
    worse = [_err(w - lo[:, :r] @ ro[:r], sa, sg) / _err(w - lt[:, :r] @ rt[:r], sa, sg)
             for r in (1, 2, 3)]
    assert max(worse) > 1.01


def test_identity_is_svd_llm_on_the_shrunk_a_and_ignores_g():
    gen = torch.Generator().manual_seed(2)
    w = torch.randn(7, 5, generator=gen, dtype=torch.float64)
    a, g = _spd(5, gen), _spd(7, gen)
    li, ri, si, info = factorize_weight(w, method="kfac", a=a, g=g, left_factor="identity",
                                        shrink_a=0.1)
    ls, rs, ss, _ = factorize_weight(w, method="svd_llm", a=shrink(a, 0.1))
    assert "G:I" in info
    assert torch.allclose(si, ss, rtol=1e-12)
    for r in (1, 3):
        assert torch.allclose(li[:, :r] @ ri[:r], ls[:, :r] @ rs[:r], atol=1e-10)
    other = factorize_weight(w, method="kfac", a=a, g=3 * g + torch.eye(7, dtype=torch.float64),
                             left_factor="identity")
    assert torch.equal(other[2], si)


def test_transpose_is_the_default_and_bad_left_factors_are_named():
    assert LEFT_FACTORS[0] == "transpose" and CompressConfig().left_factor == "transpose"
    w = torch.eye(3, dtype=torch.float64)
    with pytest.raises(ValueError, match="left_factor.*'sideways'"):
        factorize_weight(w, method="kfac", a=w, g=w, left_factor="sideways")
    from icml26.core.errors import UserError

    with pytest.raises(UserError, match="`left_factor`.*'sideways'"):
        CompressConfig(left_factor="sideways")
