"""ATLAS part (c): configurations, examinees, the held-out family and the zoo requirement."""

import numpy as np
import pytest

from icml26.atlas import claim_llm as c
from icml26.core.errors import UserError


def test_configs_and_examinees_cover_the_grid():
    models = {"m1": "f1", "m2": "f2", "m3": "f2"}
    cfgs = c.configs(models, ["float32"], range(2))
    assert len(cfgs) == 3 * 2 * 2 and len({x.key for x in cfgs}) == len(cfgs)
    exs = c.examinees(cfgs, (0.0, 0.5, 1.0), sample_seeds=3)
    assert len(exs) == len(cfgs) * (1 + 2 * 3)  # T = 0 once
    assert len({e.name for e in exs}) == len(exs)


def test_answer_matrix_greedy_and_hot():
    items = c._tiny_items(40)
    cfg = c.Config("f", "m", "letter", "float32", 0)
    gold = [next(iter(it.gold)) for it in items]
    # a table that prefers the gold choice by 2 nats: greedy is always right, T = 50 near chance
    table = [
        [2.0 if j == g else 0.0 for j in range(len(it.choices))]
        for it, g in zip(items, gold, strict=True)
    ]
    exs = [c.Examinee(cfg, 0.0, 0), c.Examinee(cfg, 50.0, 0)]
    Y = c.answer_matrix({cfg.key: table}, items, exs, seed=1)
    assert Y[0].tolist() == [1.0] * 40
    assert 0.05 < Y[1].mean() < 0.6


def test_part_c_needs_two_zoo_families(tmp_path, monkeypatch):
    from icml26.core.claims import RunContext

    ctx = RunContext(scale="small", seed=0, device="cpu", out_dir=tmp_path)
    monkeypatch.setattr(c, "installed_zoo", lambda names: {"smollm2-135m-instruct": "smollm2"})
    with pytest.raises(UserError, match="make models.*installed: smollm2-135m-instruct"):
        c.part_c(ctx, {"max_iter": 10})
    monkeypatch.undo()
    with pytest.raises(UserError, match="unknown model.*nope"):
        c.installed_zoo(["nope"])


def test_tiny_part_c_holds_out_whole_families(tmp_path):
    from icml26.core.claims import RunContext

    ctx = RunContext(scale="tiny", seed=0, device="cpu", out_dir=tmp_path)
    res = c.part_c(ctx, {"max_iter": 60})
    assert len(res["errs"]) == 2  # one seed per family at tiny
    held = [n for n in res["notes"] if "held out" in n][0]
    assert "a (36 test / 72 calibration" in held and "b (72 test / 36 calibration" in held
    assert res["ratio"].n_clusters == 2
    assert {r["system"] for r in res["rows"]} >= {c.HEADLINE, c.RANDOM_K, c.CONTROL, c.FLOOR}
    assert np.isfinite(res["ratio"].value)
