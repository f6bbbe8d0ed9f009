import json

import pytest

from icml26.core.claims import Claim, run_claim
from icml26.core.mcq import bigbench_ready


@pytest.mark.skipif(not bigbench_ready(), reason="BIG-bench task index not built (make setup)")
def test_tiny_claim(tmp_path):
    from icml26.corrsteer.claim import run

    rec = run_claim(Claim("corrsteer", "p", "s", "f", run=run), scale="tiny", out_root=tmp_path)
    assert rec["verdict"] != "error", rec.get("error")
    rows = {r["system"]: r for r in rec["rows"]}
    assert {"unsteered", "CorrSteer-S", "CorrSteer-A", "CorrSteer-P", "raw-mode P",
            "mean-difference (CAA)", "random feature #1"} <= set(rows)
    assert rows["unsteered"]["Δacc pp"] == 0
    lo, hi = rec["headline"]["spread"]
    assert lo <= rec["headline"]["value"] <= hi
    details = json.loads(next(tmp_path.rglob("details.json")).read_text())
    assert details["runs"][0]["base_train_acc"] > 0
