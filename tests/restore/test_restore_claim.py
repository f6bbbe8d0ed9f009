"""The tiny claim end to end, the CLI on a tiny saved model, bad JSONL input."""

import json

import pytest

from icml26.core.claims import Claim, run_claim
from icml26.core.errors import UserError


def test_tiny_claim_runs_and_decides(tmp_path):
    from icml26.restore.claim import run

    rec = run_claim(Claim("restore", "p", "s", "f", run=run), scale="tiny", out_root=tmp_path)
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive"), rec.get("error")
    systems = {r["system"] for r in rec["rows"]}
    assert {"full", "divprune", "divprune+restore", "visionzip+restore", "tome+restore", "fastv", "pdrop"} <= systems
    mass = [r for r in rec["rows"] if r["system"].startswith("attention mass")]
    assert len(mass) == 4 and all(len(r["per_layer"]) == 2 for r in mass)
    assert len(rec["figures"]) == 3


def _tiny_saved(tmp_path):
    from icml26.core.io import atomic_write_json
    from icml26.restore import scenes
    from icml26.restore.train import N_IMAGE_TOKENS  # noqa: F401
    from icml26.restore.vlm import tiny_llava

    m = tiny_llava(len(scenes.VOCAB), image_size=scenes.IMAGE, patch=4, vision_width=32, hidden=32,
                   image_token_id=scenes.IMAGE_ID)
    m.save_pretrained(tmp_path / "m")
    atomic_write_json(tmp_path / "m" / "restore-vocab.json", {"vocab": scenes.VOCAB})
    return tmp_path / "m"


def test_cli_eval_on_saved_tiny_model(tmp_path):
    from typer.testing import CliRunner

    from icml26.restore.cli import app
    from icml26.restore.vqa import write_scenes_jsonl

    model = _tiny_saved(tmp_path)
    data = write_scenes_jsonl(tmp_path / "d", n_scenes=3)
    res = CliRunner().invoke(app, ["eval", "--model", str(model), "--data", str(data), "--keep", "16",
                                   "--full", "-o", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    out = json.loads((tmp_path / "r.json").read_text())
    assert out["reduced"]["n"] == out["full"]["n"] > 0 and out["reduced"]["config"]["keep"] == 16


def test_bad_jsonl_names_the_line(tmp_path):
    from icml26.restore.vqa import read_vqa_jsonl

    (tmp_path / "a.png").write_bytes(b"")
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps({"image": "a.png", "question": "q", "answers": ["x"]}) + "\n"
                 + json.dumps({"image": "missing.png", "question": "q", "answers": ["x"]}) + "\n")
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
    rec = run_claim(Claim("restore", "p", "s", "f", run=run), scale="full", out_root=tmp_path,
                    options={"model": str(model), "data": str(data), "keeps": "16", "dtype": "float32"})
    assert rec["verdict"] != "error", rec.get("error")
    assert [r["system"] for r in rec["rows"]][:2] == ["full", "divprune"]
