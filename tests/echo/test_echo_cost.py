import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.echo.calibrate import auc, calibrate_gates, youden_tau
from icml26.echo.cost import Knee, fit_knee, gpu_spec_cost


@settings(max_examples=15, deadline=None)
@given(st.floats(1e-3, 1.0), st.integers(4, 400), st.floats(1e-4, 0.05))
def test_fit_knee_recovers_known_parameters(t_ar, k_max, gamma):
    k = np.unique(np.round(np.geomspace(1, 2000, 60)))
    true = Knee(t_ar, float(k_max), gamma)
    fit = fit_knee(k, true.time(k))
    assert fit.t_ar == pytest.approx(t_ar, rel=1e-3)
    assert fit.gamma == pytest.approx(gamma, rel=0.05)
    assert abs(fit.k_max - k_max) <= 0.05 * k_max + 4


def test_roofline_knee_and_draft_cost():
    c = gpu_spec_cost(1024)
    k1, k256 = c.knee(1), c.knee(256)
    assert 100 < k1.k_max < 400 and k256.k_max > k1.k_max  # more KV traffic moves the knee right
    assert c.verify_time([1] * 8) == pytest.approx(c.ar_time(8))
    assert c.verify_time([60] * 256) > 10 * c.ar_time(256)  # static trees are far past the knee
    assert c.draft_time([[1, 3, 3], [1, 3]]) > c.draft_time([[1, 3], [1, 3]]) > 0
    assert c.draft_time([]) == 0.0
    with pytest.raises(ValueError, match=">= 3"):
        fit_knee([1, 2], [1.0, 1.0])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.booleans()), min_size=2, max_size=30))
def test_auc_equals_pairwise_brute_force(pairs):
    s = np.array([p[0] for p in pairs])
    y = np.array([p[1] for p in pairs])
    if y.all() or not y.any():
        assert np.isnan(auc(s, y))
        return
    pos, neg = s[y], s[~y]
    ref = np.mean([(a > b) + 0.5 * (a == b) for a in pos for b in neg])
    assert auc(s, y) == pytest.approx(ref)


def test_calibration_finds_the_informative_depth():
    rng = np.random.default_rng(0)
    n, depth = 400, 5
    conf = rng.uniform(0, 1, (n, depth))
    acc = rng.integers(0, depth + 1, n)
    # depth 3's confidence predicts "acceptance passes 3" perfectly, threshold 0.4
    passes = conf[:, 2] > 0.4
    acc = np.where(passes, np.maximum(acc, 4), np.minimum(acc, 3))
    cal = calibrate_gates(conf, acc, auc_min=0.8, max_gates=2)
    assert cal.gate_depths == (3,)
    assert cal.aucs[2] == pytest.approx(1.0)
    assert abs(cal.taus[0] - 0.4) < 0.02
    assert youden_tau(np.array([0.1, 0.2, 0.8, 0.9]), np.array([0, 0, 1, 1])) == pytest.approx(0.5, abs=0.31)
    with pytest.raises(ValueError, match="auc_min"):
        calibrate_gates(conf, acc, auc_min=0.3)
