"""The ``binarypc`` claim runs at tiny scale and yields a measured verdict."""

from icml26.core.claims import Claim, run_claim


def test_binarypc_tiny_claim(tmp_path):
    from icml26.binarypc.claim import run

    rec = run_claim(Claim("binarypc", "p", "s", "f", run=run), scale="tiny", out_root=tmp_path)
    assert rec.get("error") is None, rec.get("error")
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive")
    recall = [r for r in rec["rows"] if r["study"] == "recall"]
    rows = {r["method"]: r for r in recall}
    assert rows["Oracle top-k"]["oracle recall@k"] == 1.0
    # the oracle keeps the most mass of any method that attends at most k tokens per head
    assert all(
        r["attention-mass recall"] <= rows["Oracle top-k"]["attention-mass recall"] + 1e-6
        for r in recall
        if not r["method"].startswith("MagicPIG")
    )
    assert "MagicPIG (K=10, L=150)" in rows
    ppl = {r["method"]: r for r in rec["rows"] if r["study"] == "perplexity"}
    assert ppl["Dense"]["ppl ratio to dense"] == 1.0 and "BinaryPC" in ppl
    pk = [r for r in rec["rows"] if r["study"] == "passkey"]
    assert {r["method"] for r in pk} == {"Dense", "BinaryPC"}


def test_binarypc_claim_resumes_from_its_memo(tmp_path, monkeypatch):
    """A second run in the same folder reuses every finished stage (here: nothing recomputed)."""
    import icml26.binarypc.claim as claim
    import icml26.binarypc.decode_eval as de

    first = run_claim(
        Claim("binarypc", "p", "s", "f", run=claim.run), scale="tiny", out_root=tmp_path
    )
    assert first.get("error") is None, first.get("error")

    def boom(*a, **k):
        raise AssertionError("recomputed a memoised stage")

    monkeypatch.setattr(claim, "evaluate_context", boom)
    monkeypatch.setattr(de, "perplexity_study", boom)
    monkeypatch.setattr(de, "passkey_study", boom)
    again = run_claim(
        Claim("binarypc", "p", "s", "f", run=claim.run), scale="tiny", out_root=tmp_path
    )
    assert again.get("error") is None, again.get("error")
    assert again["rows"] == first["rows"]
    assert again["headline"] == first["headline"]


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
