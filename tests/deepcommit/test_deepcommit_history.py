"""History preprocessing on small scripted repositories: drops with reasons, symbols, errors."""

import os
import subprocess

import pytest

from icml26.core.errors import UserError
from icml26.deepcommit.history import load_history

ENV = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def sh(repo, *args, author=("Ann", "ann@x.org"), t=0):
    env = {
        **os.environ,
        **ENV,
        "GIT_AUTHOR_NAME": author[0],
        "GIT_AUTHOR_EMAIL": author[1],
        "GIT_COMMITTER_NAME": author[0],
        "GIT_COMMITTER_EMAIL": author[1],
        "GIT_AUTHOR_DATE": f"@{1_700_000_000 + t} +0000",
        "GIT_COMMITTER_DATE": f"@{1_700_000_000 + t} +0000",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, env=env, capture_output=True, text=True
    ).stdout.strip()


def commit(repo, files, msg, t, author=("Ann", "ann@x.org")):
    for rel, text in files.items():
        p = repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    sh(repo, "add", "-A")
    sh(repo, "commit", "-q", "-m", msg, author=author, t=t)
    return sh(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "r"
    r.mkdir()
    sh(r, "init", "-q", "-b", "main")
    return r


def test_drops_bot_format_revert_and_keeps_partial_revert(repo):
    a = commit(repo, {"m.py": "def f(x):\n    return x + 1\n"}, "add f", 0)
    bot = commit(repo, {"req.txt": "x==2\n"}, "Bump x", 10, author=("dependabot[bot]", "b@x"))
    fmt = commit(repo, {"m.py": "def f(x):\n\n    return (x + 1)\n"}, "format", 20)
    b = commit(repo, {"m.py": "def f(x):\n\n    return (x + 1)\nDEBUG = 1\n"}, "debug", 30)
    rv = commit(repo, {"m.py": "def f(x):\n\n    return (x + 1)\n"}, "Revert debug", 40)
    c = commit(repo, {"m.py": "def f(x):\n\n    return (x + 1)\nA = 1\nB = 2\n"}, "two", 50)
    part = commit(repo, {"m.py": "def f(x):\n\n    return (x + 1)\nA = 1\n"}, "drop B", 60)
    h = load_history(repo)
    reasons = {d.sha: d.reason for d in h.dropped}
    assert reasons[bot] == "bot" and reasons[fmt] == "formatting-only"
    assert reasons[b].startswith("reverted by") and reasons[rv].startswith("revert of")
    assert [x.sha for x in h.commits] == [a, c, part]  # the partial revert is kept
    assert h.commits[0].defines == {"m.f"}


def test_merge_dropped_and_symbols(repo):
    commit(repo, {"pkg/a.py": "def fa(x):\n    return x\n"}, "a", 0)
    sh(repo, "checkout", "-q", "-b", "side")
    commit(repo, {"pkg/b.py": "from pkg.a import fa\n\ndef fb(x):\n    return fa(x)\n"}, "b", 10)
    sh(repo, "checkout", "-q", "main")
    commit(repo, {"pkg/c.py": "C = 1\n"}, "c", 20)
    sh(repo, "merge", "-q", "--no-ff", "side", "-m", "merge side", t=30)
    h = load_history(repo)
    assert [d.reason for d in h.dropped] == ["merge"]  # first-parent history: b is not listed
    assert [c.subject for c in h.commits] == ["a", "c"]
    h2 = load_history(repo, "main~1..side")
    (b,) = h2.commits
    assert b.uses == {"pkg.a.fa"} and b.defines == {"pkg.b.fb"}


def test_bad_inputs(tmp_path, repo):
    with pytest.raises(UserError, match="not a git repository"):
        load_history(tmp_path / "nope")
    commit(repo, {"a.txt": "1\n"}, "one", 0)
    commit(repo, {"a.txt": "2\n"}, "two", 10)
    with pytest.raises(UserError, match="unknown revision 'v9'"):
        load_history(repo, "v9..HEAD")
    shallow = tmp_path / "shallow"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow)],
        check=True,
        env={**os.environ, **ENV},
        capture_output=True,
    )
    with pytest.raises(UserError, match="unshallow"):
        load_history(shallow)
    (repo / ".gitmodules").write_text('[submodule "x"]\n')
    with pytest.raises(UserError, match="submodules"):
        load_history(repo)
    (repo / ".gitmodules").unlink()
    (repo / ".gitattributes").write_text("*.bin filter=lfs diff=lfs\n")
    with pytest.raises(UserError, match="LFS"):
        load_history(repo)
