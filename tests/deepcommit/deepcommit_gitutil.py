"""Scripted git commits with fixed authors and dates, shared by the deepcommit tests."""

import os
import subprocess

ENV = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def commit(repo, files, msg, t):
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    d = f"@{1_700_000_000 + t} +0000"
    env = {
        **os.environ,
        **ENV,
        "GIT_AUTHOR_NAME": "A",
        "GIT_AUTHOR_EMAIL": "a@x",
        "GIT_COMMITTER_NAME": "A",
        "GIT_COMMITTER_EMAIL": "a@x",
        "GIT_AUTHOR_DATE": d,
        "GIT_COMMITTER_DATE": d,
    }
    for args in (["add", "-A"], ["commit", "-q", "-m", msg]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, env=env, capture_output=True)


#: the base state of the hand-built two-milestone repositories (fa(x) = x and its test)
BASE_FILES = {
    "pkg/__init__.py": "",
    "tests/__init__.py": "",
    "pkg/a.py": "def fa(x):\n    return x\n",
    "tests/test_a.py": "from pkg.a import fa\n\ndef test_fa():\n    assert fa(1) == 1\n",
}


def init_repo(repo):
    """An empty repository on branch main at ``repo`` (created)."""
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, capture_output=True)
    return repo
