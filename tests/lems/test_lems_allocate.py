"""LEMS's pure parts: knapsack vs brute force, shape, depth bias, uniform budgets, bad targets."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.core.errors import UserError
from icml26.lems.layers import TargetLayer
from icml26.lems.lems import (
    LayerOptions,
    candidate_ranks,
    check_target,
    depth_multiplier,
    energy_shape,
    kept_fraction,
    layer_options,
    solve_knapsack,
    uniform_ranks,
)

SMOL = [TargetLayer(f"b{b}.{k}", n_in, n_out, b) for b in range(30)
        for k, (n_in, n_out) in {"q": (576, 576), "k": (576, 192), "v": (576, 192), "o": (576, 576),
                                 "gate": (576, 1536), "up": (576, 1536), "down": (1536, 576)}.items()]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.2, 1.0))
def test_knapsack_equals_brute_force(seed, frac):
    rng = np.random.default_rng(seed)
    opts = [LayerOptions(np.arange(4), rng.integers(1, 20, 4).astype(float), rng.random(4))
            for _ in range(4)]
    cheapest = sum(o.cost.min() for o in opts)
    budget = cheapest + frac * (sum(o.cost.max() for o in opts) - cheapest)
    best = min((sum(o.error[i] for o, i in zip(opts, c, strict=True)), c)
               for c in itertools.product(range(4), repeat=4)
               if sum(o.cost[i] for o, i in zip(opts, c, strict=True)) <= budget)
    picks = solve_knapsack(opts, budget)
    got = sum(o.error[i] for o, i in zip(opts, picks, strict=True))
    assert sum(o.cost[i] for o, i in zip(opts, picks, strict=True)) <= budget + 1e-9
    assert got == pytest.approx(best[0], abs=1e-7)


def test_knapsack_refuses_impossible_budget():
    opts = [LayerOptions(np.arange(2), np.array([5.0, 3.0]), np.array([0.0, 1.0]))]
    with pytest.raises(UserError, match="cheapest"):
        solve_knapsack(opts, 2.0)


@given(st.lists(st.floats(0.0, 100.0), min_size=3, max_size=40), st.integers(0, 5))
def test_energy_shape_is_one_at_ref_and_non_increasing(values, r_ref):
    s = np.array(values)
    shape = energy_shape(s, r_ref)
    assert shape.shape == (s.size + 1,)
    assert np.all(np.diff(shape) <= 1e-12)
    assert np.all(shape >= 0)
    if shape.any():
        assert shape[min(r_ref, s.size)] == pytest.approx(1.0)


@pytest.mark.parametrize("alpha", [0.0, 0.7, 3.0])
def test_depth_multiplier_ends(alpha):
    m = depth_multiplier(30, alpha, 5.0)
    assert m[0] == pytest.approx(6.0) and m[-1] == pytest.approx(1.0)
    assert np.all(np.diff(m) <= 1e-12)
    if alpha == 0:  # linear in the remaining depth
        assert np.allclose(np.diff(m), -5.0 / 29)
    assert depth_multiplier(1, alpha, 5.0).tolist() == [1.0]


@pytest.mark.parametrize("target", [0.9, 0.8, 0.6, 0.4])
def test_uniform_budget_close_and_multiples_of_8(target):
    ranks = uniform_ranks(SMOL, target)
    kept = kept_fraction(SMOL, ranks)
    assert kept <= target and target - kept < 0.005
    assert all(r % 8 == 0 for r in ranks.values())


def test_lems_options_respect_bounds():
    lay = SMOL[0]  # 576 x 576, r_eq 288
    for target, lo in ((0.8, 0.3), (0.4, 0.1)):
        ranks = candidate_ranks(lay, target)
        assert np.all(ranks % 8 == 0)
        assert ranks.min() >= lo * lay.r_eq and ranks.max() < 0.95 * lay.r_eq
    s = np.linspace(10, 0.1, 576)
    opts = layer_options(lay, s, kl_ref=2.0, multiplier=1.5, target=0.8)
    assert opts.ranks[0] == -1 and opts.cost[0] == lay.params and opts.error[0] == 0
    assert np.all(opts.cost[1:] < lay.params)
    assert np.all(np.diff(opts.error[1:]) <= 0)


def test_knapsack_on_smollm_shapes_hits_budget():
    rng = np.random.default_rng(0)
    opts = [layer_options(lay, np.sort(rng.gamma(1.0, size=min(lay.n_in, lay.n_out)))[::-1],
                          float(rng.random()), 1.0, 0.6) for lay in SMOL]
    budget = 0.6 * sum(lay.params for lay in SMOL)
    picks = solve_knapsack(opts, budget)
    ranks = {lay.name: (None if o.ranks[p] < 0 else int(o.ranks[p]))
             for lay, o, p in zip(SMOL, opts, picks, strict=True)}
    kept = kept_fraction(SMOL, ranks)
    assert kept <= 0.6 and 0.6 - kept < 0.01


def test_bad_targets_name_the_minimum():
    with pytest.raises(UserError, match=r"\(0, 1\]"):
        check_target(1.5, SMOL)
    with pytest.raises(UserError, match="achievable minimum"):
        check_target(0.001, SMOL)
    assert uniform_ranks(SMOL, 1.0) == {lay.name: None for lay in SMOL}
