"""The tiny claim end to end (MiniLM + git), and the synthetic repository's ground truth."""

from icml26.core.claims import Claim, run_claim
from icml26.deepcommit.history import load_history
from icml26.deepcommit.synth import make_repo


def test_generated_repo_truth_matches_preprocessing(tmp_path):
    truth = make_repo(tmp_path / "r", seed=3, n_features=4, n_commits=30)
    h = load_history(truth.path)
    dropped = {d.sha for d in h.dropped}
    assert dropped == set(truth.dropped)  # every noise drop found, nothing else dropped
    kept = {c.sha for c in h.commits}
    assert set(truth.label) <= kept
    assert all(a < b for a, b in truth.edges)


def test_tiny_claim_runs(tmp_path):
    claim = Claim(
        "deepcommit",
        "p",
        "s",
        "f",
        run=lambda ctx: __import__("icml26.deepcommit.claim", fromlist=["run"]).run(ctx),
    )
    rec = run_claim(claim, scale="tiny", out_root=tmp_path, threads=1)
    assert rec["error"] is None, rec["error"]
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive")
    names = [r["system"] for r in rec["rows"]]
    assert "DeepCommit-lite" in names and "one milestone per commit" in names
    single = next(r for r in rec["rows"] if r["system"] == "one milestone per commit")
    assert single["mean ARI"] == 0.0  # closed form: singletons share no pair
