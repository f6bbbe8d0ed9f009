import numpy as np
import pytest

from icml26.claims_index import get
from icml26.core.claims import Claim, Measure, Verdict, run_claim, verdict_for
from icml26.oserve.capacity import Cluster, unloaded_latency
from icml26.oserve.claim import (
    PROFILE_TYPES,
    SLO_SCALE,
    SYSTEMS,
    heterogeneity_profile,
    power_checks,
    run,
)
from icml26.oserve.replay import type_metrics
from icml26.oserve.search import Scorer, best_homogeneous, search
from icml26.oserve.workload import count_weights, work_cv, work_per_request, work_shares
from icml26.sim.cost import HardwareSpec
from icml26.sim.engine import RequestRecord
from icml26.sim.trace import Request


def test_tiny_claim_record_has_the_power_fields(tmp_path):
    r = run_claim(Claim("oserve", "p", "s", "f", run=run, power=get("oserve").power), scale="tiny",
                  out_root=tmp_path)
    assert r["verdict"] in ("reproduced", "not reproduced", "inconclusive", "uninformative"), r.get("error")
    checks = r["power"]["checks"]
    assert [c["kind"] for c in checks] == ["control", "floor", "degeneracy"]
    assert all(c["passed"] in (True, False) for c in checks)
    assert (r["verdict"] == "uninformative") == (not all(c["passed"] for c in checks))
    assert checks[0]["systems"] == ["OServe (heterogeneity profile)", "best homogeneous + LP (heterogeneity profile)"]
    assert checks[1]["systems"][-1] == SYSTEMS["s"]
    deg = checks[2]
    assert deg["values"]["total"] == 2  # tiny: one model x 2 seeds at the headline CV
    parts = {row.get("part") for row in r["rows"]}
    assert {"mix CV", "load curve", "per type", "control load curve", "power", "drift"} <= parts
    plans = {row["system"]: row["plans (per run)"] for row in r["rows"] if row.get("part") == "power"
             and row["system"] in ("OServe", "best homogeneous plan")}
    assert deg["passed"] is (plans["OServe"] != plans["best homogeneous plan"])
    curve = [row for row in r["rows"] if row.get("part") == "load curve"]
    assert [row["load (x static capacity)"] for row in curve] == [0.8, 1.0]
    assert any("prompt length only" in n for n in r["notes"])
    lo, hi = r["headline"]["spread"]
    assert lo <= r["headline"]["value"] <= hi


def test_heterogeneity_profile_plan_differs_and_is_not_worse():
    """The control's profile: OServe's plan is heterogeneous, not the homogeneous one, and its
    objective (LP goodput capacity within the SLOs) is at least the homogeneous plan's."""
    cl, prof = Cluster(1, 4, HardwareSpec.h100()), heterogeneity_profile()
    L = np.array([(i, o) for _, i, o in PROFILE_TYPES], float)
    from icml26.oserve.capacity import llama2_13b

    slo = SLO_SCALE * unloaded_latency(llama2_13b(), cl, L, profile=prof)
    sc = Scorer(llama2_13b(), cl, L, np.array([1.0, 1.0]), profile=prof, slo_s=slo)
    homo, ours = best_homogeneous(sc), search(sc, seed=0)
    assert ours.describe() != homo.describe()
    assert len({r.layout for r in ours.replicas}) > 1
    assert ours.score >= homo.score * 1.05


def test_work_mix_cv_closed_form_two_types():
    # counts 3:1, GPU-seconds 1 and 5 per request: work 3 and 5 -> shares 3/8, 5/8, CV |3-5|/(3+5)
    assert work_shares([0.75, 0.25], [1.0, 5.0]) == pytest.approx([3 / 8, 5 / 8])
    assert work_cv([0.75, 0.25], [1.0, 5.0]) == pytest.approx(0.25)
    assert work_cv([3, 1], [2.0, 2.0]) == pytest.approx(0.5)  # equal work: count CV
    assert work_cv([5, 3], [3.0, 5.0]) == pytest.approx(0.0)  # counts unequal, work equal
    c = count_weights([0.5, 0.5], [1.0, 4.0])
    assert c == pytest.approx([0.8, 0.2]) and work_cv(c, [1.0, 4.0]) == pytest.approx(0.0)
    # GPU-seconds per request: the cheapest layout (2 GPUs at 4 req/s beats 1 GPU at 1 req/s)
    n = np.array([[1.0, 0.0], [4.0, 0.5]])
    assert work_per_request(n, [1, 2]) == pytest.approx([0.5, 4.0])


def _rec(i, typ, e2e):
    return RequestRecord(i, 0.0, 0.1, e2e, 10, 10, 0, 0, typ)


def test_type_metrics_per_type_and_drops():
    recs = [_rec(i, "a", 1.0 + i / 100) for i in range(100)] + [_rec(100 + i, "b", 10.0) for i in range(99)]
    dropped = [Request(999, 0.0, 10, 10, type="b")]
    m = type_metrics(recs, dropped, {"a": 2.0, "b": 20.0})
    assert m["types"]["a"]["attainment"] == 1.0 and m["types"]["b"]["dropped"] == 1
    assert m["types"]["b"]["attainment"] == pytest.approx(0.99)
    assert m["types"]["b"]["p99"] == 10.0 or np.isinf(m["types"]["b"]["p99"])
    assert m["worst p99/slo"] == max(v["p99/slo"] for v in m["types"].values())
    assert m["dropped"] == 1


def _run(plan_c, s, a, b, c, plan_a="4xtp4pp1"):
    """A fake one_trace record at load 0.8: plans and each arm's worst-type P99/SLO."""
    worst = {"s": s, "a": a, "b": b, "c": c}
    return {"plans": {"s": "4xtp4pp1", "a": plan_a, "b": plan_a, "c": plan_c},
            "loads": {0.8: {k: {"worst p99/slo": v} for k, v in worst.items()}}}


def test_identical_plans_are_uninformative():
    """Homogeneous and OServe plans identical -> degeneracy fails, so a ratio above the target is
    still uninformative; a control that does not separate fails too."""
    runs = [_run("4xtp4pp1", 3.0, 3.0, 2.0, 2.0) for _ in range(3)]
    ctl = [_run("2xtp1pp1 + 1xtp2pp1", 1.0, 1.0, 1.0, 1.2, plan_a="2xtp2pp1") for _ in range(3)]
    checks, rows, _ = power_checks(runs, ctl, 0.8)
    kinds = {c.kind: c for c in checks}
    assert kinds["degeneracy"].passed is False and kinds["degeneracy"].values["differing"] == 0
    assert kinds["control"].passed is False  # (b)/(c) = 0.83 on the profile
    assert kinds["floor"].passed is True  # LP routing beats static on every run here
    v, reason = verdict_for(Measure("x", 1.5, "x", (1.45, 1.55)), 1.3, power=checks)
    assert v is Verdict.UNINFORMATIVE and "same decisions" in reason
    # a different plan that wins on every run, and a control that separates: all pass
    runs = [_run("2xtp2pp1 + 1xtp4pp1 + 1xtp4pp2", 3.0, 3.0, 2.5, 2.0) for _ in range(3)]
    ctl = [_run("2xtp1pp1 + 1xtp2pp1", 2.0, 2.0, 2.0, 1.2, plan_a="2xtp2pp1") for _ in range(3)]
    checks, _, _ = power_checks(runs, ctl, 0.8)
    assert all(c.passed for c in checks)
