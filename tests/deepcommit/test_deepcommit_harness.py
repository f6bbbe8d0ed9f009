"""Verification (F2P/P2P/N2P/filtered) and trials on a hand-built repository with known truth."""

import subprocess

import pytest
from deepcommit_gitutil import BASE_FILES, commit, init_repo

from icml26.deepcommit.dag import Dag
from icml26.deepcommit.harness import ScriptedAgent, TrialSpec, _unlocked, depths, run_trial
from icml26.deepcommit.history import load_history
from icml26.deepcommit.verify import verify


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("h")
    repo, counter = init_repo(root / "repo"), root / "counter"
    commit(repo, BASE_FILES, "base", 0)
    commit(
        repo,
        {
            "pkg/a.py": "def fa(x):\n    return abs(x)\n",
            "pkg/b.py": "from pkg.a import fa\n\ndef fb(x):\n    return fa(x) * 2\n",
            "tests/test_a.py": "from pkg.a import fa\n\ndef test_fa():\n    assert fa(1) == 1\n"
            "\ndef test_fa_neg():\n    assert fa(-1) == 1\n",
            "tests/test_b.py": "from pkg.b import fb\n\ndef test_fb():\n    assert fb(-2) == 4\n",
            "tests/test_flaky.py": "from pathlib import Path\n\ndef test_flaky():\n"
            f"    p = Path({str(counter)!r})\n    n = int(p.read_text()) if p.exists() else 0\n"
            "    p.write_text(str(n + 1))\n    assert n % 2 == 0\n",
        },
        "M1: abs + fb",
        10,
    )
    commit(
        repo,
        {
            "pkg/c.py": "from pkg.b import fb\n\ndef fc(x):\n    return fb(x) + 1\n",
            "tests/test_c.py": "from pkg.c import fc\n\ndef test_fc():\n    assert fc(1) == 3\n",
        },
        "M2: fc",
        20,
    )
    h = load_history(repo)
    dag = Dag([0, 1, 2], {(1, 2): "Strong"})
    v = verify(h, [0, 1, 2], dag, runs=2)  # the flaky test alternates
    return repo, h, dag, v


def test_classification_matches_truth_and_flaky_is_filtered(built):
    repo, _, _, v = built
    assert v.non_graded == {0: "no FAIL_TO_PASS or NONE_TO_PASS test"}
    c1, c2 = v.classification[1], v.classification[2]
    assert c1["FAIL_TO_PASS"] == ["tests/test_a.py::test_fa_neg"]
    assert c1["PASS_TO_PASS"] == ["tests/test_a.py::test_fa"]
    assert c1["NONE_TO_PASS"] == ["tests/test_b.py::test_fb"]
    assert c1["filtered"] == ["tests/test_flaky.py::test_flaky"]
    assert c2["NONE_TO_PASS"] == ["tests/test_c.py::test_fc"]
    assert set(c2["PASS_TO_PASS"]) == {
        "tests/test_a.py::test_fa",
        "tests/test_a.py::test_fa_neg",
        "tests/test_b.py::test_fb",
    }
    wl = (
        subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True)
        .stdout.strip()
        .splitlines()
    )
    assert len(wl) == 1  # scratch worktrees removed
    st = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True
    ).stdout
    assert st == ""  # the user's checkout is untouched


def test_gold_agent_scores_100_in_both_modes(built):
    repo, _, dag, v = built
    spec = TrialSpec.from_verified(repo, v, dag)
    agent = ScriptedAgent(spec, q=1.0)
    for mode in ("continuous", "isolated"):
        r = run_trial(spec, agent, mode)
        assert r["score"] == 100.0 and r["resolve_rate"] == 100.0, (mode, r["log"])


def test_regression_hurts_descendant_precision_in_continuous_only(built):
    repo, _, _, v = built
    spec = TrialSpec(repo, v, {(1, 2): "Weak"})
    agent = ScriptedAgent(spec, q=1.0)
    agent.kind[1] = "regress"  # fa returns abs(x) + 1: breaks M1 and, kept, M2's P2P tests
    cont = run_trial(spec, agent, "continuous", ignore_weak=True)["per_milestone"]
    iso = run_trial(spec, agent, "isolated")["per_milestone"]
    assert cont[1].score == iso[1].score < 1
    assert iso[2].score == 1.0 and iso[2].precision == 1.0
    assert cont[2].precision < 1.0 and cont[2].n_broken >= 2
    locked = run_trial(spec, agent, "continuous", ignore_weak=False)
    assert 2 not in locked["outcomes"]  # weak predecessor not completed -> never unlocked


def test_unlocking_rules_and_depths():
    edges = {(0, 2): "Strong", (1, 2): "Weak"}
    assert not _unlocked(2, edges, {0: True}, False, {})
    assert not _unlocked(2, edges, {0: True, 1: False}, False, {})
    assert _unlocked(2, edges, {0: True, 1: False}, True, {})  # weak: finished is enough
    assert not _unlocked(2, edges, {0: False, 1: True}, True, {})  # strong must be completed
    assert _unlocked(2, edges, {0: True}, False, {1: "non-graded"})
    assert depths([0, 1, 2, 3], [(0, 1), (1, 2), (0, 2)]) == {0: 0, 1: 1, 2: 2, 3: 0}


def test_replay_conflict_is_forced_and_marked_non_graded(tmp_path):
    repo = tmp_path / "c"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True, capture_output=True)
    commit(repo, {"README": "r\n"}, "base", 0)
    commit(repo, {"x.py": "X = 1\n"}, "m1 creates x", 10)
    commit(repo, {"x.py": "X = 2\n"}, "m2 edits x", 20)
    commit(repo, {"y.py": "Y = 1\n"}, "m1 adds y", 30)
    h = load_history(repo)
    # no edges: m2 (last commit earlier) is replayed first and finds no x.py
    v = verify(h, [0, 1, 2, 1], Dag([0, 1, 2]), runs=1, test_dirs=("tests",))
    assert v.order == [0, 2, 1]
    assert "conflict" in v.non_graded[2]
    wl = (
        subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True)
        .stdout.strip()
        .splitlines()
    )
    assert len(wl) == 1
