"""The tiny claim runs end to end with a computed verdict; the CLI rejects bad input."""

import json

import pytest
from typer.testing import CliRunner

from icml26 import claims_index
from icml26.core.claims import run_claim
from icml26.quatro.cli import app


def test_tiny_claim_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    rec = run_claim(claims_index.get("quatro"), scale="tiny", out_root=tmp_path)
    assert rec.get("error") is None, rec.get("error")
    # tiny runs one seed at the harshest setting only: the control cannot be measured
    assert rec["verdict"] == "uninformative"
    checks = {c["kind"]: c for c in rec["power"]["checks"]}
    assert sorted(checks) == sorted(rec["power"]["declared"]) == ["control", "floor"]
    assert checks["control"]["passed"] is None
    assert "on-policy GRPO" in checks["control"]["reason"]
    assert checks["floor"]["passed"] in (True, False)
    base = checks["floor"]["values"]["base policy (SFT-warmed, before RL)"]
    assert 0 < base < 1
    arms = {r["arm"] for r in rec["rows"]}
    assert arms == {"tr_dual", "tr_dual (std A)", "grpo", "dapo", "gspo", "kl_penalty",
                    "base policy"}
    assert rec["headline"]["value"] > 0
    assert "tr_dual (std A)" in rec["headline"]["name"]
    assert any("RECONSTRUCTION" in n for n in rec["notes"])
    # tiny does not tune: every arm at the base LR x the setting's multiplier (8, 10)
    assert any("No LR tuning" in n for n in rec["notes"]) and rec["tuning"] is None
    assert {r["lr"] for r in rec["rows"] if "lr" in r} == {1e-3}


def test_cli_dual_and_errors():
    r = CliRunner().invoke(app, ["dual", "1,0,0,0", "1,1,1,1", "--delta", "0.05"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in r.output.strip().splitlines()]
    assert rows[0]["lambda"] > 0 and abs(rows[0]["kl_to_uniform"] - 0.05) < 1e-8
    assert rows[1]["lambda"] == 0.0
    bad = CliRunner().invoke(app, ["dual", "1,x"])
    assert bad.exit_code != 0
    bad2 = CliRunner().invoke(app, ["dual", "1,0", "--delta", "-1"])
    assert bad2.exit_code != 0


def _fake_unit(seed_p1: dict, steps=5, on_policy=None, base=0.3):
    from icml26.core.claims import Measure, Result

    rows = []
    runs = [(arm, p1, (8, 10)) for arm, p1 in seed_p1.items()]
    runs += [(arm, p1, (1, 1)) for arm, p1 in (on_policy or {}).items()]
    for arm, p1, (mu, lr_x) in runs:
        rows.append(
            {
                "kind": "run",
                "arm": arm,
                "mu": mu,
                "lr_x": lr_x,
                "pass@1": p1,
                "pass@8": p1,
                "unique": 3,
                "ent_ratio": 1.0,
                "collapse": False,
                "kl_share": 0.5,
                "clip": 0.0,
                "reward": [0.3] * steps,
                "entropy": [1.0] * steps,
                "pass@1_0": base,
            }
        )
    rows.append({"kind": "query", "spread": [0.5], "lam": [1.0], "kl": [0.04]})
    rows.append({"kind": "sft", "sft_steps": 10, "sft_val_exact": 0.3})
    return Result(rows=rows, headline=Measure("unit", 0.0), target=0.0)


def test_units_and_combine_headline(tmp_path):
    from icml26.core.claims import RunContext
    from icml26.quatro.claim import combine, units

    ctx = RunContext(scale="tiny", seed=4, out_dir=tmp_path, options={"seeds": "2"})
    us = units(ctx)
    assert [u.seed for u in us] == [4, 5] and len({u.out_dir for u in us}) == 2
    a = {"tr_dual": 0.29, "tr_dual (std A)": 0.30, "grpo": 0.20, "dapo": 0.10, "gspo": 0.05,
         "kl_penalty": 0.0}
    b = {"tr_dual": 0.29, "tr_dual (std A)": 0.10, "grpo": 0.20, "dapo": 0.25, "gspo": 0.05,
         "kl_penalty": 0.0}
    res = combine(ctx, [_fake_unit(a), _fake_unit(b)])
    eps = 0.5 / (32 * 8)  # tiny eval: 32 prompts x 8 samples
    # best baseline by mean pass@1 is grpo (0.20) over dapo (0.175)
    assert abs(res.headline.value - (0.2 + eps) / (0.2 + eps)) < 1e-12
    lo, hi = res.headline.spread
    assert (
        abs(lo - (0.1 + eps) / (0.2 + eps)) < 1e-12 and abs(hi - (0.3 + eps) / (0.2 + eps)) < 1e-12
    )
    # the headline is the matched-scale arm, never the centred tr_dual (0.29 here)
    assert len(res.rows) == 7 and all(p.exists() for p in res.figures)  # 6 arms + base policy
    checks = {c.kind: c for c in res.power}
    assert checks["control"].passed is None  # no on-policy (mu=1, LR x1) GRPO in this run
    # every arm's mean pass@1 at (8, 10) is at or below the base policy's 0.3: uninformative
    assert checks["floor"].passed is False


def _combine(tmp_path, a, b, on_a, on_b, base=(0.3, 0.3)):
    from icml26.core.claims import RunContext
    from icml26.quatro.claim import combine

    ctx = RunContext(scale="small", seed=0, out_dir=tmp_path, options={"seeds": "2"})
    units = [
        _fake_unit(a, on_policy=on_a, base=base[0]),
        _fake_unit(b, on_policy=on_b, base=base[1]),
    ]
    return combine(ctx, units)


def test_power_checks_control_and_floor(tmp_path):
    a = {"tr_dual": 0.40, "tr_dual (std A)": 0.40, "grpo": 0.20, "dapo": 0.10, "gspo": 0.05,
         "kl_penalty": 0.0}
    b = {"tr_dual": 0.36, "tr_dual (std A)": 0.36, "grpo": 0.24, "dapo": 0.25, "gspo": 0.05,
         "kl_penalty": 0.0}
    # the stress degrades GRPO beyond the seed spread: on-policy 0.35..0.37 vs stressed 0.20..0.24
    res = _combine(tmp_path, a, b, {"grpo": 0.35}, {"grpo": 0.37}, base=(0.30, 0.32))
    checks = {c.kind: c for c in res.power}
    ctl = checks["control"]
    assert ctl.passed is True
    assert ctl.systems == ("grpo (mu=1, LR x1)", "grpo (mu=8, LR x10)")
    assert ctl.spreads["grpo (mu=8, LR x10)"] == (0.20, 0.24)
    systems = {v for r in res.rows for v in r.values() if isinstance(v, str)}
    assert set(ctl.systems) <= systems and "base policy (SFT-warmed, before RL)" in systems
    flo = checks["floor"]  # tr_dual 0.38 lies above the base policy's 0.30..0.32
    assert flo.passed is True and flo.values["base policy (SFT-warmed, before RL)"] == 0.31
    # overlapping seed ranges: the stress did not measurably degrade GRPO -> control fails
    res = _combine(tmp_path, a, b, {"grpo": 0.22}, {"grpo": 0.30}, base=(0.30, 0.45))
    checks = {c.kind: c for c in res.power}
    assert checks["control"].passed is False
    assert checks["floor"].passed is False  # tr_dual 0.38 is inside the base range 0.30..0.45


def test_every_arm_is_tuned_then_stressed_from_its_own_lr(tmp_path, monkeypatch):
    """tune_lrs brackets every arm (interior best, resumable memo); units carry the tuned LRs and
    run_unit multiplies each arm's own LR by the setting's multiplier."""
    import math

    import icml26.quatro.claim as C
    from icml26.core.claims import RunContext

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    peak = {"tr_dual": 4e-4, "tr_dual (std A)": 1e-4, "grpo": 2e-4, "dapo": 2e-4,
            "gspo": 1e-4, "kl_penalty": 5e-5}
    calls = []

    class FakeLoop:
        def __init__(self, arm, mu, lr):
            self.arm, self.mu, self.lr, self.query_stats = arm, mu, lr, []

        def run(self, progress=None):
            calls.append((self.arm, self.mu, self.lr))
            r = 0.5 - 0.1 * math.log(self.lr / peak[C._lr_key(self.arm)]) ** 2
            return [{"r": r}]

    def fake_summary(hist):
        return {"reward": [0.0, 0.0, 0.0, hist[0]["r"]], "pass@1": 0.3, "pass@8": 0.5,
                "unique": 1, "ent_ratio": 1.0, "collapse": False, "kl_share": 1.0, "clip": 0.0,
                "entropy": [1.0] * 4, "pass@1_0": 0.3}

    monkeypatch.setattr(C, "warm_policy", lambda *a, **k: (None, None, {"sft_val_exact": 0.3}))
    monkeypatch.setattr(C, "_loop", lambda base, tok, spec, arm, over, mu, lr, seed:
                        FakeLoop(arm, mu, lr))
    monkeypatch.setattr(C, "_summarise", fake_summary)
    ctx = RunContext(scale="small", seed=0, out_dir=tmp_path / "out", options={"seeds": "2"})
    us = C.units(ctx)
    tuned = json.loads(us[0].options["tuned_lrs"])
    assert tuned == pytest.approx(peak, rel=1e-9)  # the grid (x2 around 1e-4) holds each peak
    tuning = json.loads(us[0].options["tuning"])
    assert all(tuning[a]["interior"] for a in C.ARMS)
    assert tuning["tr_dual"]["extensions"] == 1  # 4e-4 sat at the start grid's top edge
    assert all(mu == 1 for _, mu, _ in calls)
    n_tune = len(calls)
    C.units(ctx)  # resumed from the memo: no new tuning runs
    assert len(calls) == n_tune
    calls.clear()
    res = C.run_unit(us[1])
    got = {(arm, mu): lr for arm, mu, lr in calls}
    for arm in C.ARMS:
        assert got[(arm, 1)] == pytest.approx(peak[arm])
        assert got[(arm, 8)] == pytest.approx(10 * peak[arm])
    assert got[("tr_dual δ=0.01", 8)] == pytest.approx(10 * peak["tr_dual"])
    lrs_row = next(r for r in res.rows if r["kind"] == "lrs")
    assert lrs_row["tuning"]["protocol"]["setting"] == "mu=1, LR x1"
    # the tuning seed's on-policy runs at the tuned LR are the tuning runs: not trained again
    calls.clear()
    res0 = C.run_unit(us[0])
    assert not [c for c in calls if c[1] == 1]
    assert {(a, s) for a, s in ((r["arm"], r["mu"]) for r in res0.rows if r["kind"] == "run")
            if s == 1} == {(a, 1) for a in C.ARMS}
