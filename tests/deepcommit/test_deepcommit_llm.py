"""The optional LLM pass (split, merge, names, SRS) driven by StubChat: exact effects of known
answers, unparsable answers change nothing, and build writes the names and SRS."""

import csv
import json
import subprocess

import pytest
from deepcommit_gitutil import commit

from icml26.core.chat import StubChat
from icml26.deepcommit.build import build_dataset
from icml26.deepcommit.history import Commit, FileChange
from icml26.deepcommit.llm import llm_pass
from icml26.deepcommit.milestones import GroupConfig


def _c(sha, subject, files, defines=(), uses=()):
    ch = tuple(FileChange(f, (), (), (), ()) for f in files)
    return Commit(
        sha, (), "a", "a@x", 0, subject, ch, frozenset(), frozenset(defines), frozenset(uses)
    )


COMMITS = [
    _c("s0", "add parser", ["p.py"], defines={"p.parse"}),
    _c("s1", "parser: handle quotes", ["p.py"]),
    _c("s2", "bump logo colour", ["logo.svg", "p.py"]),  # the odd one out of milestone 0
    _c("s3", "add lexer", ["lex.py"], uses={"p.parse"}),
    _c("s4", "unrelated docs", ["README"]),
]


def _answer(msgs):
    q = msgs[-1]["content"]
    if "Does this commit belong" in q:
        return "NO." if "bump logo" in q.split("belong to the same goal?")[1] else "Yes"
    if "Milestone A" in q:  # merge only the parser and lexer milestones
        return "YES" if "add parser" in q and "add lexer" in q else "no"
    return "Title: Parsing support\nThe parser reads quoted strings.\nIt raises on bad input."


def test_split_merge_and_names_follow_the_answers():
    r = llm_pass(COMMITS, [0, 0, 0, 1, 2], StubChat(_answer))
    # s2 split off (new id 3 before renumbering), then the parser (0) and lexer (1) merged
    assert r.splits == [(0, ["s2"])]
    assert r.merges == [(0, 1)]
    assert r.labels == [0, 0, 1, 0, 2]
    assert r.titles == {0: "Parsing support", 1: "Parsing support", 2: "Parsing support"}
    assert r.srs[0] == "The parser reads quoted strings.\nIt raises on bad input."
    assert r.log == []
    # 3 split questions + merge questions on candidate pairs only + 3 names
    assert r.calls == 3 + 2 + 3


@pytest.mark.parametrize("junk", ["hmm", "The goal:\n- something"])
def test_unparsable_answers_change_nothing_and_are_logged(junk):
    r = llm_pass(COMMITS, [0, 0, 0, 1, 2], StubChat(lambda m: junk))
    assert r.labels == [0, 0, 0, 1, 2]
    assert r.merges == [] and r.splits == [] and r.titles == {}
    assert len(r.log) == 3 + 1 + 3  # unsplit: one candidate pair (parser, lexer)


def test_build_with_llm_writes_titles_and_srs(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True, capture_output=True)
    commit(repo, {"a.py": "A = 1\n"}, "a", 0)
    commit(repo, {"b.py": "B = 1\n"}, "b", 10)
    chat = StubChat(lambda m: "Add constants\nModule constants A and B exist.")
    out = tmp_path / "d"
    build_dataset(
        repo, "HEAD", out, GroupConfig(message=0), chat=chat, chat_spec="stub", echo=lambda s: 0
    )
    rows = list(csv.DictReader((out / "milestones.csv").read_text().splitlines()))
    assert {r["title"] for r in rows} == {"Add constants"}
    srs = (out / "srs" / rows[0]["id"] / "SRS.md").read_text()
    assert "## Goal\n\nModule constants A and B exist." in srs
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["llm"]["model"] == "stub" and meta["llm"]["calls"] == len(chat.calls)
