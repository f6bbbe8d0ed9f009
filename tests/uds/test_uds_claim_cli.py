import json

import pytest
import torch

from icml26 import claims_index
from icml26.core.claims import run_claim


def test_tiny_claim_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    rec = run_claim(claims_index.get("uds"), scale="tiny", out_root=tmp_path / "res")
    assert rec["error"] is None, rec["error"]
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive", "uninformative")
    arms = {(r["selector"], r["budget"]) for r in rec["rows"]}
    assert {
        ("full", 1.0),
        ("random", 0.25),
        ("maxloss", 0.25),
        ("gradnorm", 0.25),
        ("uds", 0.25),
        ("random-tokens", 0.25),
        ("single-source (add)", 0.25),
        ("no fine-tuning (model before SFT)", 0.0),
    } <= arms
    lo, hi = rec["headline"]["spread"]
    assert lo <= rec["headline"]["value"] <= hi
    assert all((tmp_path / "res" / f).exists() for f in rec["figures"])
    # power checks: the three declared kinds, measured on this run
    checks = {c["kind"]: c for c in rec["power"]["checks"]}
    assert sorted(checks) == sorted(rec["power"]["declared"]) == ["control", "degeneracy", "floor"]
    assert all(c["passed"] in (True, False) for c in checks.values())
    assert checks["control"]["systems"] == ["random", "single-source (add)"]
    d = checks["degeneracy"]["values"]
    assert 0 < d["differing"] <= d["total"]
    # from scratch, the untrained model is far worse than any fine-tuned arm
    assert checks["floor"]["passed"] is True
    # budgets: tokens per arm; the token-matched Random trains on as many response tokens as UDS
    b = rec["budgets"]["response tokens trained (the tokens the loss trains on)"]
    assert b["matched"] is False and set(b["arms"]) >= {"random", "uds", "random-tokens"}
    assert abs(b["arms"]["random-tokens"] - b["arms"]["uds"]) <= 32  # within one example
    assert b["arms"]["uds"] > b["arms"]["random"]  # UDS picks longer responses
    full = next(r for r in rec["rows"] if r["selector"] == "full")
    assert full["scoring s"] == 0.0
    # cached runs make the rerun resume without training: every arm and the base model, 2 seeds
    n = len(list((tmp_path / "cache" / "icml26" / "uds" / "runs").glob("*.json")))
    n_arms = sum(1 for r in rec["rows"] if "seeds" in r)  # arm rows and the base-model row
    assert n == 2 * n_arms


def _batch(lengths, prompt=1):
    """A collated batch whose row i has lengths[i] response tokens after ``prompt`` tokens."""
    from icml26.uds.loop import Encoded, collate

    items = [
        Encoded([1] * prompt + [2 + i] * n, [-100] * prompt + [2 + i] * n)
        for i, n in enumerate(lengths)
    ]
    return collate(items, pad_id=0), items


def test_token_matched_random_reaches_the_token_target():
    from icml26.uds.claim import TokenMatchedRandom

    batch, _ = _batch([1, 2, 3, 4, 5, 6, 7, 8])
    sel = TokenMatchedRandom(seed=0, total_tokens=60, n_steps=4)
    used, picks = 0, []
    for _ in range(4):
        idx = sel.select(None, batch, k=2)  # k is ignored: tokens decide
        assert len(idx) >= 1 and len(set(idx.tolist())) == len(idx)
        picks.append(len(idx))
        used += sum(i + 1 for i in idx.tolist())
    assert 60 <= used < 60 + 8  # reaches the total, overshooting by less than one example
    assert sel.used == used
    # a target below one example per step still trains on one example per step
    sel = TokenMatchedRandom(seed=0, total_tokens=1, n_steps=3)
    assert [len(sel.select(None, batch, 2)) for _ in range(3)] == [1, 1, 1]


def test_single_source_prefers_its_family_and_fills_k():
    from icml26.uds.claim import SingleSource

    batch, items = _batch([2, 2, 2, 2, 2, 2])
    fam = ["a", "b", "a", "b", "b", "b"]
    family_of = {tuple(e.input_ids): f for e, f in zip(items, fam, strict=True)}
    sel = SingleSource(seed=0, family_of=family_of, family="a")
    assert sel.select(None, batch, 2).tolist() == [0, 2]
    three = sel.select(None, batch, 3).tolist()
    assert {0, 2} <= set(three) and len(three) == 3  # only one of family b fills the K


def test_pick_overlap_counts_shared_picks_per_epoch():
    from icml26.uds.claim import pick_overlap

    # 2 epochs, 3 picks each: index 5 shared in epoch 0; index 1 picked by b only in epoch 0
    a = [5, 1, 2, 7, 8, 9]
    b = [5, 3, 4, 1, 8, 0]
    assert pick_overlap(a, b, epochs=2) == (2, 6)  # (0, 5) and (1, 8)
    assert pick_overlap(a, a, epochs=2) == (6, 6)


def test_cli_sft_writes_adapter_that_reloads(tmp_path):
    pytest.importorskip("peft")
    from peft import PeftModel
    from typer.testing import CliRunner

    from icml26.core.lm import tiny_llama
    from icml26.uds.cli import app

    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"{i}+1=", "response": str(i + 1)}) + "\n" for i in range(8))
    )
    out = tmp_path / "out"
    res = CliRunner().invoke(
        app,
        [
            "sft",
            "--data",
            str(data),
            "-o",
            str(out),
            "--model",
            "tiny",
            "--candidates",
            "4",
            "--budget",
            "0.5",
            "--max-len",
            "16",
            "--lr",
            "1e-2",
        ],
    )
    assert res.exit_code == 0, res.output
    log = json.loads((out / "uds_selection.json").read_text())
    assert len(log["selected"]) == 4 and len(set(log["selected"])) == 4
    base, _ = tiny_llama(128, 4, 4, max_len=24, seed=0)
    model = PeftModel.from_pretrained(base, out)
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert lora_b and any(
        float(p.abs().max()) > 0 for p in lora_b
    )  # trained away from the zero init
    bad = CliRunner().invoke(app, ["sft", "--data", str(tmp_path / "none.jsonl"), "-o", str(out)])
    assert bad.exit_code != 0
    assert torch.is_tensor(lora_b[0])


def _capture_saved(monkeypatch):
    """Record the model object that `uds sft` saves, to compare it with the reloaded adapter."""
    from peft import PeftModel

    saved = []
    original = PeftModel.save_pretrained

    def save(self, *args, **kwargs):
        saved.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(PeftModel, "save_pretrained", save)
    return saved


def test_cli_sft_adapter_reloads_with_identical_logits(tmp_path, monkeypatch):
    """The adapter written by `icml26 uds sft --lora` reloads with peft onto a fresh base model
    and gives the trained model's logits exactly (fp32, CPU)."""
    pytest.importorskip("peft")
    from peft import PeftModel
    from typer.testing import CliRunner

    from icml26.core.lm import tiny_llama
    from icml26.uds.cli import app

    saved = _capture_saved(monkeypatch)
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(
            json.dumps({"messages": [{"role": "user", "content": f"{i}*3="},
                                     {"role": "assistant", "content": str(3 * i)}]}) + "\n"
            for i in range(12)
        )
    )  # fmt: skip
    out = tmp_path / "adapter"
    args = ["sft", "--data", str(data), "-o", str(out), "--model", "tiny", "--candidates", "4"]
    args += ["--budget", "0.25", "--max-len", "16", "--lr", "3e-2", "--seed", "3"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert (out / "adapter_config.json").exists()
    assert len(saved) == 1
    trained = saved[0].eval()
    base, _ = tiny_llama(128, 4, 4, max_len=24, seed=3)  # the CLI's base for --model tiny
    ids = torch.randint(3, 259, (3, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        base_logits = base(input_ids=ids).logits.clone()
        reloaded = PeftModel.from_pretrained(base, out).eval()
        want = trained(input_ids=ids).logits
        got = reloaded(input_ids=ids).logits
    assert torch.equal(got, want)
    assert not torch.allclose(got, base_logits)  # the adapter changed the model
    # 12 examples, 4 candidates per step, budget 1/4: 3 steps of one pick each
    log = json.loads((out / "uds_selection.json").read_text())
    assert len(log["selected"]) == 3


def test_shared_lr_is_bracketed_until_interior():
    """The full-data LR grid extends at the edge holding the best (one point at a time, at most
    twice), and a too-short grid is a usage error."""
    import math

    import pytest

    from icml26.core.errors import UserError
    from icml26.uds.claim import LR_CAP, LR_EXTEND, tune_lr

    calls = []

    def val(lr):  # validation loss with its minimum at 1e-2: above the start grid's top
        calls.append(lr)
        return (math.log10(lr) + 2.0) ** 2

    lr, tr = tune_lr(val, (3e-3, 3e-4, 1e-3))  # unsorted on purpose
    assert (LR_EXTEND, LR_CAP) == (1, 2)
    assert tr.interior and tr.extensions == 2 and len(calls) == 5
    assert lr == pytest.approx(1e-2, rel=0.05) and lr == tr.best
    assert tr.grid == sorted(tr.grid) and tr.grid[0] == 3e-4
    with pytest.raises(UserError, match=">= 3 distinct LRs"):
        tune_lr(val, (1e-3, 3e-3))
