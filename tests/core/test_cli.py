"""The command line: exit codes, clear errors, reproduce -> JSON + report, interrupts."""

import json

import pytest
from typer.testing import CliRunner

from icml26 import claims_index
from icml26.cli import app
from icml26.core.claims import Claim, Measure, Result
from icml26.core.options import Opt

runner = CliRunner()


def _ok(ctx):
    return Result(rows=[{"system": "m", "v": 1}], headline=Measure("h", 2.0, "x"), target=1.0)


def _boom(ctx):
    raise RuntimeError("kaput")


def _interrupt(ctx):
    raise KeyboardInterrupt


@pytest.fixture
def fake_claims(monkeypatch):
    claims = [
        Claim("good", "P", "S", "F", run=_ok, area="t", options=(Opt("model", "str", "an LM"),)),
        Claim("bad", "P", "S", "F", run=_boom, area="t"),
        Claim("stop", "P", "S", "F", run=_interrupt, area="t"),
        Claim("later", "P", "S", "F", area="t"),
    ]
    monkeypatch.setattr(claims_index, "CLAIMS", claims)
    return claims


def test_list_and_show(fake_claims, tmp_path):
    r = runner.invoke(app, ["list", "--out", str(tmp_path)])
    assert r.exit_code == 0 and "good" in r.output and "planned" in r.output
    r = runner.invoke(app, ["show", "good", "--out", str(tmp_path)])
    assert r.exit_code == 0 and "not run" in r.output


def test_unknown_name_exit_2_lists_known(fake_claims, tmp_path):
    r = runner.invoke(app, ["reproduce", "nope", "--out", str(tmp_path)])
    assert r.exit_code == 2
    assert "good" in r.output and "bad" in r.output


def test_bad_scale_exit_2_lists_allowed(fake_claims):
    r = runner.invoke(app, ["reproduce", "good", "--scale", "huge"])
    assert r.exit_code == 2
    assert "tiny" in r.output and "small" in r.output and "full" in r.output


def test_planned_and_empty_are_usage_errors(fake_claims, tmp_path):
    assert runner.invoke(app, ["reproduce", "later", "--out", str(tmp_path)]).exit_code == 2
    assert runner.invoke(app, ["reproduce", "--out", str(tmp_path)]).exit_code == 2
    assert runner.invoke(app, ["reproduce", "good", "--opt", "novalue"]).exit_code == 2


def test_reproduce_writes_json_and_report(fake_claims, tmp_path):
    r = runner.invoke(
        app, ["reproduce", "good", "--scale", "tiny", "--out", str(tmp_path), "--opt", "model=/x"]
    )
    assert r.exit_code == 0, r.output
    rec = json.loads((tmp_path / "good" / "tiny.json").read_text())
    assert rec["verdict"] == "reproduced" and rec["options"] == {"model": "/x"}
    assert (tmp_path / "report.html").is_file() and (tmp_path / "report.md").is_file()
    r = runner.invoke(app, ["show", "good", "--out", str(tmp_path)])
    assert "reproduced" in r.output


def test_errored_claim_exit_1_others_still_run(fake_claims, tmp_path):
    r = runner.invoke(app, ["reproduce", "bad", "good", "--scale", "tiny", "--out", str(tmp_path)])
    assert r.exit_code == 1
    assert json.loads((tmp_path / "bad" / "tiny.json").read_text())["verdict"] == "error"
    assert json.loads((tmp_path / "good" / "tiny.json").read_text())["verdict"] == "reproduced"
    assert "kaput" in (tmp_path / "report.html").read_text()


def test_ctrl_c_keeps_earlier_results(fake_claims, tmp_path):
    r = runner.invoke(app, ["reproduce", "good", "stop", "--scale", "tiny", "--out", str(tmp_path)])
    assert r.exit_code == 130
    assert json.loads((tmp_path / "good" / "tiny.json").read_text())["verdict"] == "reproduced"
    assert not (tmp_path / "stop" / "tiny.json").exists()
    assert not list(tmp_path.rglob("*.tmp"))
    r = runner.invoke(app, ["report", "--out", str(tmp_path)])
    assert r.exit_code == 0 and (tmp_path / "report.html").is_file()


def test_every_method_subcommand_loads():
    from icml26.cli import METHOD_CLIS

    for name in METHOD_CLIS:
        r = runner.invoke(app, [name, "--help"])
        assert r.exit_code == 0, (name, r.output)
        assert "Usage" in r.output


def _with_estimates(monkeypatch, claims):
    """``good`` and ``bad`` with CPU-time estimates at tiny (``later`` stays planned)."""
    from dataclasses import replace

    est = {"good": 0.5, "bad": 2.25}
    claims = [replace(c, cpu_minutes={"tiny": est[c.name]}) if c.name in est else c
              for c in claims]
    monkeypatch.setattr(claims_index, "CLAIMS", claims)


def test_dry_run_prints_the_eta_and_runs_nothing(fake_claims, monkeypatch, tmp_path):
    _with_estimates(monkeypatch, fake_claims)
    r = runner.invoke(app, ["reproduce", "good", "bad", "--scale", "tiny", "--dry-run",
                            "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert any(ln.split()[:4] == ["good", "tiny", "0.50", "estimate"] for ln in lines), r.output
    assert any(ln.split()[:4] == ["bad", "tiny", "2.2", "estimate"] for ln in lines), r.output
    assert any(ln.split()[:2] == ["total", "2.8"] for ln in lines), r.output
    assert len(lines) <= 6  # a heading, the column names, two claims, the total
    assert not list(tmp_path.iterdir())  # no record, no figure, no report
    r = runner.invoke(app, ["reproduce", "--all", "--scale", "small", "--dry-run",
                            "--out", str(tmp_path)])
    assert r.exit_code == 0 and "?" in r.output and "3 claim(s) without an estimate" in r.output


def test_reproduce_prints_the_eta_first_then_uses_the_last_run(fake_claims, monkeypatch,
                                                                tmp_path):
    _with_estimates(monkeypatch, fake_claims)
    r = runner.invoke(app, ["reproduce", "good", "--scale", "tiny", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "0.50" in r.output and "estimate" in r.output
    assert r.output.index("expected CPU time") < r.output.index("good: reproduced")
    rec = json.loads((tmp_path / "good" / "tiny.json").read_text())
    r = runner.invoke(app, ["reproduce", "good", "--scale", "tiny", "--dry-run",
                            "--out", str(tmp_path)])
    assert r.exit_code == 0
    assert f"last run {rec['started_at'][:10]}" in r.output and "estimate" not in r.output


def test_outputs_and_device_are_checked_before_any_work(fake_claims, tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(claims_index, "CLAIMS", [
        Claim("good", "P", "S", "F", run=lambda ctx: ran.append(1) or _ok(ctx), area="t")])
    a_file = tmp_path / "results.txt"
    a_file.write_text("x")
    r = runner.invoke(app, ["reproduce", "good", "--scale", "tiny", "--out", str(a_file)])
    assert r.exit_code == 2 and "is a file" in r.output and not ran
    r = runner.invoke(app, ["reproduce", "good", "--scale", "tiny", "--out", str(tmp_path / "r"),
                            "--device", "tpu"])
    assert r.exit_code == 2 and "tpu" in r.output and not ran
    r = runner.invoke(app, ["reproduce", "good", "--scale", "tiny", "--out", str(tmp_path / "r"),
                            "--device", "cuda:0"])
    import torch
    if not torch.cuda.is_available():
        assert r.exit_code == 2 and "no CUDA GPU" in r.output and not ran
    assert not (tmp_path / "r").exists()
    r = runner.invoke(app, ["report", "--out", str(tmp_path / "typo")])
    assert r.exit_code == 2 and "no such results folder" in r.output
    assert not (tmp_path / "typo").exists()
    r = runner.invoke(app, ["report", "--out", str(a_file)])
    assert r.exit_code == 2 and "is a file" in r.output
