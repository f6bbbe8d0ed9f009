import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26 import claims_index
from icml26.cclrec import claim as cc
from icml26.cclrec.claim import NO_CL
from icml26.cclrec.study.checks import EQUAL, MIN_CONSENSUS, power_checks
from icml26.core.claims import Measure, RunContext, decide, run_claim, verdict_for
from icml26.core.stats import clustered_bootstrap


def test_tiny_claim_runs_with_both_targets_tuning_and_power(tmp_path):
    rec = run_claim(claims_index.get("cclrec"), scale="tiny", out_root=tmp_path / "a")
    assert rec["error"] is None, rec["error"]
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive", "uninformative")
    checks = {c["kind"]: c for c in rec["power"]["checks"]}
    assert sorted(checks) == ["control", "degeneracy", "floor"]
    assert all(c["passed"] in (True, False) for c in checks.values())  # all measured at tiny
    assert checks["degeneracy"]["systems"] == ["CCLRec", EQUAL]
    rows = {r["system"]: r for r in rec["rows"]}
    assert {"MostPop", "LightGCN", "CCLRec", EQUAL, NO_CL} <= set(rows)
    # the headline is the weaker of the two targets (intersection-union)
    lo, hi = rec["headline"]["spread"]
    assert lo <= rec["headline"]["value"] <= hi
    assert EQUAL in rec["headline"]["name"]
    assert any(k.startswith("vs ") and EQUAL in k for k in rows["CCLRec"])
    for r in rec["rows"]:
        assert 0 <= r["ndcg@20 low"] <= r["ndcg@20"] <= r["ndcg@20 high"] <= 1
        assert len(r["passes"].split("/")) == 2  # 2 seeds at tiny
    assert 0 <= rows["CCLRec"]["pos_consensus"] <= 1
    # every tuned arm has its bracketing record: grid, scores, best, interior flag
    assert set(rec["tuning"]) == {"LightGCN", "CCLRec", EQUAL, NO_CL}
    for t in rec["tuning"].values():
        assert t["best"] in t["grid"] and len(t["grid"]) == len(t["scores"]) >= 3
        assert isinstance(t["interior"], bool)
    assert len(rec["figures"]) >= 3
    # resumable: a second run (on a copy, so the first record stays for the CPU budget check)
    # reuses every (system, value, seed) fit from the unit memos
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    again = run_claim(claims_index.get("cclrec"), scale="tiny", out_root=tmp_path / "b")
    assert again["headline"] == rec["headline"]
    assert again["cpu_time_s"] < rec["cpu_time_s"]


def _fake(rng, mean, n_users=50, seeds=3, rates=None):
    users = list(range(n_users))
    out = []
    for _ in range(seeds):
        pu = np.clip(rng.normal(mean, 0.05, n_users), 0, 1)
        out.append(
            {
                "users": users,
                "per_user_ndcg20": pu.tolist(),
                "ndcg@20": float(pu.mean()),
                "rates": rates or {},
            }
        )
    return out


def test_power_checks_on_known_systems():
    rng = np.random.default_rng(0)
    fires = {"pos_consensus": 0.1, "neg_consensus": 0.002, "any_consensus": 0.101}
    res = {
        "MostPop": _fake(rng, 0.09),
        "LightGCN": _fake(rng, 0.12),
        "SGL": _fake(rng, 0.12),
        "CCLRec": _fake(rng, 0.13, rates=fires),
        EQUAL: _fake(rng, 0.13, rates=fires),
    }
    checks = {c.kind: c for c in power_checks(res, ["LightGCN", "SGL"], "CCLRec")}
    assert checks["control"].passed and checks["floor"].passed and checks["degeneracy"].passed
    assert checks["degeneracy"].values["differing"] == pytest.approx(10.1)
    # weights that never fire: CCLRec and its equal-weight arm are one model -> degenerate
    silent = {"pos_consensus": 0.0, "neg_consensus": 0.002, "any_consensus": 0.002}
    res["CCLRec"] = _fake(rng, 0.13, rates=silent)
    deg = {c.kind: c for c in power_checks(res, ["SGL"], "CCLRec")}["degeneracy"]
    assert deg.passed is False and deg.values["differing"] < 100 * MIN_CONSENSUS
    v, why = verdict_for(Measure("r", 1.05, "x", (1.02, 1.08)), 1.0, power=[deg])
    assert v.value == "uninformative" and "degeneracy" in why
    # a control that equals the null (LightGCN = MostPop per user) cannot pass
    res["LightGCN"] = [dict(x) for x in res["MostPop"]]
    ctl = {c.kind: c for c in power_checks(res, ["SGL"], "CCLRec")}["control"]
    assert ctl.passed is False
    # a floor nobody beats; the equal-weight arm absent -> degeneracy not measured
    low = {"MostPop": _fake(rng, 0.2), "LightGCN": _fake(rng, 0.05), "CCLRec": _fake(rng, 0.1)}
    fl = {c.kind: c for c in power_checks(low, ["LightGCN"], "CCLRec")}
    assert fl["floor"].passed is False and fl["control"].passed is False
    assert fl["degeneracy"].passed is None


def _records(per_seed_means: dict[str, list[list[float]]]):
    out = {}
    for n, seeds in per_seed_means.items():
        out[n] = [
            {
                "users": list(range(len(pu))),
                "per_user_ndcg20": pu,
                "ndcg@20": float(np.mean(pu)),
                "rates": {},
            }
            for pu in seeds
        ]
    return out


def test_ratio_is_the_ratio_of_pooled_means_and_checks_users():
    """Closed form: the point value of target ratios = pooled mean a / pooled mean b."""
    a = [[0.2, 0.4], [0.3, 0.1]]
    b = [[0.1, 0.1], [0.2, 0.2]]
    res = _records({"A": a, "B": b})
    ci = cc.ratio_ci(res, "A", "B", seed=0)
    assert ci.value == pytest.approx(1.0 / 0.6)
    assert ci.low <= ci.value <= ci.high
    assert ci == clustered_bootstrap(a, b, statistic="ratio", seed=0)
    res["B"][1]["users"] = [5, 6]
    with pytest.raises(ValueError, match="different users"):
        cc.ratio_ci(res, "A", "B", seed=0)


def test_settings_defaults_and_bad_systems():
    small = cc._settings(RunContext(scale="small"))
    assert small["passes"] == 50 and small["patience"] == 5 and len(small["seeds"]) == 3
    assert NO_CL in small["names"] and EQUAL in small["names"]
    with pytest.raises(ValueError, match="unknown system 'Nope'"):
        cc._settings(RunContext(scale="tiny", options={"systems": "CCLRec,Nope"}))
    with pytest.raises(ValueError, match="needs CCLRec"):
        cc._settings(RunContext(scale="tiny", options={"systems": "LightGCN,MostPop"}))
    # every unit folder is named after its system (the memo survives a changed system list)
    names = [u.out_dir.name for u in cc.units(RunContext(scale="tiny"))]
    assert len(set(names)) == len(names) and "unit-cclrec-wpm-1" in names


def test_tune_spec_variants_share_cclrec_grid_and_paper_systems_are_fixed():
    assert cc.tune_spec(EQUAL) == cc.TUNE["CCLRec"] == cc.tune_spec(NO_CL)
    assert cc.tune_spec("SGL paper λ") is None and cc.tune_spec("MostPop") is None
    assert cc.SYSTEMS[NO_CL][1]["cl_weight"] == 0.0


_iv = st.tuples(st.floats(0.5, 1.5), st.floats(0.0, 0.3), st.floats(0.0, 0.3)).map(
    lambda t: (t[0], t[0] - t[1], t[0] + t[2])
)


@settings(max_examples=200, deadline=None)
@given(a=_iv, b=_iv)
def test_both_targets_verdict_is_the_conjunction(a, b):
    """reproduced iff both targets are; not reproduced iff either is; else inconclusive."""
    value, spread = cc.both_targets(a, b)
    got = decide(Measure("h", value, "x", spread), 1.0).value
    each = [decide(Measure("t", v, "x", (lo, hi)), 1.0).value for v, lo, hi in (a, b)]
    if all(e == "reproduced" for e in each):
        assert got == "reproduced"
    elif any(e == "not reproduced" for e in each):
        assert got == "not reproduced"
    else:
        assert got == "inconclusive"
