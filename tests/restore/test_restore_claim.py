"""The tiny claim end to end, the CLI on a tiny saved model, bad JSONL input."""

import json

import pytest

from icml26.core.claims import Claim, run_claim
from icml26.core.errors import UserError


def test_tiny_claim_runs_and_decides(tmp_path):
    from icml26.claims_index import get
    from icml26.restore.claim import run

    rec = run_claim(
        Claim("restore", "p", "s", "f", run=run, power=get("restore").power),
        scale="tiny",
        out_root=tmp_path,
    )
    assert rec.get("error") is None, rec.get("error")
    # tiny is an untrained model: below the accuracy gate, so uninformative whatever the checks say
    assert rec["verdict"] == "uninformative"
    checks = rec["power"]["checks"]
    assert sorted(c["kind"] for c in checks) == [
        "control",
        "control",
        "degeneracy",
        "degeneracy",
        "floor",
    ]
    assert all(c["passed"] in (True, False, None) for c in checks)
    per_base = {r["system"]: r for r in rec["rows"] if r["system"].startswith("per base:")}
    assert set(per_base) == {
        "per base: divprune+restore / divprune",
        "per base: visionzip+restore / visionzip",
    }
    assert all(len(r["per build"]) == 2 for r in per_base.values())  # tiny: two random builds
    controls = [r for r in rec["rows"] if r["system"].startswith("control: full /")]
    assert len(controls) == 2 and all(
        0 <= r["answers changed by RESTORE"] <= r["of"] == 32 for r in controls
    )
    builds = [r for r in rec["rows"] if r["system"].startswith("build seed")]
    assert [r["system"] for r in builds] == ["build seed 0", "build seed 1"]
    assert all("FAIL" in r["gate"] for r in builds)
    assert any("weaker of DivPrune and VisionZip-like" in rec["headline"]["name"] for _ in [0])
    proxy = [r for r in rec["rows"] if r["system"].startswith("mechanism (")]
    assert len(proxy) == 9 and all(r["mass / full (all layers)"] > 0 for r in proxy)
    systems = {r["system"] for r in rec["rows"]}
    assert {
        "full",
        "divprune",
        "divprune+restore",
        "visionzip+restore",
        "tome+restore",
        "fastv",
        "pdrop",
    } <= systems
    mass = [r for r in rec["rows"] if r["system"].startswith("attention mass")]
    assert len(mass) == 4 and all(len(r["per_layer"]) == 2 for r in mass)
    assert len(rec["figures"]) == 3


def _tiny_saved(tmp_path):
    from icml26.core.io import atomic_write_json
    from icml26.restore import scenes
    from icml26.restore.train import N_IMAGE_TOKENS  # noqa: F401
    from icml26.restore.vlm import tiny_llava

    m = tiny_llava(
        len(scenes.VOCAB),
        image_size=scenes.IMAGE,
        patch=4,
        vision_width=32,
        hidden=32,
        image_token_id=scenes.IMAGE_ID,
    )
    m.save_pretrained(tmp_path / "m")
    atomic_write_json(tmp_path / "m" / "restore-vocab.json", {"vocab": scenes.VOCAB})
    return tmp_path / "m"


def test_cli_eval_on_saved_tiny_model(tmp_path):
    from typer.testing import CliRunner

    from icml26.restore.cli import app
    from icml26.restore.vqa import write_scenes_jsonl

    model = _tiny_saved(tmp_path)
    data = write_scenes_jsonl(tmp_path / "d", n_scenes=3)
    res = CliRunner().invoke(
        app,
        [
            "eval",
            "--model",
            str(model),
            "--data",
            str(data),
            "--keep",
            "16",
            "--full",
            "-o",
            str(tmp_path / "r.json"),
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads((tmp_path / "r.json").read_text())
    assert out["reduced"]["n"] == out["full"]["n"] > 0 and out["reduced"]["config"]["keep"] == 16


def test_bad_jsonl_names_the_line(tmp_path):
    from icml26.restore.vqa import read_vqa_jsonl

    (tmp_path / "a.png").write_bytes(b"")
    p = tmp_path / "d.jsonl"
    p.write_text(
        json.dumps({"image": "a.png", "question": "q", "answers": ["x"]})
        + "\n"
        + json.dumps({"image": "missing.png", "question": "q", "answers": ["x"]})
        + "\n"
    )
    with pytest.raises(UserError, match=r"d.jsonl:2: image 'missing.png' not found"):
        read_vqa_jsonl(p)
    p.write_text(json.dumps({"question": "q", "answers": []}) + "\n")
    with pytest.raises(UserError, match=r":1: missing field 'image'"):
        read_vqa_jsonl(p)


def test_full_scale_on_user_model_and_jsonl(tmp_path):
    from icml26.restore.claim import run
    from icml26.restore.vqa import write_scenes_jsonl

    model = _tiny_saved(tmp_path)
    data = write_scenes_jsonl(tmp_path / "d", n_scenes=2)
    from icml26.claims_index import get

    rec = run_claim(
        Claim("restore", "p", "s", "f", run=run, power=get("restore").power),
        scale="full",
        out_root=tmp_path,
        options={"model": str(model), "data": str(data), "keeps": "16", "dtype": "float32"},
    )
    assert rec["verdict"] == "uninformative", rec.get(
        "error"
    )  # the user-data path measures no power check
    assert all(c["passed"] is None for c in rec["power"]["checks"])
    assert [r["system"] for r in rec["rows"]][:2] == ["full", "divprune"]


def test_power_checks_per_base():
    """No answer changed by RESTORE -> degeneracy fails (uninformative); a reduction that loses no
    accuracy fails the control; every system at the majority answer fails the floor."""
    import numpy as np

    from icml26.core.claims import Measure, Verdict, verdict_for
    from icml26.restore.claim import power_checks

    n = 200
    rng = np.random.default_rng(0)
    full = rng.random(n) < 0.9
    base = full & (rng.random(n) < 0.7)
    rest = full & (rng.random(n) < 0.85)
    res = {
        (16, "divprune"): base,
        (16, "divprune+restore"): rest,
        (16, "visionzip"): base,
        (16, "visionzip+restore"): rest,
    }
    ans = {k: np.where(v, 1, 2 + np.arange(n) % 3) for k, v in res.items()}
    majority = rng.random(n) < 0.3

    def pc(res, ans, majority, builds=(0, 1)):  # every build the same answers: a shape test
        ev = {
            s: {"full": full, "results": res, "answers": ans, "majority": majority} for s in builds
        }
        return power_checks(ev, list(builds), 16)

    checks, rows, _ = pc(res, ans, majority)
    assert all(c.passed for c in checks), [c.reason for c in checks]
    assert {r["system"]: r.get("of") for r in rows}["control: full / divprune"] == 2 * n
    ans_same = dict(ans)
    ans_same[(16, "visionzip+restore")] = ans[(16, "visionzip")]
    checks, _, _ = pc(res, ans_same, majority)
    failed = [c.name for c in checks if not c.passed]
    assert failed == ["degeneracy (visionzip)"]
    v, _ = verdict_for(Measure("x", 1.2, "x", (1.1, 1.3)), 1.0, power=checks)
    assert v is Verdict.UNINFORMATIVE
    res_same = {**res, (16, "divprune"): full}  # the reduction loses nothing
    checks, _, _ = pc(res_same, ans, majority)
    assert [c.name for c in checks if not c.passed] == ["positive control (divprune)"]
    checks, _, _ = pc(res, ans, np.ones(n, bool))
    assert [c.kind for c in checks if not c.passed] == ["floor"]


def test_gate_rules():
    from icml26.restore.study.builds import gate_decision

    assert gate_decision([0.79, 0.64, 0.72], 0.7, "median") is None
    msg = gate_decision([0.79, 0.64, 0.66], 0.7, "median")
    assert "median 0.660" in msg and "0.640" in msg
    assert gate_decision([0.79, 0.64, 0.72], 0.7, "all") is not None
    assert gate_decision([0.79, 0.64, 0.60], 0.7, "any") is None
    with pytest.raises(ValueError, match="gate rule must be one of.*got 'mean'"):
        gate_decision([0.8], 0.7, "mean")


def test_build_cache_is_keyed_by_seed_and_precision(tmp_path):
    from icml26.restore.train import model_dir

    assert (
        model_dir(tmp_path, autocast=True, seed=0).name == "tiny-llava-scenes-v3-bf16"
    )  # today's cache
    assert model_dir(tmp_path, autocast=False, seed=2).name == "tiny-llava-scenes-v3-fp32-seed2"
    with pytest.raises(ValueError, match="build seed must be an integer >= 0; got -1"):
        model_dir(tmp_path, seed=-1)


def test_build_seeds_option():
    from icml26.core.claims import RunContext
    from icml26.restore.claim import build_seeds

    def ctx(**opts):
        return RunContext(scale="small", options=opts)

    assert build_seeds(ctx()) == [0, 1, 2] and build_seeds(ctx(builds="3,5")) == [3, 5]
    with pytest.raises(UserError, match="distinct integers"):
        build_seeds(ctx(builds="1,1"))
