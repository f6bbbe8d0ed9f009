"""The ``binarypc`` claim runs at tiny scale and yields a measured verdict."""

from icml26.core.claims import Claim, run_claim


def test_binarypc_tiny_claim(tmp_path):
    from icml26.binarypc.claim import run

    rec = run_claim(Claim("binarypc", "p", "s", "f", run=run), scale="tiny", out_root=tmp_path)
    assert rec.get("error") is None, rec.get("error")
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive")
    rows = {r["method"]: r for r in rec["rows"]}
    assert rows["Oracle top-k"]["oracle recall@k"] == 1.0
    # the oracle keeps the most mass of any method at the same budget
    assert all(
        r["attention-mass recall"] <= rows["Oracle top-k"]["attention-mass recall"] + 1e-6
        for r in rec["rows"]
    )
