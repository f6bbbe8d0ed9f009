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
