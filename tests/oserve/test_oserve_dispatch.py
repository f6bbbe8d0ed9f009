import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.oserve.dispatch import capacity_scale, dispatch


def brute_force(n, lam, steps=60):
    """Max served rate of 2 replicas x 2 types by grid search over replica 0's split (float64)."""
    best = 0.0
    for a, b in itertools.product(np.linspace(0, lam[0], steps + 1), np.linspace(0, lam[1], steps + 1)):
        u0 = a / n[0, 0] + b / n[0, 1]
        if u0 > 1 + 1e-12:
            continue
        # replica 1 takes what it can of the rest, best order by exchange: greedy on 1/n is exact
        # for one replica (fractional knapsack with unit values)
        rest = [(lam[0] - a, n[1, 0]), (lam[1] - b, n[1, 1])]
        cap, got = 1.0, 0.0
        for r, rate in sorted(rest, key=lambda t: -t[1]):
            take = min(r, cap * rate)
            got += take
            cap -= take / rate
        best = max(best, a + b + got)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_lp_matches_brute_force_2x2(seed):
    rng = np.random.default_rng(seed)
    n = rng.uniform(0.5, 10, (2, 2))
    lam = rng.uniform(0.5, 12, 2)
    d = dispatch(n, lam)
    bf = brute_force(n, lam, steps=200)
    assert d.served >= bf - 1e-6  # LP is exact; the grid can only be below
    assert d.served <= bf + 0.02 * lam.sum()  # and the fine grid comes close


def test_maxflow_equals_lp_single_type():
    rng = np.random.default_rng(1)
    for _ in range(5):
        n = rng.uniform(1, 20, (5, 1))
        lam = rng.uniform(1, 80, 1)
        assert dispatch(n, lam, "maxflow").served == pytest.approx(dispatch(n, lam).served, rel=1e-7)
        assert dispatch(n, lam).served == pytest.approx(min(lam[0], n.sum()), rel=1e-7)


def test_balance_minimises_max_util():
    n = np.array([[10.0], [10.0], [5.0]])
    d = dispatch(n, np.array([10.0]))
    assert d.served == pytest.approx(10)
    np.testing.assert_allclose(d.util, 0.4, atol=1e-6)  # 10 req/s over 25 of capacity, evenly


def test_duals_mark_bottleneck():
    # type 0 overloads; only replica 0 serves it well -> its capacity row has a positive dual
    n = np.array([[10.0, 1.0], [0.0, 10.0]])
    d = dispatch(n, np.array([100.0, 1.0]))
    assert d.duals[0] > 0 and d.duals[1] == pytest.approx(0)


def test_capacity_scale_is_inverse_min_max_util():
    rng = np.random.default_rng(3)
    n = rng.uniform(0.5, 10, (4, 3))
    mix = rng.uniform(0.1, 1, 3)
    a = capacity_scale(n, mix)
    assert dispatch(n, mix * a * 0.999).served == pytest.approx(mix.sum() * a * 0.999, rel=1e-6)
    assert dispatch(n, mix * a * 1.05).served < mix.sum() * a * 1.05 * (1 - 1e-4)
    assert dispatch(n, mix).util.max() == pytest.approx(1 / a, rel=1e-5)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.integers(0, 10_000))
def test_dispatch_invariants(R, K, seed):
    rng = np.random.default_rng(seed)
    n = rng.uniform(0, 10, (R, K)) * (rng.random((R, K)) > 0.2)
    lam = rng.uniform(0, 20, K)
    d = dispatch(n, lam)
    assert (d.x >= -1e-9).all()
    assert (d.x.sum(0) <= lam + 1e-6).all()
    assert (d.util <= 1 + 1e-6).all()
    assert (d.x[n == 0] == 0).all()


def test_bad_input():
    with pytest.raises(ValueError, match="lam must be finite"):
        dispatch(np.ones((2, 2)), np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="must be 'lp' or 'maxflow'"):
        dispatch(np.ones((2, 2)), np.ones(2), method="simplex")
    with pytest.raises(ValueError, match=r"\(replicas, types\)"):
        dispatch(np.ones((2, 3)), np.ones(2))
