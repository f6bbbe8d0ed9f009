import json

from typer.testing import CliRunner

from icml26.skillpro.cli import app
from icml26.skillpro.skill import load_pool


def test_train_resume_eval_export(tmp_path):
    r = CliRunner()
    out = tmp_path / "pool"
    res = r.invoke(app, ["train", "-o", str(out), "--iterations", "2", "--episodes", "2"])
    assert res.exit_code == 0, res.output
    log = json.loads((out / "log.json").read_text())
    assert len(log["iterations"]) == 2 and (out / "pool_snapshots" / "iter_0001.json").exists()
    res = r.invoke(app, ["train", "-o", str(out), "--iterations", "3", "--episodes", "2"])
    assert res.exit_code == 0 and len(json.loads((out / "log.json").read_text())["iterations"]) == 3
    res = r.invoke(app, ["train", "-o", str(out), "--iterations", "3", "--episodes", "3"])
    assert res.exit_code != 0 and "another config" in str(res.exception)
    res = r.invoke(app, ["eval", "--pool", str(out), "--episodes", "2"])
    assert res.exit_code == 0 and 0 <= json.loads(res.output)["return"] <= 1
    res = r.invoke(app, ["export", str(out), "-o", str(tmp_path / "skills")])
    assert res.exit_code == 0
    assert [s.name for s in load_pool(tmp_path / "skills")] == [s.name for s in load_pool(out)]
    assert not (tmp_path / "skills" / "pool.json").exists()
