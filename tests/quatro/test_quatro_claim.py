"""The tiny claim runs end to end with a computed verdict; the CLI rejects bad input."""

import json

from typer.testing import CliRunner

from icml26.core.claims import Claim, run_claim
from icml26.quatro.cli import app


def test_tiny_claim_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    from icml26.quatro.claim import run

    rec = run_claim(Claim("quatro", "p", "s", "f", run=run), scale="tiny", out_root=tmp_path)
    assert rec.get("error") is None, rec.get("error")
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive")
    arms = {r["arm"] for r in rec["rows"]}
    assert arms == {"tr_dual", "grpo", "dapo", "gspo", "kl_penalty"}
    assert rec["headline"]["value"] > 0
    assert any("RECONSTRUCTION" in n for n in rec["notes"])


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


def _fake_unit(seed_p1: dict, steps=5):
    from icml26.core.claims import Measure, Result

    rows = []
    for arm, p1 in seed_p1.items():
        rows.append(
            {
                "kind": "run",
                "arm": arm,
                "mu": 8,
                "lr_x": 10,
                "pass@1": p1,
                "pass@8": p1,
                "unique": 3,
                "ent_ratio": 1.0,
                "collapse": False,
                "kl_share": 0.5,
                "clip": 0.0,
                "reward": [0.3] * steps,
                "entropy": [1.0] * steps,
                "pass@1_0": 0.3,
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
    a = {"tr_dual": 0.30, "grpo": 0.20, "dapo": 0.10, "gspo": 0.05, "kl_penalty": 0.0}
    b = {"tr_dual": 0.10, "grpo": 0.20, "dapo": 0.25, "gspo": 0.05, "kl_penalty": 0.0}
    res = combine(ctx, [_fake_unit(a), _fake_unit(b)])
    eps = 0.5 / (32 * 8)  # tiny eval: 32 prompts x 8 samples
    # best baseline by mean pass@1 is grpo (0.20) over dapo (0.175)
    assert abs(res.headline.value - (0.2 + eps) / (0.2 + eps)) < 1e-12
    lo, hi = res.headline.spread
    assert (
        abs(lo - (0.1 + eps) / (0.2 + eps)) < 1e-12 and abs(hi - (0.3 + eps) / (0.2 + eps)) < 1e-12
    )
    assert len(res.rows) == 5 and all(p.exists() for p in res.figures)
