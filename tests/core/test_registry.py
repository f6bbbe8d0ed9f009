"""The explicit claims index: names, lookups, and no heavy import at `icml26 list`."""

import subprocess
import sys

import pytest

from icml26 import claims_index

PAPERS = {
    "tie",
    "oserve",
    "echo",
    "binarypc",
    "restore",
    "lems",
    "cat",
    "quartet2",
    "sso",
    "quatro",
    "uds",
    "atlas",
    "algosteer",
    "deepcommit",
    "corrsteer",
    "cclrec",
    "chemcensor",
    "skillpro",
    "cyberpal",
}


def test_nineteen_papers_and_the_health_check():
    names = claims_index.names()
    assert len(names) == len(set(names)) == 20
    assert set(names) == PAPERS | {"smollm2-perplexity"}


def test_every_claim_is_described():
    for c in claims_index.CLAIMS:
        assert c.paper and c.statement and c.paper_figure and c.area, c.name


def test_unknown_name_lists_known():
    with pytest.raises(KeyError, match="known: tie, oserve"):
        claims_index.get("nope")


def test_list_does_not_import_torch(tmp_path):
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from icml26.cli import app\n"
        f"r = CliRunner().invoke(app, ['list', '--out', {str(tmp_path)!r}])\n"
        "assert r.exit_code == 0, r.output\n"
        "heavy = [m for m in ('torch', 'transformers', 'numpy', 'matplotlib') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
