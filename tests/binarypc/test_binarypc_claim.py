"""The ``binarypc`` claim runs at tiny scale and yields a measured verdict."""

import numpy as np

from icml26.claims_index import get
from icml26.core.claims import Claim, run_claim

POWER = get("binarypc").power


def test_binarypc_tiny_claim(tmp_path):
    from icml26.binarypc.claim import run

    rec = run_claim(
        Claim("binarypc", "p", "s", "f", run=run, power=POWER), scale="tiny", out_root=tmp_path
    )
    assert rec.get("error") is None, rec.get("error")
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive", "uninformative")
    checks = rec["power"]["checks"]
    assert [c["kind"] for c in checks] == ["control", "floor", "degeneracy"]
    assert all(c["passed"] in (True, False, None) for c in checks)
    assert (rec["verdict"] == "uninformative") == (not rec["power"]["passed"])
    assert checks[0]["systems"] == ["Oracle top-k", "Random-k"]
    assert checks[2]["values"]["total"] == 4 * 8  # 1 context x 4 layers x 8 positions
    recall = [r for r in rec["rows"] if r["study"] == "recall"]
    rows = {r["method"]: r for r in recall}
    assert rows["Oracle top-k"]["oracle recall@k"] == 1.0
    # the oracle keeps the most mass of any method that attends at most k tokens per head
    assert all(
        r["attention-mass recall"] <= rows["Oracle top-k"]["attention-mass recall"] + 1e-6
        for r in recall
        if not r["method"].startswith("MagicPIG")
    )
    assert "MagicPIG (K=10, L=150)" in rows and "Random-k" in rows
    assert rows["Random-k"]["attention-mass recall"] < rows["Oracle top-k"]["attention-mass recall"]
    ppl = {r["method"]: r for r in rec["rows"] if r["study"] == "perplexity"}
    assert ppl["Dense"]["ppl ratio to dense"] == 1.0 and "BinaryPC" in ppl
    pk = [r for r in rec["rows"] if r["study"] == "passkey"]
    assert {r["method"] for r in pk} == {"Dense", "BinaryPC"}


def test_binarypc_claim_resumes_from_its_memo(tmp_path, monkeypatch):
    """A second run in the same folder reuses every finished stage (here: nothing recomputed)."""
    import icml26.binarypc.claim as claim
    import icml26.binarypc.decode_eval as de

    first = run_claim(
        Claim("binarypc", "p", "s", "f", run=claim.run, power=POWER),
        scale="tiny",
        out_root=tmp_path,
    )
    assert first.get("error") is None, first.get("error")

    def boom(*a, **k):
        raise AssertionError("recomputed a memoised stage")

    monkeypatch.setattr(claim, "evaluate_context", boom)
    monkeypatch.setattr(de, "perplexity_study", boom)
    monkeypatch.setattr(de, "passkey_study", boom)
    again = run_claim(
        Claim("binarypc", "p", "s", "f", run=claim.run, power=POWER),
        scale="tiny",
        out_root=tmp_path,
    )
    assert again.get("error") is None, again.get("error")
    assert again["rows"] == first["rows"]
    assert again["headline"] == first["headline"]
    assert again["power"] == first["power"]


def test_passkey_fits_at_the_models_position_limit():
    """A passkey trial as long as the model's window must not run past it (prompt + answer +
    key replay), dense or sparse: the 8k SmolLM2 trial used to fail at 8,197 positions."""
    import torch

    from icml26.binarypc.decode_eval import passkey_config, passkey_reserve, passkey_study
    from icml26.core.lm import tiny_llama

    model, tok = tiny_llama(layers=3, max_len=320, seed=0)
    model.eval()
    filler = torch.tensor(
        tok(
            "the quick brown fox jumps over the lazy dog. " * 40, add_special_tokens=False
        ).input_ids
    )
    cfg = {"BinaryPC": passkey_config(0.5, method="bpc", dense_layers=(0,), min_context=16)}
    recs = passkey_study(model, tok, filler, [320], [2], cfg, max_new=8)
    assert {r["method"] for r in recs} == {"Dense", "BinaryPC"} and len(recs) == 4
    assert all(r["length"] == 320 for r in recs)
    assert passkey_reserve(8, 6) == 8 and passkey_reserve(4, 9) == 8


def _records(same, n_ctx=3, n_pos=4, bpc=0.8, base=0.6):
    """Fake recall records: per context one layer; ``same`` = BinaryPC's selection identical to
    every baseline's."""
    from icml26.binarypc.claim import BASELINES

    rng = np.random.default_rng(0)
    out = []
    level = {
        "BinaryPC": bpc,
        "Oracle top-k": 0.95,
        "Random-k": 0.1,
        "StreamingLLM (4 sinks)": 0.3,
        **{b: base for b in BASELINES},
    }
    for c in range(n_ctx):
        for lab, m in level.items():
            r = {
                "variant": lab,
                "frac": 0.02,
                "ctx": c,
                "layer": 2,
                "mass": m + 0.01 * rng.standard_normal(n_pos) + 0.05 * c,
            }
            if lab == "BinaryPC":
                for b in BASELINES:
                    r[f"same:{b}"] = np.full(n_pos, 1.0 if same else 0.0)
                    r[f"shared:{b}"] = np.full(n_pos, 1.0 if same else 0.5)
            out.append(r)
    return out


def test_identical_selections_are_uninformative():
    """BinaryPC selecting exactly what the best baseline selects -> degeneracy fails; distinct
    selections pass; the headline CI has contexts as its clusters."""
    from icml26.binarypc.claim import context_clusters, power_checks
    from icml26.core.stats import clustered_bootstrap

    checks, rows = power_checks(_records(same=True), "Quest (page 16)")
    assert [c.kind for c in checks] == ["control", "floor", "degeneracy"]
    assert checks[0].passed and checks[1].passed and checks[2].passed is False
    checks, _ = power_checks(_records(same=False), "Quest (page 16)")
    assert all(c.passed for c in checks)
    recs = _records(same=False)
    ci = clustered_bootstrap(
        context_clusters(recs, "BinaryPC"), context_clusters(recs, "Quest (page 16)")
    )
    assert ci.n_clusters == 3 and ci.n_items == 12
    # floor: everything at or below random / StreamingLLM fails
    checks, _ = power_checks(_records(same=False, bpc=0.2, base=0.2), "Quest (page 16)")
    assert checks[1].passed is False
