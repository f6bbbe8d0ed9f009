"""EvoClaw-style trials: an agent works through a verified milestone DAG in a workspace of its
own (a repository holding only the state it was handed and its past); each submission is
fetched into a separate, reused evaluation worktree, tested with the hidden tests and scored.

``mode="continuous"``: one persistent workspace from the base state; the agent keeps its own tree.
A milestone unlocks when every Strong predecessor is *completed* (resolved) and every Weak one too,
unless ``ignore_weak`` (then Weak predecessors need only be *finished*: submitted, pass or fail).
``mode="isolated"``: every graded milestone starts from its gold start state, no locking.
Rounds repeat until everything is submitted or ``max_idle_rounds`` rounds add no submission.
An agent is a callable ``(workdir: Path, task: dict) -> bool | None`` (False = gives up), or a
command template (``{workdir}``, ``{milestone}``, ``{srs}``) run with ``timeout_s``.
With ``state_path`` a trial is resumable (see :func:`run_trial`).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from icml26.core.errors import UserError
from icml26.core.io import atomic_write_json, atomic_write_text
from icml26.deepcommit.dag import Dag
from icml26.deepcommit.history import git
from icml26.deepcommit.score import MilestoneTests, RunOutcome, score_trial
from icml26.deepcommit.verify import Verified, Worktree, run_tests

__all__ = ["TrialSpec", "run_trial", "ScriptedAgent", "Workspace", "depths"]


@dataclass
class TrialSpec:
    """What a trial needs: repository, states, test classes, typed edges, graded milestones."""

    repo: Path
    verified: Verified
    edges: dict[tuple[int, int], str]
    test_dirs: tuple[str, ...] = ("tests",)
    srs: dict[int, str] = field(default_factory=dict)
    test_cmd: list[str] | None = None  # see verify.run_tests; None = pytest
    test_timeout_s: float = 300

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


class Workspace:
    """The agent's working copy: a repository of its own in a temporary folder, holding only the
    state it was handed and that state's past (no later milestone, no hidden test, unlike a
    worktree, which shares every object of the source repository). ``reset(rev)`` fetches
    ``rev`` from the source repository; ``close()`` deletes the folder."""

    def __init__(self, src: Path, rev: str):
        self.src = Path(src)
        self.path = Path(tempfile.mkdtemp(prefix="dc-ws-")) / "ws"
        subprocess.run(["git", "init", "-q", str(self.path)], check=True, capture_output=True)
        self.reset(rev)

    git = Worktree.git
    head = Worktree.head
    snapshot = Worktree.snapshot

    def reset(self, rev: str) -> None:
        self.git("fetch", "-q", "--no-tags", str(self.src), rev)
        self.git("reset", "-q", "--hard", "FETCH_HEAD")
        self.git("clean", "-qfdx")

    def close(self) -> None:
        shutil.rmtree(self.path.parent, ignore_errors=True)


def _command_agent(template: str, timeout_s: float, log_dir: Path | None = None) -> Callable:
    """A shell command template run in the workspace; ``{workdir}``, ``{milestone}``, ``{srs}``
    (path of SRS.md) are filled in (shell-quoted) and also exported as ``$DC_WORKDIR``,
    ``$DC_MILESTONE``, ``$DC_SRS``. Exit 0 = submitted; another status or a timeout = the agent
    gave up on this milestone; exit 126/127 (the shell could not run it) is a UserError."""
    first = template.split()[0] if template.split() else ""
    if not first:
        raise UserError("agent command is empty")
    if (
        re.fullmatch(r"[\w.+-]+", first)
        and subprocess.run(
            ["sh", "-c", 'command -v "$1"', "sh", first], capture_output=True
        ).returncode
    ):  # not a program on PATH, a builtin or a keyword
        raise UserError(f"agent command not found: {first!r} (from --agent-cmd {template!r})")

    def agent(workdir: Path, task: dict) -> bool:
        m = task["milestone"]
        cmd = template.format(
            workdir=shlex.quote(str(workdir)),
            milestone=shlex.quote(str(m)),
            srs=shlex.quote(task["srs_path"]),
        )
        env = {
            **os.environ,
            "DC_WORKDIR": str(workdir),
            "DC_MILESTONE": str(m),
            "DC_SRS": task["srs_path"],
        }
        try:
            proc = subprocess.run(
                cmd,
                shell=True,
                cwd=workdir,
                timeout=timeout_s,
                capture_output=True,
                text=True,
                env=env,
            )
            out, rc = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            out, rc = f"{exc.stdout or ''}{exc.stderr or ''}\n[timed out after {timeout_s} s]", None
            out = out if isinstance(out, str) else repr(out)
        if log_dir is not None:
            atomic_write_text(Path(log_dir) / f"{m}.log", f"$ {cmd}\n[exit {rc}]\n{out}")
        if rc in (126, 127):
            raise UserError(
                f"agent command could not run (exit {rc}) for {m}: {out.strip()[-300:]}"
            )
        return rc == 0

    return agent


def _outcome_json(o: RunOutcome) -> dict:
    return {"passed": sorted(o.passed), "failed": sorted(o.failed), "collected": o.collected}


def run_trial(
    spec: TrialSpec,
    agent,
    mode: str = "continuous",
    ignore_weak: bool = False,
    timeout_s: float = 18_000,
    max_idle_rounds: int = 3,
    state_path: Path | str | None = None,
    state_key: dict | None = None,
    agent_log_dir: Path | str | None = None,
) -> dict:
    """Run ``agent`` through the DAG; returns score_trial's dict plus ``log``, ``outcomes`` and
    ``patches`` (milestone -> the agent's source diff, tests excluded, from the tree it was
    handed: in isolated mode the milestone's start commit).

    The agent works in a :class:`Workspace` (its own repository: it cannot read later states or
    hidden tests); each submission is fetched into a reused evaluation worktree of
    ``spec.repo`` and tested there. With ``state_path`` the trial is resumable: after every
    finished milestone the state (finished milestones, outcomes, the agent's tree as a ref
    ``refs/dc-run/<mode>/head`` in ``spec.repo``) is written atomically; a later call with the
    same ``state_key`` continues from the last finished milestone (an interrupted milestone is
    started again from that tree)."""
    if mode not in ("continuous", "isolated"):
        raise ValueError(f"mode must be continuous or isolated; got {mode!r}")
    if isinstance(agent, str):
        agent = _command_agent(agent, timeout_s, Path(agent_log_dir) if agent_log_dir else None)
    v, graded = spec.verified, spec.graded
    state_path = Path(state_path) if state_path else None
    key = {"mode": mode, "ignore_weak": ignore_weak, **(state_key or {})}
    st = {
        "key": key,
        "done": [],
        "outcomes": {},
        "resolved": {},
        "log": [],
        "head": v.base,
        "idle": 0,
        "tried": [],
        "stopped": False,
        "round_before": 0,
    }
    if state_path and state_path.exists():
        old = json.loads(state_path.read_text())
        if old.get("key") == key:
            st = old
    done: set = set(st["done"])
    outcomes: dict = {}
    by_name = {str(m): m for m in v.order}
    for k, o in st["outcomes"].items():
        outcomes[by_name[k]] = RunOutcome.of(o["passed"], o["failed"], o["collected"])
    resolved = {by_name[k]: r for k, r in st["resolved"].items()}
    log: list[str] = st["log"]
    tried: set = {by_name[k] for k in st["tried"]}
    idle = st["idle"]
    if st["stopped"]:
        return _finish(spec, outcomes, graded, log, st)

    def save(head: str) -> None:
        if not state_path:
            return
        st.update(
            done=[str(m) for m in v.order if m in done],
            outcomes={str(m): _outcome_json(o) for m, o in outcomes.items()},
            resolved={str(m): r for m, r in resolved.items()},
            log=log,
            head=head,
            idle=idle,
            tried=[str(m) for m in tried],
        )
        atomic_write_json(state_path, st)

    def keep(snap: str) -> None:  # the agent's tree into spec.repo (and a ref when resumable)
        evalwt.git("fetch", "-q", "--no-tags", str(work.path), snap)
        if state_path:
            evalwt.git("update-ref", f"refs/dc-run/{mode}/head", snap)

    work = Workspace(spec.repo, st["head"] if mode == "continuous" else v.base)
    evalwt = Worktree(spec.repo, v.base)
    srs_dir = work.path.parent / "srs"
    try:
        # every replayed milestone is a task (non-graded ones too, as in EvoClaw); only graded
        # ones are tested and scored; a non-graded one counts as completed once submitted
        tasks = [m for m in v.order if m in v.start and (mode == "continuous" or m in graded)]
        while len(done) < len(tasks) and idle < max_idle_rounds:
            before = st.setdefault("round_before", len(done))
            for m in tasks:
                if m in done or m in tried:
                    continue
                if mode == "continuous" and not _unlocked(m, spec.edges, resolved, ignore_weak, {}):
                    continue
                if mode == "isolated":
                    work.reset(v.start[m])
                srs = srs_dir / str(m) / "SRS.md"
                srs.parent.mkdir(parents=True, exist_ok=True)
                srs.write_text(spec.srs.get(m, f"Implement milestone {m}."))
                task = {"milestone": m, "srs": srs.read_text(), "srs_path": str(srs)}
                pre = work.head()
                ok = agent(work.path, task)
                tried.add(m)
                if not (work.path / ".git").is_dir():
                    log.append(f"{m}: agent deleted .git; trial stopped")
                    st["stopped"] = True
                    save(pre)
                    return _finish(spec, outcomes, graded, log, st)
                if ok is False:
                    log.append(f"{m}: agent gave up or failed")
                    if mode == "continuous":  # its edits stay in the tree (kept on resume too)
                        keep(work.snapshot(f"agent-gave-up-{m}"))
                    save(work.head() if mode == "continuous" else st["head"])
                    continue
                done.add(m)
                snap = work.snapshot(f"agent-impl-{m}")
                # the agent's source change from the state it was handed (tests excluded): in
                # isolated mode a SWE-bench `model_patch` against the milestone's start commit
                st.setdefault("patches", {})[str(m)] = work.git(
                    "diff", "--binary", "--no-color", "--no-ext-diff", pre, snap, "--", ".",
                    *[f":(exclude){d}" for d in spec.test_dirs],
                ).stdout
                edited = work.git(
                    "diff", "--name-only", pre, snap, "--", *spec.test_dirs
                ).stdout.split()
                if edited:
                    log.append(f"{m}: agent's test edits overwritten by the hidden tests: {edited}")
                keep(snap)
                if m not in graded:
                    resolved[m] = True
                else:
                    outcomes[m] = _evaluate(evalwt, snap, v.end[m], spec)
                    resolved[m] = score_trial({m: spec.tests(m)}, {m: outcomes[m]})[
                        "per_milestone"
                    ][m].resolved
                save(snap if mode == "continuous" else st["head"])
            idle = idle + 1 if len(done) == before else 0
            tried = set()
            st["round_before"] = len(done)
            save(work.head() if mode == "continuous" else st["head"])
    finally:
        work.close()
        evalwt.close()
    return _finish(spec, outcomes, graded, log, st)


def _finish(spec, outcomes, graded, log, st) -> dict:
    res = score_trial({m: spec.tests(m) for m in graded}, outcomes, graded)
    res["log"], res["outcomes"] = log, outcomes
    res["patches"] = dict(st.get("patches", {}))
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
    passed, failed, collected = run_tests(wt.path, spec.test_timeout_s, spec.test_cmd)
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
