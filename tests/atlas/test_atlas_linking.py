"""Linking keeps every probability; the released formula does not; chunked calibration."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.atlas import calibrate, link_items, mean_sigma
from icml26.atlas.bank import irf
from icml26.atlas.synth import random_bank, simulate


@settings(max_examples=50, deadline=None)
@given(A=st.floats(0.3, 3.0), B=st.floats(-2.0, 2.0), seed=st.integers(0, 1000))
def test_correct_linking_keeps_probabilities(A, B, seed):
    bank = random_bank(20, "3PL", seed=seed)
    theta_k = np.linspace(-4, 4, 41)
    a2, d2 = link_items(bank.a, bank.d, A, B, "correct")
    before = irf(theta_k, bank.a, bank.d, bank.g)
    after = irf(A * theta_k + B, a2, d2, bank.g)
    np.testing.assert_allclose(after, before, atol=1e-12, rtol=0)


def test_official_formula_changes_probabilities_unless_identity():
    bank = random_bank(20, "2PL", seed=1)
    theta_k = np.linspace(-3, 3, 13)
    before = irf(theta_k, bank.a, bank.d, bank.g)
    a2, d2 = link_items(bank.a, bank.d, 1.3, 0.4, "official")
    assert np.max(np.abs(irf(1.3 * theta_k + 0.4, a2, d2, bank.g) - before)) > 0.05
    a3, d3 = link_items(bank.a, bank.d, 1.0, 0.0, "official")
    np.testing.assert_allclose(irf(theta_k, a3, d3, bank.g), before, atol=1e-15)


def test_mean_sigma_recovers_affine_map():
    t = np.random.default_rng(0).normal(size=300)
    assert mean_sigma(2.0 * t - 0.7, t) == pytest.approx((2.0, -0.7))
    with pytest.raises(ValueError, match="A must be > 0"):
        link_items([1.0], [0.0], 0.0, 0.0)


def test_chunked_calibration_is_close_to_concurrent():
    true = random_bank(40, "2PL", seed=2)
    R = simulate(true, np.random.default_rng(3).standard_normal(2000), seed=4)
    whole = calibrate(R, model="2PL", drop_constant_models=False)
    chunked = calibrate(R, model="2PL", chunk=20, drop_constant_models=False)
    assert chunked.linking["method"] == "mean_sigma" and len(chunked.linking["chunks"]) == 2
    assert chunked.linking["chunks"][0]["A"] == pytest.approx(1.0)
    assert np.sqrt(np.mean((chunked.b - whole.b) ** 2)) < 0.1
