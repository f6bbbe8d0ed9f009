import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.echo.policies import AR, AdaptiveChain, DenseDynamic, Echo, StaticTree, make_policy

sys.path.insert(0, str(Path(__file__).parent))
from echo_helpers import SyntheticOracle  # noqa: E402

ratios = st.lists(st.floats(0.02, 0.9), min_size=1, max_size=8)


@settings(max_examples=20, deadline=None)
@given(ratios, st.integers(0, 40), st.sampled_from(["echo", "dense", "chain"]))
def test_budget_respected(rs, extra, kind):
    b = len(rs)
    k_max = b + extra
    pol = {"echo": Echo(gate_depths=(2, 4), taus=(0.3, 0.2), depth=6, topk=3),
           "dense": DenseDynamic(tau=0.2, depth=6, topk=3), "chain": AdaptiveChain(depth=6)}[kind]
    trees = pol.build(SyntheticOracle(rs), list(range(b)), [0] * b, k_max)
    assert sum(t.size for t in trees) <= k_max
    assert all(t.max_depth <= 6 for t in trees)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.floats(0.02, 0.3), min_size=1, max_size=6), st.integers(0, 30))
def test_echo_depth_before_width(rs, extra):
    """Confident requests (no gate fires) get chains while the budget cannot finish every chain;
    width appears only once every request is at full depth."""
    b = len(rs)
    depth = 4
    pol = Echo(gate_depths=(2,), taus=(0.01,), depth=depth, topk=3, root_tau=0.01)
    trees = pol.build(SyntheticOracle(rs), list(range(b)), [0] * b, b + extra)
    widths = [max(list(t.depth).count(d) for d in range(1, t.max_depth + 1)) if t.size > 1 else 0 for t in trees]
    if any(t.max_depth < depth for t in trees):
        assert max(widths) <= 1
    if extra <= b * depth:  # one node per depth step: the budget is used exactly
        assert sum(t.size for t in trees) == b + extra


def test_echo_gates_root_check_and_width():
    # request 0 is confident, request 1 is not (root best prob < root_tau): truncated at depth 1
    oracle = SyntheticOracle([0.05, 0.97])
    pol = Echo(gate_depths=(2,), taus=(0.5,), depth=5, topk=3, root_tau=0.2, root_topk=6, width_topk=4)
    t0, t1 = pol.build(oracle, [0, 1], [0, 0], k_max=2 + 4)
    assert t1.max_depth <= 1
    assert t0.max_depth == 4 and t1.size == 1  # all budget to depth of the confident request
    t0, t1 = pol.build(oracle, [0, 1], [0, 0], k_max=2 + 5 + 6)
    assert t0.max_depth == 5 and t1.size == 1 + 6  # leftover widens the root of request 1


def test_echo_gate_truncates():
    oracle = SyntheticOracle([0.5])  # best child prob ~0.5: the depth-2 path prob ~0.25
    low = Echo(gate_depths=(2,), taus=(0.2,), depth=5, topk=2, root_tau=0.1)
    high = Echo(gate_depths=(2,), taus=(0.3,), depth=5, topk=2, root_tau=0.1)
    assert low.build(oracle, [0], [0], 6)[0].max_depth == 5
    assert high.build(oracle, [0], [0], 6)[0].max_depth == 2


def test_static_tree_shape_and_dense_budget():
    oracle = SyntheticOracle([0.5, 0.5])
    t = StaticTree(depth=8, topk=10, total=60).build(oracle, [0], [1], 1)[0]
    assert t.size == 61 and t.max_depth <= 8
    assert t.expanded == [1] + [10] * 7
    ts = DenseDynamic(tau=0.01, depth=8, topk=4).build(oracle, [0, 1], [1, 1], 12)
    assert all(x.size <= 6 for x in ts)
    assert [x.size for x in AR().build(oracle, [0, 1], [1, 2], 2)] == [1, 1]


def test_bad_parameters():
    with pytest.raises(ValueError, match="k_max must be >= the batch size"):
        Echo().build(SyntheticOracle([0.5] * 3), [0, 1, 2], [0] * 3, 2)
    with pytest.raises(ValueError, match=r"tau must be in \(0, 1\)"):
        Echo(taus=(0.3, 1.2))
    with pytest.raises(ValueError, match="gate depth"):
        Echo(gate_depths=(2, 9), depth=8)
    with pytest.raises(ValueError, match="equal lengths"):
        Echo(gate_depths=(2,), taus=(0.1, 0.2))
    with pytest.raises(ValueError, match="tau"):
        DenseDynamic(tau=0.0)
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("eagle9")
    assert make_policy("sglang").total == 8


@settings(max_examples=25, deadline=None)
@given(ratios, st.integers(0, 40), st.integers(1, 6))
def test_adaptive_chain_best_first_admits_the_top_slots(rs, extra, depth):
    """Best-first admission equals ranking every slot of fully drafted chains (vLLM's rule), and a
    chain is drafted only as deep as it is admitted plus the step that priced its refused slot."""
    b = len(rs)
    oracle = SyntheticOracle(rs)
    trees = AdaptiveChain(depth=depth).build(oracle, list(range(b)), [0] * b, b + extra)
    slots = []  # the synthetic oracle's top-1 log-prob is the same at every node of a request
    for i in range(b):
        lp0 = float(oracle.topk(i, [()], 1)[0][1][0])
        slots += [(-d * lp0, d, i) for d in range(1, depth + 1)]
    want = [0] * b
    for _, d, i in sorted(slots)[:extra]:
        want[i] = max(want[i], d)
    assert [t.max_depth if t.size > 1 else 0 for t in trees] == want
    for t, w in zip(trees, want, strict=True):
        assert len(t.expanded) <= min(depth, w + 1)


def test_static_shape_family_hits_the_published_defaults():
    from icml26.echo.experiment import static_shape

    s8, s60 = static_shape(8), static_shape(60)
    assert (s8.depth, s8.topk, s8.total) == (5, 4, 8)  # SGLang's high-load default
    assert (s60.depth, s60.topk, s60.total) == (8, 10, 60)  # EAGLE-3's
    assert static_shape(2, depth_cap=4).depth == 3 and static_shape(64, depth_cap=4).depth == 4
