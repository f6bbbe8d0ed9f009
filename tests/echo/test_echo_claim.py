import json
import os

import pytest

from icml26.core.claims import Claim, run_claim


@pytest.mark.skipif(os.environ.get("ICML26_SKIP_MODEL") == "1", reason="needs the packaged SmolLM2")
def test_echo_tiny_claim(tmp_path):
    from icml26.echo.claim import run

    rec = run_claim(Claim("echo", "p", "s", "f", run=run), scale="tiny", out_root=tmp_path)
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive"), rec.get("error")
    pols = {r["policy"] for r in rec["rows"]}
    assert {"AR", "StaticTree", "StaticTree-SGLang", "DenseDynamic", "AdaptiveChain", "Echo"} <= pols
    live = [r for r in rec["rows"] if r["policy"].endswith("(live CPU)")]
    assert {(r["policy"].split(" (")[0], r["B"]) for r in live} == {
        (p, 2) for p in ("AR", "StaticTree", "DenseDynamic", "Echo")}
    for r in live:
        assert r["tokens"] == 2 * 6 and r["K_max"] >= r["B"]
        n_same, n = map(int, r["identical to AR"].split("/"))
        assert n == 2 and 0 <= n_same <= 2
        if r["policy"].startswith("AR"):
            assert r["wall vs AR"] == 1 and r["MAT"] == 1 and r["identical to AR"] == "2/2"
        else:
            assert r["MAT"] >= 1 and r["verified/accepted"] > 0
    for r in rec["rows"]:
        if "live" in r["policy"]:
            continue
        if r["policy"] == "AR":
            assert r["MAT"] == 1 and r["speed-up vs AR"] == 1
        elif "MAT" in r and r["policy"] != "AR":
            assert 1 <= r["MAT"] <= 1 + 4  # at most depth + bonus
            assert r["mean K_i"] <= r["K_max"] / r["B"] + 1e-9 or r["policy"].startswith("StaticTree")
    exp = json.loads((tmp_path / "echo" / "echo_experiment.json").read_text()) if (
        tmp_path / "echo" / "echo_experiment.json").exists() else None
    assert all(os.path.exists(f) for f in rec["result"]["figures"]) if "result" in rec else True
    assert exp is None or len(exp["calibration"]["aucs"]) == 4
