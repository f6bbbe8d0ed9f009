import json

import pytest

from icml26.core.claims import Claim, RunContext, run_claim
from icml26.core.errors import UserError


def test_tiny_claim(tmp_path):
    # Runs on the packaged BIG-bench excerpt: no download or index needed, so CI exercises it.
    from icml26.claims_index import get
    from icml26.corrsteer.claim import CONTROL_NAME, FLOOR_NAME, run

    spec = get("corrsteer").power
    rec = run_claim(Claim("corrsteer", "p", "s", "f", run=run, power=spec), scale="tiny", out_root=tmp_path)
    assert rec["verdict"] != "error", rec.get("error")
    rows = {r["system"]: r for r in rec["rows"]}
    assert {"unsteered", "CorrSteer-S", "CorrSteer-A", "CorrSteer-P", "raw-mode P",
            "mean-difference (CAA)", "random feature #1", CONTROL_NAME, FLOOR_NAME} <= set(rows)
    assert rows["unsteered"]["Δacc pp"] == 0 and rows["unsteered"]["changed answers"] == 0
    checks = {c["kind"]: c for c in rec["power"]["checks"]}
    assert list(checks) == list(spec.kinds)
    assert all(c["passed"] in (True, False, None) for c in checks.values())
    assert checks["degeneracy"]["values"]["differing"] == rows["CorrSteer-P"]["changed answers"]
    assert checks["control"]["values"][CONTROL_NAME] == pytest.approx(
        100 * rows[CONTROL_NAME]["changed answers"] / checks["degeneracy"]["values"]["total"])
    if rows["CorrSteer-P"]["changed answers"] == 0:
        assert rec["verdict"] == "uninformative"
    assert all(r["task"] == "MMLU stand-in" for r in rec["rows"])
    lo, hi = rec["headline"]["spread"]
    assert lo <= rec["headline"]["value"] <= hi
    details = json.loads(next(tmp_path.rglob("details.json")).read_text())
    assert details["parts"][0]["runs"][0]["base_train_acc"] > 0


def test_tiny_fixture_matches_the_issue_sizes():
    from icml26.corrsteer.claim import TINY_TASKS, tiny_items

    items = tiny_items()
    assert len(items) >= 48 + 16 + 32
    assert {it.task for it in items} == set(TINY_TASKS)
    assert len({it.id for it in items}) == len(items)
    assert all(it.answer in it.gold for it in items)


@pytest.mark.parametrize("opts", [{"parts": "mmlu,nope"}, {"sft": "bbq,xyz"}, {"parts": "none"}])
def test_bad_part_options_are_named(tmp_path, opts):
    from icml26.corrsteer.claim import _settings

    ctx = RunContext(scale="small", seed=0, out_dir=tmp_path, options=opts)
    with pytest.raises(UserError, match="parts|sft"):
        _settings(ctx, 30)


def test_source_option_and_the_bbq_default_without_bigbench(tmp_path, monkeypatch):
    import icml26.corrsteer.claim as C

    def settings(**o):
        return C._settings(RunContext(scale="small", seed=0, out_dir=tmp_path, options=o), 30)

    with pytest.raises(UserError, match=r"--opt source='mmlu2': choose from \['mmlu', 'bigbench'\]"):
        settings(source="mmlu2")
    assert settings()["source"] == "mmlu" and settings(source="bigbench")["source"] == "bigbench"
    S = settings()
    assert S["layers"] == [8, 15, 22] and S["train"].d_sae == 4096 and S["splits"].n_test == 300
    assert S["select_token"] == 0 and S["coef_grid"] == (0.5, 1.0, 2.0, 3.0) and S["caa_grid"][-1] == 32.0
    assert C._settings(RunContext(scale="small", seed=0, out_dir=tmp_path, options={}), 24)["layers"] == [6, 12, 18]
    with pytest.raises(UserError, match="select_token"):
        settings(select_token="2")
    with pytest.raises(UserError, match="coef_grid"):
        settings(coef_grid="1,-2")
    monkeypatch.setattr(C, "bigbench_local", lambda: False)
    S = settings()  # BBQ is a default part, but its data is not here: skipped with a note
    assert S["parts"] == ["mmlu"] and "BBQ part not run" in S["skipped"][0]
    assert settings(parts="mmlu,bbq")["parts"] == ["mmlu", "bbq"]  # asked for: kept (fails loudly later)
    monkeypatch.setattr(C, "bigbench_local", lambda: True)
    S = settings()
    assert S["parts"] == ["mmlu", "bbq"] and S["skipped"] == []


def test_sft_units_are_memoised_and_stale_locks_do_not_block(tmp_path, monkeypatch):
    import os

    import numpy as np
    import torch

    import icml26.corrsteer.claim as C
    import icml26.corrsteer.mcqsteer as M
    from icml26.corrsteer.experiment import Splits

    calls = []

    def fake_sft(model, data, sp, seed, cfg, progress):
        calls.append(seed)
        return {"seed": seed, "test_idx": sp.make(len(data.items), seed)[2], "base": np.ones(32, bool),
                "sft": np.arange(32) % 2 == 0, "stats": {"steps": 48}, "seconds": 1.0, "ser": 1.0,
                "changed": 16}

    monkeypatch.setattr(C, "sft_baseline", fake_sft)
    monkeypatch.setattr(M, "letter_token_ids", lambda tok, n: list(range(65, 65 + n)))
    monkeypatch.setattr(M, "encode_items", lambda tok, items: [None] * len(items))
    monkeypatch.setattr(M, "answer_groups", lambda tok, n: torch.zeros(8, dtype=torch.long))
    ctx = RunContext(scale="small", seed=0, out_dir=tmp_path, options={"sft": "bbq", "seeds": "2", "sft_seeds": "2"})
    S = C._settings(ctx, 30)
    items, sp = C.tiny_items(), Splits(48, 16, 32)
    lock = tmp_path / "sft_bbq.lock"
    lock.write_text(str(os.getpid()))  # our own lock (the worker itself): no wait
    first = C._sft_units(ctx, None, None, S, "bbq", items, sp)
    lock.write_text("999999999")  # a dead worker: no wait
    again = C._sft_units(ctx, None, None, S, "bbq", items, sp)
    assert calls == [0, 1]  # computed once per seed, then read back from sft_bbq.json
    for a, b in zip(first, again, strict=True):
        assert a["base"].dtype == bool and np.array_equal(a["sft"], b["sft"])


def test_power_checks_flag_a_null_intervention():
    import numpy as np

    from icml26.corrsteer.claim import CONTROL_NAME, FLOOR_NAME, power_checks

    names = ["unsteered", "CorrSteer-S", "CorrSteer-A", "CorrSteer-P", "raw-mode P", "mean-difference (CAA)",
             "random feature #1", CONTROL_NAME]
    rng = np.random.default_rng(0)
    runs = []
    for seed in range(3):
        base = rng.integers(0, 4, 100)
        pred = np.stack([base] * 7 + [(base + 1) % 4])  # only the control changes answers
        gold = rng.integers(0, 4, 100)
        runs.append({"seed": seed, "names": names, "pred": pred, "test": pred == gold,
                     "majority_test": gold == 0, "majority_letter": 0})
    P = {"part": "mmlu", "name": "MMLU stand-in", "runs": runs}
    checks = {c.kind: c for c in power_checks(P, n_boot=300)}
    assert checks["degeneracy"].passed is False and checks["degeneracy"].values["differing"] == 0
    assert checks["control"].passed is True and checks["control"].values[CONTROL_NAME] == 100.0
    assert FLOOR_NAME in checks["floor"].systems
    # the refusal part has no letters: every check is not measured
    refusal = power_checks({"part": "refusal", "name": "Refusal", "runs": runs})
    assert [c.passed for c in refusal] == [None, None, None]
