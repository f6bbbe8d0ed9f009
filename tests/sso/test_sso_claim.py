"""The sso claim: the tiny scale end to end, and its headline arithmetic."""

import json

import pytest

from icml26.core.claims import Claim, run_claim
from icml26.sso.claim import _grid, steps_to_reach


def test_steps_to_reach_interpolates_and_reports_never():
    steps, loss = [0, 10, 20, 30], [5.0, 3.0, 2.0, 1.5]
    assert steps_to_reach(steps, loss, 2.5) == pytest.approx(15.0)
    assert steps_to_reach(steps, loss, 3.0) == pytest.approx(10.0)
    assert steps_to_reach(steps, loss, 1.0) is None
    assert steps_to_reach(steps, [5.0, float("nan"), 2.0, 1.5], 2.5) == pytest.approx(20.0)


def test_lr_grid_is_x2_apart_around_the_default():
    assert _grid(0.02, 3) == pytest.approx([0.01, 0.02, 0.04])
    assert _grid(5e-3, 2) == pytest.approx([5e-3, 1e-2])


def test_tiny_claim_runs(tmp_path):
    claim = Claim("sso", "p", "s", "f", run=lambda ctx: __import__(
        "icml26.sso.claim", fromlist=["run"]).run(ctx))
    rec = run_claim(claim, scale="tiny", out_root=tmp_path, threads=1)
    assert rec["error"] is None, rec["error"]
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive")
    summary = [r for r in rec["rows"] if r["table"].startswith("summary")]
    assert [r["optimizer"] for r in summary] == ["adamw", "muon", "sso", "muonsphere"]
    sso = summary[2]
    assert float(sso["max abs(Theta.Phi)"]) <= 2e-4 * (1 + 1e-6)
    lo, hi = rec["headline"]["spread"]
    assert lo <= rec["headline"]["value"] <= hi
    for fig in rec["figures"]:
        assert (tmp_path / fig).stat().st_size > 1000
    hist = json.loads((tmp_path / "sso" / "tiny" / "histories.json").read_text())
    assert len(hist) == 2 * 3 * 2 + 3 + 1  # grid + extra seed per arm + MuonSphere
