"""The refusal part's generation, bookkeeping and degenerate-reward handling."""

import numpy as np
import pytest
import torch

import icml26.corrsteer.refusal_exp as R
from icml26.core.lm import tiny_llama
from icml26.corrsteer.claim import refusal_rows
from icml26.corrsteer.refusal_exp import UnsteeredPass, generate_rows, paired_rows, refusal_seed
from icml26.corrsteer.sae import SAE
from icml26.corrsteer.steer import Steerer


@pytest.fixture(scope="module")
def tiny():
    model, tok = tiny_llama(hidden=32, layers=4, heads=4, seed=0)
    return model.double().eval(), tok


def test_generate_rows_equals_generate_with_steerer_per_row(tiny):
    model, _ = tiny
    ids = torch.randint(3, 250, (9,), generator=torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(2)
    d = {1: 3 * torch.randn(3, 32, generator=g, dtype=torch.float64),
         3: 3 * torch.randn(3, 32, generator=g, dtype=torch.float64)}
    d[1][0] = 0
    d[3][0] = 0  # row 0 unsteered
    toks, steps = generate_rows(model, ids, d, n_rows=3, max_new_tokens=6, capture=[1, 2])
    for b in range(3):
        with Steerer(model, {L: v[b] for L, v in d.items()}):
            out = model.generate(input_ids=ids[None], max_new_tokens=6, do_sample=False, pad_token_id=0)
        assert toks[b] == out[0, 9:].tolist()
    assert toks[1] != toks[0] or toks[2] != toks[0]  # the steering is strong enough to matter
    # Captured steps of row 0: the residual entering block L at positions T-1 .. T-1+S-1.
    full = torch.tensor(ids.tolist() + toks[0][:-1])[None]
    with torch.no_grad():
        hs = model(input_ids=full, output_hidden_states=True).hidden_states
    for L in (1, 2):
        assert steps[L].shape == (6, 32)
        torch.testing.assert_close(steps[L], hs[L][0, 8:].float(), atol=1e-5, rtol=1e-5)


def test_generate_rows_stops_at_eos(tiny):
    model, _ = tiny
    ids = torch.randint(3, 250, (7,), generator=torch.Generator().manual_seed(3))
    toks, _ = generate_rows(model, ids, max_new_tokens=5)
    first = toks[0][1]  # make the second generated token an EOS
    toks2, steps = generate_rows(model, ids, max_new_tokens=5, eos={first}, capture=[2])
    cut = toks[0].index(first) + 1
    assert toks2[0] == toks[0][:cut] and steps[2].shape[0] == cut


def _run(test, benign=None, names=None, degenerate=None):
    names = names or ["unsteered"] + [f"s{k}" for k in range(1, len(test))]
    return {"seed": 0, "names": names, "test": np.array(test, bool),
            "benign": None if benign is None else np.array(benign, bool),
            "features": {n: [] for n in names}, "degenerate": degenerate}


def test_refusal_rows_bookkeeping_on_hand_cases():
    # seed A: unsteered refuses items 0,1 of 5; s1 refuses 0,2,3,4 (2 better... 3 better, 1 worse)
    a = _run([[1, 1, 0, 0, 0], [1, 0, 1, 1, 1]], benign=[[0, 0, 0, 0], [1, 1, 0, 0]])
    b = _run([[0, 0, 0, 0, 0], [0, 0, 0, 0, 1]], benign=[[1, 0, 0, 0], [1, 0, 0, 0]])
    rows = refusal_rows([a, b])
    assert [r["system"] for r in rows] == ["unsteered", "s1"]
    u, s = rows
    assert u["test acc %"] == 20.0 and s["test acc %"] == 50.0  # (40% + 0%)/2, (80% + 20%)/2
    assert s["Δacc pp"] == 30.0 and s["Δ min/max over seeds"] == "+20.00 / +40.00"
    assert s["better/worse"] == "4/1" and s["SER"] == 0.2
    assert u["SER"] is None and u["better/worse"] == "0/0"
    assert u["over-refusal %"] == 12.5 and s["over-refusal %"] == 37.5
    assert s["Δover-refusal pp"] == 25.0
    lo, hi = (float(x) for x in s["Δ 95% CI"].strip("[]").split(","))
    assert lo <= 30.0 <= hi


def test_degenerate_seeds_leave_only_their_unsteered_row_or_are_skipped():
    deg = _run([[1, 0, 0, 0]], benign=[[0, 0]], degenerate="all 60 training rewards are 0")
    rows = refusal_rows([deg])
    assert [r["system"] for r in rows] == ["unsteered"] and rows[0]["test acc %"] == 25.0
    ok = _run([[0, 0, 0, 0, 0], [1, 1, 0, 0, 0]], benign=[[0, 0], [0, 1]])
    rows = paired_rows([deg, ok], "x", lambda d: (0.0, 0.0))  # the degenerate seed is left out
    assert [r["system"] for r in rows] == ["unsteered", "s1"] and rows[1]["Δacc pp"] == 40.0


def test_refusal_seed_with_constant_rewards_reports_base_rate(tiny):
    model, tok = tiny
    n = 20
    base = UnsteeredPass(["x"] * n, np.zeros(n, bool), {}, steps=[{} for _ in range(n)])
    rec = refusal_seed(model, tok, {}, [None] * n, base, [], seed=0, benign_base=np.array([0, 1, 0], bool))
    assert "all 6 training rewards are 0" in rec["degenerate"] and "0.000" in rec["degenerate"]
    assert rec["names"] == ["unsteered"] and rec["test"].shape == (1, 14)
    assert rec["benign"].tolist() == [[False, True, False]]
    base.refused[:] = True
    assert "rewards are 1" in refusal_seed(model, tok, {}, [None] * n, base, [], seed=0)["degenerate"]


def test_refusal_seed_end_to_end_on_a_tiny_model(tiny, monkeypatch):
    # A judge that depends on the text (so rewards vary); row 0 of every batch is the unsteered
    # system and must reproduce the unsteered pass exactly (float64 model).
    model, tok = tiny
    monkeypatch.setattr(R, "is_refusal", lambda t: sum(t.encode()) % 3 == 0)
    g = torch.Generator().manual_seed(0)
    harm = [torch.randint(3, 250, (int(k),), generator=g) for k in torch.randint(4, 9, (20,), generator=g)]
    benign = [torch.randint(3, 250, (5,), generator=g) for _ in range(4)]
    saes = {L: SAE(32, 64, "topk", k=8, hook=f"blocks.{L}.hook_resid_pre", seed=L, dtype=torch.float64)
            for L in (1, 2)}
    base = R.unsteered_generations(model, tok, harm, [1, 2], max_new_tokens=4)
    bb = R.unsteered_generations(model, tok, benign, max_new_tokens=4)
    assert 0 < base.refused[R.refusal_split(20, 0)[0]].sum() < 6
    rec = refusal_seed(model, tok, saes, harm, base, benign, seed=0, n_random=2, max_new_tokens=4,
                       benign_base=bb.refused)
    assert not rec.get("degenerate")
    assert rec["test"].shape == (8, 14) and rec["benign"].shape == (8, 4)
    assert np.array_equal(rec["test"][0], base.refused[rec["test_idx"]])
    assert np.array_equal(rec["benign"][0], bb.refused)
    assert rec["names"][3] == "CorrSteer-P" and len(rec["features"]["CorrSteer-S"]) == 1
    rows = refusal_rows([rec])
    assert len(rows) == 8 and all("over-refusal %" in r for r in rows)


def test_claim_result_with_only_degenerate_refusal_seeds_is_uninformative(tmp_path):
    import icml26.corrsteer.claim as C
    from icml26.core.claims import RunContext

    ctx = RunContext(scale="small", seed=0, out_dir=tmp_path, options={"parts": "refusal"})
    S = C._settings(ctx, 30)
    assert S["parts"] == ["refusal"] and S["refusal_tokens"] == 24 and S["benign"] == 140
    deg = _run([[1, 0, 0, 0]], benign=[[0, 1]], degenerate="all 60 training rewards are 0 (base accuracy 0.000)")
    deg.update(n_train=60, n_train_refused=0, test_idx=np.arange(4), top_r={})
    P = {"part": "refusal", "name": C.PART_NAMES["refusal"], "runs": [deg], "tasks": ["harmbench_standard"],
         "probe": [], "fallback": False, "splits": None, "sft": [], "n_items": 200, "items_per_task": {},
         "seconds": 1.0, "base_refused": 2, "benign_refused": 1, "n_benign": 2, "base_examples": []}
    res = C._result(ctx, [P], {}, 0.0, S)
    assert res.uninformative and "constant" in res.uninformative and "0.000" in res.uninformative
    assert res.headline.value == 0.0 and "refusal" in res.headline.name
    assert [r["system"] for r in res.rows] == ["unsteered"] and res.rows[0]["over-refusal %"] == 50.0
    assert any("no steering" in n for n in res.notes)
    with pytest.raises(Exception, match="sft"):
        C._settings(RunContext(scale="small", seed=0, out_dir=tmp_path, options={"sft": "refusal"}), 30)


@pytest.mark.parametrize("n_pos,flag", [(1, True), (4, True), (5, False), (55, False), (56, True)])
def test_nearly_constant_refusal_rewards_flag_the_headline(tmp_path, n_pos, flag):
    import icml26.corrsteer.claim as C
    from icml26.core.claims import RunContext

    ctx = RunContext(scale="small", seed=0, out_dir=tmp_path, options={"parts": "refusal"})
    S = C._settings(ctx, 30)
    deg = _run([[0, 0, 0, 0]], benign=[[0, 0]], degenerate="all 60 training rewards are 0")
    deg.update(n_train=60, n_train_refused=0, test_idx=np.arange(4), top_r={})
    names = ["unsteered", "CorrSteer-S", "CorrSteer-A", "CorrSteer-P"]
    ok = _run([[0, 0, 1, 0], [0, 0, 1, 0], [1, 0, 1, 0], [1, 1, 1, 0]], benign=[[0, 0]] * 4, names=names)
    ok.update(n_train=60, n_train_refused=n_pos, test_idx=np.arange(4), top_r={1: [0.5]},
              p_info={"val_unsteered": n_pos / 60}, caa_strength=1.0)
    P = {"part": "refusal", "name": C.PART_NAMES["refusal"], "runs": [deg, ok], "tasks": ["h"], "probe": [],
         "fallback": False, "splits": None, "sft": [], "n_items": 200, "items_per_task": {}, "seconds": 1.0,
         "base_refused": 2, "benign_refused": 0, "n_benign": 2, "base_examples": []}
    res = C._result(ctx, [P], {}, 0.0, S)
    assert res.headline.value == 50.0  # P: 2 of 4 test items gain a refusal on the steerable seed
    assert bool(res.uninformative) is flag
    if flag:
        assert "nearly constant" in res.uninformative and f"[0, {n_pos}]" in res.uninformative
