"""EM calibration against mirt's LSAT7 fit, simulated recovery and EM monotonicity."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.atlas import calibrate
from icml26.atlas.calibrate import EMConfig, em_fit
from icml26.atlas.synth import random_bank, simulate
from icml26.core.errors import UserError

# LSAT7 (Bock & Lieberman 1970) as mirt's expand.table: pattern -> count, 1,000 examinees.
LSAT7 = {
    "00000": 12,
    "00001": 19,
    "00010": 1,
    "00011": 7,
    "00100": 3,
    "00101": 19,
    "00110": 3,
    "00111": 17,
    "01000": 10,
    "01001": 5,
    "01010": 3,
    "01011": 7,
    "01100": 7,
    "01101": 23,
    "01110": 8,
    "01111": 28,
    "10000": 7,
    "10001": 39,
    "10010": 11,
    "10011": 34,
    "10100": 14,
    "10101": 51,
    "10110": 15,
    "10111": 90,
    "11000": 6,
    "11001": 25,
    "11010": 7,
    "11011": 35,
    "11100": 18,
    "11101": 136,
    "11110": 32,
    "11111": 308,
}


def lsat7() -> np.ndarray:
    rows = [[int(c) for c in p] for p, n in LSAT7.items() for _ in range(n)]
    return np.array(rows, dtype=float)


def rmse(x, y):
    return float(np.sqrt(np.mean((np.asarray(x) - np.asarray(y)) ** 2)))


def test_lsat7_matches_mirt_2pl():
    R = lsat7()
    assert R.shape == (1000, 5) and sum(LSAT7.values()) == 1000
    bank = calibrate(R, model="2PL", drop_constant_models=False)
    # mirt 1.x, mirt(LSAT7full, 1, "2PL"): coef(..., simplify=TRUE)
    np.testing.assert_allclose(bank.a, [0.988, 1.081, 1.706, 0.765, 0.736], atol=0.01)
    np.testing.assert_allclose(bank.d, [1.856, 0.808, 1.804, 0.486, 1.855], atol=0.01)
    assert bank.fit["converged"]
    assert bank.fit["loglik"] == pytest.approx(-2658.805, abs=0.01)  # mirt's logLik


@pytest.mark.parametrize("missing", [0.0, 0.3])
def test_2pl_recovery(missing):
    true = random_bank(50, "2PL", seed=1)
    theta = np.random.default_rng(2).standard_normal(5000)
    R = simulate(true, theta, seed=3, missing=missing)
    bank = calibrate(R, model="2PL", drop_constant_models=False)
    idx = true.index(["i" + i for i in bank.ids])
    assert bank.fit["missing_share"] == pytest.approx(missing, abs=0.01)
    assert rmse(bank.a, true.a[idx]) <= 0.08
    assert rmse(bank.b, true.b[idx]) <= 0.08


@pytest.mark.parametrize("g_prior, b_tol", [(None, 0.25), ((5, 17), 0.2)])
def test_3pl_recovery(g_prior, b_tol):
    # Plain ML (mirt's default) trades b against g on easy, flat items: RMSE b measured 0.214 here
    # (a >= 0.8), so it gets 0.25; a BILOG-style Beta(5, 17) prior on g brings it to 0.13.
    true = random_bank(50, "3PL", seed=1, a_range=(0.8, 2.5))
    theta = np.random.default_rng(2).standard_normal(10_000)
    bank = calibrate(
        simulate(true, theta, seed=3), model="3PL", drop_constant_models=False, g_prior=g_prior
    )
    idx = true.index(["i" + i for i in bank.ids])
    assert bank.fit["converged"]
    assert rmse(bank.b, true.b[idx]) <= b_tol
    assert rmse(bank.g, true.g[idx]) <= 0.08


def test_1pl_common_slope():
    true = random_bank(30, "2PL", seed=4)
    true.a[:] = 1.3
    true.d = -1.3 * np.random.default_rng(5).normal(size=30)
    R = simulate(true, np.random.default_rng(6).standard_normal(3000), seed=7)
    bank = calibrate(R, model="1PL", drop_constant_models=False)
    assert np.ptp(bank.a) == 0 and bank.a[0] == pytest.approx(1.3, abs=0.08)


@settings(max_examples=8, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    model=st.sampled_from(["1PL", "2PL", "3PL"]),
    missing=st.sampled_from([0.0, 0.2]),
)
def test_em_loglik_never_falls(seed, model, missing):
    rng = np.random.default_rng(seed)
    true = random_bank(8, "3PL" if model == "3PL" else "2PL", seed=seed)
    R = simulate(true, rng.standard_normal(300), seed=seed + 1, missing=missing)
    obs = (~np.isnan(R)).astype(float)
    Y = np.nan_to_num(R)
    *_, fit = em_fit(Y, obs, EMConfig(model=model, max_iter=40, tol=1e-12))
    trace = np.array(fit["loglik_trace"])
    assert np.all(np.diff(trace) >= -1e-8 * np.abs(trace[:-1]))


@pytest.mark.filterwarnings("ignore:EM did not converge")
def test_too_few_examinees_names_smaller_model():
    R = simulate(random_bank(10, "2PL"), np.zeros(100) + np.linspace(-2, 2, 100), seed=1)
    with pytest.raises(UserError, match="3PL needs at least 500 examinees.*'2PL'"):
        calibrate(R, model="3PL")
    with pytest.raises(UserError, match="2PL needs at least 50"):
        calibrate(R[:40], model="2PL")
    bank = calibrate(R[:40], model="2PL", force=True, max_iter=20)
    assert bank.n_items == 10


def test_constant_items_and_models_dropped_and_listed():
    R = simulate(
        random_bank(12, "2PL", seed=2), np.random.default_rng(0).standard_normal(200), seed=3
    )
    R[5, :] = 0.0
    R[:, 0] = 1.0
    R[:, 1] = np.nan
    bank = calibrate(R, model="2PL", max_iter=30)
    reasons = {e["id"]: e["reason"] for e in bank.excluded["items"]}
    assert reasons["0"] == "constant: all correct" and reasons["1"] == "no responses"
    assert {"id": "5", "reason": "constant: all wrong"} in bank.excluded[
        "models"
    ]  # once item 0 goes
    assert "0" not in bank.ids
    assert bank.fit["n_models"] == 200 - len(bank.excluded["models"])


def test_nothing_left_is_an_error():
    with pytest.raises(UserError, match="nothing left"):
        calibrate(np.ones((60, 4)), model="2PL")


def test_nonconvergence_warns_and_is_recorded():
    R = simulate(random_bank(10, "2PL"), np.random.default_rng(0).standard_normal(300), seed=1)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        bank = calibrate(R, model="2PL", max_iter=2)
    assert bank.fit["converged"] is False


def test_config_validation():
    with pytest.raises(UserError, match="`model` must be one of"):
        EMConfig(model="4PL")
    with pytest.raises(UserError, match="theta_lim"):
        EMConfig(theta_lim=(3, -3))


def test_accelerations_reach_plain_em_fixed_point():
    true = random_bank(10, "3PL", seed=8, a_range=(0.8, 2.5))
    R = simulate(true, 0.3 + 1.4 * np.random.default_rng(9).standard_normal(2000), seed=10)
    obs, Y = (~np.isnan(R)).astype(float), np.nan_to_num(R)
    plain = em_fit(
        Y, obs, EMConfig(model="3PL", accelerate=None, px=False, max_iter=3000, tol=1e-7)
    )
    fast = em_fit(Y, obs, EMConfig(model="3PL", max_iter=3000, tol=1e-7))
    assert plain[3]["converged"] and fast[3]["converged"]
    assert fast[3]["iterations"] < plain[3]["iterations"]
    assert fast[3]["loglik"] == pytest.approx(plain[3]["loglik"], abs=1e-3)
    np.testing.assert_allclose(fast[0], plain[0], atol=2e-3)


def test_start_values_keep_the_sign_of_small_negative_slopes():
    # Regression: start values used to map every |a| < 0.2 to +0.2, flipping weakly mis-keyed
    # items (item-rest correlation slightly below 0) to a positive start.
    from icml26.atlas.calibrate import start_values

    true = random_bank(12, "2PL", seed=3, a_range=(0.8, 2.0))
    true.a[0], true.a[1] = -0.12, -0.05
    R = simulate(true, np.random.default_rng(4).standard_normal(4000), seed=5)
    obs, Y = (~np.isnan(R)).astype(float), np.nan_to_num(R)
    a, _, _ = start_values(Y, obs, EMConfig(model="2PL"))
    rest = Y.sum(1)[:, None] - Y  # the rest score, computed apart from the library
    rho = np.array([np.corrcoef(Y[:, j], rest[:, j])[0, 1] for j in range(Y.shape[1])])
    small = np.abs(1.7 * rho / np.sqrt(1 - rho**2)) < 0.2
    assert small[:2].all() and (rho[:2] < 0).all()  # the case the old line got wrong
    assert np.array_equal(np.sign(a), np.sign(rho))
    assert np.all(np.abs(a) >= 0.2 - 1e-12)


def test_3pl_gets_the_beta_prior_by_default_and_none_is_plain_ml():
    from icml26.atlas.calibrate import G_PRIOR_3PL

    true = random_bank(10, "3PL", seed=1, a_range=(0.8, 2.5))
    R = simulate(true, np.random.default_rng(2).standard_normal(1500), seed=3)
    default = calibrate(R, model="3PL", drop_constant_models=False, max_iter=200)
    plain = calibrate(R, model="3PL", drop_constant_models=False, max_iter=200, g_prior=None)
    assert default.fit["g_prior"] == list(G_PRIOR_3PL) and plain.fit["g_prior"] is None
    # the prior pulls every g towards its mode 0.2: the posterior fit's g's lie nearer 0.2
    mode = (G_PRIOR_3PL[0] - 1) / (sum(G_PRIOR_3PL) - 2)
    assert np.mean(np.abs(default.g - mode)) < np.mean(np.abs(plain.g - mode))
    assert plain.fit["loglik"] >= default.fit["loglik"] - 1e-6  # ML is the higher likelihood
    two = calibrate(R, model="2PL", drop_constant_models=False, max_iter=50)
    assert two.fit["g_prior"] is None and not np.any(two.g)
    with pytest.raises(UserError, match="g_prior"):
        calibrate(R, model="3PL", g_prior="beta")


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10_000), missing=st.sampled_from([0.0, 0.2]))
def test_em_log_posterior_never_falls_with_a_g_prior(seed, missing):
    from icml26.atlas.calibrate import log_prior

    rng = np.random.default_rng(seed)
    true = random_bank(8, "3PL", seed=seed)
    R = simulate(true, rng.standard_normal(300), seed=seed + 1, missing=missing)
    obs, Y = (~np.isnan(R)).astype(float), np.nan_to_num(R)
    cfg = EMConfig(model="3PL", max_iter=40, tol=1e-12, g_prior=(5, 17))
    a, d, g, fit = em_fit(Y, obs, cfg)
    trace = np.array(fit["loglik_trace"])
    assert np.all(np.diff(trace) >= -1e-8 * np.abs(trace[:-1]))
    assert trace[-1] == pytest.approx(fit["loglik"] + log_prior(g, cfg), rel=1e-12)
