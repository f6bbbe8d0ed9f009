"""Where claims run: in this process, in N local processes, or as tasks on a Ray cluster.

``icml26 reproduce --jobs SPEC``: no SPEC runs claims one after another in this process; ``N``
runs them in N local worker processes (``spawn``; each worker gets cores/N threads so workers do
not oversubscribe the machine); ``ray`` starts a local Ray, ``ray://HOST:PORT`` joins a cluster
(``pip install 'icml26[ray]'``). Every backend writes the same ``results/NAME/SCALE.json``.

A task ships only names and numbers (:class:`Job`): the worker imports icml26 from its own
environment, runs the claim and sends back the record; with Ray the record and the figure bytes
travel back and the driver writes them atomically (nodes need no shared filesystem). A claim
whose module defines ``units``/``combine`` (see :meth:`Claim.unit_functions`) is fanned out one
task per unit and combined on the driver, where the runner computes the verdict as usual.

Failures: a worker process that dies (OOM, preemption, kill) is retried up to ``max_retries``
times; a claim that raises is an ``error`` verdict and is not retried. Ctrl-C cancels what is
outstanding; finished records stay, and nothing half-written is left.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import multiprocessing
import os
import socket
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from icml26.core.claims import (
    Claim,
    Measure,
    Progress,
    Result,
    RunContext,
    code_version,
    run_claim,
)
from icml26.core.errors import UserError
from icml26.core.io import atomic_write_bytes, atomic_write_json

__all__ = ["Job", "Backend", "InProcess", "LocalProcesses", "RayBackend", "parse_jobs"]

RAY_HINT = "install the Ray extra: pip install 'icml26[ray]'"


@dataclass(frozen=True)
class Job:
    """One claim run, as a task sees it: names and numbers only (picklable, tiny)."""

    name: str
    scale: str
    seed: int = 0
    device: str = "cpu"
    options: tuple[tuple[str, str], ...] = ()
    out_root: str = "results"
    threads: int | None = None
    run_target: str | None = None  # "pkg.module:run" for a claim outside the index (demos, tests)

    def claim(self) -> Claim:
        if self.run_target:
            from icml26.core.claims import lazy

            return Claim(self.name, "-", "-", "-", run=lazy(self.run_target))
        from icml26 import claims_index

        return claims_index.get(self.name)

    def kwargs(self, out_root: str | None = None) -> dict:
        return dict(scale=self.scale, seed=self.seed, device=self.device,
                    out_root=out_root or self.out_root, options=dict(self.options),
                    threads=self.threads)


# ----------------------------------------------------------------------------- worker side

def _set_worker_threads(threads: int | None) -> None:
    if threads:
        for var in ("ICML26_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(threads)


def _unit_ctx(job: Job, spec: dict) -> RunContext:
    return RunContext(scale=spec["scale"], seed=spec["seed"], device=spec["device"],
                      out_dir=Path(spec["out_dir"]), options=spec["options"])


def _unit_spec(ctx: RunContext) -> dict:
    return {"scale": ctx.scale, "seed": ctx.seed, "device": ctx.device,
            "out_dir": str(ctx.out_dir), "options": dict(ctx.options)}


def run_whole_local(job: Job) -> dict:
    """Worker: run the claim and write its record (shared filesystem); return the record."""
    _set_worker_threads(job.threads)
    return run_claim(job.claim(), **job.kwargs())


def run_unit_local(job: Job, spec: dict) -> Result:
    """Worker: one unit of a claim; the driver combines."""
    from icml26.core.claims import seed_everything, set_threads

    _set_worker_threads(job.threads)
    set_threads(job.threads)
    seed_everything(spec["seed"])
    ctx = _unit_ctx(job, spec)
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    return job.claim().unit_functions()[1](ctx)


def _figure_bytes(paths: Sequence[str | Path], root: Path) -> dict[str, bytes]:
    out = {}
    for p in paths:
        path = Path(p) if Path(p).is_absolute() else root / p
        if path.is_file():
            try:
                rel = path.resolve().relative_to(root.resolve()).as_posix()
            except ValueError:
                rel = path.name
            out[rel] = path.read_bytes()
    return out


def run_whole_remote(job: Job) -> tuple[str, dict, dict[str, bytes]]:
    """Ray worker: run into a private folder; return (code version, record, figure bytes)."""
    _set_worker_threads(job.threads)
    with tempfile.TemporaryDirectory(prefix="icml26-") as tmp:
        record = run_claim(job.claim(), **job.kwargs(out_root=tmp))
        return code_version(), record, _figure_bytes(record.get("figures") or [], Path(tmp))


def run_unit_remote(job: Job, spec: dict) -> tuple[str, dict, dict[str, bytes]]:
    """Ray worker: one unit into a private folder; the Result travels as a dict + bytes."""
    with tempfile.TemporaryDirectory(prefix="icml26-") as tmp:
        rel = Path(spec["out_dir"]).relative_to(spec["out_root"])
        result = run_unit_local(job, {**spec, "out_dir": str(Path(tmp) / rel)})
        figures = _figure_bytes(result.figures, Path(tmp))
        payload = dataclasses.asdict(result)
        payload["figures"] = list(figures)
        return code_version(), payload, figures


def remote_version() -> str:
    return code_version()


# ----------------------------------------------------------------------------- driver side

class JobsCancelled(KeyboardInterrupt):
    """Raised in a driver thread whose task was cancelled by Ctrl-C: like KeyboardInterrupt, the
    runner writes no record for it."""


OnDone = Callable[[Job, dict], None]


class Backend:
    """Runs jobs and calls ``on_done(job, record)`` as each claim finishes (any order)."""

    parallel = False

    def run(self, jobs: Sequence[Job], on_done: OnDone, progress: Progress | None = None) -> None:
        raise NotImplementedError


class InProcess(Backend):
    """One claim after another in this process (the default); shows each claim's progress."""

    def run(self, jobs, on_done, progress=None):
        for job in jobs:
            on_done(job, run_claim(job.claim(), progress=progress, **job.kwargs()))


@contextlib.contextmanager
def _ctrl_c_sets(event: threading.Event):
    """While the driver waits, SIGINT sets ``event`` instead of raising KeyboardInterrupt
    wherever the main thread happens to be (a half-acquired lock, a pool's bookkeeping, a
    handler that swallows it). The driver loop turns the event into KeyboardInterrupt itself.
    Only the main thread can install handlers; elsewhere this does nothing. A SIGINT that the
    parent chose to ignore stays ignored."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, lambda signum, frame: event.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class _Threaded(Backend):
    """Shared driver logic: one waiting thread per job, the work itself in workers."""

    parallel = True

    def __init__(self, max_retries: int = 2):
        self.max_retries = max_retries
        self._lock = threading.Lock()
        self._cancelled = threading.Event()

    def _whole(self, job: Job) -> dict:
        raise NotImplementedError

    def _units(self, job: Job, claim: Claim, ctxs: list[RunContext]) -> list[Result]:
        raise NotImplementedError

    def _prepare(self, jobs: Sequence[Job]) -> None:
        pass

    def _cancel(self) -> None:
        pass

    def _one(self, job: Job) -> dict:
        claim = job.claim()
        if not self._split[job]:
            return self._whole(job)
        return run_claim(claim, map_units=lambda c, ctxs: self._units(job, c, ctxs),
                         **job.kwargs())

    def run(self, jobs, on_done, progress=None):
        # Which claims split into units: decided here, one import at a time (imports racing in
        # the driver threads can half-initialise a package such as scipy).
        self._split = {job: job.claim().unit_functions() is not None for job in jobs}
        self._prepare(jobs)
        with _ctrl_c_sets(self._cancelled), \
                cf.ThreadPoolExecutor(max_workers=max(1, len(jobs))) as threads:
            futures = {threads.submit(self._one, job): job for job in jobs}
            try:
                pending = set(futures)
                while pending:
                    # Short waits, not one blocking wait: Ctrl-C only sets the event (see
                    # _ctrl_c_sets), and KeyboardInterrupt is raised here, at a known point,
                    # rather than inside a lock or a pool's bookkeeping.
                    if self._cancelled.is_set():
                        raise KeyboardInterrupt
                    done, pending = cf.wait(pending, timeout=0.2,
                                            return_when=cf.FIRST_COMPLETED)
                    for fut in done:
                        if self._cancelled.is_set():
                            raise KeyboardInterrupt
                        record = fut.result()
                        with self._lock:
                            on_done(futures[fut], record)
            except BaseException:
                self._cancelled.set()
                for f in futures:
                    f.cancel()
                self._cancel()
                raise


class LocalProcesses(_Threaded):
    """``--jobs N``: N worker processes on this machine (``spawn`` context)."""

    def __init__(self, n: int, max_retries: int = 2):
        super().__init__(max_retries)
        if n < 1:
            raise UserError(f"--jobs must be >= 1, got {n}")
        self.n = n
        self._pool: cf.ProcessPoolExecutor | None = None
        self._generation = 0

    def _new_pool(self) -> None:
        self._pool = cf.ProcessPoolExecutor(max_workers=self.n,
                                            mp_context=multiprocessing.get_context("spawn"))
        self._generation += 1

    def _prepare(self, jobs):
        self._new_pool()

    def _threads(self, job: Job) -> Job:
        if job.threads:
            return job
        from icml26.core.claims import usable_cores

        return dataclasses.replace(job, threads=max(1, usable_cores() // self.n))

    def _submit(self, fn, *args):
        """Run ``fn(*args)`` in a worker; if the pool broke (a worker died), rebuild and retry."""
        for attempt in range(self.max_retries + 1):
            with self._lock:
                pool, generation = self._pool, self._generation
            try:
                return pool.submit(fn, *args).result()
            except Exception as exc:
                # once Ctrl-C cancelled the run, whatever a task ends with (a broken pool, a
                # cancelled future, "cannot schedule new futures after shutdown") is that
                # cancellation: no record may be written for it
                if self._cancelled.is_set():
                    raise JobsCancelled from None
                if not isinstance(exc, cf.process.BrokenProcessPool) or \
                        attempt == self.max_retries:
                    raise
                with self._lock:
                    if generation == self._generation:  # first thread to notice rebuilds
                        self._new_pool()
        raise AssertionError("unreachable")  # pragma: no cover

    def _whole(self, job):
        return self._submit(run_whole_local, self._threads(job))

    def _units(self, job, claim, ctxs):
        job = self._threads(job)
        with cf.ThreadPoolExecutor(max_workers=len(ctxs) or 1) as t:
            return list(t.map(lambda c: self._submit(run_unit_local, job, _unit_spec(c)), ctxs))

    def _cancel(self):
        pool = self._pool
        if pool is not None:
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.terminate()
            pool.shutdown(wait=False, cancel_futures=True)

    def run(self, jobs, on_done, progress=None):
        try:
            super().run(jobs, on_done, progress)
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)


class RayBackend(_Threaded):
    """``--jobs ray`` (a local Ray) or ``--jobs ray://HOST:PORT`` (a cluster via Ray Client)."""

    def __init__(self, address: str | None = None, max_retries: int = 2,
                 connect_timeout: float = 30.0):
        super().__init__(max_retries)
        self.address = address
        self.connect_timeout = connect_timeout
        self._refs: list = []

    def _ray(self):
        try:
            import ray
        except ImportError:
            raise UserError(f"--jobs ray needs Ray; {RAY_HINT}") from None
        return ray

    def _connect(self):
        ray = self._ray()
        if ray.is_initialized():
            return ray
        if self.address:
            host, _, port = self.address.removeprefix("ray://").partition(":")
            try:
                socket.create_connection((host, int(port or 10001)),
                                         timeout=self.connect_timeout).close()
            except (OSError, ValueError) as exc:
                raise UserError(f"cannot reach the Ray cluster at {self.address} ({exc}); "
                                "check the head node's client port (default 10001)") from None
            ray.init(address=self.address, logging_level="ERROR", runtime_env=_runtime_env())
        else:
            ray.init(include_dashboard=False, logging_level="ERROR", runtime_env=_runtime_env())
        return ray

    def _prepare(self, jobs):
        ray = self._connect()
        mine = code_version()
        theirs = ray.get(ray.remote(remote_version).options(num_cpus=0.01).remote())
        if theirs != mine:
            raise UserError(f"Ray workers run icml26 {theirs}, this driver runs {mine}; install "
                            "the same version on the cluster (runtime_env or image)")
        have = ray.cluster_resources()
        for job in jobs:
            res = job.claim().resources_for(job.scale)
            if res.gpus > have.get("GPU", 0):
                raise UserError(f"claim {job.name!r} at scale {job.scale} asks for {res} but the "
                                f"cluster has {have.get('GPU', 0):g} GPUs")
        self._ray_mod = ray

    def _options(self, job: Job) -> dict:
        res = job.claim().resources_for(job.scale)
        opts = {"num_cpus": res.cpus, "num_gpus": res.gpus, "max_retries": self.max_retries,
                "retry_exceptions": False}
        if res.memory_gb:
            opts["memory"] = int(res.memory_gb * 1024**3)
        return opts

    def _get(self, fn, job, *args):
        ray = self._ray_mod
        if not job.threads:
            job = dataclasses.replace(job, threads=max(1, int(job.claim().resources_for(
                job.scale).cpus)))
        ref = ray.remote(fn).options(**self._options(job)).remote(job, *args)
        with self._lock:
            self._refs.append(ref)
        try:
            version, payload, figures = ray.get(ref)
        except Exception:
            if self._cancelled.is_set():
                raise JobsCancelled from None
            raise
        if version != code_version():
            raise UserError(f"a Ray worker ran icml26 {version}, the driver runs {code_version()}")
        return payload, figures

    def _whole(self, job):
        record, figures = self._get(run_whole_remote, job)
        root = Path(job.out_root)
        for rel, data in figures.items():
            atomic_write_bytes(root / rel, data)
        record["figures"] = list(figures)
        atomic_write_json(root / job.name / f"{job.scale}.json", record)
        return record

    def _units(self, job, claim, ctxs):
        def one(ctx: RunContext) -> Result:
            spec = {**_unit_spec(ctx), "out_root": job.out_root}
            payload, figures = self._get(run_unit_remote, job, spec)
            for rel, data in figures.items():
                atomic_write_bytes(Path(job.out_root) / rel, data)
            return Result(rows=payload["rows"], headline=Measure(**{
                **payload["headline"], "spread": tuple(payload["headline"]["spread"])
                if payload["headline"]["spread"] is not None else None}),
                target=payload["target"], notes=payload["notes"],
                figures=[Path(job.out_root) / rel for rel in figures])

        with cf.ThreadPoolExecutor(max_workers=len(ctxs) or 1) as t:
            return list(t.map(one, ctxs))

    def _cancel(self):
        ray = getattr(self, "_ray_mod", None)
        if ray is not None:
            for ref in self._refs:
                with contextlib.suppress(Exception):  # finished or already gone
                    ray.cancel(ref, force=True)


def _runtime_env() -> dict | None:
    """``$ICML26_RAY_RUNTIME_ENV``: a JSON Ray runtime_env, e.g. {"pip": ["dist/icml26.whl"]}."""
    import json

    raw = os.environ.get("ICML26_RAY_RUNTIME_ENV")
    if not raw:
        return None
    try:
        env = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UserError(f"$ICML26_RAY_RUNTIME_ENV is not JSON ({exc})") from None
    if not isinstance(env, dict):
        raise UserError("$ICML26_RAY_RUNTIME_ENV must be a JSON object (a Ray runtime_env)")
    return env


def parse_jobs(spec: str | None, max_retries: int = 2) -> Backend:
    """``None``/"" → in-process; ``"N"`` → N local processes; ``"ray"`` / ``"ray://HOST:PORT"``."""
    if spec is None or spec == "":
        return InProcess()
    if spec.isdigit() or (spec.startswith("-") and spec[1:].isdigit()):
        n = int(spec)
        if n < 1:
            raise UserError(f"--jobs {spec}: expected a positive number of processes")
        return LocalProcesses(n, max_retries=max_retries)
    if spec == "ray":
        return RayBackend(None, max_retries=max_retries)
    if spec.startswith("ray://"):
        host = spec.removeprefix("ray://")
        if not host:
            raise UserError("--jobs ray://: give the head node, e.g. ray://head:10001")
        return RayBackend(spec, max_retries=max_retries)
    raise UserError(f"--jobs {spec!r}: expected a number of local processes, 'ray' or "
                    "'ray://HOST:PORT'")


def comparable(record: dict) -> dict[str, Any]:
    """A record without what legitimately differs between backends (times, hosts, threads)."""
    drop = {"started_at", "finished_at", "wall_time_s", "cpu_time_s", "environment", "units"}
    return {k: v for k, v in record.items() if k not in drop}
