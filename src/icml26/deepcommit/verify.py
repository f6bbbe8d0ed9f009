"""Executable milestones (DeepCommit stage 3): replay, tag-free states, test classification.

:func:`verify` replays the milestones in topological order onto a detached scratch
``git worktree`` (never the user's checkout; removed at the end unless ``keep``): each milestone's
commits are cherry-picked; on a conflict the pick is retried with a union merge of the
conflicting files (append-only files such as registries merge cleanly), else the milestone is
marked non-graded ("conflict"). Start / end commits are recorded (``milestone-<m>-start/-end``
in the paper; we record shas instead of writing tags into the user's repository).

Classification: tests are the files under ``test_dirs``. *Before* = start source + end tests,
*after* = end state; each run ``runs`` times with ``TZ=UTC`` and ``PYTHONHASHSEED=0`` under
``timeout_s`` (a timeout is a failure). FAIL_TO_PASS: failed before, passed after;
PASS_TO_PASS: passed in both; NONE_TO_PASS: absent before, passed after; a test whose outcome
differs between repeats goes to ``filtered`` (EvoClaw's filter_list.json). A milestone with
neither F2P nor N2P is non-graded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from icml26.deepcommit.dag import Dag, topo_order
from icml26.deepcommit.history import History, git

__all__ = ["Verified", "verify", "run_tests", "Worktree"]

_ENV = {
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "dc",
    "GIT_AUTHOR_EMAIL": "dc@localhost",
    "GIT_COMMITTER_NAME": "dc",
    "GIT_COMMITTER_EMAIL": "dc@localhost",
    "GIT_AUTHOR_DATE": "@1700000000 +0000",
    "GIT_COMMITTER_DATE": "@1700000000 +0000",
}


class Worktree:
    """A detached worktree of ``repo`` in a temporary folder; ``close()`` removes it."""

    def __init__(self, repo: Path, rev: str):
        self.repo = Path(repo)
        self.path = Path(tempfile.mkdtemp(prefix="dc-wt-")) / "wt"
        git(self.repo, "worktree", "add", "-q", "--detach", str(self.path), rev)

    def git(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            ["git", "-C", str(self.path), *args],
            capture_output=True,
            text=True,
            env={**os.environ, **_ENV},
        )
        if check and proc.returncode:
            raise RuntimeError(f"git {' '.join(args)}: {proc.stderr.strip()}")
        return proc

    def head(self) -> str:
        return self.git("rev-parse", "HEAD").stdout.strip()

    def reset(self, rev: str) -> None:
        self.git("reset", "-q", "--hard", rev)
        self.git("clean", "-qfdx")

    def snapshot(self, message: str = "snapshot") -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "--no-verify", "-m", message)
        return self.head()

    def close(self) -> None:
        git(self.repo, "worktree", "remove", "--force", str(self.path), check=False)
        shutil.rmtree(self.path.parent, ignore_errors=True)
        git(self.repo, "worktree", "prune", check=False)


def run_tests(
    workdir: Path, timeout_s: float = 300, test_cmd: list[str] | None = None
) -> tuple[set[str], set[str], bool]:
    """(passed, failed, collected) test IDs of one pytest run (JUnit XML) in ``workdir``.

    IDs are ``path::name`` normalised (classname dots to slashes). A timeout fails every test
    it would have run: it returns (empty, empty, False). ``test_cmd`` replaces pytest: its
    arguments may hold ``{junit}`` (the JUnit XML path it must write) and ``{python}``; it runs
    in ``workdir`` with ``$DC_JUNIT`` set too. ``PYTHONPATH`` is ``workdir`` (and ``workdir/src``
    when that folder exists, for src layouts)."""
    xml = Path(tempfile.mkdtemp(prefix="dc-junit-")) / "r.xml"
    if test_cmd:
        test_cmd = [
            a.replace("{junit}", str(xml)).replace("{python}", sys.executable) for a in test_cmd
        ]
    cmd = test_cmd or [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        "--continue-on-collection-errors",
        f"--junitxml={xml}",
    ]
    env = {
        **os.environ,
        "TZ": "UTC",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": os.pathsep.join(
            [str(workdir / "src")] * (workdir / "src").is_dir() + [str(workdir)]
        ),
        "DC_JUNIT": str(xml),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    try:
        proc = subprocess.run(
            cmd, cwd=workdir, capture_output=True, text=True, env=env, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return set(), set(), False
    passed, failed = set(), set()
    if xml.exists():
        for case in ET.parse(xml).getroot().iter("testcase"):
            if not case.get("classname"):  # a collection error of a whole file: not a test
                continue
            tid = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")
            if case.find("skipped") is not None:
                continue
            bad = case.find("failure") is not None or case.find("error") is not None
            (failed if bad else passed).add(tid)
    shutil.rmtree(xml.parent, ignore_errors=True)
    collected = proc.returncode in (0, 1, 5)
    return passed, failed, collected


@dataclass
class Verified:
    order: list[int]
    start: dict[int, str] = field(default_factory=dict)
    end: dict[int, str] = field(default_factory=dict)
    classification: dict[int, dict] = field(default_factory=dict)
    non_graded: dict[int, str] = field(default_factory=dict)
    base: str = ""


def _repeat(wt: Worktree, runs: int, timeout_s: float, test_cmd) -> tuple[set, set, set]:
    """(stable passed, stable failed, unstable) over ``runs`` repeats."""
    outs = [run_tests(wt.path, timeout_s, test_cmd) for _ in range(runs)]
    passed = set.intersection(*[o[0] for o in outs])
    failed = set.intersection(*[o[1] for o in outs])
    seen = set.union(*[o[0] | o[1] for o in outs])
    return passed, failed, seen - passed - failed


def _tests_in(wt: Worktree, rev: str, test_dirs) -> list[str]:
    out = wt.git("ls-tree", "-r", "--name-only", rev, "--", *test_dirs).stdout
    return [x for x in out.splitlines() if x]


def _pick(wt: Worktree, sha: str, union_attrs: Path) -> bool:
    """Cherry-pick ``sha``; on a conflict retry with a union merge; if that fails too, resolve
    every conflict with the commit's own version (``-X theirs``, modify/delete: keep its file).
    Returns False when the forced resolution was needed."""
    args = ["cherry-pick", "--allow-empty", "--keep-redundant-commits"]
    if wt.git(*args, sha, check=False).returncode == 0:
        return True
    wt.git("cherry-pick", "--abort", check=False)
    if wt.git("-c", f"core.attributesFile={union_attrs}", *args, sha, check=False).returncode == 0:
        return True
    wt.git("cherry-pick", "--abort", check=False)
    if wt.git(*args, "-X", "theirs", sha, check=False).returncode != 0:
        wt.git("checkout", sha, "--", ".", check=False)
        for path in wt.git("diff", "--name-only", "--diff-filter=U").stdout.split():
            if wt.git("cat-file", "-e", f"{sha}:{path}", check=False).returncode:
                wt.git("rm", "-q", "--", path, check=False)
        wt.git("add", "-A")
        wt.git("-c", "core.editor=true", "cherry-pick", "--continue")
    return False


def verify(
    history: History,
    labels,
    dag: Dag,
    runs: int = 3,
    timeout_s: float = 300,
    test_dirs: tuple[str, ...] = ("tests",),
    test_cmd: list[str] | None = None,
    progress=None,
    repo: Path | str | None = None,
    resume: Verified | None = None,
    on_milestone=None,
) -> Verified:
    """Replay milestones in topological order in a scratch worktree and classify tests.

    ``repo``: the repository whose worktree the replay runs in (default ``history.repo``; the
    builder passes its own staging clone so nothing at all is written to the user's
    repository). ``resume``: a partial result of the same replay (same order); its milestones
    are kept and the replay continues from the last one's end state. ``on_milestone(res, m)``
    is called after each milestone (checkpoints)."""
    commits = history.commits
    groups: dict[int, list[str]] = {}
    for c, m in zip(commits, labels, strict=True):
        groups.setdefault(int(m), []).append(c.sha)
    # ties broken by each milestone's *last* commit: a milestone is replayed once the history
    # it was finished on (files other milestones created, lines it appends after) exists
    pos = {c.sha: i for i, c in enumerate(commits)}
    order = topo_order(sorted(groups, key=lambda m: pos[groups[m][-1]]), list(dag.edges))
    # a root commit cannot be replayed onto anything: it becomes the base state itself
    base = commits[0].parents[0] if commits[0].parents else commits[0].sha
    for m in groups:
        groups[m] = [s for s in groups[m] if s != base]
    res = Verified(order, base=base)
    done: list[int] = []
    if resume is not None and resume.end:
        if list(resume.order) != list(order) or resume.base != base:
            raise ValueError("resume: a different replay (order or base changed)")
        done = [m for m in order if m in resume.end and m in resume.classification]
        if done != order[: len(done)]:
            raise ValueError("resume: finished milestones are not a prefix of the order")
        for m in done:
            res.start[m], res.end[m] = resume.start[m], resume.end[m]
            res.classification[m] = resume.classification[m]
            if m in resume.non_graded:
                res.non_graded[m] = resume.non_graded[m]
    wt = Worktree(
        Path(repo) if repo is not None else history.repo, res.end[done[-1]] if done else base
    )
    union_attrs = Path(wt.path.parent) / "union.attributes"
    union_attrs.write_text("* merge=union\n")
    todo = order[len(done) :]
    it = progress.track(todo, len(todo), "verify milestones") if progress else todo
    try:
        for m in it:
            start = wt.head()
            forced = []
            for sha in groups[m]:
                if not _pick(wt, sha, union_attrs):
                    forced.append(sha[:10])
            if forced:  # the tree stays whole for later milestones; this one is not graded
                res.non_graded[m] = f"conflict replaying {forced} (resolved with its version)"
            end = wt.head()
            res.start[m], res.end[m] = start, end
            tests = _tests_in(wt, end, test_dirs)
            wt.reset(start)
            if tests:
                wt.git("checkout", end, "--", *tests)
            bp, bf, bu = _repeat(wt, runs, timeout_s, test_cmd)
            wt.reset(end)
            ap, af, au = _repeat(wt, runs, timeout_s, test_cmd)
            unstable = bu | au
            cls = {
                "FAIL_TO_PASS": sorted((bf & ap) - unstable),
                "PASS_TO_PASS": sorted((bp & ap) - unstable),
                "NONE_TO_PASS": sorted(ap - bp - bf - unstable),
                "filtered": sorted(unstable),
            }
            res.classification[m] = cls
            if not ap and not af and m not in res.non_graded:
                res.non_graded[m] = "no tests collected at the end state"
            elif m in res.non_graded:
                pass
            elif not cls["FAIL_TO_PASS"] and not cls["NONE_TO_PASS"]:
                res.non_graded[m] = "no FAIL_TO_PASS or NONE_TO_PASS test"
            if on_milestone is not None:
                on_milestone(res, m)
    finally:
        wt.close()
    return res
