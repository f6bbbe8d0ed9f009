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
