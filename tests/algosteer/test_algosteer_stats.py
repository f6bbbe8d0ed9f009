"""Statistics: chi-square equals scipy, Holm by hand, bootstrap coverage, TVD properties."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chi2_contingency

from icml26.algosteer.stats import (
    bootstrap_cells,
    chi2_homogeneity,
    compliance,
    holm,
    shares,
    shift_pp,
    tvd,
    tvd_ratio,
)

FAMS = ("a", "b", "c")


def test_chi2_equals_scipy_when_expected_counts_are_large():
    cue = ["a"] * 30 + ["b"] * 20 + ["c"] * 10
    base = ["a"] * 15 + ["b"] * 25 + ["c"] * 20
    stat, p, method = chi2_homogeneity(cue, base, FAMS)
    ref = chi2_contingency(np.array([[30, 20, 10], [15, 25, 20]]), correction=False)
    assert method == "chi2"
    assert stat == pytest.approx(ref.statistic) and p == pytest.approx(ref.pvalue)


def test_permutation_p_for_small_counts():
    same = chi2_homogeneity(["a", "b", "a"], ["a", "b", "a"], FAMS, n_perm=500)
    assert same[2] == "permutation" and same[1] > 0.5
    far = chi2_homogeneity(["a"] * 8, ["b"] * 8, FAMS, n_perm=500)
    assert far[2] == "permutation" and far[1] < 0.01
    # exact: 8 vs 8 all-different: only permutations with a perfect split reach the statistic
    assert np.isnan(chi2_homogeneity([], ["a"], FAMS)[1])
    assert np.isnan(chi2_homogeneity(["a"], ["a"], FAMS)[1])  # one family: no test


def test_holm_by_hand():
    p = [0.01, 0.04, 0.03, float("nan"), 0.2]
    # sorted 0.01, 0.03, 0.04, 0.2 with m = 4: 0.04, 0.09, max(0.09, 0.08) = 0.09, 0.2
    np.testing.assert_allclose(holm(p), [0.04, 0.09, 0.09, np.nan, 0.2])
    assert holm([0.9, 0.8])[0] == 1.0


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.sampled_from(FAMS), min_size=1, max_size=30),
    st.lists(st.sampled_from(FAMS), min_size=1, max_size=30),
)
def test_tvd_shift_properties(x, y):
    px, py = shares(x, FAMS), shares(y, FAMS)
    assert px.sum() == pytest.approx(1)
    d = tvd(px, py)
    assert 0 <= d <= 1 and d == pytest.approx(tvd(py, px))
    assert d == pytest.approx(np.abs(shift_pp(x, y, FAMS)).sum() / 200)
    assert tvd(px, px) == 0


def test_bootstrap_coverage_on_simulated_multinomials():
    rng = np.random.default_rng(0)
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.3, 0.3, 0.4])
    true_shift = 100 * (p[0] - q[0])
    hits, reps = 0, 100
    for r in range(reps):
        a = list(rng.choice(FAMS, 60, p=p))
        b = list(rng.choice(FAMS, 60, p=q))
        lo, hi = bootstrap_cells(lambda x, y: shift_pp(x, y, FAMS)[0], a, b, n_boot=200, seed=r)
        hits += lo <= true_shift <= hi
    assert 0.87 <= hits / reps <= 0.995, hits / reps


def test_compliance_and_ratio():
    assert compliance(["a", "a", "b", "c"], "a") == 0.5
    assert np.isnan(compliance([], "a"))
    cells = {
        ("t", "none"): ["a"] * 10,
        ("t", "none_resampled"): ["a"] * 9 + ["b"],
        ("t", "sem"): ["b"] * 10,
        ("t", "thin"): ["b"] * 3,
    }
    ratio, pairs, tasks = tvd_ratio(cells, {"t": FAMS}, ["sem", "thin"], min_n=5)
    assert pairs == [("t", "sem")] and tasks == ["t"]
    assert ratio == pytest.approx(1.0 / 0.1)
    assert np.isnan(tvd_ratio(cells, {"t": FAMS}, ["thin"], min_n=5)[0])


def test_ratio_ci_with_a_task_whose_cue_cell_is_missing():
    """Regression (the first informative Qwen grid crashed): the bootstrap re-evaluates the ratio
    on the used cells only, with min_n=0; a numerator cue absent for one task must not count."""
    from icml26.algosteer.claim import _ratio_ci

    cells = {
        ("t", "none"): ["a"] * 10,
        ("t", "none_resampled"): ["a"] * 5 + ["b"] * 5,
        ("t", "sem"): ["b"] * 10,
        ("u", "none"): ["a"] * 10,
        ("u", "none_resampled"): ["a"] * 4 + ["b"] * 6,
        ("u", "sem"): ["a"] * 3,  # under min_n: out of the headline
    }
    fams = {"t": FAMS, "u": FAMS}
    assert tvd_ratio(cells, fams, ["sem", "other"], min_n=0)[1] == [("t", "sem"), ("u", "sem")]
    ratio, (lo, hi), pairs = _ratio_ci(cells, fams, ["sem"], 5, seed=0, n_boot=200)
    assert pairs == [("t", "sem")]
    assert ratio == pytest.approx(1.0 / ((0.5 + 0.6) / 2))
    assert lo <= ratio <= hi
