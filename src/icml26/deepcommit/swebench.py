"""A verified milestone dataset as SWE-bench task instances, and an agent's isolated-mode patches
as SWE-bench predictions.

One instance per graded milestone (``deepcommit build --verify``; the states live in the
dataset's ``repo.git``, tagged ``milestone-<m>-start/-end``)::

    instance_id              "<repo>__<milestone>"
    repo                     the repository name (``--repo owner/name`` to set it)
    base_commit              the milestone's start state
    environment_setup_commit the same commit (one environment per repository state)
    patch                    start..end diff outside the test folders (the gold change)
    test_patch               start..end diff of the test folders (the hidden tests)
    problem_statement        the milestone's SRS.md
    FAIL_TO_PASS             the milestone's FAIL_TO_PASS + NONE_TO_PASS tests (a new test
                             fails before the change too: it does not exist), as a JSON string
    PASS_TO_PASS             its PASS_TO_PASS tests, as a JSON string
    created_at, version, hints_text

``FAIL_TO_PASS``/``PASS_TO_PASS`` are JSON-encoded lists, as in the published SWE-bench datasets
(the harness reads either form). Predictions are ``{"instance_id", "model_name_or_path",
"model_patch"}`` lines from ``RUNS/isolated/patches.json`` of ``deepcommit run``: in isolated
mode each patch is against the instance's ``base_commit``. (Continuous-mode patches are against
the agent's own earlier tree, which SWE-bench cannot reproduce; they are not exported.)
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from icml26.core.errors import UserError
from icml26.core.io import atomic_open
from icml26.deepcommit.export import Dataset, load_dataset
from icml26.deepcommit.history import git

__all__ = ["instances", "predictions", "write_jsonl", "repo_name"]


def repo_name(ds: Dataset) -> str:
    """``owner/name`` is not known for a local repository: the folder name of its source."""
    src = str(ds.metadata.get("repo") or ds.root.name).rstrip("/")
    name = Path(src).name.removesuffix(".git") or "repo"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name)


def _states(ds: Dataset) -> tuple[dict, Path]:
    st = ds.metadata.get("states")
    if not st:
        raise UserError(
            f"{ds.root}: no replay states in metadata.json; SWE-bench instances need a verified "
            "build (`icml26 deepcommit build REPO --range ... --verify -o DATA`)"
        )
    repo = ds.root / st.get("repository", "repo.git")
    if not (repo / "HEAD").exists():
        raise UserError(f"{ds.root}: the states repository {repo} is missing")
    return st, repo


def _graded(ds: Dataset) -> list[str]:
    non = set(ds.non_graded)
    return [m for m in ds.selected if m not in non and m in ds.classifications]


def _created_at(ds: Dataset, mid: str) -> str:
    from datetime import datetime, timezone

    row = next((r for r in ds.milestones if (r.get("id") or "") == mid), {})
    try:
        t = float(row.get("last_time", ""))
    except ValueError:
        return ""
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def instances(data: str | os.PathLike, *, repo: str | None = None, version: str = "0.0") -> list[dict]:
    """SWE-bench instances of the graded milestones of the dataset folder ``data``."""
    ds = load_dataset(data)
    st, states = _states(ds)
    test_dirs = list(ds.metadata.get("test_dirs", ["tests"]))
    name = repo or repo_name(ds)
    out = []
    for m in _graded(ds):
        if m not in st.get("start", {}) or m not in st.get("end", {}):
            raise UserError(f"{ds.root}: graded milestone {m} has no replay state in metadata.json")
        start, end = st["start"][m], st["end"][m]
        diff = ["diff", "--binary", "--no-color", "--no-ext-diff", start, end, "--"]
        patch = git(states, *diff, ".", *[f":(exclude){d}" for d in test_dirs])
        test_patch = git(states, *diff, *test_dirs)
        c = ds.classifications[m]
        f2p = list(c.get("FAIL_TO_PASS", [])) + list(c.get("NONE_TO_PASS", []))
        out.append(
            {
                "instance_id": f"{name.replace('/', '__')}__{m}",
                "repo": name,
                "base_commit": start,
                "environment_setup_commit": start,
                "patch": patch,
                "test_patch": test_patch,
                "problem_statement": ds.srs.get(m, f"Implement milestone {m}."),
                "hints_text": "",
                "created_at": _created_at(ds, m),
                "version": version,
                "FAIL_TO_PASS": json.dumps(f2p),
                "PASS_TO_PASS": json.dumps(list(c.get("PASS_TO_PASS", []))),
            }
        )
    if not out:
        raise UserError(f"{ds.root}: no graded milestone (every one is non-graded or unverified)")
    return out


def predictions(
    data: str | os.PathLike, runs: str | os.PathLike, *, model: str = "agent",
    repo: str | None = None,
) -> list[dict]:
    """SWE-bench predictions from ``RUNS/isolated/patches.json`` (``deepcommit run --mode
    isolated``); a graded milestone the agent never submitted gets no line."""
    ds = load_dataset(data)
    path = Path(runs) / "isolated" / "patches.json"
    if not path.is_file():
        raise UserError(
            f"{path}: no isolated-mode patches; run `icml26 deepcommit run DATA --mode isolated "
            f"-o {runs}` (continuous-mode patches are not SWE-bench predictions)"
        )
    try:
        patches = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not JSON ({e.msg})") from None
    name = (repo or repo_name(ds)).replace("/", "__")
    return [
        {"instance_id": f"{name}__{m}", "model_name_or_path": model, "model_patch": patches[m]}
        for m in _graded(ds)
        if m in patches
    ]


def write_jsonl(rows: list[dict], path: str | os.PathLike) -> Path:
    path = Path(path)
    with atomic_open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path
