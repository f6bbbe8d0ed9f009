from icml26.core.claims import Claim, run_claim
from icml26.oserve.claim import run


def test_tiny_claim(tmp_path):
    r = run_claim(Claim("oserve", "p", "s", "f", run=run), scale="tiny", out_root=tmp_path)
    assert r["verdict"] in ("reproduced", "not reproduced", "inconclusive"), r.get("error")
    cv_rows = [row for row in r["rows"] if row["mix CV"] != "drift"]
    drift = {row["system"]: row for row in r["rows"] if row["mix CV"] == "drift"}
    assert len(cv_rows) == 2
    assert set(drift) == {"static", "cold reload", "OServe switching", "oracle",
                          "predictor: per-type LSTM", "predictor: aggregate LSTM",
                          "predictor: moving average"}
    assert drift["static"]["static P99 / this P99"] == 1.0 and drift["static"]["switches"] == 0
    assert all(drift[f"predictor: {n}"]["RRMSE %"] > 0 for n in ("per-type LSTM", "moving average"))
    assert len(r["figures"]) == 2
    lo, hi = r["headline"]["spread"]
    assert lo <= r["headline"]["value"] <= hi
