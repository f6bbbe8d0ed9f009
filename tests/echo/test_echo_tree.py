import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.echo.policies import top_closed
from icml26.echo.replay import replay_accept
from icml26.echo.tree import DraftTree, greedy_accept


@st.composite
def trees(draw):
    n = draw(st.integers(1, 25))
    parents = [-1] + [draw(st.integers(0, j - 1)) for j in range(1, n)]
    depth = [0]
    for j in range(1, n):
        depth.append(depth[parents[j]] + 1)
    # sibling tokens are distinct (paths are unique in a draft tree)
    tokens = [draw(st.integers(0, 4))]
    for j in range(1, n):
        earlier = sum(parents[i] == parents[j] for i in range(1, j))
        tokens.append(draw(st.integers(0, 1)) + 2 * earlier)
    return DraftTree(np.array(tokens), np.array(parents), np.array(depth), np.zeros(n))


def _is_ancestor(tree, a, b):  # a ancestor-or-self of b, by walking up from b
    while b >= 0:
        if b == a:
            return True
        b = tree.parents[b]
    return False


@settings(max_examples=25, deadline=None)
@given(trees())
def test_tree_mask_is_ancestors_brute_force(tree):
    m = tree.tree_mask()
    n = tree.size
    ref = torch.tensor([[_is_ancestor(tree, j, i) for j in range(n)] for i in range(n)])
    assert torch.equal(m, ref)
    assert torch.equal(tree.position_ids(7), torch.as_tensor(7 + tree.depth))


@settings(max_examples=25, deadline=None)
@given(trees(), st.lists(st.integers(0, 4), min_size=25, max_size=25))
def test_greedy_accept_brute_force(tree, nxt):
    nxt = np.array(nxt[: tree.size])
    path, bonus = greedy_accept(tree.tokens, tree.parents, nxt)
    # brute force: a node is accepted iff every node on its root path matches the target's argmax
    ok = [j for j in range(tree.size)
          if all(tree.tokens[a] == nxt[tree.parents[a]] for a in tree.ancestors(j)[1:])]
    deepest = max(ok, key=lambda j: tree.depth[j])
    assert len(path) - 1 == tree.depth[deepest]
    assert all(tree.depth[path[i]] == i for i in range(len(path)))
    assert bonus == nxt[path[-1]]


@settings(max_examples=25, deadline=None)
@given(trees(), st.lists(st.integers(0, 4), min_size=8, max_size=8))
def test_replay_accept_matches_greedy_accept(tree, truth):
    # a target whose greedy continuation is ``truth``: after node j on the truth path it predicts
    # truth[depth]; off-path nodes get a token that matches nothing in the truth walk
    nxt = np.array([truth[d] if d < len(truth) else -1 for d in tree.depth])
    path, _ = greedy_accept(tree.tokens, tree.parents, nxt)
    assert replay_accept(tree, truth) == len(path)


def test_from_paths_requires_prefix_closed():
    with pytest.raises(ValueError, match="prefix-closed"):
        DraftTree.from_paths(1, {(2, 3): -1.0})
    t = DraftTree.from_paths(1, {(2,): -0.1, (2, 3): -0.5, (4,): -0.3})
    assert t.size == 4 and t.path(3) == (2, 3) and list(t.depth) == [0, 1, 1, 2]


@settings(max_examples=25, deadline=None)
@given(st.dictionaries(st.tuples(st.integers(0, 3), st.integers(0, 3)), st.floats(-5, 0), min_size=1),
       st.integers(1, 12))
def test_top_closed_is_prefix_closed_and_best(cands, n):
    full = {}
    for p, s in cands.items():  # parents score at least their children (log q <= 0)
        full[p[:1]] = max(full.get(p[:1], -10.0), s)
        full[p] = s
    for p in list(full):
        if len(p) == 1:
            full[p] = max([full[p]] + [s for q, s in full.items() if len(q) == 2 and q[:1] == p])
    out = top_closed(full, n)
    assert len(out) == min(n, len(full))
    assert all(len(p) == 1 or p[:-1] in out for p in out)
    worst_in = min(out.values())
    assert all(s <= worst_in + 1e-12 for p, s in full.items() if p not in out)
