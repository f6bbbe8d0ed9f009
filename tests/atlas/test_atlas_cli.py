"""`icml26 atlas calibrate | test | score` on CSV and Parquet files, and the tiny claim."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from icml26.atlas.cli import app
from icml26.atlas.synth import random_bank, simulate
from icml26.core.errors import UserError


def write_wide(path, R, items):
    rows = ["model," + ",".join(items)]
    for m, r in enumerate(R):
        rows.append(f"m{m}," + ",".join("" if np.isnan(v) else str(int(v)) for v in r))
    path.write_text("\n".join(rows) + "\n")


def test_calibrate_then_test_and_score(tmp_path):
    true = random_bank(30, "2PL", seed=1)
    R = simulate(true, np.random.default_rng(0).standard_normal(400), seed=2, missing=0.1)
    write_wide(tmp_path / "r.csv", R, true.ids)
    run = CliRunner().invoke
    res = run(
        app,
        ["calibrate", str(tmp_path / "r.csv"), "-o", str(tmp_path / "bank.json"), "--model", "2PL"],
    )
    assert res.exit_code == 0, res.output
    bank = json.loads((tmp_path / "bank.json").read_text())
    assert bank["schema_version"] == 1 and bank["model"] == "2PL" and bank["n_items"] == 30
    # long layout for the tested models
    Yt = simulate(true, np.array([-1.0, 1.0]), seed=3)
    lines = ["model,item,correct"] + [
        f"t{m},{i},{int(Yt[m, k])}" for m in range(2) for k, i in enumerate(true.ids)
    ]
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    res = run(
        app,
        [
            "test",
            "--bank",
            str(tmp_path / "bank.json"),
            "--responses",
            str(tmp_path / "t.csv"),
            "--min-items",
            "10",
            "--se-stop",
            "0.5",
            "--trace",
            str(tmp_path / "t.jsonl"),
            "-o",
            str(tmp_path / "out.json"),
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads((tmp_path / "out.json").read_text())
    assert [o["model"] for o in out] == ["t0", "t1"] and out[0]["theta"] < out[1]["theta"]
    steps = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert len(steps) == out[0]["items"] + out[1]["items"]
    res = run(
        app,
        ["score", "--bank", str(tmp_path / "bank.json"), "--responses", str(tmp_path / "t.csv")],
    )
    assert res.exit_code == 0 and "t1\ttheta" in res.output


def test_parquet_and_unknown_items(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    true = random_bank(12, "2PL", seed=4)
    R = simulate(true, np.random.default_rng(1).standard_normal(120), seed=5)
    cols = {"model": [f"m{i}" for i in range(len(R))]}
    cols.update({i: R[:, k].astype(int).tolist() for k, i in enumerate(true.ids)})
    pq.write_table(pa.table(cols), tmp_path / "r.parquet")
    res = CliRunner().invoke(
        app,
        [
            "calibrate",
            str(tmp_path / "r.parquet"),
            "-o",
            str(tmp_path / "b.json"),
            "--model",
            "2PL",
        ],
    )
    assert res.exit_code == 0, res.output
    (tmp_path / "x.csv").write_text("model,zz1,zz2\nq,1,0\n")
    res = CliRunner().invoke(
        app, ["test", "--bank", str(tmp_path / "b.json"), "--responses", str(tmp_path / "x.csv")]
    )
    assert isinstance(res.exception, UserError) and "not in the bank, e.g. 'zz1', 'zz2'" in str(
        res.exception
    )


def test_tiny_claim(tmp_path):
    from icml26.atlas.claim import run
    from icml26.claims_index import get
    from icml26.core.claims import Claim, run_claim

    spec = get("atlas").power
    assert get("atlas").paper_value is None  # the paper's number is ATLAS / random-100
    rec = run_claim(
        Claim("atlas", "p", "s", "f", run=run, power=spec), scale="tiny", out_root=tmp_path
    )
    assert rec["verdict"] in (
        "reproduced",
        "not reproduced",
        "inconclusive",
        "uninformative",
    ), rec.get("error")
    checks = rec["power"]["checks"]
    assert [c["kind"] for c in checks] == list(spec.kinds)
    assert all(c["passed"] in (True, False, None) for c in checks)
    floor = next(c for c in checks if c["kind"] == "floor")
    assert floor["values"]["calibration mean theta 0 (floor)"] > 0
    systems = {(r["part"][:3], r["system"]) for r in rec["rows"]}
    assert {
        ("(c)", "ATLAS SE 0.3"),
        ("(c)", "random-k (matched to SE 0.3)"),
        ("(c)", "random-4k (4x matched, positive control)"),
        ("(a)", "ATLAS SE 0.1"),
        ("(a)", "random-k (matched)"),
        ("(a)", "random-100"),
        ("(a)", "anchor-100 (k-means medoids)"),
    } <= systems
    assert rec["headline"]["name"].startswith("theta MAE ATLAS SE 0.3 / random-k")
    lo, hi = rec["headline"]["spread"]
    assert lo <= rec["headline"]["value"] <= hi
    assert (tmp_path / "atlas").exists()


def test_headline_ci_is_over_calibration_resamples_and_control_needs_separation():
    import numpy as np

    from icml26.atlas.claim import CONTROL, FLOOR, _headline, power_checks_a

    rng = np.random.default_rng(0)
    # three calibration resamples whose banks differ: ATLAS / random-k = 0.3, 0.5, 0.7
    errs = []
    for r in (0.3, 0.5, 0.7):
        k = np.abs(rng.normal(0.4, 0.05, 200))
        errs.append(
            {
                "ATLAS SE 0.1": r * k,
                "random-k (matched)": k,
                CONTROL: k,  # more items that do not help: the control must fail
                "random-100": 0.9 * k,
                "anchor-100 (k-means medoids)": 0.9 * k,
                FLOOR: np.full(200, 0.8),
            }
        )
    h = _headline({"errs": errs}, n_boot=500)
    assert abs(h["ratio"].value - 0.5) < 0.01
    assert h["ratio"].n_clusters == 3
    lo, hi = h["ratio"].spread
    assert lo < 0.35 and hi > 0.65  # the seed-to-seed (calibration) spread is in the CI
    control, floor = power_checks_a(h)
    assert control.kind == "control" and control.passed is False
    assert floor.kind == "floor" and floor.passed is True


def test_test_and_score_drop_items_the_bank_dropped_and_calibrate_names_them(tmp_path):
    true = random_bank(20, "2PL", seed=6)
    R = simulate(true, np.random.default_rng(2).standard_normal(300), seed=7)
    R[:, 3] = 1.0  # constant: dropped at calibration
    R[:, 5] = np.nan  # never answered: dropped too
    write_wide(tmp_path / "r.csv", R, true.ids)
    run = CliRunner().invoke
    bank_path = tmp_path / "b.json"
    res = run(app, ["calibrate", str(tmp_path / "r.csv"), "-o", str(bank_path), "--model", "2PL"])
    assert res.exit_code == 0, res.output
    assert "dropped items: i3 (constant: all correct), i5 (no responses)" in res.output
    # the calibration file itself, which still holds i3 and i5, can be tested and scored
    for cmd in (["test", "--min-items", "5", "--se-stop", "0.6"], ["score"]):
        res = run(app, [*cmd, "--bank", str(bank_path), "--responses", str(tmp_path / "r.csv")])
        assert res.exit_code == 0, res.output
        assert "2 item(s) of" in res.output and "not used: i3, i5" in res.output
    # an item the bank never saw is still an error
    (tmp_path / "x.csv").write_text("model,i0,zz\nq,1,0\n")
    res = run(app, ["score", "--bank", str(bank_path), "--responses", str(tmp_path / "x.csv")])
    assert isinstance(res.exception, UserError) and "'zz'" in str(res.exception)


def test_calibrate_to_mirt_csv_convert_and_score_from_it(tmp_path):
    true = random_bank(15, "2PL", seed=8)
    R = simulate(true, np.random.default_rng(3).standard_normal(200), seed=9)
    write_wide(tmp_path / "r.csv", R, true.ids)
    run = CliRunner().invoke
    res = run(
        app, ["calibrate", str(tmp_path / "r.csv"), "-o", str(tmp_path / "b.csv"), "--model", "2PL"]
    )
    assert res.exit_code == 0, res.output
    assert (tmp_path / "b.csv").read_text().splitlines()[0] == '"","a1","d","g","u"'
    res = run(app, ["convert", str(tmp_path / "b.csv"), "-o", str(tmp_path / "b.json")])
    assert res.exit_code == 0, res.output
    res = run(
        app, ["score", "--bank", str(tmp_path / "b.csv"), "--responses", str(tmp_path / "r.csv")]
    )
    assert res.exit_code == 0 and "m0\ttheta" in res.output
    res = run(app, ["calibrate", str(tmp_path / "r.csv"), "--g-prior", "5;17"])
    assert res.exit_code != 0 and "--g-prior" in res.output


def test_from_lm_eval_writes_the_long_table(tmp_path):
    for model, accs in (("org__m1", [1, 0, 1]), ("org__m2", [0, 0, 1])):
        d = tmp_path / "out" / model
        d.mkdir(parents=True)
        lines = [
            json.dumps({"doc_id": k, "filter": "none", "metrics": ["acc"], "acc": float(v)})
            for k, v in enumerate(accs)
        ]
        (d / "samples_arc_easy_2024-05-13T14-26-39.123456.jsonl").write_text("\n".join(lines))
    res = CliRunner().invoke(
        app, ["from-lm-eval", str(tmp_path / "out"), "-o", str(tmp_path / "r.csv")]
    )
    assert res.exit_code == 0, res.output
    text = (tmp_path / "r.csv").read_text().splitlines()
    assert text[0] == "model,item,correct" and "org__m2,arc_easy:2,1" in text and len(text) == 7
