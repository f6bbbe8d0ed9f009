"""Every `icml26 ...` line in a fenced block of docs/tie.md runs as written (small inputs), and the
Python snippet runs on a loaded trace; lines that need the model zoo are skipped with a reason."""

import json
import re
import shlex
import warnings
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from icml26.cli import app
from icml26.sim.trace import synthetic_trace, write_trace

DOC = Path(__file__).resolve().parents[2] / "docs" / "tie.md"

#: doc lines not run here, by the subcommand they start with, and why
SKIP = {
    "tie sample-lengths": "samples completions from an LLM (`--model PATH`, the model zoo): minutes, not seconds",
    "tie train": "encodes the prompts with an LLM (`--model PATH`, the model zoo)",
}


def python_blocks(doc: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_trace(tmp_path / "AzureLLMInferenceTrace_conv.csv", synthetic_trace(150, rate=6.0, seed=0), schema="azure")
    rng = np.random.default_rng(0)
    lengths = {f"p{i}": {"lengths": np.minimum(np.ceil(np.exp(3 + rng.standard_t(3.5, 8))), 256).astype(int).tolist()}
               for i in range(2)}
    for e in lengths.values():
        e["censored"] = [x >= 256 for x in e["lengths"]]
    (tmp_path / "lengths.json").write_text(json.dumps(lengths))
    return tmp_path


def test_every_documented_cli_line_runs(workdir, doc_commands):
    cmds = doc_commands(DOC)
    ran, skipped = [], []
    for cmd in cmds:
        key = next((k for k in SKIP if cmd.startswith(f"icml26 {k}")), None)
        if key:
            skipped.append(key)
            continue
        r = CliRunner().invoke(app, shlex.split(cmd)[1:])
        assert r.exit_code == 0, (cmd, r.output, r.exception)
        ran.append((cmd, r.output))
    assert sorted(set(skipped)) == sorted(SKIP)  # every skip reason is still needed
    assert len(ran) >= 3
    fits = json.loads((workdir / "fits.json").read_text())
    assert set(fits) == {"p0", "p1"} and all(0 < v["ks_p_logt"] <= 1 for v in fits.values())
    sims = [o for c, o in ran if " simulate " in c]
    assert sims and all("ptla_p99" in o and "e2e_p50" in o for o in sims)


def test_python_snippet_runs_on_a_loaded_trace(workdir, capsys):
    (block,) = [b for b in python_blocks(DOC) if "load_trace(" in b]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        exec(compile(block, str(DOC), "exec"), {})  # noqa: S102 - the doc's own example
    assert "'ptla_mean'" in capsys.readouterr().out
