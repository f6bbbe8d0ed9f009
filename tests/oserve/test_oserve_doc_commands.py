"""Every `icml26 ...` line in a fenced block of docs/oserve.md runs as written, on small traces."""

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from icml26.cli import app
from icml26.oserve.workload import make_trace, mix_weights
from icml26.sim.trace import write_trace

DOC = Path(__file__).resolve().parents[2] / "docs" / "oserve.md"

#: doc lines not run here, by the subcommand they start with, and why (none today)
SKIP: dict[str, str] = {}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_trace(tmp_path / "F.csv", make_trace(300, 10.0, mix_weights(4, 0.5, 0), seed=0), schema="azure")
    write_trace(tmp_path / "G.csv", make_trace(300, 10.0, mix_weights(4, 0.5, 1), seed=1), schema="azure")
    return tmp_path


def test_every_documented_cli_line_runs(workdir, doc_commands):
    cmds = doc_commands(DOC)
    assert any(c.startswith("icml26 oserve plan") for c in cmds) and any(" simulate " in c for c in cmds)
    for cmd in cmds:
        if any(cmd.startswith(f"icml26 {k}") for k in SKIP):
            continue
        r = CliRunner().invoke(app, shlex.split(cmd)[1:])
        assert r.exit_code == 0, (cmd, r.output, r.exception)
        if " simulate " in cmd:
            assert re.search(r"e2e_p99: \d", r.output)
    plan = json.loads((workdir / "plan" / "plan.json").read_text())
    assert plan["model_config"] == "llama-2-70b" and plan["gpus_per_node"] == 8
    assert sorted(p.name for p in (workdir / "plan").glob("launch_*.sh")) == [
        "launch_sglang_node0.sh", "launch_sglang_node1.sh", "launch_vllm_node0.sh", "launch_vllm_node1.sh"]
