"""The tiny claim end to end (MiniLM + git), and the synthetic repository's ground truth."""

import numpy as np
import pytest

from icml26.claims_index import get
from icml26.core import power
from icml26.core.claims import Claim, Measure, Result, run_claim
from icml26.deepcommit.claim import GENERATORS, _differing
from icml26.deepcommit.history import load_history
from icml26.deepcommit.synth import TOPIC_FREE, make_repo


@pytest.mark.parametrize("generator", ["standard", "hard"])
def test_generated_repo_truth_matches_preprocessing(tmp_path, generator):
    truth = make_repo(tmp_path / "r", seed=3, n_features=4, n_commits=30, **GENERATORS[generator])
    h = load_history(truth.path)
    dropped = {d.sha for d in h.dropped}
    assert dropped == set(truth.dropped)  # every noise drop found, nothing else dropped
    kept = {c.sha for c in h.commits}
    assert set(truth.label) <= kept
    assert all(a < b for a, b in truth.edges)
    refactors = [c for c in h.commits if c.subject.startswith("refactor:")]
    assert len(refactors) == (3 if generator == "hard" else 1)
    assert all(truth.label[c.sha] == -1 for c in refactors)  # no feature's milestone


def test_hard_generator_hides_the_topic_from_two_authors(tmp_path):
    truth = make_repo(tmp_path / "r", seed=100, n_features=6, n_commits=60, **GENERATORS["hard"])
    h = load_history(truth.path)
    by_author: dict[str, list[str]] = {}
    for c in h.commits:
        if truth.label.get(c.sha, -1) >= 0:
            by_author.setdefault(c.author, []).append(c.subject)
    free = [a for a, subs in by_author.items() if all(s in TOPIC_FREE for s in subs)]
    assert len(free) == 2  # their messages never name a topic or a function
    topics = set(truth.topics)
    assert not any(t in s for a in free for s in by_author[a] for t in topics)
    # the standard generator is unchanged by the new parameters' defaults
    a = make_repo(tmp_path / "a", seed=5)
    b = make_repo(tmp_path / "b", seed=5, topic_free=0, refactors=1)
    assert list(a.label) == list(b.label)


def _claim():
    return Claim(
        "deepcommit",
        "p",
        "s",
        "f",
        run=lambda ctx: __import__("icml26.deepcommit.claim", fromlist=["run"]).run(ctx),
        power=get("deepcommit").power,
    )


def test_tiny_claim_runs(tmp_path):
    rec = run_claim(_claim(), scale="tiny", out_root=tmp_path, threads=1)
    assert rec["error"] is None, rec["error"]
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive", "uninformative")
    kinds = [c["kind"] for c in rec["power"]["checks"]]
    assert kinds == list(get("deepcommit").power.kinds)
    assert all(c["passed"] in (True, False, None) for c in rec["power"]["checks"])
    by = {r["system"]: r for r in rec["rows"] if "mean ARI" in r}
    # milestone recovery is a row; it compares against baselines outside the search space only
    compared = [r["mean ARI"] for r in by.values() if r["role"].startswith("compared baseline")]
    assert "files only (tuned)" in by and by["files only (tuned)"]["role"].startswith("ablation")
    recovery = next(r for r in rec["rows"] if r["system"].startswith("milestone recovery"))
    ratio = by["DeepCommit-lite"]["mean ARI"] / max(compared)
    assert abs(float(recovery["value"].split("x")[0]) - ratio) < 2e-3
    names = [r["system"] for r in rec["rows"]]
    assert "DeepCommit-lite" in names and "one milestone per commit" in names
    single = next(r for r in rec["rows"] if r["system"] == "one milestone per commit")
    assert single["mean ARI"] == 0.0  # closed form: singletons share no pair
    # the headline: the LLM agent (packaged SmolLM2 at tiny), continuous / isolated
    rows = {r["system"]: r for r in rec["rows"]}
    iso, con = rows["LLM agent smollm2, isolated"], rows["LLM agent smollm2, continuous"]
    assert iso["trials"] == con["trials"] == 1
    if rec["headline"]["value"] is not None and iso["score"] > 0:
        assert abs(rec["headline"]["value"] - con["score"] / iso["score"]) < 1e-6
    else:  # SmolLM2 resolves nothing: the ratio is undefined and the claim says so
        assert rec["verdict"] == "uninformative"
    floor = next(c for c in rec["power"]["checks"] if c["kind"] == "floor")
    assert "null agent, isolated" in floor["systems"]
    control = next(c for c in rec["power"]["checks"] if c["kind"] == "control")
    assert control["systems"][0] == "scripted agent q=0.8, continuous"
    # resumable: a second run takes every agent trial from the memo
    again = run_claim(_claim(), scale="tiny", out_root=tmp_path, threads=1)
    assert any("3 trials resumed" in n for n in again["notes"]), again["notes"]
    assert again["rows"] == rec["rows"]


def test_identical_partitions_make_the_degeneracy_check_fail(tmp_path):
    repos = [{"times": np.arange(6.0)} for _ in range(3)]
    same = lambda r: np.array([0, 0, 1, 1, 2, 2])  # noqa: E731
    relabelled = lambda r: np.array([5, 5, 3, 3, 9, 9])  # same partition, other ids  # noqa: E731
    split = lambda r: np.array([0, 1, 2, 3, 4, 5])  # noqa: E731
    assert _differing(repos, same, relabelled) == 0
    assert _differing(repos, same, split) == 3
    check = power.degeneracy(
        ("DeepCommit-lite", "files only (tuned)"), _differing(repos, same, relabelled), len(repos)
    )
    rows = [{"system": "DeepCommit-lite"}, {"system": "files only (tuned)"}]
    res = Result(
        rows=rows,
        headline=Measure("r", 2.0, spread=(1.5, 2.5)),
        target=1.0,
        power=[check, power.not_measured("control", "x"), power.not_measured("floor", "x")],
    )
    claim = Claim("deepcommit", "p", "s", "f", run=lambda ctx: res, power=get("deepcommit").power)
    assert run_claim(claim, scale="tiny", out_root=tmp_path)["verdict"] == "uninformative"


def test_spread_moves_growth_commits_out_of_their_feature_files(tmp_path):
    import subprocess
    import sys

    truth = make_repo(tmp_path / "r", seed=100, n_features=6, n_commits=60, spread=1.0)
    h = load_history(truth.path)
    own, shared = 0, 0
    for c in h.commits:
        k = truth.label.get(c.sha, -1)
        if k < 0:
            continue
        topic = truth.topics[k]
        if {f"pkg/{topic}.py", f"tests/test_{topic}.py"} & set(c.files):
            own += 1
        else:  # a spread growth commit: only shared files, but it still uses <topic>_fn0
            shared += 1
            assert set(c.files) <= {"pkg/common.py", "pkg/helpers.py", "tests/test_common.py",
                                    "pkg/cli.py"} | {f"pkg/{t}.py" for t in truth.topics}
            assert any(u.endswith(f"{topic}_fn0") for u in c.uses), (c.subject, c.uses)
    # with spread=1 every plain growth commit leaves its module: only creations, fixes and
    # cross-reference touches stay in the feature's files
    assert shared > own / 2 and own >= 6
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                         cwd=truth.path, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:]  # the generated tests pass at HEAD
    with pytest.raises(ValueError, match="spread must be in"):
        make_repo(tmp_path / "bad", seed=0, spread=1.5)
    # spread=0 keeps the earlier generator's commits (the default draws no extra random numbers)
    a, b = make_repo(tmp_path / "a", seed=5), make_repo(tmp_path / "b", seed=5, spread=0.0)
    assert list(a.label) == list(b.label)
