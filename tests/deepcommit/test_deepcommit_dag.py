"""Blame and symbol edges, Strong/Weak typing, cycle cutting, topological order."""

import subprocess

import numpy as np
import pytest
from deepcommit_gitutil import commit

from icml26.deepcommit.dag import build_dag, find_cycle, topo_order
from icml26.deepcommit.history import load_history


@pytest.fixture
def repo(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, capture_output=True)
    return tmp_path


def test_blame_edge_is_weak_symbol_edge_is_strong(repo):
    commit(repo, {"pkg/a.py": "def fa(x):\n    return x\n"}, "A writes fa", 0)
    commit(repo, {"pkg/a.py": "def fa(x):\n    return x + 0\n"}, "B edits A's line", 10)
    commit(repo, {"pkg/c.py": "from pkg.a import fa\n\ndef fc(x):\n    return fa(x)\n"}, "C", 20)
    h = load_history(repo)
    dag = build_dag(h, [0, 1, 2])
    assert dag.edges == {(0, 1): "Weak", (0, 2): "Strong"}
    assert dag.back_edges == []
    assert any("uses pkg.a.fa" in e for e in dag.evidence[(0, 2)])


def test_formatting_commit_does_not_hide_the_author(repo):
    commit(repo, {"m.py": "def f(x):\n    return x\n"}, "A", 0)
    commit(repo, {"m.py": "def f(x):\n    return (x)\n"}, "fmt", 5)  # dropped, ignored by blame
    commit(repo, {"m.py": "def f(x):\n    return x * 2\n"}, "B", 10)
    h = load_history(repo)
    assert len(h.commits) == 2
    assert build_dag(h, [0, 1]).edges == {(0, 1): "Weak"}


def test_mutual_edits_cycle_is_cut_and_listed(repo):
    commit(repo, {"x.py": "X = 1\n"}, "m0: x", 0)
    commit(repo, {"y.py": "Y = 1\n"}, "m1: y", 10)
    commit(repo, {"y.py": "Y = 2\n"}, "m0 edits y", 20)
    commit(repo, {"x.py": "X = 2\n"}, "m1 edits x", 30)
    dag = build_dag(load_history(repo), np.array([0, 1, 0, 1]))
    assert len(dag.edges) == 1 and len(dag.back_edges) == 1
    ((a, b, reason),) = dag.back_edges
    assert (b, a) in dag.edges and "cycle" in reason
    assert find_cycle([0, 1], dag.edges) is None


def test_topo_order_and_cycle_detection():
    assert topo_order([3, 1, 2], [(3, 2), (2, 1)]) == [3, 2, 1]
    assert topo_order(["a", "b", "c"], []) == ["a", "b", "c"]
    cyc = find_cycle(["a", "b", "c"], [("a", "b"), ("b", "c"), ("c", "a")])
    assert cyc[0] == cyc[-1] and set(cyc) == {"a", "b", "c"}
    with pytest.raises(ValueError, match="cycle"):
        topo_order(["a", "b"], [("a", "b"), ("b", "a")])
    with pytest.raises(ValueError, match="unknown node"):
        topo_order(["a"], [("a", "z")])
