import json
import os

import pytest

from icml26.core.claims import Claim, run_claim


def test_echo_tiny_claim(tmp_path):
    """tiny: two tiny random models (a separate draft), no zoo needed."""
    from icml26.claims_index import get
    from icml26.echo.claim import run

    rec = run_claim(Claim("echo", "p", "s", "f", run=run, power=get("echo").power), scale="tiny",
                    out_root=tmp_path)
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive", "uninformative"), rec.get("error")
    checks = rec["power"]["checks"]
    assert [c["kind"] for c in checks] == ["control", "floor", "degeneracy"]
    assert all(c["passed"] in (True, False, None) for c in checks)
    assert (rec["verdict"] == "uninformative") == (not rec["power"]["passed"])
    orc = [r for r in rec["rows"] if r["policy"] == "Oracle draft (acceptance 1)"]
    assert {r["B"] for r in orc} == {1, 2} and all(r["verified/accepted"] == 1 for r in orc)
    assert checks[0]["values"]["Oracle draft (acceptance 1)"] == pytest.approx(
        next(r for r in orc if r["B"] == 2)["tokens/s (modelled)"], abs=1e-3)  # rows are rounded
    pols = {r["policy"] for r in rec["rows"]}
    assert {"AR", "StaticTree", "StaticTree-SGLang", "StaticTree (tuned)", "DenseDynamic (tuned)",
            "AdaptiveChain (tuned)", "Echo", "Echo (no gates)"} <= pols
    assert {f"band: {k}" for k in ("nominal", "MFU x0.7", "MBU 0.85", "context 2048")} <= pols
    live = [r for r in rec["rows"] if r["policy"].endswith("(live CPU)")]
    assert {(r["policy"].split(" (")[0], r["B"]) for r in live} == {
        (p, 2) for p in ("AR", "StaticTree-SGLang", "AdaptiveChain", "Echo")}
    for r in live:
        assert r["tokens"] == 2 * 6 and r["K_max"] >= r["B"]
        n_same, n = map(int, r["identical to AR"].split("/"))
        assert n == 2 and 0 <= n_same <= 2
        if r["policy"].startswith("AR"):
            assert r["wall vs AR"] == 1 and r["MAT"] == 1 and r["identical to AR"] == "2/2"
        else:
            assert r["MAT"] >= 1 and r["verified/accepted"] > 0
    for r in rec["rows"]:
        if "live" in r["policy"] or r["policy"].startswith("band"):
            continue
        if r["policy"] == "AR":
            assert r["MAT"] == 1 and r["speed-up vs AR"] == 1
        elif "MAT" in r and r["policy"] != "AR":
            assert 1 <= r["MAT"] <= 1 + 4  # at most depth + bonus
            assert r["mean K_i"] <= r["K_max"] / r["B"] + 1e-9 or r["policy"].startswith(("StaticTree", "Dense"))
    exp = json.loads((tmp_path / "echo" / "echo_experiment.json").read_text()) if (
        tmp_path / "echo" / "echo_experiment.json").exists() else None
    assert all(os.path.exists(f) for f in rec["result"]["figures"]) if "result" in rec else True
    assert exp is None or len(exp["calibration"]["aucs"]) == 4


def test_power_checks_decide():
    """Identical trees for Echo and the best baseline -> degeneracy fails -> uninformative, whatever
    the headline; the oracle chain beats AR in the modelled GPU setting."""
    from icml26.core.claims import Measure, Verdict, verdict_for
    from icml26.echo.claim import power_checks
    from icml26.echo.cost import replica_spec_cost
    from icml26.echo.experiment import ORACLE, oracle_chain, tree_differences

    cost = replica_spec_cost(1024)
    k_max = max(128, int(cost.knee(128).k_max))
    orc = oracle_chain(8, 128, k_max, cost)
    ar = 128 / cost.ar_time(128)
    assert orc["tokens/s (modelled)"] > ar and orc["MAT"] <= k_max / 128
    at = {"AR": {"tokens/s (modelled)": ar}, ORACLE: orc, "Echo": {"tokens/s (modelled)": 1.5 * ar},
          "AdaptiveChain": {"tokens/s (modelled)": 1.4 * ar}}
    same = [[3, 3, [1, 1]], [2, 3, [1, 1]]]
    checks = power_checks(at, "AdaptiveChain", {"Echo": same, "AdaptiveChain": list(same)}, 128)
    assert [c.passed for c in checks] == [True, True, False]
    v, _ = verdict_for(Measure("x", 1.2, "x", (1.15, 1.25)), 1.1, power=checks)
    assert v is Verdict.UNINFORMATIVE
    assert tree_differences(same, [[3, 3, [1, 1]], [3, 4, [1, 1, 1]]]) == 1
    checks = power_checks(at, "AdaptiveChain", {"Echo": same, "AdaptiveChain": [[3, 3, [1, 1]], [3, 4, [2]]]}, 128)
    assert all(c.passed for c in checks)
