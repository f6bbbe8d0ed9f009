"""``deepcommit run``: trials of a command agent on a built (verified) EvoClaw-data folder.

The folder must come from ``deepcommit build --verify``: ``metadata.json`` holds the replay
``states`` and ``repo.git`` the tagged milestone states. Each run folder gets its own bare clone
(``RUNS/repo.git``, hardlinked), so the dataset is never written to. Per mode::

    RUNS/<mode>/state.json        resumable state, rewritten atomically after every milestone
    RUNS/<mode>/result.json       score, resolve rate, per-milestone scores, log (when finished)
    RUNS/<mode>/outcomes.json     test outcomes in the format ``deepcommit score`` reads
    RUNS/<mode>/patches.json      the agent's source diff per milestone from the state it was
                                  handed (isolated: SWE-bench predictions, ``export --swebench``)
    RUNS/<mode>/agent/<m>.log     the agent command, its exit status and output
    RUNS/summary.json             both modes and continuous / isolated

Running the same command again resumes an interrupted trial from its last finished milestone
(``fresh=True`` starts over); a finished mode is not run again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

from icml26.core.errors import UserError
from icml26.core.io import atomic_write_json
from icml26.deepcommit.export import Dataset, load_dataset
from icml26.deepcommit.harness import TrialSpec, _outcome_json, depths, run_trial
from icml26.deepcommit.history import git
from icml26.deepcommit.verify import Verified

__all__ = ["spec_from_dataset", "run_dataset"]


def spec_from_dataset(ds: Dataset, repo: Path) -> TrialSpec:
    """A :class:`TrialSpec` (milestone ids as keys) over the states repository ``repo``."""
    st = ds.metadata.get("states")
    if not st:
        raise UserError(
            f"{ds.root}: no replay states in metadata.json; build it with "
            "`icml26 deepcommit build REPO --range ... --verify -o DATA`"
        )
    classes = {
        m: {k: c.get(k, []) for k in ("FAIL_TO_PASS", "PASS_TO_PASS", "NONE_TO_PASS", "filtered")}
        for m, c in ds.classifications.items()
    }
    reasons = ds.metadata.get("non_graded_reasons", {})
    v = Verified(
        list(st["order"]),
        dict(st["start"]),
        dict(st["end"]),
        classes,
        {m: reasons.get(m, "non-graded") for m in ds.non_graded},
        st["base"],
    )
    return TrialSpec(
        repo,
        v,
        dict(ds.edges),
        tuple(ds.metadata.get("test_dirs", ["tests"])),
        dict(ds.srs),
        st.get("test_cmd"),
        float(st.get("test_timeout_s", 300)),
    )


def _fingerprint(ds: Dataset) -> str:
    blob = json.dumps(
        [ds.metadata.get("states"), ds.classifications, sorted(map(list, ds.edges.items()))],
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _summary(spec: TrialSpec, res: dict) -> dict:
    d = depths(spec.verified.order, list(spec.edges))
    return {
        "score": res["score"],
        "resolve_rate": res["resolve_rate"],
        "graded": len(spec.graded),
        "submitted": len(res["outcomes"]),
        "per_milestone": {
            m: {**dataclasses.asdict(s), "depth": d[m]} for m, s in res["per_milestone"].items()
        },
        "log": res["log"],
    }


def run_dataset(
    data: Path | str,
    agent,
    out: Path | str,
    modes: tuple[str, ...] = ("continuous", "isolated"),
    ignore_weak: bool = False,
    timeout_s: float = 18_000,
    max_idle_rounds: int = 3,
    fresh: bool = False,
    echo: Callable[[str], None] = print,
) -> dict:
    """Run ``agent`` (a command template, or a callable for tests) in each of ``modes``."""
    data, out = Path(data), Path(out)
    ds = load_dataset(data)
    src = data / ds.metadata.get("states", {}).get("repository", "repo.git")
    spec0 = spec_from_dataset(ds, src)
    if not (src / "HEAD").exists():
        raise UserError(f"{src}: the milestone states repository is missing")
    if not spec0.graded:
        raise UserError(f"{data}: no graded milestone (all are non-graded); nothing to score")
    for m in spec0.graded:
        if m not in spec0.verified.start:
            raise UserError(f"{data}: graded milestone {m} has no replay state in metadata.json")
    if fresh and out.exists():
        shutil.rmtree(out)
    repo = out / "repo.git"
    if not (repo / "HEAD").exists():
        out.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(repo, ignore_errors=True)
        git(out, "clone", "-q", "--bare", str(src.resolve()), str(repo))
    spec = dataclasses.replace(spec0, repo=repo)
    key = {
        "data": _fingerprint(ds),
        "agent": agent if isinstance(agent, str) else repr(agent),
        "timeout_s": timeout_s,
    }
    summary: dict = {"data": str(data), "agent": key["agent"], "modes": {}}
    for mode in modes:
        d = out / mode
        if (d / "result.json").exists():
            prev = json.loads((d / "result.json").read_text())
            if prev.get("key") == {**key, "mode": mode, "ignore_weak": ignore_weak}:
                echo(f"{mode}: already finished ({d / 'result.json'})")
                summary["modes"][mode] = prev
                continue
        if (d / "state.json").exists():
            echo(f"{mode}: resuming from {d / 'state.json'}")
        res = run_trial(
            spec,
            agent,
            mode,
            ignore_weak=ignore_weak,
            timeout_s=timeout_s,
            max_idle_rounds=max_idle_rounds,
            state_path=d / "state.json",
            state_key=key,
            agent_log_dir=d / "agent",
        )
        summ = {"key": {**key, "mode": mode, "ignore_weak": ignore_weak}, **_summary(spec, res)}
        atomic_write_json(
            d / "outcomes.json", {str(m): _outcome_json(o) for m, o in res["outcomes"].items()}
        )
        atomic_write_json(d / "patches.json", res["patches"])
        atomic_write_json(d / "result.json", summ)
        echo(
            f"{mode}: score {res['score']:.2f}, resolve rate {res['resolve_rate']:.2f} "
            f"({len(res['outcomes'])}/{len(spec.graded)} graded milestones submitted)"
        )
        summary["modes"][mode] = summ
    if {"continuous", "isolated"} <= set(summary["modes"]):
        iso = summary["modes"]["isolated"]["score"]
        summary["continuous_over_isolated"] = (
            summary["modes"]["continuous"]["score"] / iso if iso else None
        )
    atomic_write_json(out / "summary.json", summary)
    return summary
