"""Expected CPU time of a reproduction, printed before any work starts.

Per claim and scale, the best figure at hand: the last recorded run in the results folder
(``OUT/NAME/SCALE.json``: its ``cpu_time_s``; from a record without one, ``wall_time_s`` times
the threads it ran with, an upper bound), else the estimate the claim keeps
(:attr:`icml26.core.claims.Claim.cpu_minutes`). A record is used only when it ran with the same
``--opt`` options and did not end in an error (an error may stop a run early). The estimate is
for the claim's default options: with ``--opt`` and no record of a run with the same options, the
source says so (``estimate at default options``), since options such as ``seeds`` scale the work.

Imports nothing heavy: ``icml26 reproduce --dry-run`` answers without torch.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from icml26.core.claims import Claim, load_record, result_path

__all__ = ["Eta", "expected", "expected_all", "format_table", "total"]


@dataclass(frozen=True)
class Eta:
    """One claim's expected CPU time at one scale.

    ``cpu_min``: CPU-minutes (user + system, every thread), ``None`` when nothing is known;
    ``source``: ``"last run DATE"`` (possibly ``"..., <= wall x threads"``), ``"estimate"``
    (``"estimate at default options; ..."`` when ``--opt`` options were given) or ``"unknown"``;
    ``upper_bound``: the figure is a wall time times threads; ``options_ignored``: the figure is
    the default-options estimate although options were given.
    """

    name: str
    scale: str
    cpu_min: float | None
    source: str
    upper_bound: bool = False
    options_ignored: bool = False


def _from_record(record: dict, name: str, scale: str) -> Eta | None:
    date = str(record.get("started_at") or "")[:10] or "?"
    cpu = record.get("cpu_time_s")
    if isinstance(cpu, int | float) and math.isfinite(cpu):
        return Eta(name, scale, cpu / 60, f"last run {date}")
    wall = record.get("wall_time_s")
    threads = (record.get("environment") or {}).get("threads") or 1
    if "units" not in record and isinstance(wall, int | float) and math.isfinite(wall):
        # older records have no CPU time: every thread busy the whole run is the most it used
        return Eta(name, scale, wall * threads / 60, f"last run {date}, <= wall x {threads} "
                   "threads", upper_bound=True)
    return None


def expected(claim: Claim, scale: str, out_root: str | os.PathLike = "results",
             options: Mapping[str, str] | None = None) -> Eta:
    """``claim``'s expected CPU time at ``scale``: the last usable record in ``out_root``, else
    the claim's estimate, else unknown."""
    try:
        record = load_record(result_path(out_root, claim.name, scale))
    except (OSError, ValueError):
        record = None
    if (
        isinstance(record, dict)
        and record.get("verdict") != "error"
        and dict(record.get("options") or {}) == dict(options or {})
    ):
        eta = _from_record(record, claim.name, scale)
        if eta is not None:
            return eta
    estimate = claim.cpu_minutes.get(scale)
    if estimate is None:
        return Eta(claim.name, scale, None, "unknown")
    if options:
        given = " ".join(f"{k}={v}" for k, v in sorted(options.items()))
        return Eta(claim.name, scale, float(estimate),
                   f"estimate at default options; --opt {given} not counted",
                   options_ignored=True)
    return Eta(claim.name, scale, float(estimate), "estimate")


def expected_all(claims: Iterable[Claim], scale: str, out_root: str | os.PathLike = "results",
                 options: Mapping[str, str] | None = None) -> tuple[list[Eta], float]:
    """Every claim's :func:`expected` and their total in CPU-minutes (known figures only)."""
    etas = [expected(c, scale, out_root, options) for c in claims]
    return etas, total(etas)


def total(etas: Iterable[Eta]) -> float:
    """The CPU-minutes of the figures that are known (a claim without one adds nothing)."""
    return sum(e.cpu_min for e in etas if e.cpu_min is not None)


def _minutes(m: float) -> str:
    return f"{m:.2f}" if m < 1 else f"{m:.1f}" if m < 100 else f"{m:,.0f}"


def format_table(etas: list[Eta]) -> list[str]:
    """The table as plain lines: claim, scale, expected CPU-min, source; then the :func:`total`."""
    minutes = total(etas)
    width = max([len("claim"), *(len(e.name) for e in etas)])
    lines = [f"{'claim':<{width}}  scale  {'CPU-min':>7}  source"]
    for e in etas:
        m = "?" if e.cpu_min is None else _minutes(e.cpu_min)
        lines.append(f"{e.name:<{width}}  {e.scale:<5}  {m:>7}  {e.source}")
    unknown = sum(e.cpu_min is None for e in etas)
    hours = f" = {minutes / 60:.1f} CPU-h" if minutes >= 60 else ""
    tail = f"; {unknown} claim(s) without an estimate" if unknown else ""
    known = _minutes(minutes) if unknown < len(etas) else "?"
    lines.append(f"{'total':<{width}}  {'':<5}  {known:>7}  CPU-min{hours} for "
                 f"{len(etas)} claim(s){tail}")
    return lines
