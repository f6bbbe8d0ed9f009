from icml26.core.claims import Claim, run_claim
from icml26.oserve.claim import run


def test_tiny_claim(tmp_path):
    r = run_claim(Claim("oserve", "p", "s", "f", run=run), scale="tiny", out_root=tmp_path)
    assert r["verdict"] in ("reproduced", "not reproduced", "inconclusive"), r.get("error")
    assert len(r["rows"]) == 2
    lo, hi = r["headline"]["spread"]
    assert lo <= r["headline"]["value"] <= hi
