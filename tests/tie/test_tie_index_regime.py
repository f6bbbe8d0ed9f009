"""The E[S]/E[1/S] index, Spearman rho, the KV-pressure serving setup and the overload regimes."""

import math

import numpy as np
import pytest

from icml26.tie.experiment import (
    Regime,
    ServeSetup,
    arrival_times,
    make_population,
    make_trace,
    oracle_params,
    oracle_proxy,
    run_policy,
    spearman,
)
from icml26.tie.queue import QueueConfig
from icml26.tie.score import clipped_moments, exchange_index, truncated_mean


def _clipped_draws(mu, sigma, n, seed, x_max=2048.0):
    rng = np.random.default_rng(seed)
    return np.clip(np.exp(mu + sigma * rng.standard_t(3.5, n)), 1.0, x_max)


@pytest.mark.parametrize("mu,sigma", [(1.8, 0.45), (5.0, 0.65), (6.0, 0.85), (7.5, 1.2), (0.2, 1.5), (3.5, 1.5)])
def test_clipped_moments_match_monte_carlo(mu, sigma):
    x = _clipped_draws(mu, sigma, 400_000, seed=int(10 * mu + 100 * sigma))
    es, einv = clipped_moments(mu, sigma, 3.5, 2048, 1.0)
    for est, draws in ((es, x), (einv, 1 / x)):
        se = draws.std() / math.sqrt(draws.size)
        assert abs(est - draws.mean()) < 5 * se + 1e-9, (mu, sigma, est, draws.mean(), se)
    # the floor is not decoration: E[S] also agrees with the no-floor truncated mean where X < 1 is rare
    if mu > 4:
        assert es == pytest.approx(truncated_mean(mu, sigma, 3.5, 2048), rel=1e-3)


def test_clipped_moments_validate():
    with pytest.raises(ValueError, match="x_min"):
        clipped_moments(3.0, 1.0, x_min=0.0)
    with pytest.raises(ValueError, match="sigma"):
        exchange_index(3.0, -1.0)


def test_exchange_index_picks_the_better_of_two_orders():
    """Two jobs on one non-preemptive server; mean per-token latency sum_i C_i / S_i. A dispersed job
    with the larger mean goes first by the index (and loses under SJF on the mean): brute force."""
    a, b = (3.5, 1.5), (4.3, 0.1)
    ea, eb = clipped_moments(*a), clipped_moments(*b)
    assert ea[0] > eb[0]  # SJF on the mean would run b first ...
    assert exchange_index(*a) < exchange_index(*b)  # ... the index runs a first
    n = 400_000
    sa, sb = _clipped_draws(*a, n, seed=1), _clipped_draws(*b, n, seed=2)
    a_first = 1 + (sa + sb) / sb  # C_a = S_a, C_b = S_a + S_b
    b_first = 1 + (sa + sb) / sa
    d = b_first - a_first
    assert d.mean() > 5 * d.std() / math.sqrt(n)  # a first is better, beyond Monte Carlo noise
    # and the closed form of the exchange argument: E[cost, i first] = 2 + E[S_i] E[1/S_j]
    for cost, (ei, ej) in ((a_first, (ea, eb)), (b_first, (eb, ea))):
        se = cost.std() / math.sqrt(n)
        assert abs(cost.mean() - (2 + ei[0] * ej[1])) < 5 * se


def test_exchange_index_of_a_point_mass_is_its_square():
    # sigma -> 0: the length is e^mu, the index e^(2 mu) (SJF)
    assert exchange_index(4.0, 1e-4) == pytest.approx(math.exp(8.0), rel=1e-3)


def test_spearman_against_scipy_and_by_hand():
    from scipy.stats import spearmanr

    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties take their average rank: ranks (1.5, 1.5, 3) and (1, 2, 3) -> r = 0.866...
    assert spearman([5, 5, 7], [1, 2, 3]) == pytest.approx(math.sqrt(3) / 2)
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 20, 300), rng.normal(size=300)
    b = a + 5 * b
    assert spearman(a, b) == pytest.approx(spearmanr(a, b).statistic, abs=1e-12)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError, match="one length"):
        spearman([1, 2], [1, 2, 3])


def test_oracle_index_of_samples_is_the_empirical_ratio():
    L = [np.array([1, 10, 100]), np.array([50, 50, 60])]
    o = oracle_params(L, [np.zeros(3, bool)] * 2, cap=80)
    s = np.array([1, 10, 100]).clip(1, 80)
    assert o["index"][0] == pytest.approx(s.mean() / (1 / s).mean())
    assert o["index"][0] < o["index"][1]  # the dispersed prompt goes first, although its mean is lower too


def _pop(n=120):
    pop = make_population(n, cap=2048, seed=0)
    pop.oracle = oracle_proxy(pop)
    pop.pred = {"mu": pop.mu, "sigma": pop.sigma, "ssjf": np.exp(pop.mu), "ltr": pop.mu,
                "ln_mu": pop.mu, "ln_sigma": pop.sigma}
    return pop


def test_kv_pressure_setup_preempts_and_legacy_does_not():
    """The claim's default replica cannot hold 256 sequences of the population: in overload the
    engine preempts (recompute); the earlier B = 32 engine with ~450k KV tokens never does."""
    pop = _pop()
    cost, ecfg = ServeSetup().build()
    assert ecfg.max_num_seqs == 256 and ecfg.oversize == "drop"
    tr = make_trace(pop, 5000, None, seed=0)
    P = np.array([r.prompt_tokens for r in tr])
    L = np.array([r.output_tokens for r in tr])
    # a running sequence holds P + L/2 tokens on average over its L steps, and long ones run
    # longer: the time-average KV of a full batch is 256 E[L (P + L/2)] / E[L]
    assert 256 * (L * (P + L / 2)).sum() / L.sum() > ecfg.kv_tokens
    t = arrival_times(1500, 20.0, 2.0, Regime(), seed=0)
    tr = make_trace(pop, 1500, None, seed=1, times=t)
    m = run_policy("FCFS", pop, tr, cost, ecfg, QueueConfig(x_max=2048))
    assert m["preemptions"] > 50 and 0 < m["preempted_requests"] <= m["preemptions"]
    assert m["rejected"] == 0 and len(m["ptla_items"]) == 1500
    cost0, ecfg0 = ServeSetup(legacy=True).build()
    m0 = run_policy("FCFS", pop, tr, cost0, ecfg0, QueueConfig(x_max=2048))
    assert ecfg0.max_num_seqs == 32 and m0["preemptions"] == 0


def test_regimes_arrival_rates():
    n, cap = 20_000, 10.0
    t = arrival_times(n, cap, 2.0, Regime("finite"), seed=0)
    assert np.all(np.diff(t) > 0)
    assert n / t[-1] == pytest.approx(20.0, rel=0.05)
    r = Regime("burst", base=0.5, start=0.25, width=0.5)
    t = arrival_times(n, cap, 2.0, r, seed=0)
    inside = np.diff(t[n // 4: 3 * n // 4])
    outside = np.diff(t[: n // 4])
    assert 1 / inside.mean() == pytest.approx(20.0, rel=0.05)
    assert 1 / outside.mean() == pytest.approx(5.0, rel=0.05)
    with pytest.raises(ValueError, match="regime must be"):
        Regime("bursty")
    with pytest.raises(ValueError, match="burst window"):
        Regime("burst", start=0.8, width=0.5)
    with pytest.raises(ValueError, match="unknown gpu"):
        ServeSetup(gpu="tpu")
