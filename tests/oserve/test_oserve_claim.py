from icml26.claims_index import get
from icml26.core.claims import Claim, Verdict, run_claim, verdict_for
from icml26.oserve.claim import SYSTEMS, power_checks, run


def test_tiny_claim(tmp_path):
    r = run_claim(Claim("oserve", "p", "s", "f", run=run, power=get("oserve").power), scale="tiny",
                  out_root=tmp_path)
    assert r["verdict"] in ("reproduced", "not reproduced", "inconclusive", "uninformative"), r.get("error")
    checks = r["power"]["checks"]
    assert [c["kind"] for c in checks] == ["control", "floor", "degeneracy"]
    assert all(c["passed"] in (True, False) for c in checks)
    assert (r["verdict"] == "uninformative") == (not all(c["passed"] for c in checks))
    deg = checks[2]
    assert deg["values"]["total"] == 2  # tiny: 2 seeds at the headline CV
    sys_rows = {row["system"]: row for row in r["rows"] if row["mix CV"] == 0.7 and "system" in row}
    assert set(sys_rows) == set(SYSTEMS.values()) | {"best homogeneous plan"}
    same = sys_rows["best homogeneous plan"]["plans (per seed)"] == sys_rows["OServe"]["plans (per seed)"]
    assert deg["passed"] is (not same)
    cv_rows = [row for row in r["rows"] if row["mix CV"] != "drift" and "system" not in row]
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


def _run(plan_c, p99):
    """A fake one_run record: plans (a/b: 4xtp4), OServe's ``plan_c``; ``p99`` per arm."""
    r = {"homo": "4 x tp4", "ours": plan_c, "ex": plan_c}
    r |= {k: {"e2e_p99": v} for k, v in p99.items()}
    return r


def test_identical_plans_are_uninformative():
    """The issue's finding: homogeneous, OServe and optimum plans all 4 x tp4 -> degeneracy and
    control fail, so a (a)/(c) ratio above the target is still uninformative."""
    rs = [_run("4 x tp4", {"a": 100.0 + s, "b": 60.0, "c": 60.0, "e": 60.0}) for s in range(3)]
    checks, rows, _ = power_checks(rs, 0.7)
    kinds = {c.kind: c for c in checks}
    assert kinds["degeneracy"].passed is False and kinds["degeneracy"].values["differing"] == 0
    assert kinds["control"].passed is False  # same plan, same LP routing: ratio exactly 1
    assert kinds["floor"].passed is True  # LP routing beats least-load on every seed here
    from icml26.core.claims import Measure

    v, reason = verdict_for(Measure("x", 1.7, "x", (1.66, 1.72)), 1.3, power=checks)
    assert v is Verdict.UNINFORMATIVE and "same decisions" in reason
    # a genuinely different plan that wins on every seed passes all three
    rs = [_run("2 x tp4 + 1 x tp8", {"a": 100.0, "b": 90.0, "c": 70.0, "e": 70.0}) for _ in range(3)]
    checks, _, _ = power_checks(rs, 0.7)
    assert all(c.passed for c in checks)
