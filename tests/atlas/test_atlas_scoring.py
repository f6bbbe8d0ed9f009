"""Ability estimates against float64 integration and root finding; item information."""

import numpy as np
import pytest
from scipy.optimize import brentq

from icml26.atlas import ItemBank, estimate_theta
from icml26.atlas.bank import irf, item_information
from icml26.atlas.synth import random_bank, simulate
from icml26.core.errors import UserError


@pytest.fixture(scope="module")
def bank3():
    return random_bank(25, "3PL", seed=11)


@pytest.fixture(scope="module")
def patterns(bank3):
    R = simulate(bank3, np.array([-2.0, -0.5, 0.3, 1.7]), seed=5)
    R[1, :5] = np.nan
    return R


def loglik(bank, y, t):
    o = ~np.isnan(y)
    p = irf(np.array([t]), bank.a, bank.d, bank.g)[0][o]
    return float(np.sum(np.where(y[o] == 1, np.log(p), np.log1p(-p))))


def test_eap_matches_dense_integration(bank3, patterns):
    theta, sd = estimate_theta(bank3, patterns, "eap", quadpts=4001)
    grid = np.linspace(-6, 6, 4001)
    for k, y in enumerate(patterns):
        lp = np.array([loglik(bank3, y, t) for t in grid]) - 0.5 * grid**2
        w = np.exp(lp - lp.max())
        w /= w.sum()
        m = w @ grid
        assert theta[k] == pytest.approx(m, abs=1e-10)
        assert sd[k] == pytest.approx(np.sqrt(w @ (grid - m) ** 2), abs=1e-10)
    theta61, _ = estimate_theta(bank3, patterns, "eap")
    np.testing.assert_allclose(theta61, theta, atol=2e-3)  # 61 nodes are enough


def num_score(bank, y, t, h=1e-5):
    return (loglik(bank, y, t + h) - loglik(bank, y, t - h)) / (2 * h)


def test_mle_map_wle_are_roots(bank3, patterns):
    for method in ("mle", "map", "wle"):
        theta, se = estimate_theta(bank3, patterns, method)
        for k, y in enumerate(patterns):
            o = ~np.isnan(y)

            def f(t, y=y, o=o, method=method):
                s = num_score(bank3, y, t)
                if method == "map":
                    s -= t
                if method == "wle":  # Warm: + J / (2 I), numerically differentiated P
                    h = 1e-4
                    P = lambda u: irf(np.array([u]), bank3.a[o], bank3.d[o], bank3.g[o])[0]  # noqa: E731
                    p, d1 = P(t), (P(t + h) - P(t - h)) / (2 * h)
                    d2 = (P(t + h) - 2 * P(t) + P(t - h)) / h**2
                    s += np.sum(d1 * d2 / (p * (1 - p))) / (2 * np.sum(d1**2 / (p * (1 - p))))
                return s

            root = brentq(f, theta[k] - 0.5, theta[k] + 0.5, xtol=1e-12)
            assert theta[k] == pytest.approx(root, abs=1e-5), method
            info = item_information(np.array([theta[k]]), bank3.a[o], bank3.d[o], bank3.g[o]).sum()
            expect = 1 / np.sqrt(info + (1.0 if method == "map" else 0.0))
            assert se[k] == pytest.approx(expect, rel=1e-8)


def test_extreme_patterns():
    bank = random_bank(10, "2PL", seed=3)
    R = np.vstack([np.ones(10), np.zeros(10)])
    theta, se, at_bound = estimate_theta(bank, R, "mle", return_flags=True)
    assert list(at_bound) == [True, True] and list(theta) == [6.0, -6.0]
    for method in ("wle", "eap", "map"):  # finite and interior
        theta, se, at_bound = estimate_theta(bank, R, method, return_flags=True)
        assert not at_bound.any() and np.all(np.abs(theta) < 6) and theta[0] > 0 > theta[1], method


def test_information_is_fisher_information():
    bank = random_bank(7, "3PL", seed=2)
    t, h = np.linspace(-3, 3, 13), 1e-6
    dp = (irf(t + h, bank.a, bank.d, bank.g) - irf(t - h, bank.a, bank.d, bank.g)) / (2 * h)
    p = irf(t, bank.a, bank.d, bank.g)
    np.testing.assert_allclose(
        item_information(t, bank.a, bank.d, bank.g), dp**2 / (p * (1 - p)), rtol=1e-6
    )


def test_bad_answers_and_methods():
    bank = random_bank(3, "2PL")
    with pytest.raises(UserError, match="item 'i1'.*must be 0 or 1; got 2"):
        estimate_theta(bank, np.array([[0, 2, 1]]))
    with pytest.raises(UserError, match="method must be one of"):
        estimate_theta(bank, np.array([[0, 1, 1]]), "ml")
    with pytest.raises(UserError, match="the bank has 3"):
        estimate_theta(bank, np.array([[0, 1]]))


def test_bank_rejects_bad_parameters():
    with pytest.raises(UserError, match="g of item 'x' must be in"):
        ItemBank(["x"], [1.0], [0.0], [1.0])
    with pytest.raises(UserError, match="not a finite"):
        ItemBank(["x"], [np.nan], [0.0], [0.0])
