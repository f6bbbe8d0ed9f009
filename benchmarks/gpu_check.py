"""One prepared GPU check for every method: correctness against the CPU reference and timings
against each method's GPU baseline, side by side in one process, under a hard wall-clock budget.

Run on a bare GPU machine (no network, no ``pip install -e``; see docs/scale.md)::

    PYTHONPATH=src python3 benchmarks/gpu_check.py --device cuda --budget 480 --out DIR

and on CPU (what CI runs, tiny shapes, every section exercised)::

    PYTHONPATH=src python3 benchmarks/gpu_check.py --device cpu --budget 60 --out DIR

Writes ``DIR/GPU.md`` (a table per method) and ``DIR/gpu_check.json``; ``--md PATH`` writes the
markdown there too (``benchmarks/GPU.md`` for the committed GPU run). Each method is a section in
``benchmarks/gpu_sections/NAME.py``: a ``run(ctx)`` function (see :class:`Ctx` for what it may
record) and a ``WEIGHT`` (its share of the budget); a section that has nothing for a GPU sets
``CPU_ONLY = "why"`` instead. A section that raises is recorded as failed with its message and the
others still run; a section that outlives its share is stopped (SIGALRM) and recorded as timed
out with the rows it had; a section whose turn comes when the budget is spent is skipped with a
note. Exit code: 0 when no check failed and no section raised, 1 otherwise, 2 for usage errors.

Shapes: ``tiny`` (default on CPU: seconds per section) or ``paper`` (default on CUDA: the paper's
shapes, Llama-3-8B-like layers and long contexts, cut to fit). On CUDA, ``--budget`` below
:data:`MIN_BUDGET_S` at ``paper`` shapes is refused before any work.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import importlib
import importlib.abc
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for p in (str(ROOT / "src"), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

#: the sections in the order they run: the methods whose GPU path is the paper's point first
SECTIONS = ("quartet2", "sso", "binarypc", "echo", "tie", "cat", "lems", "restore", "uds",
            "corrsteer", "quatro", "cclrec", "atlas", "skillpro", "cyberpal", "algosteer",
            "deepcommit", "chemcensor", "oserve")
#: the smallest budget (s) the ``paper`` shapes are run under on CUDA (model builds, warm-ups)
MIN_BUDGET_S = 240.0
#: the smallest budget (s) at all
MIN_ANY_BUDGET_S = 10.0
#: seconds kept back from the budget for writing the outputs
RESERVE_S = 3.0


class Timeout(Exception):
    """A section outlived its share of the budget."""


class UsageError(Exception):
    """Bad command-line input (exit 2)."""


@dataclass
class Check:
    name: str
    passed: bool
    err: float | None = None
    tol: float | None = None
    note: str = ""


@dataclass
class Timing:
    name: str
    baseline: str
    baseline_ms: float
    method_ms: float
    note: str = ""
    target: float | None = None  # method/baseline ratio the issue asks for (<=), if any

    @property
    def ratio(self) -> float:
        return self.method_ms / self.baseline_ms if self.baseline_ms > 0 else math.inf


@dataclass
class SectionResult:
    name: str
    status: str = "not run"  # ok | failed | error | timeout | skipped | cpu-only
    budget_s: float = 0.0
    wall_s: float = 0.0
    checks: list[Check] = field(default_factory=list)
    timings: list[Timing] = field(default_factory=list)
    values: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str = ""


class Ctx:
    """What a section sees: the device, the shapes, a clock, and ways to record rows.

    - ``ctx.device`` (``torch.device``), ``ctx.cpu`` (the reference device), ``ctx.is_cuda``,
      ``ctx.scale`` (``"tiny"`` or ``"paper"``), ``ctx.pick(tiny=..., paper=...)``.
    - ``ctx.dtype``: bf16 on CUDA, float32 on CPU (the dtype of model-shaped work).
    - ``with ctx.exact():`` float32 without TF32 for correctness checks (restored after; the
      harness also restores these settings after every section).
    - ``ctx.remaining()``: seconds left in this section's share; ``ctx.enough(s)`` says whether
      ``s`` more seconds fit (a section skips optional parts with ``ctx.note`` when not).
    - ``ctx.check(name, passed, err=, tol=, note=)``, ``ctx.close(name, got, ref, atol=, rtol=)``
      (max-abs error against a reference moved to the CPU, in float64), ``ctx.equal(name, a, b)``
      (bit-exact).
    - ``ctx.time(fn, warmup=, iters=)`` -> median ms (CUDA events on GPU, perf_counter on CPU,
      synchronised); ``ctx.compare(name, baseline_name, baseline_fn, method_fn, target=)`` times
      both interleaved and records a timing row (ratio = method / baseline).
    - ``ctx.value(name, text)`` a measured figure that is neither a check nor a timing;
      ``ctx.note(text)``.
    """

    def __init__(self, result: SectionResult, device: str, scale: str, deadline: float):
        import torch

        self.torch = torch
        self.result = result
        self.device = torch.device(device)
        self.cpu = torch.device("cpu")
        self.is_cuda = self.device.type == "cuda"
        self.scale = scale
        self.dtype = torch.bfloat16 if self.is_cuda else torch.float32
        self.deadline = deadline

    # -- the clock -----------------------------------------------------------------------------
    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def enough(self, seconds: float) -> bool:
        return self.remaining() > seconds

    def pick(self, *, tiny: Any, paper: Any) -> Any:
        return paper if self.scale == "paper" else tiny

    @contextlib.contextmanager
    def exact(self):
        """float32 matmuls and convolutions in full precision (no TF32) while correctness checks
        run: cuDNN allows TF32 by default, and another section may have lowered the matmul
        precision; the previous settings are restored after."""
        torch = self.torch
        prev = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.allow_tf32 = False
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(prev[0])
            torch.backends.cudnn.allow_tf32 = prev[1]

    def sync(self) -> None:
        if self.is_cuda:
            self.torch.cuda.synchronize(self.device)

    # -- rows ----------------------------------------------------------------------------------
    def note(self, text: str) -> None:
        self.result.notes.append(text)

    def value(self, name: str, text: Any) -> None:
        self.result.values.append((name, str(text)))

    def check(self, name: str, passed: bool, *, err: float | None = None,
              tol: float | None = None, note: str = "") -> bool:
        self.result.checks.append(Check(name, bool(passed), None if err is None else float(err),
                                        None if tol is None else float(tol), note))
        return bool(passed)

    def close(self, name: str, got, ref, *, atol: float, rtol: float = 0.0, note: str = "") -> bool:
        """``|got - ref| <= atol + rtol * |ref|`` elementwise, both compared in float64 on CPU."""
        torch = self.torch
        g = torch.as_tensor(got).detach().to("cpu", torch.float64)
        r = torch.as_tensor(ref).detach().to("cpu", torch.float64)
        if g.shape != r.shape:
            return self.check(name, False, note=f"shape {tuple(g.shape)} vs {tuple(r.shape)}")
        if g.numel() == 0:
            return self.check(name, True, err=0.0, tol=atol, note=note or "empty")
        finite = bool(torch.isfinite(g).all()) and bool(torch.isfinite(r).all())
        diff = (g - r).abs()
        err = float(diff.max())
        ok = finite and bool((diff <= atol + rtol * r.abs()).all())
        tol_note = f"rtol {rtol:g}" if rtol else ""
        return self.check(name, ok, err=err, tol=atol,
                          note="; ".join(x for x in (note, tol_note, "" if finite else "non-finite")
                                         if x))

    def equal(self, name: str, a, b, note: str = "") -> bool:
        """Bit-exact equality (same shape, dtype and every element; NaNs equal where both)."""
        torch = self.torch
        a = torch.as_tensor(a).detach().cpu()
        b = torch.as_tensor(b).detach().cpu()
        if a.shape != b.shape or a.dtype != b.dtype:
            return self.check(name, False, note=f"{tuple(a.shape)} {a.dtype} vs "
                                                f"{tuple(b.shape)} {b.dtype}")
        equal = a.eq(b)
        if a.is_floating_point():
            equal |= a.isnan() & b.isnan()
        mismatched = int((~equal).sum())
        same = mismatched == 0
        return self.check(name, same, err=float(mismatched), tol=0.0,
                          note=note or ("bit-exact" if same else f"{mismatched} elements differ"))

    # -- timing --------------------------------------------------------------------------------
    def time(self, fn: Callable[[], Any], *, warmup: int = 2, iters: int = 5) -> float:
        """Median milliseconds of ``fn()`` after ``warmup`` calls (synchronised)."""
        return statistics.median(self._times(fn, warmup, iters))

    def _times(self, fn: Callable[[], Any], warmup: int, iters: int) -> list[float]:
        torch = self.torch
        for _ in range(warmup):
            fn()
        self.sync()
        out = []
        for _ in range(max(1, iters)):
            if self.is_cuda:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                out.append(float(start.elapsed_time(end)))
            else:
                t0 = time.perf_counter()
                fn()
                out.append((time.perf_counter() - t0) * 1e3)
        return out

    def compare(self, name: str, baseline: str, baseline_fn: Callable[[], Any],
                method_fn: Callable[[], Any], *, warmup: int = 2, iters: int = 5,
                target: float | None = None, note: str = "") -> Timing:
        """Times baseline and method in alternating rounds (so drift hits both) and records the
        row; ratio = method / baseline (below 1: the method is faster)."""
        for _ in range(warmup):
            baseline_fn()
            method_fn()
        self.sync()
        b, m = [], []
        for _ in range(max(1, iters)):
            b += self._times(baseline_fn, 0, 1)
            m += self._times(method_fn, 0, 1)
        row = Timing(name, baseline, statistics.median(b), statistics.median(m), note, target)
        self.result.timings.append(row)
        return row


# -- blocking imports (tests: prove a section needs only what the bare GPU machine has) -------
class _Blocker(importlib.abc.MetaPathFinder):
    def __init__(self, names: set[str]):
        self.names = names

    def find_spec(self, fullname, path=None, target=None):  # noqa: ARG002
        if fullname.split(".")[0] in self.names:
            raise ImportError(f"gpu_check: {fullname!r} is not on the bare GPU machine "
                              f"(blocked by --block-imports)")
        return None


# -- the run ---------------------------------------------------------------------------------
def _load_section(name: str):
    return importlib.import_module(f"gpu_sections.{name}")


def _alarm(_signum, _frame):
    raise Timeout("section outlived its share of the budget")


def run_section(name: str, module, device: str, scale: str, share: float) -> SectionResult:
    res = SectionResult(name, budget_s=round(share, 1))
    cpu_only = getattr(module, "CPU_ONLY", None)
    if cpu_only:
        res.status = "cpu-only"
        res.notes.append(f"CPU-only by design: {cpu_only}")
        return res
    t0 = time.monotonic()
    ctx = Ctx(res, device, scale, t0 + share)
    import torch

    precision = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)
    use_alarm = hasattr(signal, "SIGALRM")
    if use_alarm:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, max(share, 0.5) + 1.0)  # 1 s grace for the last row
    try:
        module.run(ctx)
        res.status = "ok" if all(c.passed for c in res.checks) else "failed"
    except Timeout:
        res.status = "timeout"
        res.error = f"stopped after {share:.0f} s (its share); rows so far kept"
    except Exception as exc:  # noqa: BLE001 - a failing section must not stop the others
        res.status = "error"
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        res.error = f"{type(exc).__name__}: {exc}"
        res.notes.append("traceback tail: " + " | ".join(
            line.strip() for line in "".join(tb[-3:]).splitlines() if line.strip())[-600:])
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        # a section that turned TF32 on for its timings does not leak it into the next one
        torch.set_float32_matmul_precision(precision[0])
        torch.backends.cudnn.allow_tf32 = precision[1]
    res.wall_s = round(time.monotonic() - t0, 2)
    if ctx.is_cuda:
        with contextlib.suppress(Exception):
            ctx.torch.cuda.empty_cache()
    return res


def machine_info(device: str) -> dict:
    import torch

    info = {"date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "python": platform.python_version(), "torch": torch.__version__,
            "cpu": platform.processor() or platform.machine(), "device": device}
    with contextlib.suppress(Exception):
        import transformers

        info["transformers"] = transformers.__version__
    with contextlib.suppress(Exception):
        info["git_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
            timeout=5).stdout.strip() or None
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        info["gpu"] = props.name
        info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        info["cuda"] = torch.version.cuda
        with contextlib.suppress(Exception):
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=10).stdout.strip().splitlines()[0]
    return info


def _fmt(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "—"
    if x == 0:
        return "0"
    if abs(x) >= 1e4 or abs(x) < 1e-3:
        return f"{x:.2e}"
    return f"{x:.{digits}g}"


def _cell(x: Any) -> str:
    """A markdown table cell: pipes escaped, newlines folded."""
    return str(x).replace("|", "\\|").replace("\n", " ")


def to_markdown(record: dict) -> str:
    m = record["machine"]
    lines = ["# GPU check", ""]
    where = m.get("gpu") or f"CPU ({m.get('cpu')})"
    lines.append(f"Machine: {where}" + (f", {m['gpu_memory_gib']} GiB" if m.get("gpu_memory_gib")
                                        else "")
                 + (f", driver {m['driver']}" if m.get("driver") else "")
                 + (f", CUDA {m['cuda']}" if m.get("cuda") else "")
                 + f"; torch {m['torch']}" + (f", transformers {m['transformers']}"
                                              if m.get("transformers") else "")
                 + f"; Python {m['python']}; {m['date']}"
                 + (f"; commit {m['git_commit']}" if m.get("git_commit") else "") + ".")
    lines.append(f"Command: `{record['command']}` (shapes `{record['scale']}`, budget "
                 f"{record['budget_s']:.0f} s, wall {record['wall_s']:.1f} s).")
    if not m.get("gpu"):
        lines.append("")
        lines.append("**CPU rehearsal**: the device under test is the CPU, so each correctness "
                     "check compares the CPU with itself and each timing is a CPU timing; this "
                     "shows that every section runs, not what a GPU measures.")
    counts: dict[str, int] = {}
    for s in record["sections"]:
        counts[s["status"]] = counts.get(s["status"], 0) + 1
    lines += ["", "Sections: " + ", ".join(f"{v} {k}" for k, v in counts.items()) + ".", ""]
    lines += ["| method | status | checks passed | timings (method / baseline) | wall s / share |",
              "|---|---|---|---|---|"]
    for s in record["sections"]:
        n_ok = sum(c["passed"] for c in s["checks"])
        tim = _cell("; ".join(f"{t['name']} {t['ratio']:.2f}×" for t in s["timings"][:3]) or "—")
        lines.append(f"| {s['name']} | {s['status']} | {n_ok}/{len(s['checks'])} | {tim} | "
                     f"{s['wall_s']:.1f} / {s['budget_s']:.0f} |")
    for s in record["sections"]:
        lines += ["", f"## {s['name']} — {s['status']}", ""]
        if s["error"]:
            lines += [f"Error: {s['error']}", ""]
        if s["checks"]:
            lines += ["| check | passed | error | tolerance | note |", "|---|---|---|---|---|"]
            for c in s["checks"]:
                lines.append(f"| {_cell(c['name'])} | {'yes' if c['passed'] else '**no**'} | "
                             f"{_fmt(c['err'])} | {_fmt(c['tol'])} | {_cell(c['note'])} |")
            lines.append("")
        if s["timings"]:
            lines += ["| timing | baseline | baseline ms | method ms | method / baseline | "
                      "target | note |", "|---|---|---|---|---|---|---|"]
            for t in s["timings"]:
                tgt = f"≤ {t['target']:g}×" if t["target"] is not None else "—"
                lines.append(f"| {_cell(t['name'])} | {_cell(t['baseline'])} | "
                             f"{_fmt(t['baseline_ms'])} | {_fmt(t['method_ms'])} | "
                             f"{t['ratio']:.3f}× | {tgt} | {_cell(t['note'])} |")
            lines.append("")
        if s["values"]:
            lines += ["| measured | value |", "|---|---|"]
            lines += [f"| {_cell(k)} | {_cell(v)} |" for k, v in s["values"]]
            lines.append("")
        for n in s["notes"]:
            lines.append(f"- {n}")
    return "\n".join(lines).rstrip() + "\n"


def _record(results: list[SectionResult], args, machine: dict, wall: float) -> dict:
    secs = []
    for r in results:
        secs.append({"name": r.name, "status": r.status, "budget_s": r.budget_s,
                     "wall_s": r.wall_s, "error": r.error, "notes": r.notes,
                     "checks": [vars(c) for c in r.checks],
                     "timings": [{**vars(t), "ratio": t.ratio} for t in r.timings],
                     "values": [list(v) for v in r.values]})
    return {"machine": machine, "scale": args.scale, "budget_s": args.budget,
            "wall_s": round(wall, 2), "command": " ".join(["benchmarks/gpu_check.py"] + args.argv),
            "sections": secs}


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    ap.add_argument("--budget", type=float, default=480.0,
                    help="hard wall-clock budget in seconds for all sections (default 480)")
    ap.add_argument("--out", type=Path, required=True,
                    help="folder for GPU.md and gpu_check.json (created)")
    ap.add_argument("--md", type=Path, default=None,
                    help="also write the markdown here (e.g. benchmarks/GPU.md)")
    ap.add_argument("--scale", choices=("tiny", "paper"), default=None,
                    help="shapes: tiny (CPU default) or paper (CUDA default)")
    ap.add_argument("--only", default="",
                    help="comma-separated methods to run (default all): " + ", ".join(SECTIONS))
    ap.add_argument("--block-imports", default="",
                    help=argparse.SUPPRESS)  # tests: packages absent on the bare GPU machine
    args = ap.parse_args(argv)
    args.argv = list(argv)
    return args


def validate(args: argparse.Namespace) -> list[str]:
    """Checks the arguments before any work; raises UsageError with one line."""
    dev = args.device
    if not (dev == "cpu" or dev == "cuda" or (dev.startswith("cuda:") and dev[5:].isdigit())):
        raise UsageError(f"--device must be cpu, cuda or cuda:N; got {dev!r}")
    if not math.isfinite(args.budget) or args.budget < MIN_ANY_BUDGET_S:
        raise UsageError(f"--budget must be at least {MIN_ANY_BUDGET_S:g} s; got {args.budget:g}")
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in SECTIONS]
    if unknown:
        raise UsageError(f"--only: unknown method(s) {', '.join(map(repr, unknown))}; "
                         f"choose from {', '.join(SECTIONS)}")
    if args.scale is None:
        args.scale = "paper" if dev.startswith("cuda") else "tiny"
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {args.out} exists and is not a folder")
    if args.md is not None and args.md.is_dir():
        raise UsageError(f"--md {args.md} is a folder; give a file path such as benchmarks/GPU.md")
    if dev.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise UsageError(f"--device {dev}: no CUDA GPU is visible to torch "
                             f"{torch.__version__} (use --device cpu for the rehearsal)")
        idx = int(dev[5:]) if ":" in dev else 0
        if idx >= torch.cuda.device_count():
            raise UsageError(f"--device {dev}: only {torch.cuda.device_count()} GPU(s) visible")
        if args.scale == "paper" and args.budget < MIN_BUDGET_S:
            raise UsageError(f"--budget {args.budget:g} s is below the {MIN_BUDGET_S:g} s that "
                             f"the paper shapes need on CUDA; give more or --scale tiny")
    return only or list(SECTIONS)


def main(argv: list[str] | None = None) -> int:
    t_start = time.monotonic()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.block_imports:
        sys.meta_path.insert(0, _Blocker({s.strip() for s in args.block_imports.split(",")}))
    try:
        names = validate(args)
    except UsageError as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 2
    import torch

    if args.device == "cpu":
        torch.set_num_threads(max(1, min(torch.get_num_threads(), len(os.sched_getaffinity(0)))))
    machine = machine_info(args.device)
    deadline = t_start + args.budget - RESERVE_S
    modules: dict[str, Any] = {}
    results: list[SectionResult] = []
    for name in names:
        try:
            modules[name] = _load_section(name)
        except Exception as exc:  # noqa: BLE001 - recorded, the others still run
            results.append(SectionResult(name, status="error",
                                         error=f"import: {type(exc).__name__}: {exc}"))
    weights = {n: float(getattr(m, "WEIGHT", 1.0)) for n, m in modules.items()
               if not getattr(m, "CPU_ONLY", None)}
    for name in names:
        if name not in modules:
            continue
        left = deadline - time.monotonic()
        pending = sum(weights.get(n, 0.0) for n in names
                      if n in modules and not any(r.name == n for r in results))
        share = left * weights.get(name, 0.0) / pending if pending > 0 else 0.0
        if name in weights and share < 1.0:
            results.append(SectionResult(name, status="skipped", notes=[
                f"skipped: the budget was spent ({left:.1f} s left for {pending:g} weight)"]))
            continue
        print(f"gpu_check: {name} ({share:.0f} s)", file=sys.stderr, flush=True)
        results.append(run_section(name, modules[name], args.device, args.scale, share))
        r = results[-1]
        print(f"gpu_check: {name}: {r.status} in {r.wall_s:.1f} s"
              + (f" ({r.error})" if r.error else ""), file=sys.stderr, flush=True)
    order = {n: i for i, n in enumerate(names)}
    results.sort(key=lambda r: order.get(r.name, 0))
    record = _record(results, args, machine, time.monotonic() - t_start)
    md = to_markdown(record)
    args.out.mkdir(parents=True, exist_ok=True)
    _write_atomic(args.out / "gpu_check.json", json.dumps(record, indent=1) + "\n")
    _write_atomic(args.out / "GPU.md", md)
    if args.md is not None:
        _write_atomic(args.md, md)
    bad = [r.name for r in results if r.status in ("failed", "error")]
    print(f"gpu_check: {len(results)} sections in {record['wall_s']:.1f} s; "
          f"{'failed: ' + ', '.join(bad) if bad else 'no failures'}; wrote {args.out / 'GPU.md'}",
          file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
