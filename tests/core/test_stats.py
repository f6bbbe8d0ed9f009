"""Clustered bootstrap (coverage under cluster effects), bracketing tuner, budgets."""

import math

import numpy as np
import pytest

from icml26.core.stats import bracket, bracket_arms, budgets, clustered_bootstrap, item_bootstrap


def _draw(rng, k=20, n=30, sd_cluster=0.3, sd_item=0.3):
    """Paired arms: a has a shared per-cluster effect (a seed that helps or hurts every item)."""
    a, b = [], []
    for _ in range(k):
        u = rng.normal(0, sd_cluster)
        a.append(2.0 + u + rng.normal(0, sd_item, n))
        b.append(1.0 + rng.normal(0, sd_item, n))
    return a, b  # true ratio of means: 2.0


def test_point_value_is_the_pooled_statistic():
    a = [[1.0, 2.0], [3.0]]
    b = [[1.0, 1.0], [2.0]]
    assert clustered_bootstrap(a, b, statistic="ratio").value == pytest.approx(6 / 4)
    assert clustered_bootstrap(a, b, statistic="diff").value == pytest.approx(2 / 3)
    assert clustered_bootstrap(a, statistic="mean").value == pytest.approx(2.0)


def test_one_cluster_without_item_resampling_has_no_spread():
    ci = clustered_bootstrap([[1.0, 2.0, 3.0]], resample_items=False, statistic="mean")
    assert ci.low == ci.high == 2.0 and ci.n_clusters == 1


def test_clustered_ci_is_wider_than_item_level_and_covers_at_the_nominal_rate():
    rng = np.random.default_rng(12345)
    reps, cover_c, cover_i, widths = 500, 0, 0, []
    for r in range(reps):
        a, b = _draw(rng)
        c = clustered_bootstrap(a, b, n_boot=400, seed=r)
        i = item_bootstrap(np.concatenate(a), np.concatenate(b), n_boot=400, seed=r)
        cover_c += c.low <= 2.0 <= c.high
        cover_i += i.low <= 2.0 <= i.high
        widths.append((c.high - c.low) / (i.high - i.low))
    # nominal 95% (measured 0.956 with this seed); the two-stage bootstrap may over-cover a little
    assert 0.90 <= cover_c / reps <= 0.995
    # the item-level bootstrap ignores the cluster effect and under-covers badly
    assert cover_i / reps < 0.75  # measured 0.60 with this seed (clustered: see above)
    assert np.median(widths) > 2.0


def test_paired_arms_must_match():
    with pytest.raises(ValueError, match="same clusters"):
        clustered_bootstrap([[1.0, 2.0]], [[1.0]])
    with pytest.raises(ValueError, match="statistic"):
        clustered_bootstrap([[1.0]], statistic="median")
    with pytest.raises(ValueError, match="needs b"):
        clustered_bootstrap([[1.0]], statistic="ratio")


def test_bracket_extends_a_convex_objective_until_its_optimum_is_interior():
    calls = []

    def f(lr):
        calls.append(lr)
        return (math.log10(lr) + 1.0) ** 2  # optimum at 0.1, outside the start grid

    t = bracket(f, [1e-4, 1e-3, 1e-2])
    assert t.interior and t.best == pytest.approx(0.1) and t.extensions == 1
    assert len(calls) == len(set(calls)) == 5  # each point once
    assert t.note("AdamW", "lr") is None


def test_bracket_on_a_monotone_objective_stops_at_the_cap_and_flags_the_edge():
    t = bracket(lambda lr: -lr, [1.0, 2.0, 4.0], extend_by=2, cap=2)
    assert not t.interior and t.extensions == 2 and t.best == 64.0
    assert len(t.grid) == 3 + 2 * 2
    assert "top edge" in t.note("SSO", "lr")


def test_bracket_treats_divergence_as_worst_and_extends_downward():
    t = bracket(lambda lr: math.nan if lr > 0.05 else (lr - 0.003) ** 2, [0.01, 0.1, 1.0])
    assert t.interior and t.best < 0.01


def test_every_arm_gets_the_same_extension_rule():
    res = bracket_arms(
        {"a": lambda x: (x - 5) ** 2, "b": lambda x: -x},
        [1.0, 2.0, 4.0],
        log=False,
        cap=1,
        extend_by=3,
    )
    assert res["a"].interior and not res["b"].interior
    assert len(res["b"].grid) == 6  # one extension of 3 points, then the cap


def test_bracket_rejects_bad_grids():
    with pytest.raises(ValueError, match="at least 3"):
        bracket(lambda x: x, [1.0, 2.0])
    with pytest.raises(ValueError, match="increase"):
        bracket(lambda x: x, [1.0, 3.0, 2.0])


def test_budgets_flags_unequal_token_counts():
    b = budgets({"UDS": 140_000, "Random": 100_000})
    assert not b["matched"] and b["ratio_to_min"]["UDS"] == pytest.approx(1.4)
    assert budgets({"a": 100, "b": 103})["matched"]
    with pytest.raises(ValueError, match="'b'"):
        budgets({"a": 1, "b": -1})
