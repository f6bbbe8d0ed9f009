from icml26.cclrec.claim import run
from icml26.core.claims import Claim, run_claim


def test_tiny_claim_runs_with_honest_rows(tmp_path):
    rec = run_claim(Claim("cclrec", "p", "s", "f", run=run), scale="tiny", out_root=tmp_path)
    assert rec["error"] is None, rec["error"]
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive")
    names = [r["system"] for r in rec["rows"]]
    assert {"MostPop", "LightGCN", "CCLRec"} <= set(names)
    lo, hi = rec["headline"]["spread"]
    assert lo <= rec["headline"]["value"] <= hi
    for r in rec["rows"]:
        assert 0 <= r["ndcg@20 min"] <= r["ndcg@20"] <= r["ndcg@20 max"] <= 1
    cc = next(r for r in rec["rows"] if r["system"] == "CCLRec")
    assert 0 <= cc["pos_consensus"] <= 1 and 0 <= cc["struct_neg_pass"] <= 1
    assert len(rec["figures"]) >= 3
