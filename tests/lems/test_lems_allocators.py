"""The non-uniform allocators beside LEMS: closed forms, brute force, budgets, bad input."""

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from icml26.core.errors import UserError
from icml26.lems.allocators import (
    atp_fractions,
    atp_ranks,
    energy_fractions,
    energy_ranks,
    project_fractions,
    unit_kl_ranks,
)
from icml26.lems.factorize import LayerFactors
from icml26.lems.layers import TargetLayer
from icml26.lems.lems import candidate_ranks, kept_fraction, uniform_ranks
from icml26.lems.search import solve_lems

KINDS = {"up": (64, 160), "down": (160, 64), "q": (64, 64)}
LAYERS = [TargetLayer(f"b{b}.{k}", n_in, n_out, b) for b in range(4) for k, (n_in, n_out) in KINDS.items()]


def _factors(layers, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    out = {}
    for lay in layers:
        k = min(lay.n_in, lay.n_out)
        s = np.sort(rng.lognormal(0, 1, k) * rng.uniform(0.5, 3))[::-1] * scale
        out[lay.name] = LayerFactors(torch.zeros(lay.n_out, k), torch.zeros(k, lay.n_in),
                                     torch.tensor(s.copy(), dtype=torch.float64))
    return out


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.6, 0.9))
def test_projection_equals_brute_force(seed, target):
    rng = np.random.default_rng(seed)
    layers = [TargetLayer(f"l{i}", n_in, n_out, i) for i, (n_in, n_out) in
              enumerate([(48, 80), (80, 48), (64, 64)])]
    want = {lay.name: float(rng.uniform(0.2, 1.2)) for lay in layers}
    ranks = project_fractions(layers, want, target)
    opts = []
    for lay in layers:
        rs = [None] + [int(r) for r in candidate_ranks(lay, target)]
        opts.append([(r, lay.params if r is None else r * (lay.n_in + lay.n_out)) for r in rs])
    budget = target * sum(lay.params for lay in layers)

    def err(choice):
        return sum(lay.params * (c / lay.params - want[lay.name]) ** 2
                   for lay, (_, c) in zip(layers, choice, strict=True))

    feasible = [c for c in itertools.product(*opts) if sum(x[1] for x in c) <= budget]
    best = min(err(c) for c in feasible)
    got = err([(ranks[lay.name], lay.params if ranks[lay.name] is None
                else ranks[lay.name] * (lay.n_in + lay.n_out)) for lay in layers])
    assert got == pytest.approx(best, rel=1e-7, abs=1e-9)
    assert kept_fraction(layers, ranks) <= target + 1e-12


def test_energy_fractions_closed_form():
    factors = _factors(LAYERS)
    t = 0.6
    frac = energy_fractions(LAYERS, factors, t)
    for kind in KINDS:
        group = [lay for lay in LAYERS if lay.name.endswith(kind)]
        removed = np.array([1 - frac[lay.name] for lay in group])
        assert removed.sum() == pytest.approx(len(group) * (1 - t), rel=1e-12)  # the group's budget
        loss = np.array([float(factors[lay.name].s[int(lay.r_eq * t):].sum()) for lay in group])
        score = 1 / (1 + np.log(loss / loss.min()))
        assert removed == pytest.approx(len(group) * (1 - t) * score / score.sum(), rel=1e-12)
        # more truncation loss -> more kept
        order = np.argsort(loss)
        assert np.all(np.diff(np.array([frac[group[i].name] for i in order])) >= -1e-12)
    # scale-free: the whitening's overall scale does not change the allocation
    assert energy_fractions(LAYERS, _factors(LAYERS, scale=1e-4), t) == pytest.approx(frac, rel=1e-9)
    ranks = energy_ranks(LAYERS, factors, t)
    assert t - 0.03 <= kept_fraction(LAYERS, ranks) <= t + 1e-12
    assert ranks != uniform_ranks(LAYERS, t)


def test_atp_ramp_closed_form_and_search():
    t, beta = 0.6, 0.4
    frac = atp_fractions(LAYERS, t, beta)
    assert frac["b0.q"] == pytest.approx(t + beta / 2) and frac["b3.q"] == pytest.approx(t - beta / 2)
    assert np.mean(list(frac.values())) == pytest.approx(t)

    class Model(nn.Module):  # the scorer only needs the named linears
        def __init__(self):
            super().__init__()
            for lay in LAYERS:
                self.add_module(lay.name.replace(".", "_"), nn.Linear(lay.n_in, lay.n_out, bias=False))

        def get_submodule(self, name):
            return super().get_submodule(name.replace(".", "_"))

    class Scorer:  # the 4th ramp (beta = 3/10 of the headroom 0.8) scores best
        calls = 0

        def score(self, model, start_block=0):
            Scorer.calls += 1
            return abs(Scorer.calls - 4) + 1.0

    factors = _factors(LAYERS)
    for f, lay in zip(factors.values(), LAYERS, strict=True):
        f.left, f.right = torch.randn(lay.n_out, f.s.numel()), torch.randn(f.s.numel(), lay.n_in)
    model = Model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ranks, log = atp_ranks(model, LAYERS, factors, t, Scorer(), steps=10)
    assert [x["beta"] for x in log] == pytest.approx([0.08 * i for i in range(11)])
    assert ranks == project_fractions(LAYERS, atp_fractions(LAYERS, t, 0.24), t,
                                      max_rank={n: f.s.numel() for n, f in factors.items()})
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())  # restored
    with pytest.raises(UserError, match="steps"):
        atp_ranks(model, LAYERS, factors, t, Scorer(), steps=0)
    with pytest.raises(UserError, match="search batches"):
        atp_ranks(model, LAYERS, factors, t, None)


def test_unit_kl_knapsack_is_lems_with_equal_kls_and_no_depth_bias():
    factors = _factors(LAYERS, seed=3)
    got = unit_kl_ranks(LAYERS, factors, 4, 0.6)
    same, *_ = solve_lems(LAYERS, factors, {lay.name: 7.5 for lay in LAYERS}, 4, 2.0, 0.0, 0.6, 8)
    assert got == same  # a common KL scale and any alpha do not matter when gamma = 0
    assert kept_fraction(LAYERS, got) <= 0.6 + 1e-12
    # the knapsack is exact: no other choice of the same options has a lower total shape
    assert got != uniform_ranks(LAYERS, 0.6)


def test_bad_input_is_named():
    factors = _factors(LAYERS)
    with pytest.raises(UserError, match="fractions lack"):
        project_fractions(LAYERS, {"b0.q": 0.5}, 0.6)
    with pytest.raises(UserError, match="finite"):
        project_fractions(LAYERS, {lay.name: math.nan for lay in LAYERS}, 0.6)
    with pytest.raises(UserError, match=r"\(0, 1\]"):
        energy_ranks(LAYERS, factors, 1.5)
    with pytest.raises(UserError, match="no target layers"):
        unit_kl_ranks([], factors, 4, 0.6)
    with pytest.raises(UserError, match="achievable minimum"):
        project_fractions(LAYERS, {}, 0.01)
