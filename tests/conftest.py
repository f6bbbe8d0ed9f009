"""Fixtures shared by every test folder."""

import re
from pathlib import Path

import pytest


def _doc_commands(doc: Path, prefix: str = "icml26 ") -> list[str]:
    """The ``prefix ...`` lines of a Markdown file's fenced blocks: continuations joined, comments
    dropped."""
    out, fenced, buf = [], False, ""
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            continue
        buf += line.rstrip()
        if buf.endswith("\\"):
            buf = buf[:-1] + " "
            continue
        cmd = re.sub(r"\s+#.*$", "", buf).strip()
        buf = ""
        if cmd.startswith(prefix):
            out.append(cmd)
    return out


@pytest.fixture
def doc_commands():
    """``doc_commands(path)``: the documented CLI lines of a doc page, to run as written."""
    return _doc_commands
