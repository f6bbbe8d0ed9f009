"""Reducers and distinctive anchors against brute-force references."""

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from icml26.restore import (
    DivPrune,
    Hybrid,
    ToMe,
    UniformAnchors,
    VisionZipLike,
    anchor_scores,
    distinctive_anchors,
)
from icml26.restore.reducers import Reduction


def brute_scores(x):
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    c = x @ x.T
    r = c.sum(1)
    out = []
    for i in range(len(x)):
        denser = [c[i, j] for j in range(len(x)) if r[j] > r[i]]
        out.append(r[i] * (1 - max(denser)) if denser else r[i])
    return np.array(out)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 24), d=st.integers(2, 6), k=st.integers(1, 24), seed=st.integers(0, 10_000))
def test_distinctive_anchors_match_brute_force(n, d, k, seed):
    k = min(k, n)
    x = np.random.default_rng(seed).normal(size=(n, d))
    xs = x / np.linalg.norm(x, axis=1, keepdims=True)
    r = np.sort((xs @ xs.T).sum(1))
    assume(np.all(np.diff(r) > 1e-9))  # near-equal densities: "denser" is decided by rounding
    ref = brute_scores(x)
    got = anchor_scores(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9)
    red = distinctive_anchors(torch.from_numpy(x), k)
    top = set(np.argsort(-ref, kind="stable")[:k].tolist())
    if len(set(np.round(ref, 9))) == n:  # no ties: anchors are exactly the top-k scores
        assert set(red.kept.tolist()) == top
    assert red.sizes.sum() == n and (red.groups >= 0).all()
    # every token joins its most similar anchor
    xs = x / np.linalg.norm(x, axis=1, keepdims=True)
    anchors = red.kept.numpy()
    for i in range(n):
        sims = xs[i] @ xs[anchors].T
        j = int(red.groups[i])
        assert sims[j] >= sims.max() - 1e-12 or i == anchors[j]
    # size-weighted sums preserved: sum_n s_n * merged_n == sum_i x_i
    merged = red.merge(torch.from_numpy(x))
    np.testing.assert_allclose(
        (merged * red.sizes[:, None].double()).sum(0).numpy(), x.sum(0), atol=1e-9
    )


def brute_divprune(x, k):
    xs = x / np.linalg.norm(x, axis=1, keepdims=True)
    dist = 1 - xs @ xs.T
    off = dist + np.eye(len(x)) * 1e9
    chosen = [int(off.min(1).argmax())]
    while len(chosen) < k:
        rest = [j for j in range(len(x)) if j not in chosen]
        chosen.append(max(rest, key=lambda j: min(dist[j, c] for c in chosen)))
    return sorted(chosen)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(3, 30), k=st.integers(1, 29), seed=st.integers(0, 10_000))
def test_divprune_is_greedy_max_min(n, k, seed):
    k = min(k, n - 1)
    x = np.random.default_rng(seed).normal(size=(n, 5))
    red = DivPrune().reduce(torch.from_numpy(x), k)
    assert red.kept.tolist() == brute_divprune(x, k)
    assert (red.sizes == 1).all() and int((red.groups >= 0).sum()) == k


@pytest.mark.parametrize(
    "make",
    [
        lambda: ToMe(),
        lambda: UniformAnchors(),
        lambda: VisionZipLike(),
        lambda: Hybrid(DivPrune(), 0.5),
        lambda: Hybrid(VisionZipLike(), 0.5),
        lambda: Hybrid(DivPrune(), 0.5, anchors="uniform"),
    ],
)
@pytest.mark.parametrize("keep", [1, 5, 16, 31])
def test_merging_reducers_conserve_tokens(make, keep):
    g = torch.Generator().manual_seed(keep)
    x = torch.randn(32, 6, generator=g, dtype=torch.float64)
    cls = torch.rand(32, generator=g)
    reducer = make()
    if isinstance(reducer, VisionZipLike) and round(keep * reducer.dominant) >= keep:
        pytest.skip("no contextual budget: VisionZip prunes the rest")
    red = reducer.reduce(x, keep, cls)
    assert red.n == keep
    assert red.sizes.sum() == 32 and (red.groups >= 0).all()
    assert torch.equal(torch.bincount(red.groups, minlength=keep).float(), red.sizes)
    torch.testing.assert_close((red.merge(x) * red.sizes[:, None].double()).sum(0), x.sum(0))
    pos = red.positions()
    assert torch.all(pos[1:] > pos[:-1])  # outputs ordered by their merged position
    for j in range(keep):  # lower median of each group
        idx = torch.nonzero(red.groups == j).flatten().sort().values
        assert int(pos[j]) == int(idx[(idx.numel() - 1) // 2])


def test_tome_is_bipartite():
    # A = {0, 2}, B = {1, 3}: the most similar A->B edge is 2->1 (0 and 2 are twins but both in A)
    x = torch.tensor([[1.0, 0], [0, 1.0], [1.0, 0.01], [-1.0, 0.2]], dtype=torch.float64)
    red = ToMe().reduce(x, 3)
    assert red.groups[1] == red.groups[2]
    assert sorted(red.sizes.tolist()) == [1.0, 1.0, 2.0]


def test_reduction_merge_positions():
    groups = torch.tensor([0, 0, 1, 0, 1, 0])  # group 0 = {0,1,3,5}, group 1 = {2,4}
    r = Reduction.from_groups(groups)
    assert r.positions("lower").tolist() == [1, 2]
    assert r.positions("upper").tolist() == [3, 4]
    assert r.positions("first").tolist() == [0, 2] and r.positions("last").tolist() == [5, 4]
    with pytest.raises(ValueError, match="merge_position"):
        r.positions("middle")


@pytest.mark.parametrize("keep", [0, 32, 40])
def test_bad_keep(keep):
    with pytest.raises(ValueError, match=f"got {keep}"):
        DivPrune().reduce(torch.randn(32, 4), keep)


def test_bad_gamma_and_missing_cls():
    with pytest.raises(ValueError, match="gamma.*1.5"):
        Hybrid(DivPrune(), 1.5)
    with pytest.raises(ValueError, match="cls_attn"):
        VisionZipLike().reduce(torch.randn(8, 3), 4)
