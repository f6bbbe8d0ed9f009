"""``deepcommit build`` as a resumable pipeline: history -> milestones -> DAG -> verification ->
EvoClaw layout, each stage checkpointed under ``OUT/.build/`` so an interrupted build (Ctrl-C,
a killed job) resumes where it stopped; verification is checkpointed per milestone.

A checkpoint is only reused when its key matches: the resolved shas of the range, the range,
the grouping configuration and the verification settings. Anything else starts over.

With verification, the replay runs in a *staging clone* (``OUT/.build/repo.git``, a local bare
clone: hardlinked objects), so nothing is written to the user's repository, not even objects.
The milestone states are tagged there (``milestone-<m>-start`` / ``milestone-<m>-end``,
``milestone-base``) as in EvoClaw, and the clone becomes ``OUT/repo.git``, which
``deepcommit run`` clones for its trials.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from icml26.core.errors import UserError
from icml26.core.io import atomic_write_json
from icml26.deepcommit.dag import Dag, build_dag
from icml26.deepcommit.export import milestone_id, write_dataset
from icml26.deepcommit.history import Commit, Dropped, FileChange, History, git, load_history
from icml26.deepcommit.milestones import GroupConfig, group
from icml26.deepcommit.verify import Verified, verify

__all__ = ["build_dataset", "history_to_json", "history_from_json"]

STAGES = ("history", "milestones", "llm", "dag", "verify")


def history_to_json(h: History) -> dict:
    def commit(c: Commit) -> dict:
        d = {f.name: getattr(c, f.name) for f in dataclasses.fields(c) if f.name != "changes"}
        for k in ("touched", "defines", "uses"):
            d[k] = sorted(d[k])
        d["changes"] = [dataclasses.asdict(ch) for ch in c.changes]
        return d

    return {
        "repo": str(h.repo),
        "rev_range": h.rev_range,
        "commits": [commit(c) for c in h.commits],
        "dropped": [dataclasses.asdict(d) for d in h.dropped],
    }


def history_from_json(d: dict) -> History:
    def change(x: dict) -> FileChange:
        return FileChange(
            x["path"],
            tuple(tuple(r) for r in x["old_ranges"]),
            tuple(tuple(r) for r in x["new_ranges"]),
            tuple(x["added"]),
            tuple(x["removed"]),
        )

    commits = [
        Commit(
            c["sha"],
            tuple(c["parents"]),
            c["author"],
            c["email"],
            int(c["time"]),
            c["message"],
            tuple(change(x) for x in c["changes"]),
            frozenset(c["touched"]),
            frozenset(c["defines"]),
            frozenset(c["uses"]),
        )
        for c in d["commits"]
    ]
    dropped = [Dropped(x["sha"], x["reason"]) for x in d["dropped"]]
    return History(Path(d["repo"]), d["rev_range"], commits, dropped)


def _verified_to_json(v: Verified) -> dict:
    def keys(d: dict) -> dict:
        return {str(k): val for k, val in d.items()}

    return {
        "order": v.order,
        "base": v.base,
        "start": keys(v.start),
        "end": keys(v.end),
        "classification": keys(v.classification),
        "non_graded": keys(v.non_graded),
    }


def _verified_from_json(d: dict) -> Verified:
    def ints(x: dict) -> dict:
        return {int(k): val for k, val in x.items()}

    return Verified(
        list(d["order"]),
        ints(d["start"]),
        ints(d["end"]),
        ints(d["classification"]),
        ints(d["non_graded"]),
        d["base"],
    )


def _range_key(repo: Path, rev_range: str) -> list[str]:
    revs = [r for r in re.split(r"\.\.\.?", rev_range) if r] or ["HEAD"]
    return [git(repo, "rev-parse", "--verify", "--quiet", f"{r}^{{commit}}").strip() for r in revs]


def build_dataset(
    repo: Path | str,
    rev_range: str,
    out: Path | str,
    cfg: GroupConfig | None = None,
    verify_tests: bool = False,
    runs: int = 3,
    timeout_s: float = 300,
    test_dirs: tuple[str, ...] = ("tests",),
    test_cmd: list[str] | None = None,
    fresh: bool = False,
    chat=None,
    chat_spec: str = "",
    echo: Callable[[str], None] = print,
    progress=None,
    _stop_after: Callable[[str], None] | None = None,
) -> dict:
    """Build (or resume building) the EvoClaw-data folder ``out`` for ``repo`` ``rev_range``.

    Returns a summary dict (counts, non-graded reasons, which stages were resumed).
    ``_stop_after(stage)`` is a test hook called after each checkpoint is written."""
    repo, out = Path(repo).resolve(), Path(out)
    cfg = cfg or GroupConfig()
    from icml26.deepcommit.history import _check_repo

    _check_repo(repo, rev_range)
    ck = out / ".build"
    key = {
        "repo": str(repo),
        "range": rev_range,
        "shas": _range_key(repo, rev_range),
        "group": dataclasses.asdict(cfg),
        "verify": [verify_tests, runs, timeout_s, list(test_dirs), list(test_cmd or [])],
        "llm": chat_spec if chat is not None else None,
        "format": 1,
    }
    if ck.exists():
        try:
            old = json.loads((ck / "key.json").read_text())
        except (OSError, json.JSONDecodeError):
            old = None
        if fresh or old != key:
            echo(f"{ck}: checkpoint of a different build (or --fresh); starting over")
            shutil.rmtree(ck)
    resumed: list[str] = []
    ck.mkdir(parents=True, exist_ok=True)
    atomic_write_json(ck / "key.json", key)
    stop = _stop_after or (lambda stage: None)

    # stage 1: history
    if (ck / "history.json").exists():
        hist = history_from_json(json.loads((ck / "history.json").read_text()))
        resumed.append("history")
    else:
        hist = load_history(repo, rev_range)
        atomic_write_json(ck / "history.json", history_to_json(hist))
    stop("history")
    if not hist.commits:
        raise UserError(f"{repo}: no commits left in {rev_range!r} after preprocessing")

    # stage 2: milestones
    if (ck / "milestones.json").exists():
        labels = json.loads((ck / "milestones.json").read_text())
        resumed.append("milestones")
    else:
        labels = [int(x) for x in group(hist.commits, cfg)]
        atomic_write_json(ck / "milestones.json", labels)
    stop("milestones")

    # stage 2b: the optional LLM pass (split, merge, names, SRS)
    titles: dict[int, str] = {}
    srs_text: dict[int, str] = {}
    llm_meta: dict = {}
    if chat is not None:
        if (ck / "llm.json").exists():
            d = json.loads((ck / "llm.json").read_text())
            resumed.append("llm")
        else:
            from icml26.deepcommit.llm import llm_pass

            r = llm_pass(hist.commits, labels, chat, progress=progress)
            d = {
                "labels": r.labels,
                "titles": r.titles,
                "srs": r.srs,
                "merges": r.merges,
                "splits": r.splits,
                "log": r.log,
                "calls": r.calls,
            }
            atomic_write_json(ck / "llm.json", d)
            echo(
                f"LLM pass: {r.calls} calls, {len(r.merges)} merges, {len(r.splits)} splits, "
                f"{len(r.titles)} titles" + (f"; {len(r.log)} unusable answers" if r.log else "")
            )
        labels = d["labels"]
        llm_meta = {
            "llm": {"model": chat_spec, **{k: d[k] for k in ("merges", "splits", "log", "calls")}}
        }
        titles = {int(k): v for k, v in d["titles"].items()}
        srs_text = {int(k): v for k, v in d["srs"].items()}
        stop("llm")

    # stage 3: DAG
    if (ck / "dag.json").exists():
        d = json.loads((ck / "dag.json").read_text())
        dag = Dag(
            d["nodes"],
            {(a, b): s for a, b, s in d["edges"]},
            {(a, b): ev for a, b, ev in d["evidence"]},
            [tuple(x) for x in d["back_edges"]],
        )
        resumed.append("dag")
    else:
        dag = build_dag(hist, labels)
        atomic_write_json(
            ck / "dag.json",
            {
                "nodes": list(dag.nodes),
                "edges": [[a, b, s] for (a, b), s in dag.edges.items()],
                "evidence": [[a, b, ev] for (a, b), ev in dag.evidence.items()],
                "back_edges": [list(x) for x in dag.back_edges],
            },
        )
    stop("dag")

    # stage 4: verification, one checkpoint per milestone, in a staging clone
    classes = None
    v = None
    non_graded: dict[str, str] = {}
    if verify_tests:
        staging = ck / "repo.git"
        if not (staging / "HEAD").exists():
            shutil.rmtree(staging, ignore_errors=True)
            git(ck, "clone", "-q", "--bare", str(repo), str(staging))
        partial = None
        if (ck / "verify.json").exists():
            partial = _verified_from_json(json.loads((ck / "verify.json").read_text()))
            resumed.append(f"verify ({len(partial.end)} milestones)")

        def checkpoint(res: Verified, m: int) -> None:
            mid = milestone_id(m)
            git(staging, "tag", "-f", f"milestone-{mid}-start", res.start[m])
            git(staging, "tag", "-f", f"milestone-{mid}-end", res.end[m])
            atomic_write_json(ck / "verify.json", _verified_to_json(res))
            stop(f"verify:{mid}")

        v = verify(
            hist,
            labels,
            dag,
            runs=runs,
            timeout_s=timeout_s,
            test_dirs=test_dirs,
            test_cmd=test_cmd,
            progress=progress,
            repo=staging,
            resume=partial,
            on_milestone=checkpoint,
        )
        git(staging, "tag", "-f", "milestone-base", v.base)
        git(staging, "worktree", "prune")
        non_graded = {milestone_id(m): why for m, why in v.non_graded.items()}
        classes = {milestone_id(m): c for m, c in v.classification.items() if m not in v.non_graded}

    # stage 5: the layout (atomic files), then the states repository, then drop the checkpoint
    write_dataset(
        out,
        hist,
        labels,
        dag,
        classifications=classes,
        test_dirs=test_dirs,
        states=None
        if v is None
        else {
            "base": v.base,
            "order": [milestone_id(m) for m in v.order],
            "start": {milestone_id(m): s for m, s in v.start.items()},
            "end": {milestone_id(m): s for m, s in v.end.items()},
            "repository": "repo.git",
            "test_cmd": list(test_cmd) if test_cmd else None,
            "test_timeout_s": timeout_s,
        },
        non_graded_reasons=non_graded,
        titles=titles,
        srs_text=srs_text,
        extra_metadata=llm_meta,
    )
    if v is not None:
        final = out / "repo.git"
        if final.exists():
            shutil.rmtree(final)
        (ck / "repo.git").rename(final)
    shutil.rmtree(ck)
    return {
        "kept": len(hist.commits),
        "dropped": len(hist.dropped),
        "milestones": len(set(labels)),
        "edges": len(dag.edges),
        "back_edges": len(dag.back_edges),
        "graded": None if v is None else len(classes or {}),
        "non_graded": non_graded,
        "resumed": resumed,
    }
