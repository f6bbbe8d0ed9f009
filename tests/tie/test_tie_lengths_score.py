import math

import numpy as np
import pytest
from scipy import integrate, stats

from icml26.tie.lengths import LogT, fit_lognormal, fit_logt, ks_statistic, ks_test, loglik
from icml26.tie.score import adaptive_beta, tie_score, tie_score_mc, truncated_cvar, truncated_mean


def test_logt_cdf_matches_scipy():
    d = LogT(3.0, 0.8, 3.5)
    x = np.array([1.0, 5.0, 20.0, 300.0])
    np.testing.assert_allclose(d.cdf(x), stats.t.cdf((np.log(x) - 3.0) / 0.8, 3.5), rtol=1e-12)
    np.testing.assert_allclose(d.sf(x), 1 - d.cdf(x), atol=1e-14)
    q = d.ppf(0.9)
    assert d.cdf(q) == pytest.approx(0.9)
    # density integrates to the cdf
    assert integrate.quad(lambda t: math.exp(d.logpdf(t)), 1, 50)[0] == pytest.approx(d.cdf(50) - d.cdf(1), rel=1e-6)


def test_censored_mle_recovers_parameters():
    rng = np.random.default_rng(0)
    d = LogT(4.5, 0.9, 3.5)
    L, c = d.sample_lengths(rng, 2000, cap=256)
    assert 0.05 < c.mean() < 0.3  # the cap really censors
    f = fit_logt(L, c)
    assert f.mu == pytest.approx(4.5, abs=0.08) and f.sigma == pytest.approx(0.9, abs=0.08)
    naive = fit_logt(L, None)  # ignoring censoring biases sigma down
    assert naive.sigma < f.sigma
    free = fit_logt(L, c, nu=None)
    assert 2.3 < free.nu < 6
    assert loglik(f, L, c) > loglik(fit_lognormal(L, c), L, c)


def test_ks_test_separates_families():
    rng = np.random.default_rng(1)
    L, c = LogT(4.0, 1.2, 2.5).sample_lengths(rng, 300, cap=2048)
    _, p_t = ks_test(L, c, "logt", nu=None, n_boot=19, seed=0)
    _, p_n = ks_test(L, c, "lognormal", n_boot=19, seed=0)
    assert p_t > 0.05 and p_n < p_t
    assert ks_statistic(fit_logt(L, c), L, c) < 0.1


@pytest.mark.parametrize("bad", [dict(sigma=0.0), dict(sigma=-1.0), dict(nu=1.0), dict(nu=0.5)])
def test_logt_rejects_bad_parameters(bad):
    with pytest.raises(ValueError):
        LogT(**{"mu": 1.0, "sigma": 1.0, "nu": 3.5, **bad})


def test_fit_needs_two_samples():
    with pytest.raises(ValueError, match=">= 2 lengths"):
        fit_logt([5])
    with pytest.raises(ValueError, match="integers"):
        fit_logt([1.5, 3])


@pytest.mark.parametrize("mu,sigma,nu", [(4.0, 0.7, 3.5), (7.5, 1.5, 3.5), (2.0, 0.05, 3.5), (1.0, 2.5, 3.5),
                                         (5.0, 1.0, math.inf), (7.6, 0.02, 3.5)])
def test_truncated_moments_match_float64_monte_carlo(mu, sigma, nu):
    rng = np.random.default_rng(42)
    n = 1_000_000
    t = rng.standard_normal(n) if math.isinf(nu) else rng.standard_t(nu, n)
    x = np.minimum(np.exp(np.minimum(mu + sigma * t, 700)), 2048.0)
    var = np.quantile(x, 0.9)
    cvar_mc = x[x >= var].mean() if var < 2048 else 2048.0
    se = x.std() / math.sqrt(n)
    assert truncated_mean(mu, sigma, nu, 2048) == pytest.approx(x.mean(), abs=5 * se + 1e-9)
    tail = x[x >= var]
    se_tail = tail.std() / math.sqrt(tail.size) + 1e-9
    assert truncated_cvar(mu, sigma, nu, 2048, 0.9) == pytest.approx(cvar_mc, abs=5 * se_tail + 1e-6)


def test_truncated_mean_equals_integral_of_survival():
    d = LogT(3.5, 1.1, 3.5)
    ref = integrate.quad(lambda v: float(d.sf(v)), 0, 500, limit=400)[0]
    assert truncated_mean(3.5, 1.1, 3.5, 500) == pytest.approx(ref, rel=1e-6)


def test_beta_clamps_and_score():
    np.testing.assert_allclose(adaptive_beta([0, 32, 64, 160, 1000], 32), [0.1, 0.1, 0.2, 0.5, 0.5])
    m, cv = truncated_mean(5.0, 1.0), truncated_cvar(5.0, 1.0)
    assert tie_score(5.0, 1.0, queue_len=64) == round(m + 0.2 * cv)
    assert tie_score(5.0, 1.0, beta=0) == round(m)  # SEPT
    assert tie_score(-30.0, 0.1) == 1  # clamps at 1
    s = tie_score(np.linspace(1, 9, 50), 0.8, 10)
    assert np.all(np.diff(s) >= 0) and s.dtype == np.int64


def test_score_orders_like_monte_carlo():
    rng = np.random.default_rng(0)
    mus, sig = rng.uniform(3, 7, 8), rng.uniform(0.3, 1.5, 8)
    exact = tie_score(mus, sig, 64)
    mc = np.array([tie_score_mc(m, s, 64, n=200_000, rng=rng) for m, s in zip(mus, sig, strict=True)])
    np.testing.assert_allclose(exact, mc, rtol=0.03)
    assert (np.argsort(exact) == np.argsort(mc)).mean() >= 0.75


@pytest.mark.parametrize("kw,match", [(dict(sigma=0.0), "sigma"), (dict(alpha=1.0), "alpha"),
                                      (dict(alpha=0.0), "alpha"), (dict(x_max=0.5), "x_max"), (dict(nu=1.0), "nu")])
def test_score_rejects_bad_input(kw, match):
    args = {"mu": 4.0, "sigma": 1.0, "queue_len": 3, **kw}
    with pytest.raises(ValueError, match=match):
        tie_score(**args)


def test_all_censored_is_rejected():
    with pytest.raises(ValueError, match="not identifiable"):
        fit_logt([96, 96, 96], [True, True, True])


def test_score_table_matches_exact_scores():
    from icml26.tie.score import ScoreTable, tie_score, truncated_cvar, truncated_mean

    table = ScoreTable()
    rng = np.random.default_rng(3)
    mu, sg = rng.normal(5.0, 1.5, 5000), np.exp(rng.uniform(np.log(0.05), np.log(3.0), 5000))
    m, c = table.expectations(mu, sg)
    np.testing.assert_allclose(m, truncated_mean(mu, sg), rtol=2e-3)
    np.testing.assert_allclose(c, truncated_cvar(mu, sg), rtol=2e-3)
    exact, fast = tie_score(mu, sg, 64), table(mu, sg, 64)
    assert np.mean(exact == fast) > 0.9 and np.all(np.abs(exact - fast) <= 1 + 0.002 * exact)
    # outside the grid: exact formulas
    assert table(20.0, 0.1) == tie_score(20.0, 0.1) and table(2.0, 9.0) == tie_score(2.0, 9.0)
    assert table(5.0, 1.0, beta=0) == tie_score(5.0, 1.0, beta=0)
    with pytest.raises(ValueError):
        table(5.0, -1.0)
