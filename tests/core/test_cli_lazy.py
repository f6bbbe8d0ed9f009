"""The lazy command line: help and `list` import no method module and no torch/scipy/numpy.

Import checks, not timings (timings flake on a loaded machine); `benchmarks/cli.py` times them.
"""

import importlib
import inspect
import json
import subprocess
import sys

import typer
from typer.testing import CliRunner

from icml26.cli import METHOD_CLIS, METHOD_HELP, app

HEAVY = ("torch", "scipy", "numpy", "transformers")

# Methods whose `icml26 NAME --help` may import one of HEAVY, with the reason. None today.
HEAVY_HELP_ALLOWED: dict[str, tuple[str, str]] = {}

_PROBE = """
import json, sys
from typer.testing import CliRunner
from icml26.cli import app

heavy = {heavy!r}
report = []
for args in {commands!r}:
    r = CliRunner().invoke(app, args)
    loaded = sorted(m for m in sys.modules if m.startswith("icml26.") and m.count(".") >= 1)
    report.append(dict(args=args, exit_code=r.exit_code, output=r.output,
                       heavy=[m for m in heavy if m in sys.modules], icml26=loaded))
print(json.dumps(report))
"""


def _probe(commands: list[list[str]]) -> list[dict]:
    """Invoke each command in turn in one fresh interpreter; what was imported after each."""
    code = _PROBE.format(heavy=HEAVY, commands=commands)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _real_help(name: str) -> str:
    module, _, attr = METHOD_CLIS[name].partition(":")
    command = typer.main.get_command(getattr(importlib.import_module(module), attr))
    return inspect.cleandoc(command.help or "").split("\n\n")[0]


def test_static_method_help_equals_the_apps_help():
    assert set(METHOD_HELP) == set(METHOD_CLIS)
    for name in METHOD_CLIS:
        assert METHOD_HELP[name] == _real_help(name), name
        assert "\n" not in METHOD_HELP[name], name


def test_root_help_lists_every_method_without_importing_it():
    root, listing = _probe([["--help"], ["list"]])
    assert root["exit_code"] == 0, root["output"]
    lines = root["output"].splitlines()
    for name in METHOD_CLIS:
        row = [ln for ln in lines if ln.lstrip("│ ").startswith(f"{name} ")]
        assert row, (name, root["output"])
        first_words = " ".join(METHOD_HELP[name].split()[:3])
        assert first_words in row[0], (name, row[0])
    assert root["heavy"] == [], root["heavy"]
    assert root["icml26"] == ["icml26.cli", "icml26.core", "icml26.core.errors"], root["icml26"]
    assert listing["exit_code"] == 0, listing["output"]
    assert listing["heavy"] == [], listing["heavy"]
    methods = {spec.partition(":")[0].rsplit(".", 1)[0] for spec in METHOD_CLIS.values()}
    assert not [m for m in listing["icml26"] if m in methods - {"icml26.core"}], listing["icml26"]


def test_method_help_imports_no_heavy_module():
    commands = [[name, "--help"] for name in METHOD_CLIS]
    seen: set[str] = set()
    for row in _probe(commands):
        name = row["args"][0]
        assert row["exit_code"] == 0, (name, row["output"])
        assert "Usage" in row["output"], (name, row["output"])
        new = set(row["heavy"]) - seen
        allowed = {HEAVY_HELP_ALLOWED[name][0]} if name in HEAVY_HELP_ALLOWED else set()
        assert new <= allowed, f"`icml26 {name} --help` imports {sorted(new - allowed)}"
        seen |= new


def test_method_subcommand_is_the_real_app_after_root_help():
    runner = CliRunner()
    assert runner.invoke(app, ["--help"]).exit_code == 0
    r = runner.invoke(app, ["tie", "--help"])
    assert r.exit_code == 0, r.output
    for sub in ("sample-lengths", "fit", "train", "simulate"):
        assert sub in r.output, r.output
    r = runner.invoke(app, ["tie", "nope"])
    assert r.exit_code == 2, r.output
