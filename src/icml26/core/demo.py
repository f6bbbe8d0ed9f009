"""A small claim that splits into units: the worked example of the ``units`` contract.

Monte Carlo estimates of pi, one unit per seed. It is not one of the papers' claims (the index
does not list it); the job backends' tests and docs/scale.md use it, since it runs in well under a
second and is deterministic given its seeds.

    Job("demo-pi", "tiny", run_target="icml26.core.demo:run")
"""

from __future__ import annotations

import dataclasses
import math

from icml26.core.claims import Measure, Result, RunContext


def units(ctx: RunContext) -> list[RunContext]:
    """One unit per seed: seeds ``1000 * seed + i``, each in its own folder."""
    n = int(ctx.options.get("units", ctx.pick(tiny=4, small=8, full=32)))
    return [dataclasses.replace(ctx, seed=1000 * ctx.seed + i, out_dir=ctx.out_dir / f"unit{i}")
            for i in range(n)]


def run_unit(ctx: RunContext) -> Result:
    """One seed's estimate. Test hooks: option ``sleep`` (seconds) and ``crash_marker`` (a path:
    the first unit to find it missing creates it and kills its own process, like a preempted
    worker)."""
    import os
    import time
    from pathlib import Path

    import numpy as np

    marker = ctx.options.get("crash_marker")
    if marker and not Path(marker).exists():
        Path(marker).write_text("crashed once\n")
        os._exit(9)
    time.sleep(float(ctx.options.get("sleep", 0)))

    n = int(ctx.options.get("samples", ctx.pick(tiny=100_000, small=1_000_000, full=10_000_000)))
    xy = np.random.default_rng(ctx.seed).random((n, 2))
    estimate = 4.0 * float(np.mean((xy**2).sum(1) <= 1.0))
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    sample = ctx.out_dir / "estimate.txt"
    sample.write_text(f"{estimate!r}\n")
    return Result(rows=[{"seed": ctx.seed, "samples": n, "estimate": estimate}],
                  headline=Measure("pi estimate / pi", estimate / math.pi), target=0.99,
                  figures=[sample])


def combine(ctx: RunContext, results: list[Result]) -> Result:
    ratios = [r.headline.value for r in results]
    rows = [row for r in results for row in r.rows]
    return Result(rows=rows, headline=Measure("pi estimate / pi", sum(ratios) / len(ratios), "x",
                                              (min(ratios), max(ratios))),
                  target=0.99, notes=[f"{len(results)} units"],
                  figures=[f for r in results for f in r.figures])


def run(ctx: RunContext) -> Result:
    return combine(ctx, [run_unit(u) for u in units(ctx)])
