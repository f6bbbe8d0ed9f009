"""EvoClaw-style trials: an agent works through a verified milestone DAG; each submission is
tested with the hidden tests in a separate, reused evaluation worktree and scored.

``mode="continuous"``: one persistent worktree from the base state; the agent keeps its own tree.
A milestone unlocks when every Strong predecessor is *completed* (resolved) and every Weak one too,
unless ``ignore_weak`` (then Weak predecessors need only be *finished*: submitted, pass or fail).
``mode="isolated"``: every graded milestone starts from its gold start state, no locking.
Rounds repeat until everything is submitted or ``max_idle_rounds`` rounds add no submission.
An agent is a callable ``(workdir: Path, task: dict) -> bool | None`` (False = gives up), or a
command template (``{workdir}``, ``{milestone}``, ``{srs}``) run with ``timeout_s``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from icml26.deepcommit.dag import Dag
from icml26.deepcommit.history import git
from icml26.deepcommit.score import MilestoneTests, RunOutcome, score_trial
from icml26.deepcommit.verify import Verified, Worktree, run_tests

__all__ = ["TrialSpec", "run_trial", "ScriptedAgent", "depths"]


@dataclass
class TrialSpec:
    """What a trial needs: repository, states, test classes, typed edges, graded milestones."""

    repo: Path
    verified: Verified
    edges: dict[tuple[int, int], str]
    test_dirs: tuple[str, ...] = ("tests",)
    srs: dict[int, str] = field(default_factory=dict)

    @classmethod
    def from_verified(cls, repo: Path, verified: Verified, dag: Dag, **kw) -> TrialSpec:
        return cls(Path(repo), verified, dict(dag.edges), **kw)

    @property
    def graded(self) -> list[int]:
        v = self.verified
        return [m for m in v.order if m in v.classification and m not in v.non_graded]

    def tests(self, m: int) -> MilestoneTests:
        c = self.verified.classification[m]
        return MilestoneTests.of(
            c["FAIL_TO_PASS"], c["PASS_TO_PASS"], c["NONE_TO_PASS"], c["filtered"]
        )


def depths(nodes, edges) -> dict:
    """Longest-path depth from a root (0) of each node of an acyclic graph."""
    preds: dict = {n: [] for n in nodes}
    for a, b in edges:
        if a in preds and b in preds:
            preds[b].append(a)
    memo: dict = {}

    def d(n):
        if n not in memo:
            memo[n] = 1 + max((d(p) for p in preds[n]), default=-1)
        return memo[n]

    return {n: d(n) for n in nodes}


def _command_agent(template: str, timeout_s: float) -> Callable:
    def agent(workdir: Path, task: dict) -> bool:
        cmd = template.format(workdir=workdir, milestone=task["milestone"], srs=task["srs_path"])
        try:
            proc = subprocess.run(
                cmd, shell=True, cwd=workdir, timeout=timeout_s, capture_output=True, text=True
            )
        except subprocess.TimeoutExpired:
            return False
        return proc.returncode == 0

    return agent


def run_trial(
    spec: TrialSpec,
    agent,
    mode: str = "continuous",
    ignore_weak: bool = False,
    timeout_s: float = 18_000,
    max_idle_rounds: int = 3,
) -> dict:
    """Run ``agent`` through the DAG; returns score_trial's dict plus ``log`` and ``outcomes``."""
    if mode not in ("continuous", "isolated"):
        raise ValueError(f"mode must be continuous or isolated; got {mode!r}")
    if isinstance(agent, str):
        agent = _command_agent(agent, timeout_s)
    v, graded = spec.verified, spec.graded
    work = Worktree(spec.repo, v.base)
    evalwt = Worktree(spec.repo, v.base)
    srs_dir = work.path.parent / "srs"
    outcomes: dict[int, RunOutcome] = {}
    resolved: dict[int, bool] = {}
    log: list[str] = []
    try:
        idle = 0
        # every replayed milestone is a task (non-graded ones too, as in EvoClaw); only graded
        # ones are tested and scored; a non-graded one counts as completed once submitted
        tasks = [m for m in v.order if m in v.start and (mode == "continuous" or m in graded)]
        done: set[int] = set()
        while len(done) < len(tasks) and idle < max_idle_rounds:
            before = len(done)
            for m in tasks:
                if m in done:
                    continue
                if mode == "continuous" and not _unlocked(m, spec.edges, resolved, ignore_weak, {}):
                    continue
                if mode == "isolated":
                    work.reset(v.start[m])
                srs = srs_dir / f"{m}.md"
                srs.parent.mkdir(exist_ok=True)
                srs.write_text(spec.srs.get(m, f"Implement milestone {m}."))
                task = {"milestone": m, "srs": srs.read_text(), "srs_path": str(srs)}
                if not (work.path / ".git").exists():
                    log.append(f"{m}: agent deleted .git; trial stopped")
                    return _finish(spec, outcomes, graded, log)
                pre = work.head()
                ok = agent(work.path, task)
                if ok is False:
                    log.append(f"{m}: agent gave up or failed")
                    continue
                done.add(m)
                snap = work.snapshot(f"agent-impl-{m}")
                edited = work.git(
                    "diff", "--name-only", pre, snap, "--", *spec.test_dirs
                ).stdout.split()
                if edited:
                    log.append(f"{m}: agent's test edits overwritten by the hidden tests: {edited}")
                if m not in graded:
                    resolved[m] = True
                    continue
                outcomes[m] = _evaluate(evalwt, snap, v.end[m], spec)
                resolved[m] = score_trial({m: spec.tests(m)}, {m: outcomes[m]})["per_milestone"][
                    m
                ].resolved
            idle = idle + 1 if len(done) == before else 0
    finally:
        work.close()
        evalwt.close()
    return _finish(spec, outcomes, graded, log)


def _finish(spec, outcomes, graded, log) -> dict:
    res = score_trial({m: spec.tests(m) for m in graded}, outcomes, graded)
    res["log"], res["outcomes"] = log, outcomes
    return res


def _unlocked(m, edges, resolved, ignore_weak, non_graded) -> bool:
    for (a, b), s in edges.items():
        if b != m or a in non_graded:
            continue
        if s == "Strong" or not ignore_weak:
            if not resolved.get(a, False):
                return False
        elif a not in resolved:
            return False
    return True


def _evaluate(wt: Worktree, snap: str, end: str, spec: TrialSpec) -> RunOutcome:
    """Agent source at ``snap`` + hidden tests of the milestone's end state, in ``wt``."""
    wt.reset(snap)
    for d in spec.test_dirs:
        wt.git("rm", "-rq", "--ignore-unmatch", "--", d)
    if git(spec.repo, "ls-tree", "--name-only", end, "--", *spec.test_dirs).strip():
        wt.git("checkout", end, "--", *spec.test_dirs)
    passed, failed, collected = run_tests(wt.path)
    return RunOutcome.of(passed, failed, collected)


def _show(repo: Path, rev: str, path: str) -> str | None:
    proc = subprocess.run(
        ["git", "-C", str(repo), "show", f"{rev}:{path}"], capture_output=True, text=True
    )
    return proc.stdout if proc.returncode == 0 else None


class ScriptedAgent:
    """Applies milestone m's gold source patch (start..end, tests excluded) with probability
    ``q``; else, with equal odds, the gold patch plus an injected regression (the first
    ``return`` line of a patched ``.py`` file gets ``+ 1``) or only the first half of its files.
    Draws are fixed per (seed, milestone), so both modes see the same ones. Each patched file is
    3-way merged into the agent's tree (``git merge-file --union``: conflicting hunks keep both
    sides, which breaks code that really conflicts)."""

    def __init__(self, spec: TrialSpec, q: float, seed: int = 0):
        if not 0 <= q <= 1:
            raise ValueError(f"q must be in [0, 1]; got {q}")
        self.spec = spec
        self.kind = {}
        for m in spec.verified.order:
            r = np.random.default_rng([seed, m]).random(2)
            self.kind[m] = "gold" if r[0] < q else ("regress" if r[1] < 0.5 else "partial")

    def __call__(self, workdir: Path, task: dict) -> bool:
        m, v = task["milestone"], self.spec.verified
        excl = [f":(exclude){d}" for d in self.spec.test_dirs]
        files = git(
            self.spec.repo, "diff", "--name-only", v.start[m], v.end[m], "--", ".", *excl
        ).split()
        if self.kind[m] == "partial" and len(files) > 1:
            files = files[: len(files) // 2]
        if not files:
            return True
        for f in files:  # 3-way merge of each file into the agent's own tree (union on conflict)
            base = _show(self.spec.repo, v.start[m], f)
            theirs = _show(self.spec.repo, v.end[m], f)
            target = workdir / f
            if theirs is None:
                target.unlink(missing_ok=True)
                continue
            ours = target.read_text() if target.exists() else ""
            tmp = workdir.parent / "merge"
            tmp.mkdir(exist_ok=True)
            for name, text in (("ours", ours), ("base", base or ""), ("theirs", theirs)):
                (tmp / name).write_text(text)
            proc = subprocess.run(
                [
                    "git",
                    "merge-file",
                    "-p",
                    "--union",
                    str(tmp / "ours"),
                    str(tmp / "base"),
                    str(tmp / "theirs"),
                ],
                capture_output=True,
                text=True,
            )
            if proc.returncode < 0 or proc.returncode > 127:
                return False
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(proc.stdout)
        if self.kind[m] == "regress":
            for f in files:
                p = workdir / f
                if f.endswith(".py") and p.exists():
                    lines = p.read_text().splitlines()
                    idx = [i for i, ln in enumerate(lines) if ln.strip().startswith("return ")]
                    if idx:
                        lines[idx[0]] += " + 1"
                        p.write_text("\n".join(lines) + "\n")
                        break
        return True
