"""The `tiny` claim runs end to end on the packaged SmolLM2 (last 2 blocks) with a verdict."""

import json

import pytest

from icml26 import claims_index
from icml26.core.claims import run_claim
from icml26.lems.claim import ARMS, BASELINES, LEMS, RANDOM, TARGET, UNIGRAM


@pytest.mark.slow
def test_tiny_claim_runs(tmp_path):
    record = run_claim(claims_index.get("lems"), scale="tiny", out_root=tmp_path)
    assert record["error"] is None, record["error"]
    assert record["verdict"] in ("reproduced", "not reproduced", "inconclusive", "uninformative")
    assert record["target"] == TARGET
    systems = {r["system"] for r in record["rows"]}
    assert systems == {"dense", UNIGRAM} | {a[0] for a in ARMS}
    checks = record["power"]["checks"]
    assert [c["kind"] for c in checks] == list(claims_index.get("lems").power.kinds)
    assert all(c["passed"] in (True, False, None) for c in checks)
    control, floor, degen = checks
    assert RANDOM in control["systems"] and len(set(control["systems"]) & set(BASELINES)) == 1
    assert LEMS in degen["systems"]
    assert any(r["left factor"] == "L_G^T" for r in record["rows"])  # each row names its factor
    assert floor["passed"] is True  # the compressed models beat a unigram by far
    assert degen["values"]["total"] > 0
    for row in record["rows"][1:]:  # equal budgets: achieved within 0.5% below the target
        if row["system"] == UNIGRAM:
            continue
        assert row["target"] - 0.005 <= row["kept"] <= row["target"]
        assert row["perplexity"] > 0
    lo, hi = record["headline"]["spread"]
    assert lo <= record["headline"]["value"] <= hi
    for fig in record["figures"]:
        assert (tmp_path / fig).is_file()
    json.dumps(record)
