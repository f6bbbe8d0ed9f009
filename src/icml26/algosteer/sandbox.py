"""Run generated programs against a task's tests in separate, resource-limited processes.

``run_tests(code, task, limits)`` starts a fresh interpreter (``python -I -S``, bare environment,
private temporary folder, new session) that applies ``resource`` limits -- address space, CPU
seconds, file size, open files, processes -- and, when started as root, drops to ``nobody`` before
the program runs. The parent enforces a wall-clock deadline and kills the whole process group.
:class:`SandboxPool` does the same through long-lived "zygote" processes that ``fork`` a child per
program instead of starting an interpreter (several times faster; see benchmarks/algosteer.py).

Outcomes: ``pass`` (every case right), ``fail`` (a wrong answer, an exception in a case, or no
entry point), ``timeout``, ``memory``, ``crash`` (the program failed while loading: syntax it
smuggled past us, ``sys.exit``, a top-level exception, or a hard kill). An empty program is
``unparsable`` before any process starts.

Not a security boundary: a hostile program can still reach the network or read world-readable
files. Use containers/VMs for untrusted code at scale.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from icml26.algosteer.tasks import Task

__all__ = ["Limits", "TestOutcome", "run_tests", "SandboxPool", "calibrate_limits", "OUTCOMES"]

OUTCOMES = ("pass", "fail", "timeout", "memory", "crash", "unparsable")
_HARNESS = (Path(__file__).with_name("_harness.py")).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Limits:
    """Per-program limits. ``time_s``: wall seconds for all cases of one kind (the CPU limit is
    ``ceil(time_s) + 1``); ``mem_mb``: address space in MiB; ``max_output``: bytes a program may
    print or write to a file; ``drop_uid``: uid to run as when started as root (65534 = nobody;
    ``None`` keeps root)."""

    time_s: float = 5.0
    mem_mb: int = 512
    max_output: int = 65536
    drop_uid: int | None = 65534

    def __post_init__(self) -> None:
        if not (self.time_s > 0 and math.isfinite(self.time_s)):
            raise ValueError(f"time_s must be a positive number of seconds; got {self.time_s}")
        if self.mem_mb < 64:
            raise ValueError(
                f"mem_mb must be >= 64 (the interpreter needs ~30 MiB); got {self.mem_mb}"
            )
        if self.max_output < 0:
            raise ValueError(f"max_output must be >= 0 bytes; got {self.max_output}")


@dataclass(frozen=True)
class TestOutcome:
    """``outcome`` in :data:`OUTCOMES`; ``n_passed``/``n_cases``; ``error``: the first failure
    message (truncated); ``wall_s``: seconds the child ran."""

    outcome: str
    n_passed: int
    n_cases: int
    error: str | None
    wall_s: float

    def to_dict(self) -> dict:
        return {
            "outcome": self.outcome,
            "n_passed": self.n_passed,
            "n_cases": self.n_cases,
            "error": self.error,
            "wall_s": round(self.wall_s, 4),
        }


def _request(code: str, task: Task, kind: str, limits: Limits, result_path: str) -> dict:
    if kind not in ("functional", "large"):
        raise ValueError(f"kind must be 'functional' or 'large'; got {kind!r}")
    cases = task.functional if kind == "functional" else task.large
    return {
        "code": code,
        "harness": task.harness,
        "entry": task.entry,
        "entry_is_class": task.entry_is_class,
        "alias_entry": task.alias_entry,
        "cases": [{"expr": c.expr, "expected": c.expected} for c in cases],
        "mem_mb": limits.mem_mb,
        "cpu_s": int(math.ceil(limits.time_s)) + 1,
        "wall_s": limits.time_s,
        "max_output": limits.max_output,
        "max_procs": 0,
        "drop_uid": limits.drop_uid,
        "result_path": result_path,
        "recursion_limit": 1000,
    }


def _interpret(result_file: Path, status: int | None, timed_out: bool, wall: float, n: int):
    if timed_out:
        return TestOutcome("timeout", 0, n, "wall-clock limit", wall)
    try:
        res = json.loads(result_file.read_text())
    except (OSError, ValueError):
        res = None
    if res is None:
        if status is not None and status in (-signal.SIGXCPU, -signal.SIGKILL):
            return TestOutcome("timeout", 0, n, f"killed by signal {-status}", wall)
        return TestOutcome("crash", 0, n, f"no result (exit status {status})", wall)
    cases = res.get("cases", [])
    passed = sum(bool(c["ok"]) for c in cases)
    errors = [c["error"] for c in cases if not c["ok"]]
    if res["stage"] == "load":
        err = res.get("error") or ""
        kind = "memory" if err.startswith("MemoryError") else "crash"
        return TestOutcome(kind, 0, n, err, wall)
    if res.get("error"):  # the task's harness failed: the program broke a name it needs
        return TestOutcome("fail", 0, n, res["error"], wall)
    if any(e and e.startswith("MemoryError") for e in errors):
        return TestOutcome("memory", passed, n, errors[0], wall)
    if any(e and e.startswith("RecursionError") for e in errors):
        return TestOutcome("fail", passed, n, next(e for e in errors if e), wall)
    if passed == n and len(cases) == n:
        return TestOutcome("pass", passed, n, None, wall)
    return TestOutcome("fail", passed, n, errors[0] if errors else "incomplete", wall)


def _tempdir() -> Path:
    d = Path(tempfile.mkdtemp(prefix="algosteer-"))
    os.chmod(d, 0o777)  # the dropped-privilege child writes here
    return d


def run_tests(
    code: str,
    task: Task,
    limits: Limits | None = None,
    kind: str = "functional",
    python: str | None = None,
) -> TestOutcome:
    """Run ``code`` against ``task``'s ``functional`` (default) or ``large`` cases in a fresh
    interpreter. Gate on ``functional``; ``large`` outcomes are a family property, kept apart."""
    limits = limits or Limits()
    n = len(task.functional if kind == "functional" else task.large)
    if not code.strip():
        return TestOutcome("unparsable", 0, n, "empty program", 0.0)
    work = _tempdir()
    try:
        req = _request(code, task, kind, limits, str(work / "result.json"))
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [python or sys.executable, "-I", "-S", "-c", _HARNESS],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=work,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
            start_new_session=True,
            close_fds=True,
        )
        timed_out = False
        try:
            proc.communicate(json.dumps(req).encode(), timeout=limits.time_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(proc.pid)
            proc.wait()
        wall = time.perf_counter() - t0
        return _interpret(work / "result.json", proc.returncode, timed_out, wall, n)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class _Zygote:
    """One ``python -I -S`` process in ``serve`` mode; one request at a time."""

    def __init__(self, python: str) -> None:
        self.proc = subprocess.Popen(
            [python, "-I", "-S", "-c", _HARNESS, "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
            text=True,
            bufsize=1,
        )
        self.lock = threading.Lock()

    def run(self, code: str, task: Task, kind: str, limits: Limits) -> TestOutcome:
        n = len(task.functional if kind == "functional" else task.large)
        work = _tempdir()
        try:
            req = _request(code, task, kind, limits, str(work / "result.json"))
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("sandbox zygote died; restart the pool")
            ans = json.loads(line)
            return _interpret(
                work / "result.json", ans["status"], ans["timed_out"], ans["wall_s"], n
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class SandboxPool:
    """``workers`` zygotes; ``map`` runs programs concurrently (one per zygote at a time).

    Use as a context manager. Same outcomes and limits as :func:`run_tests`.
    """

    def __init__(self, workers: int = 2, python: str | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1; got {workers}")
        self.python = python or sys.executable
        self._free: list[_Zygote] = [_Zygote(self.python) for _ in range(workers)]
        self._cv = threading.Condition()
        self._exec = ThreadPoolExecutor(workers)

    def run(
        self, code: str, task: Task, limits: Limits | None = None, kind: str = "functional"
    ) -> TestOutcome:
        limits = limits or Limits()
        if not code.strip():
            n = len(task.functional if kind == "functional" else task.large)
            return TestOutcome("unparsable", 0, n, "empty program", 0.0)
        with self._cv:
            while not self._free:
                self._cv.wait()
            z = self._free.pop()
        try:
            try:
                return z.run(code, task, kind, limits)
            except (RuntimeError, BrokenPipeError, OSError):
                z.close()
                z = _Zygote(self.python)
                return z.run(code, task, kind, limits)
        finally:
            with self._cv:
                self._free.append(z)
                self._cv.notify()

    def map(
        self, codes: list[str], task: Task, limits: Limits | None = None, kind: str = "functional"
    ) -> list[TestOutcome]:
        return list(self._exec.map(lambda c: self.run(c, task, limits, kind), codes))

    def imap(self, fn, items) -> list:
        """``[fn(x) for x in items]`` on the pool's threads (``fn`` calls :meth:`run`)."""
        return list(self._exec.map(fn, items))

    def close(self) -> None:
        self._exec.shutdown()
        for z in self._free:
            z.close()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def calibrate_limits(
    task: Task,
    base: Limits | None = None,
    factor: float = 20.0,
    floor_s: float = 2.0,
    probe_s: float = 3.0,
) -> Limits:
    """Large-input limits scaled to this machine: ``max(floor_s, factor * t)`` where ``t`` is the
    fastest reference program's wall time on ``task.large`` (each probed with a ``probe_s``
    limit; slow families simply time out there) (EvalPlus #5: fixed limits make slow
    machines fail correct programs)."""
    base = base or Limits()
    probe = Limits(
        time_s=probe_s, mem_mb=base.mem_mb, max_output=base.max_output, drop_uid=base.drop_uid
    )
    times = []
    for refs in task.references.values():
        for code in refs:
            out = run_tests(code, task, probe, kind="large")
            if out.outcome == "pass":
                times.append(out.wall_s)
    if not times:
        raise RuntimeError(f"task {task.name!r}: no reference program passes its large cases")
    return Limits(max(floor_s, factor * min(times)), base.mem_mb, base.max_output, base.drop_uid)
