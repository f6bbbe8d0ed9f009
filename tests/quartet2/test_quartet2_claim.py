"""The ``tiny`` claim runs end to end through the runner and measures what it says."""

from pathlib import Path

import torch

from icml26 import claims_index
from icml26.core.claims import run_claim
from icml26.quartet2.claim import ZERO, power_checks


def test_tiny_claim_runs(tmp_path):
    threads = torch.get_num_threads()
    try:  # one thread: many small ops, and 2 threads collapse when the machine is shared
        rec = run_claim(claims_index.get("quartet2"), scale="tiny",
                        out_root=tmp_path, threads=1)
    finally:
        torch.set_num_threads(threads)
    assert rec["error"] is None, rec["error"]
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive", "uninformative")
    checks = rec["power"]["checks"]
    assert [c["kind"] for c in checks] == list(claims_index.get("quartet2").power.kinds)
    assert all(c["passed"] in (True, False, None) for c in checks)
    control, floor = checks
    assert set(control["systems"]) == {"rtn", "sr"}
    assert floor["values"][ZERO] == 1.0
    assert floor["passed"] is True  # both stochastic estimators are far below relative MSE 1
    lo, hi = rec["headline"]["spread"]
    assert lo <= rec["headline"]["value"] <= hi
    rows = {(r["experiment"], r["system"], r["metric"]): r for r in rec["rows"]}
    gauss = {s: rows[("quantizer error, Gaussian rows", s, "relative MSE")]["value"]
             for s in ("rtn", "sr", "ms_eden", "four_over_six")}
    # the paper's ordering on heavy-tailed Gaussian rows: 4/6 < RTN < MS-EDEN << SR
    assert gauss["four_over_six"] < gauss["rtn"] < gauss["ms_eden"] < gauss["sr"] / 2
    systems = {r["system"] for r in rec["rows"] if r["experiment"].startswith("pre-training")}
    assert {"fp32", "nvidia", "quartet2"} <= systems
    assert len(rec["figures"]) == 3
    assert all((Path(tmp_path) / f).is_file() for f in rec["figures"])


def test_power_checks_decide_on_the_draws():
    real = {"ms_eden": [0.01, 0.011], "sr": [0.023, 0.024]}
    # RTN's slope clearly below SR's over every draw: the bias measurement has power
    control, floor = power_checks({"rtn": [0.5, 0.55, 0.6], "sr": [0.98, 1.0, 1.02]}, real, 1.0, "m")
    assert control.passed is True and floor.passed is True
    # the draws overlap: RTN cannot be told from SR, the control fails
    control, _ = power_checks({"rtn": [0.8, 0.95, 1.0], "sr": [0.9, 1.0, 1.03]}, real, 1.0, "m")
    assert control.passed is False
    # estimators no better than predicting zero: the floor fails
    _, floor = power_checks({"rtn": [0.5], "sr": [1.0]}, {"ms_eden": [1.2], "sr": [1.5]}, 1.0, "m")
    assert floor.passed is False


def _runs(fp32, nvidia, quartet2, seeds=3, blocks=64):
    from icml26.quartet2.train import PretrainResult

    g = torch.Generator().manual_seed(0)
    out = {}
    for arm, base in (("fp32", fp32), ("nvidia", nvidia), ("quartet2", quartet2)):
        out[arm] = [PretrainResult(arm=arm, seed=s, train_loss=[3.0], val_loss=base,
                                   val_block_losses=(base + 0.01 * torch.randn(blocks, generator=g)).tolist())
                    for s in range(seeds)]
    return out


def test_gap_decision_is_decided_under_its_power_checks():
    from icml26.quartet2.claim import UNIGRAM, gap_decision

    floor = [3.5] * 64
    rows, note = gap_decision(_runs(2.50, 2.57, 2.55), floor)
    assert "-> reproduced" in note and "passes" in note
    by = {r["system"]: r for r in rows}
    assert by["quartet2 - nvidia"]["high"] < 0 < by["nvidia - fp32"]["low"]
    assert by[UNIGRAM]["value"] == 3.5
    _, note = gap_decision(_runs(2.50, 2.50, 2.49), floor)  # NVFP4 has no visible effect
    assert "-> uninformative" in note and "does not separate" in note
    _, note = gap_decision(_runs(3.60, 3.70, 3.65), floor)  # nothing learned beyond unigram
    assert "-> uninformative" in note and "floor" in note


def test_recipe_errors_follow_each_recipe():
    from icml26.quartet2.analysis import recipe_errors

    x = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))
    dx_dy = recipe_errors(x, "dx_dy")
    assert 0.02 < dx_dy["nvidia"] < 0.03  # SR, no rotation (relative MSE ~0.024 on Gaussians)
    assert dx_dy["quartet2"] < dx_dy["nvidia"] / 2
    assert recipe_errors(x, "dx_w")["nvidia"] is None  # NVIDIA reuses its forward tiles
    assert recipe_errors(x, "dw_x")["nvidia"] < dx_dy["nvidia"]  # RTN after RHT-16


def test_training_units_resume_from_the_memo(tmp_path, monkeypatch):
    from icml26.core.checkpoint import Memo
    from icml26.quartet2 import claim
    from icml26.quartet2.train import PretrainConfig

    cfg = PretrainConfig(hidden=128, layers=1, heads=4, ffn=384, seq_len=16, batch_size=2, steps=2,
                         warmup=1)
    blocks = torch.randint(0, 200, (8, 16), generator=torch.Generator().manual_seed(0))
    memo = Memo(tmp_path / "memo.json", config={"x": 1})
    first = {arm: claim._train_unit(memo, tmp_path, arm, 0, blocks, blocks[:4], cfg, "cpu",
                                    lambda n=1: None) for arm in ("fp32", "quartet2")}

    def no_training(*_a, **_k):
        raise AssertionError("trained again")

    monkeypatch.setattr(claim, "pretrain", no_training)
    memo = Memo(tmp_path / "memo.json", config={"x": 1})
    for arm in ("fp32", "quartet2"):
        res, cap = claim._train_unit(memo, tmp_path, arm, 0, blocks, blocks[:4], cfg, "cpu",
                                     lambda n=1: None)
        assert res.val_block_losses == first[arm][0].val_block_losses
        assert (cap is None) == (arm != "fp32")
        if cap is not None:
            assert set(cap) == set(first["fp32"][1])
            assert all(torch.equal(cap[k], first["fp32"][1][k]) for k in cap)
