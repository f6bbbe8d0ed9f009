"""ARI against a brute-force pair count, Hungarian matching, edge scores, and the grouping."""

import itertools
from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.deepcommit.evaluate import adjusted_rand, edge_scores, match_milestones
from icml26.deepcommit.history import Commit, FileChange
from icml26.deepcommit.milestones import GroupConfig, group, signal_matrices


def ari_brute(a, b):
    """ARI from explicit pair counts (Hubert & Arabie's formula over all n(n-1)/2 pairs)."""
    n = len(a)
    pairs = list(itertools.combinations(range(n), 2))
    same_a = sum(a[i] == a[j] for i, j in pairs)
    same_b = sum(b[i] == b[j] for i, j in pairs)
    both = sum(a[i] == a[j] and b[i] == b[j] for i, j in pairs)
    expected = same_a * same_b / comb(n, 2)
    mx = (same_a + same_b) / 2
    return 1.0 if mx == expected else (both - expected) / (mx - expected)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), min_size=2, max_size=25))
def test_ari_matches_brute_force_and_is_label_invariant(pairs):
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    assert adjusted_rand(a, b) == pytest.approx(ari_brute(a, b), abs=1e-12)
    relabel = [7 - x for x in a]
    assert adjusted_rand(relabel, b) == pytest.approx(adjusted_rand(a, b), abs=1e-12)
    assert adjusted_rand(a, a) == 1.0


def test_ari_known_values():
    assert adjusted_rand([0, 0, 1, 1], [0, 0, 1, 1]) == 1.0
    assert adjusted_rand([0, 0, 1, 1], [0, 1, 2, 3]) == 0.0
    assert adjusted_rand([0, 0, 1, 1], [0, 1, 0, 1]) == pytest.approx(-0.5)


def test_match_and_edge_scores():
    true = [0, 0, 1, 1, 2, 2]
    found = [5, 5, 5, 6, 7, 7]
    m = match_milestones(true, found)
    assert m == {5: 0, 6: 1, 7: 2}
    s = edge_scores(
        {(0, 1): "Strong", (1, 2): "Weak"}, {(5, 6): "Strong", (6, 7): "Strong", (5, 7): "Weak"}, m
    )
    assert s["precision"] == pytest.approx(2 / 3) and s["recall"] == 1.0
    assert s["f1"] == pytest.approx(0.8) and s["strength_acc"] == 0.5


def _commit(i, files, t_h, msg, email="a@x"):
    ch = tuple(FileChange(f, ((1, 1),), ((1, 1),), ("x",), ()) for f in files)
    return Commit(f"{i:040x}", ("0" * 40,), "A", email, int(t_h * 3600), msg, ch)


def fake_embed(texts):
    """Bag-of-topic one-hot vectors: deterministic stand-in for MiniLM."""
    vocab = ["cache", "parser", "retry"]
    return np.array([[float(w in t) for w in vocab] + [0.01] for t in texts])


def test_group_recovers_separated_bursts_and_config_validates():
    commits = [
        _commit(0, ["pkg/cache.py"], 0, "cache: add"),
        _commit(1, ["pkg/cache.py", "tests/t_cache.py"], 1, "cache fix"),
        _commit(2, ["pkg/parser.py"], 2, "parser: add"),
        _commit(3, ["pkg/parser.py"], 3, "parser grow"),
        _commit(4, ["pkg/retry.py"], 100, "retry: add"),
        _commit(5, ["pkg/retry.py"], 101, "retry more"),
    ]
    labels = group(commits, GroupConfig(threshold=0.6), embed_fn=fake_embed)
    assert list(labels) == [0, 0, 1, 1, 2, 2]
    time_only = group(
        commits,
        GroupConfig(file=0, symbol=0, message=0, time=1, time_scale_h=12, threshold=0.9),
        embed_fn=fake_embed,
    )
    assert list(time_only) == [0, 0, 0, 0, 1, 1]
    S = signal_matrices(commits, fake_embed)
    for name, mat in S.items():
        assert mat.shape == (6, 6) and np.allclose(mat, mat.T), name
        assert mat.min() >= 0 and mat.max() <= 1 + 1e-12, name
    with pytest.raises(ValueError, match="not all 0"):
        GroupConfig(file=0, symbol=0, message=0, time=0, author=0)
    with pytest.raises(ValueError, match="threshold"):
        GroupConfig(threshold=0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.frozensets(st.sampled_from("abcdef")), min_size=1, max_size=8))
def test_weighted_jaccard_matches_pairwise_definition(sets):
    from icml26.deepcommit.milestones import _jaccard

    idf = {c: 0.5 + i for i, c in enumerate("abcdef")}
    got = _jaccard(sets, idf)
    for i, a in enumerate(sets):
        for j, b in enumerate(sets):
            den = sum(idf[x] for x in a | b)
            want = sum(idf[x] for x in a & b) / den if den else 0.0
            assert got[i, j] == pytest.approx(want, abs=1e-12)
