"""The sso claim: the tiny scale end to end, its headline arithmetic and its tuning driver."""

import json
import math

import pytest
import torch

from icml26 import claims_index
from icml26.core.claims import run_claim
from icml26.core.stats import bracket
from icml26.sso.claim import _grid, steps_to_reach, tune, unigram_loss


def test_steps_to_reach_interpolates_and_reports_never():
    steps, loss = [0, 10, 20, 30], [5.0, 3.0, 2.0, 1.5]
    assert steps_to_reach(steps, loss, 2.5) == pytest.approx(15.0)
    assert steps_to_reach(steps, loss, 3.0) == pytest.approx(10.0)
    assert steps_to_reach(steps, loss, 1.0) is None
    assert steps_to_reach(steps, [5.0, float("nan"), 2.0, 1.5], 2.5) == pytest.approx(20.0)


def test_lr_grid_is_x2_apart_around_the_default_and_bracketable():
    assert _grid(0.02, 3) == pytest.approx([0.01, 0.02, 0.04])
    assert _grid(5e-3, 4) == pytest.approx([1.25e-3, 2.5e-3, 5e-3, 1e-2])
    with pytest.raises(ValueError, match=">= 3"):
        _grid(5e-3, 2)  # the old 2-point tiny grid cannot be bracketed


def _loss(opt_lr):
    """A convex loss in log(lr), optimum at opt_lr."""
    return lambda lr: (math.log(lr) - math.log(opt_lr)) ** 2


def test_tune_equals_plain_bracket_and_batches_each_round():
    fns = {("a", 1): _loss(0.1), ("b", 1): _loss(0.003), ("c", 1): _loss(1e-5)}
    grids = {"a": _grid(0.02, 3), "b": _grid(0.02, 3), "c": _grid(0.02, 3)}
    trained: dict = {}
    rounds = []

    def score(key, lr):
        return trained.get((key, lr))

    def run_points(points):
        assert all((k, lr) not in trained for k, lr in points)  # never trains a point twice
        rounds.append(list(points))
        for k, lr in points:
            trained[(k, lr)] = fns[k](lr)

    got = tune(list(fns), grids, score, run_points, extend_by=2, cap=2)
    for k, f in fns.items():
        want = bracket(f, grids[k[0]], extend_by=2, cap=2)
        assert got[k].grid == want.grid and got[k].best == want.best
        assert got[k].interior == want.interior and got[k].extensions == want.extensions
    assert got[("a", 1)].interior and got[("a", 1)].best == pytest.approx(0.08)  # moved up
    assert got[("b", 1)].interior and got[("b", 1)].best == pytest.approx(0.0025)  # moved down
    assert not got[("c", 1)].interior  # optimum far outside: capped at the edge, flagged
    assert "bottom edge" in got[("c", 1)].note("c", "lr")
    # start grid in one batch, then one batch per extension round (arms side by side)
    assert len(rounds[0]) == 9 and len(rounds) == 3
    assert {k for k, _ in rounds[1]} == set(fns)


def test_unigram_loss_is_the_cross_entropy_of_train_frequencies():
    train = torch.tensor([[0, 0, 0, 1]] * 50)  # p(0) ~ 3/4, p(1) ~ 1/4 (add-one over 4 ids)
    val = torch.tensor([[9, 0, 1, 0, 0]])  # first token of a block is not a target
    counts = torch.tensor([151.0, 51.0, 1.0, 1.0])
    p = counts / counts.sum()
    want = -(3 * math.log(p[0]) + math.log(p[1])) / 4
    assert unigram_loss(train, val, 4) == pytest.approx(want)


def test_tiny_claim_runs(tmp_path):
    claim = claims_index.get("sso")
    rec = run_claim(claim, scale="tiny", out_root=tmp_path, threads=1)
    assert rec["error"] is None, rec["error"]
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive", "uninformative")
    # power checks: the declared kinds, measured
    checks = {c["kind"]: c for c in rec["power"]["checks"]}
    assert sorted(checks) == sorted(rec["power"]["declared"]) == ["control", "floor"]
    assert all(c["passed"] in (True, False, None) for c in checks.values())
    ctl = checks["control"]
    assert ctl["systems"][0].startswith("adamw at its tuned LR")
    assert ctl["systems"][1].startswith("adamw at the worst LR")
    flo = checks["floor"]
    assert set(flo["systems"]) >= {"adamw", "muon", "sso"}
    assert 2.0 < flo["values"]["unigram (training-data byte frequencies)"] < math.log(259)
    # every tuned arm went through the same bracketing budget; notes flag arms at an edge
    tuning = rec["tuning"]
    proto = tuning.pop("protocol")
    assert (proto["start_points"], proto["extend_by"], proto["cap"]) == (3, 1, 1)
    assert sorted(tuning) == sorted(
        [f"{k}@width{w}" for k in ("adamw", "muon", "sso") for w in (32, 64)]
        + ["muonsphere@width64"]  # the λ = 0 ablation: tuned at the top width only
        + ["muon_si@width64"]  # Muon from SSO's spectral init (issue 36): top width only
    )
    for key, t in tuning.items():
        assert 3 <= len(t["grid"]) <= 4 and t["best"] in t["grid"]
        assert t["interior"] == (t["best"] not in (min(t["grid"]), max(t["grid"])))
        if not t["interior"]:
            k, w = key.split("@width")
            assert any(n.startswith(f"{k} at width {w}: best lr") for n in rec["notes"])
    summary = [r for r in rec["rows"] if r["table"].startswith("summary")]
    assert [r["optimizer"] for r in summary] == ["adamw", "muon", "sso", "muonsphere", "muon_si"]
    sso = summary[2]
    assert float(sso["max abs(Theta.Phi)"]) <= 2e-4 * (1 + 1e-6)
    assert sso["lr"] == tuning["sso@width64"]["best"]
    assert summary[3]["lr"] == tuning["muonsphere@width64"]["best"]
    assert summary[3]["seeds"] == 2  # rerun on the other seed like every arm
    assert summary[4]["lr"] == tuning["muon_si@width64"]["best"] and summary[4]["seeds"] == 2
    lo, hi = rec["headline"]["spread"]
    assert lo <= rec["headline"]["value"] <= hi
    # two headline rows (SSO vs AdamW, vs Muon); the headline is the one against the baseline
    # with the lower mean final loss at the top width
    heads = {r["system"]: r for r in rec["rows"] if r["table"].startswith("headline rows")}
    assert sorted(heads) == ["SSO vs adamw", "SSO vs muon", "SSO vs muon + spectral init (row)"]
    assert not heads["SSO vs muon + spectral init (row)"]["headline"]  # a row, never the headline
    finals = {b: heads[f"SSO vs {b}"][f"{b} final val loss (mean)"] for b in ("adamw", "muon")}
    better = min(finals, key=finals.get)
    assert [r["headline"] for r in heads.values()].count(True) == 1
    assert heads[f"SSO vs {better}"]["headline"]
    assert better in rec["headline"]["name"]
    assert abs(heads[f"SSO vs {better}"]["steps for SSO to reach its final / its steps"]
               - rec["headline"]["value"]) < 1e-3
    for fig in rec["figures"]:
        assert (tmp_path / fig).stat().st_size > 1000
    hist = json.loads((tmp_path / "sso" / "tiny" / "histories.json").read_text())
    n_grid = sum(len(t["grid"]) for t in tuning.values())
    assert len(hist) == n_grid + 5 + 1  # grids + the extra seed per arm (5 arms) + worst AdamW


def test_muon_si_starts_from_the_spectral_init_then_steps_like_muon():
    """The muon_si arm: every hidden atom (q/k/v per head) on its sphere at step 0, the same
    torch Muon + AdamW pair as the muon arm; the muon arm keeps the default init."""
    import torch

    from icml26.sso.groups import sso_param_groups
    from icml26.sso.optim import atom_view, radius
    from icml26.sso.train import ArmSpec, TrainConfig, build_model, build_optimizer

    cfg = TrainConfig(width=32, layers=1, head_dim=16, seq_len=32, batch_size=2, steps=2,
                      eval_every=1, seed=0)
    ratios = {}
    for kind in ("muon", "muon_si"):
        model, _ = build_model(cfg)
        opt, mat = build_optimizer(model, ArmSpec(kind, 1e-3))
        assert isinstance(mat, torch.optim.Muon)
        groups, _ = sso_param_groups(model, split_qkv_heads=True)
        r = []
        for g in groups:
            for p in g["params"]:
                nb, m, n = atom_view(p.shape, g.get("split"))
                s = torch.linalg.matrix_norm(p.detach().reshape(nb, m, n).double(), ord=2)
                r.append(s / radius(m, n, 1.0))
        ratios[kind] = torch.cat(r)
    assert torch.allclose(ratios["muon_si"], torch.ones_like(ratios["muon_si"]), atol=1e-5)
    assert (ratios["muon"] - 1).abs().max() > 0.05  # the default init is not on the sphere
