"""Claims, their results and verdicts, and the runner that measures them.

A :class:`Claim` is a paper's headline result in one sentence plus a ``run`` function that
reproduces it in miniature and returns a :class:`Result`: the measured table, one headline
:class:`Measure` (with its spread over seeds or a bootstrap CI) and the ``target`` the headline must
beat. The runner, never the claim, turns headline and target into a :class:`Verdict`
(:func:`decide`), times the run, catches its exceptions and writes ``results/NAME/SCALE.json``
atomically.

This module imports nothing heavy: ``icml26 list`` reads claims without importing torch.
"""

from __future__ import annotations

import enum
import importlib
import importlib.metadata
import importlib.util
import math
import os
import platform
import random
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from icml26.core import power as _power
from icml26.core.errors import UserError
from icml26.core.io import atomic_write_json
from icml26.core.options import Opt
from icml26.core.power import PowerCheck, PowerSpec

try:
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None

__all__ = [
    "SCALES",
    "Claim",
    "Measure",
    "PowerCheck",
    "PowerSpec",
    "Result",
    "RunContext",
    "Verdict",
    "Progress",
    "decide",
    "verdict_for",
    "lazy",
    "run_claim",
    "result_path",
    "load_record",
    "cpu_seconds",
    "Resources",
    "code_version",
]

SCALES = ("tiny", "small", "full")
RECORD_VERSION = 1


class Verdict(enum.StrEnum):
    REPRODUCED = "reproduced"
    NOT_REPRODUCED = "not reproduced"
    INCONCLUSIVE = "inconclusive"
    UNINFORMATIVE = "uninformative"
    ERROR = "error"


@dataclass(frozen=True)
class Measure:
    """One measured number.

    ``spread`` is ``(low, high)``: a confidence interval, or min/max over seeds; ``None`` when the
    measurement is exact (deterministic, one run).
    """

    name: str
    value: float
    unit: str = ""
    spread: tuple[float, float] | None = None
    higher_is_better: bool = True

    def __post_init__(self) -> None:
        if self.spread is not None:
            lo, hi = self.spread
            if lo > hi:
                raise ValueError(
                    f"Measure {self.name!r}: spread must be (low, high); got {self.spread}"
                )


@dataclass
class Result:
    """What a claim's ``run`` returns. See DESIGN.md, "The claim contract"."""

    rows: list[dict]
    headline: Measure
    target: float
    notes: list[str] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    #: the paper's own number for the headline quantity, when the run knows it better than the
    #: claim's ``paper_value`` (e.g. it depends on the setting run); the report plots it.
    paper_value: float | None = None
    #: why this measurement cannot test the claim (a failed precondition the claim checks, e.g. a
    #: model that never learned the task); the runner then says ``uninformative``, whatever the
    #: headline, and keeps the reason in the record.
    uninformative: str | None = None
    #: the measured power checks (see :mod:`icml26.core.power`), one per kind the claim declares
    #: in its :class:`PowerSpec`; a check that did not pass makes the verdict ``uninformative``.
    power: list[PowerCheck] = field(default_factory=list)
    #: what each arm consumed in the unit the metric rewards (:func:`icml26.core.stats.budgets`)
    budgets: dict | None = None
    #: tuned arms: ``{arm: TuneResult.to_dict()}`` from the bracketing tuner
    tuning: dict | None = None


class Progress:
    """The progress handle a claim reports to. This base class shows nothing (tests, library use).

    ``track`` wraps an iterable; ``task`` returns a callable that advances a bar by ``n`` steps.
    The CLI passes a rich-backed subclass.
    """

    def track(
        self, iterable: Iterable, total: int | None = None, description: str = ""
    ) -> Iterator:
        yield from iterable

    def task(self, description: str, total: float | None = None) -> Callable[[float], None]:
        return lambda n=1: None

    def log(self, message: str) -> None:
        pass


@dataclass
class RunContext:
    """What a claim's ``run`` receives.

    ``scale``: ``tiny`` (the pipeline check CI runs: every stage end to end on a miniature too
    small to decide anything), ``small`` (default: the documented runs, minutes to hours of CPU
    each; ``Claim.cpu_minutes`` holds the figure) or ``full`` (the paper's configuration, for a
    GPU). ``options`` carries user settings given on the command
    line as ``--opt key=value`` (a model path, a data file), as strings; a claim declares the keys
    it reads (``Claim.options``), and the CLI refuses any other before the run starts.
    """

    scale: str = "tiny"
    seed: int = 0
    device: str = "cpu"
    out_dir: Path = field(default_factory=lambda: Path("results"))
    progress: Progress = field(default_factory=Progress)
    options: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.scale not in SCALES:
            raise UserError(f"scale must be one of {', '.join(SCALES)}; got {self.scale!r}")
        self.out_dir = Path(self.out_dir)

    def pick(self, tiny: Any, small: Any, full: Any) -> Any:
        """The value for this run's scale."""
        return {"tiny": tiny, "small": small, "full": full}[self.scale]


@dataclass(frozen=True)
class Resources:
    """What one run of a claim needs on a node: CPU cores, GPUs and memory (GB).

    The Ray backend turns these into task options; the local backend gives each worker
    ``cpus`` threads at most. A GPU request fails up front on a cluster without GPUs.
    """

    cpus: float = 1
    gpus: float = 0
    memory_gb: float = 0

    def __post_init__(self) -> None:
        if not self.cpus > 0 or self.gpus < 0 or self.memory_gb < 0:
            raise ValueError(f"Resources need cpus > 0, gpus >= 0, memory_gb >= 0; got {self}")

    def __str__(self) -> str:
        parts = [f"{self.cpus:g} CPU"]
        if self.gpus:
            parts.append(f"{self.gpus:g} GPU")
        if self.memory_gb:
            parts.append(f"{self.memory_gb:g} GB")
        return ", ".join(parts)


#: Per-scale defaults; a claim overrides any of them (``full`` usually needs a GPU).
DEFAULT_RESOURCES = {
    "tiny": Resources(cpus=1),
    "small": Resources(cpus=2),
    "full": Resources(cpus=8, gpus=1, memory_gb=64),
}


@dataclass(frozen=True)
class Claim:
    """A paper's headline claim and how to reproduce it in miniature.

    ``run`` is ``None`` while the method is planned (its issue has not landed); such claims are
    listed and shown in the report as "planned" but cannot be run. ``area`` groups the index.
    """

    name: str
    paper: str
    statement: str
    paper_figure: str
    run: Callable[[RunContext], Result] | None = None
    area: str = ""
    resources: Mapping[str, Resources] = field(default_factory=dict)
    #: ``paper_figure`` as a number on the headline's scale (same quantity, same direction), so
    #: the report can draw reported vs measured; None when the paper has no comparable number.
    paper_value: float | None = None
    #: the claim's power checks in words; every landed claim declares one (registry test)
    power: PowerSpec | None = None
    #: expected CPU time of one run per scale, in CPU-minutes (user + system, every thread and
    #: child process), from the doc page's measured runs or an estimate; ``icml26 reproduce``
    #: prints it before work starts unless a recorded run says better (:mod:`icml26.core.eta`)
    cpu_minutes: Mapping[str, float] = field(default_factory=dict)
    #: the ``--opt`` keys ``run`` reads (:mod:`icml26.core.options`); any other key is refused
    options: tuple[Opt, ...] = ()

    @property
    def planned(self) -> bool:
        return self.run is None

    def resources_for(self, scale: str) -> Resources:
        """The resources one run at ``scale`` declares (the claim's own, else the default)."""
        return self.resources.get(scale, DEFAULT_RESOURCES[scale])

    def module(self):
        """The module holding a lazy ``run`` (where optional ``units``/``combine`` live)."""
        target = getattr(self.run, "target", None)
        if target is None:
            return sys.modules.get(getattr(self.run, "__module__", ""), None)
        return importlib.import_module(target.partition(":")[0])

    def unit_functions(self):
        """``(units, run_unit, combine)`` when the claim splits into independent units, else None.

        A claim module may define ``units(ctx) -> list[RunContext]`` (e.g. one per seed, each with
        its own ``out_dir``), ``run_unit(ctx) -> Result`` and ``combine(ctx, results) -> Result``;
        a parallel runner then runs the units in any order, on any worker, and combines them on
        the driver. Its ``run`` must equal ``combine(ctx, [run_unit(u) for u in units(ctx)])``.
        """
        module = self.module() if self.run is not None else None
        fns = tuple(getattr(module, f, None) for f in ("units", "run_unit", "combine"))
        return fns if all(callable(f) for f in fns) else None


def lazy(target: str) -> Callable[[RunContext], Result]:
    """A ``run`` function named ``"package.module:function"``, imported only when called.

    Keeps ``claims_index.py`` a literal list without importing torch-heavy method modules.
    """
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError(f"lazy target must look like 'pkg.module:function'; got {target!r}")

    def run(ctx: RunContext) -> Result:
        return getattr(importlib.import_module(module_name), attr)(ctx)

    run.__qualname__ = run.__name__ = f"lazy({target})"
    run.target = target  # type: ignore[attr-defined]
    return run


def decide(headline: Measure, target: float) -> Verdict:
    """The verdict rule, applied by the runner to every claim.

    The headline must *beat* the target (strictly greater, or strictly smaller when lower is
    better). With a spread ``(low, high)`` (widened to include the value itself): reproduced when
    the whole interval beats the target, not reproduced when none of it does, inconclusive when the
    interval straddles (or touches) the target. An exact tie (headline equal to the target with
    no spread, or a spread collapsed onto it) is inconclusive, never not reproduced. A NaN headline
    or target is an error. Power checks are applied by the runner (:func:`verdict_for`).
    """
    value = float(headline.value)
    if math.isnan(value) or math.isnan(float(target)):
        return Verdict.ERROR
    lo = hi = value
    if headline.spread is not None:
        s_lo, s_hi = (float(x) for x in headline.spread)
        if math.isnan(s_lo) or math.isnan(s_hi):
            return Verdict.INCONCLUSIVE
        lo, hi = min(lo, s_lo), max(hi, s_hi)
    if not headline.higher_is_better:  # mirror: smaller is better
        lo, hi, target = -hi, -lo, -float(target)
    if lo > target:
        return Verdict.REPRODUCED
    if hi < target:
        return Verdict.NOT_REPRODUCED
    return Verdict.INCONCLUSIVE


def verdict_for(headline: Measure, target: float, uninformative: str | None = None,
                power: list[PowerCheck] | None = None) -> tuple[Verdict, str | None]:
    """The verdict with the power checks applied, and the reason when it is ``uninformative``.

    A reason given by the claim (``uninformative``) or any power check that did not pass turns the
    verdict into ``uninformative``, whatever the headline. A NaN headline is ``error``, unless the
    claim itself says why the headline cannot be measured (``uninformative``, e.g. no cell of the
    grid has enough passing programs): a headline that does not exist is then no bug. A NaN target
    is always ``error``.
    """
    verdict = decide(headline, target)
    reasons = [r for r in (uninformative, _power.summary(power or [])) if r]
    reason = "; ".join(reasons) or None
    if verdict is Verdict.ERROR:
        if uninformative and not math.isnan(float(target)):
            return Verdict.UNINFORMATIVE, reason
        return verdict, reason
    if reason:
        verdict = Verdict.UNINFORMATIVE
    return verdict, reason


def cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this process and by its reaped children.

    The difference of two readings is the CPU time of the work between them, however loaded the
    machine (a wall time is not): ``run_claim`` records
    it as ``cpu_time_s``. A child process counts once it has exited and been waited for.
    """
    if resource is None:  # pragma: no cover - not a POSIX system: this process only
        return time.process_time()
    self_, children = (resource.getrusage(w) for w in (resource.RUSAGE_SELF,
                                                       resource.RUSAGE_CHILDREN))
    return self_.ru_utime + self_.ru_stime + children.ru_utime + children.ru_stime


def result_path(out_root: str | os.PathLike, name: str, scale: str) -> Path:
    return Path(out_root) / name / f"{scale}.json"


def load_record(path: str | os.PathLike) -> dict:
    import json

    return json.loads(Path(path).read_text(encoding="utf-8"))


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (the latter two only if importable)."""
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # pragma: no cover
        pass
    if "torch" in sys.modules or _can_import("torch"):
        import torch

        torch.manual_seed(seed)


def _can_import(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def usable_cores() -> int:
    """The cores this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` where the
    platform has no affinity)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - macOS / Windows
        return max(1, os.cpu_count() or 1)


def free_cores(load: float | None = None) -> int:
    """Cores free for this run: the usable cores minus the 1-minute load average (rounded),
    at least 1. On a shared machine more threads than free cores oversubscribe: with torch's
    default (every core), one SSO step on a 64x64 matrix took 2.76 CPU-s with 2 threads under
    load against 0.021 with 1 (issue 40's measurement)."""
    n = usable_cores()
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # pragma: no cover - no load average
            return n
    return max(1, min(n, n - int(round(load))))


def set_threads(n: int | None = None) -> int:
    """Use ``n`` threads for torch (default: ``$ICML26_THREADS``, else :func:`free_cores`).
    Returns n."""
    n = n or int(os.environ.get("ICML26_THREADS", "0")) or free_cores()
    if "torch" in sys.modules or _can_import("torch"):
        import torch

        torch.set_num_threads(n)
    return n


def environment(device: str, threads: int) -> dict[str, Any]:
    """Versions, threads, device and git commit, recorded beside every result."""
    versions = {"python": platform.python_version()}
    for pkg in ("icml26", "torch", "transformers", "numpy", "scipy"):
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = None
    env: dict[str, Any] = {
        "versions": versions,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "usable_cores": usable_cores(),
        "threads": threads,
        "device": device,
        "git_commit": _git_commit(),
    }
    if device.startswith("cuda") and "torch" in sys.modules:
        import torch

        if torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return env


def code_version() -> str:
    """``VERSION+COMMIT`` of the running icml26 (the commit when run from a git checkout).

    Workers compare theirs with the driver's; ``--resume`` only reuses records of the same one.
    """
    try:
        version = importlib.metadata.version("icml26")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - source tree on sys.path
        version = "0+unknown"
    commit = _git_commit()
    return f"{version}+{commit[:12]}" if commit else version


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def run_claim(
    claim: Claim,
    *,
    scale: str = "small",
    seed: int = 0,
    device: str = "cpu",
    out_root: str | os.PathLike = "results",
    progress: Progress | None = None,
    options: Mapping[str, str] | None = None,
    threads: int | None = None,
    map_units: Callable[[Claim, list[RunContext]], list[Result]] | None = None,
) -> dict:
    """Run one claim and write its record to ``out_root/NAME/SCALE.json``; return the record.

    An exception inside the claim becomes verdict ``error`` with the traceback in the record (the
    caller goes on to the next claim). ``KeyboardInterrupt`` is not caught: nothing is written
    for the interrupted claim, and earlier records stay intact.

    ``map_units`` (given by a parallel job backend): when the claim defines ``units``/``combine``
    (see :meth:`Claim.unit_functions`), its units are run through ``map_units`` and combined here;
    otherwise, and always without ``map_units``, the claim runs whole.

    The record keeps ``wall_time_s`` and ``cpu_time_s``: the CPU seconds of this process (every
    thread) and of the child processes it reaped during the run (:func:`cpu_seconds`), which a
    loaded machine does not inflate; ``None`` when ``map_units`` ran the units elsewhere.
    """
    if claim.run is None:
        raise UserError(f"claim {claim.name!r} is planned: its method has not landed yet")
    out_root = Path(out_root)
    out_dir = out_root / claim.name / scale
    ctx = RunContext(
        scale=scale,
        seed=seed,
        device=device,
        out_dir=out_dir,
        progress=progress or Progress(),
        options=dict(options or {}),
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    n_threads = set_threads(threads)
    seed_everything(seed)
    started = datetime.now(UTC)
    t0, cpu0 = time.perf_counter(), cpu_seconds()
    record: dict[str, Any] = {
        "record_version": RECORD_VERSION,
        "name": claim.name,
        "paper": claim.paper,
        "area": claim.area,
        "statement": claim.statement,
        "paper_figure": claim.paper_figure,
        "scale": scale,
        "seed": seed,
        "options": dict(ctx.options),
        "started_at": started.isoformat(timespec="seconds"),
        "code_version": code_version(),
    }
    try:
        fns = claim.unit_functions() if map_units is not None else None
        if fns is None:
            result = claim.run(ctx)
        else:
            units, _, combine = fns
            unit_ctxs = list(units(ctx))
            record["units"] = len(unit_ctxs)
            result = combine(ctx, list(map_units(claim, unit_ctxs)))
        if not isinstance(result, Result):
            raise TypeError(f"claim {claim.name!r} returned {type(result).__name__}, not Result")
        _power.validate(claim.name, claim.power, list(result.power), list(result.rows))
        verdict, reason = verdict_for(result.headline, result.target, result.uninformative,
                                      list(result.power))
        record.update(
            verdict=verdict.value,
            headline=asdict(result.headline),
            target=float(result.target),
            rows=[dict(r) for r in result.rows],
            notes=list(result.notes),
            figures=[_relative(Path(f), out_root) for f in result.figures],
            paper_value=result.paper_value if result.paper_value is not None
            else claim.paper_value,
            uninformative=reason,
            power={
                "declared": {k: claim.power.describe(k) for k in claim.power.kinds}
                if claim.power is not None else None,
                "checks": [c.to_dict() for c in result.power],
                "passed": not _power.failures(result.power),
            },
            budgets=result.budgets,
            tuning=result.tuning,
            error=None,
        )
        if verdict is Verdict.ERROR:
            record["error"] = {"type": "ValueError", "message": "headline or target is NaN"}
    except Exception as exc:  # noqa: BLE001 - any failure of a claim is reported, not raised
        record.update(
            verdict=Verdict.ERROR.value,
            headline=None,
            target=None,
            rows=[],
            notes=[],
            figures=[],
            error={
                "type": type(exc).__name__,
                "message": str(exc),
                "traceback": traceback.format_exc(),
            },
        )
    record["wall_time_s"] = round(time.perf_counter() - t0, 3)
    # Units that ``map_units`` ran in other worker processes are not this process's CPU time:
    # the figure would understate the run, so such a record has none.
    record["cpu_time_s"] = None if "units" in record else round(cpu_seconds() - cpu0, 3)
    record["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    record["environment"] = environment(device, n_threads)
    path = atomic_write_json(result_path(out_root, claim.name, scale), record)
    return load_record(path)  # exactly what is on disk (tuples as lists, numpy as numbers)


def _relative(path: Path, root: Path) -> str:
    """Figure paths are stored relative to the results root, so a results folder can move."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix()
