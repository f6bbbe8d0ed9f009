"""score_reliable on hand cases, and the layout round trip with its validation errors."""

import pytest

from icml26.core.errors import UserError
from icml26.deepcommit.score import MilestoneTests, RunOutcome, score_milestone, score_trial


def test_zero_targets_nothing_broken_scores_one():
    s = score_milestone(MilestoneTests.of(p2p=["a"]), RunOutcome.of(passed=["a"]))
    assert (s.recall, s.precision, s.score, s.resolved) == (1.0, 1.0, 1.0, True)


def test_all_broken_and_missing_p2p():
    spec = MilestoneTests.of(f2p=["f1", "f2"], p2p=["p1", "p2", "p3"], n2p=["n1"])
    s = score_milestone(spec, RunOutcome.of(passed=["f1", "n1"], failed=["p1"]))
    # fixed 2 of 3; broken = 1 failed + 2 missing
    assert (s.n_target, s.n_fixed, s.n_broken, s.p2p_missing) == (3, 2, 3, 2)
    p, r = 3 / 6, 2 / 3
    assert s.precision == pytest.approx(p) and s.recall == pytest.approx(r)
    assert s.score == pytest.approx(2 * p * r / (p + r)) and not s.resolved
    s0 = score_milestone(MilestoneTests.of(f2p=["f"], p2p=["p"]), RunOutcome.of(failed=["f", "p"]))
    assert s0.recall == 0 and s0.score == 0


def test_no_collection_and_not_submitted_score_zero_and_filters_apply():
    spec = MilestoneTests.of(f2p=["f", "flaky"], filtered=["flaky"])
    assert score_milestone(spec, RunOutcome.of(collected=False)).score == 0
    assert score_milestone(spec, None).score == 0
    ok = score_milestone(spec, RunOutcome.of(passed=["f"], failed=["flaky"]))
    assert ok.resolved and ok.score == 1.0
    t = score_trial(
        {"a": spec, "b": MilestoneTests.of(f2p=["g"])}, {"a": RunOutcome.of(passed=["f"])}
    )
    assert t["score"] == pytest.approx(50.0) and t["resolve_rate"] == pytest.approx(50.0)
    with pytest.raises(ValueError, match="without a test classification"):
        score_trial({"a": spec}, {}, graded=["a", "zz"])


def _write(root, deps):
    root.mkdir(parents=True, exist_ok=True)
    (root / "milestones.csv").write_text("id,title\nM001,a\nM002,b\nM003,c\n")
    (root / "dependencies.csv").write_text("source,target,strength\n" + deps)


def test_load_dataset_rejects_cycles_and_unknown_ids(tmp_path):
    from icml26.deepcommit.export import load_dataset

    _write(tmp_path / "ok", "M001,M002,Strong\nM002,M003,Weak\n")
    ds = load_dataset(tmp_path / "ok")
    assert ds.edges == {("M001", "M002"): "Strong", ("M002", "M003"): "Weak"}
    assert ds.selected == ["M001", "M002", "M003"]
    _write(tmp_path / "cyc", "M001,M002,Strong\nM002,M001,Weak\n")
    with pytest.raises(UserError, match="cycle M00. -> M00. -> M00."):
        load_dataset(tmp_path / "cyc")
    _write(tmp_path / "unk", "M001,M009,Strong\n")
    with pytest.raises(UserError, match="line 2: unknown milestone id.*M009"):
        load_dataset(tmp_path / "unk")
    with pytest.raises(UserError, match="no milestones.csv"):
        load_dataset(tmp_path / "nothing")
