"""The `tiny` claim runs end to end on the packaged SmolLM2 (last 2 blocks) with a verdict."""

import json

import pytest

from icml26.core.claims import Claim, run_claim
from icml26.lems.claim import ARMS, TARGET, run


@pytest.mark.slow
def test_tiny_claim_runs(tmp_path):
    record = run_claim(Claim("lems", "p", "s", "f", run=run), scale="tiny", out_root=tmp_path)
    assert record["error"] is None, record["error"]
    assert record["verdict"] in ("reproduced", "not reproduced", "inconclusive")
    assert record["target"] == TARGET
    systems = {r["system"] for r in record["rows"]}
    assert systems == {"dense"} | {a[0] for a in ARMS}
    for row in record["rows"][1:]:  # equal budgets: achieved within 0.5% below the target
        assert row["target"] - 0.005 <= row["kept"] <= row["target"]
        assert row["perplexity"] > 0
    lo, hi = record["headline"]["spread"]
    assert lo <= record["headline"]["value"] <= hi
    for fig in record["figures"]:
        assert (tmp_path / fig).is_file()
    json.dumps(record)
