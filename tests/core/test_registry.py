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



def declaration_problems(claims) -> list[str]:
    """Why each landed claim's power declaration is missing or incomplete ([] when all are)."""
    from icml26.core.power import KINDS, PowerSpec

    out = []
    for c in claims:
        if c.planned:
            continue
        if not isinstance(c.power, PowerSpec):
            out.append(f"{c.name}: no PowerSpec (Claim.power)")
        elif not set(c.power.kinds) <= set(KINDS):
            out.append(f"{c.name}: unknown kinds {c.power.kinds}")
    return out


def test_every_landed_claim_declares_its_power_checks():
    assert declaration_problems(claims_index.CLAIMS) == []
    assert all(c.power.describe("control") and c.power.describe("floor")
               for c in claims_index.CLAIMS)


def test_a_landed_claim_without_power_checks_is_caught():
    from icml26.core.claims import Claim

    bare = Claim("bare", "p", "s", "f", run=lambda ctx: None)
    planned = Claim("later", "p", "s", "f")
    assert declaration_problems([bare, planned]) == ["bare: no PowerSpec (Claim.power)"]


def test_every_landed_claim_has_a_test_that_runs_it_at_tiny():
    """The tiny CPU budget (tests/conftest.py) is checked on the records the claim tests write, so
    each landed claim needs a test that runs it at ``tiny``."""
    import re
    from pathlib import Path

    files = [p.read_text(encoding="utf-8") for p in Path(__file__).parents[1].rglob("test_*.py")]
    missing = []
    for c in claims_index.CLAIMS:
        if c.planned:
            continue
        n = re.escape(c.name)
        pattern = re.compile(rf'get\("{n}"\)|Claim\("{n}"|reproduce", "{n}"')
        if not any('scale="tiny"' in t and pattern.search(t) for t in files):
            missing.append(c.name)
    assert not missing, f"no test runs these claims at tiny: {missing}"
