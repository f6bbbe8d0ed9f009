"""Power checks: can this experiment detect the paper's effect at all?

A claim's verdict is a finding only when its setup could have shown the effect. Every claim
declares (in ``claims_index.py``, as a :class:`PowerSpec`) what its checks are, and its ``run``
returns the measured checks in ``Result.power``. The runner validates them against the declaration
and the measured rows (:func:`validate`) and turns any failed check into the verdict
``uninformative`` with the check's reason (:func:`failures`).

The three kinds:

``control``
    A *positive control*: a system that must move the headline metric if the setup can show any
    effect (an oracle arm, a steering strength large enough to change answers, a known-good
    reference). Passes when the control beats the null system by more than the noise: the
    control's interval lies wholly on the better side of the null's interval (plus ``noise``).
``floor``
    The best *trivial* system (constant, majority, prior, random valid action, computed from
    training data). Passes when at least one compared system (the method or a baseline) beats the
    floor: its value lies beyond the floor's interval. When all are at or below it, the systems do
    not do the task.
``degeneracy``
    Do the compared systems make different decisions at all (different plans, selections,
    answers)? Passes when at least ``min_differing`` of ``total`` decisions differ.

A check that a claim cannot measure in a run (too few items at ``tiny``) is returned by
:func:`not_measured`; it counts as not passed: no evidence of power is not power.

Numbers only; no numpy, no torch (``icml26 list`` imports this module).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "KINDS",
    "PowerSpec",
    "PowerCheck",
    "control",
    "floor",
    "degeneracy",
    "not_measured",
    "validate",
    "failures",
    "summary",
]

KINDS = ("control", "floor", "degeneracy")

Interval = tuple[float, float]


@dataclass(frozen=True)
class PowerSpec:
    """What a claim's power checks are, in words (declared in the claims index).

    ``control`` and ``floor`` are required; ``degeneracy`` is ``None`` where it does not apply
    (then ``degeneracy_na`` says why, e.g. "one system's decisions only").
    """

    control: str
    floor: str
    degeneracy: str | None = None
    degeneracy_na: str = ""

    def __post_init__(self) -> None:
        for name in ("control", "floor"):
            if not str(getattr(self, name)).strip():
                raise ValueError(f"PowerSpec.{name} must describe the check; got an empty string")
        if self.degeneracy is None and not self.degeneracy_na.strip():
            raise ValueError(
                "PowerSpec: give a degeneracy check or say why none applies (degeneracy_na)"
            )

    @property
    def kinds(self) -> tuple[str, ...]:
        return ("control", "floor") + (("degeneracy",) if self.degeneracy is not None else ())

    def describe(self, kind: str) -> str:
        return {
            "control": self.control,
            "floor": self.floor,
            "degeneracy": self.degeneracy or f"n/a: {self.degeneracy_na}",
        }[kind]


@dataclass(frozen=True)
class PowerCheck:
    """One measured power check, as the record keeps it.

    ``systems`` names the compared systems; each must appear as a value in the claim's rows.
    ``values``/``spreads`` are their numbers; ``passed`` is ``None`` when not measured.
    """

    kind: str
    name: str
    systems: tuple[str, ...]
    values: Mapping[str, float] = field(default_factory=dict)
    spreads: Mapping[str, Interval | None] = field(default_factory=dict)
    passed: bool | None = None
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["systems"] = list(self.systems)
        d["values"] = dict(self.values)
        d["spreads"] = {k: (list(v) if v is not None else None) for k, v in self.spreads.items()}
        return d


def _interval(value: float, spread: Sequence[float] | None) -> Interval:
    value = float(value)
    if spread is None:
        return value, value
    lo, hi = (float(x) for x in spread)
    return min(lo, value), max(hi, value)


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _fmt_iv(value: float, spread: Sequence[float] | None) -> str:
    if spread is None:
        return _fmt(value)
    lo, hi = spread
    return f"{_fmt(value)} [{_fmt(lo)}, {_fmt(hi)}]"


def control(
    system: str,
    value: float,
    null_system: str,
    null_value: float,
    *,
    spread: Sequence[float] | None = None,
    null_spread: Sequence[float] | None = None,
    higher_is_better: bool = True,
    noise: float = 0.0,
    metric: str = "",
    name: str = "positive control",
    paired: Sequence[float] | None = None,
    paired_null: float = 0.0,
) -> PowerCheck:
    """The positive control ``system`` against the null (``null_system``, e.g. the unchanged
    model or the baseline the effect is measured from).

    Passes when the control's interval is wholly on the better side of the null's interval, by
    more than ``noise`` (an absolute margin in the metric's unit, e.g. a seed-to-seed spread that
    the intervals do not carry). With neither spread nor noise, a strict improvement suffices.

    ``paired``: when both were measured on the same items, the interval of the paired effect
    (control - null, or control / null with ``paired_null=1``, e.g. from
    :func:`icml26.core.stats.clustered_bootstrap`). The check then asks that interval to lie
    wholly beyond ``paired_null`` (by more than ``noise``), which is less conservative than two
    unpaired intervals and the right test for paired arms.
    """
    better = "above" if higher_is_better else "below"
    values = {system: float(value), null_system: float(null_value)}
    spreads = {system: _tuple(spread), null_system: _tuple(null_spread)}
    if paired is not None:
        p_lo, p_hi = (float(x) for x in paired)
        margin = p_lo - paired_null if higher_is_better else paired_null - p_hi
        compared = (
            f"{_fmt(value)} VERB from {null_system} {_fmt(null_value)}: paired effect "
            f"[{_fmt(p_lo)}, {_fmt(p_hi)}] (needs to lie {better} {_fmt(paired_null)}"
        )
        values.update({"paired effect low": p_lo, "paired effect high": p_hi})
    else:
        c_lo, c_hi = _interval(value, spread)
        n_lo, n_hi = _interval(null_value, null_spread)
        margin = c_lo - n_hi if higher_is_better else n_lo - c_hi
        compared = (
            f"{_fmt_iv(value, spread)} VERB from {null_system} "
            f"{_fmt_iv(null_value, null_spread)} (needs to lie {better} it"
        )
    passed = bool(math.isfinite(margin) and margin > noise)
    verb = "separates" if passed else "does not separate"
    reason = (
        f"{system}{f' on {metric}' if metric else ''} "
        + compared.replace(" VERB ", f" {verb} ", 1)
        + (f" by more than {_fmt(noise)}" if noise else "")
        + ")"
    )
    return PowerCheck("control", name, (system, null_system), values, spreads, passed, reason)


def floor(
    systems: Mapping[str, float],
    floor_system: str,
    floor_value: float,
    *,
    spreads: Mapping[str, Sequence[float] | None] | None = None,
    floor_spread: Sequence[float] | None = None,
    higher_is_better: bool = True,
    metric: str = "",
    name: str = "floor",
) -> PowerCheck:
    """The best trivial system ``floor_system`` against the compared ``systems`` (method and
    baselines, ``{name: value}``).

    Passes when at least one system's value lies strictly beyond the floor's interval (above its
    high end, or below its low end when lower is better).
    """
    if not systems:
        raise ValueError("floor check needs at least one compared system")
    spreads = dict(spreads or {})
    f_lo, f_hi = _interval(floor_value, floor_spread)
    if higher_is_better:
        beating = [s for s, v in systems.items() if float(v) > f_hi]
    else:
        beating = [s for s, v in systems.items() if float(v) < f_lo]
    passed = bool(beating)
    what = f" on {metric}" if metric else ""
    if passed:
        reason = (
            f"{', '.join(beating)} beat{'s' if len(beating) == 1 else ''} the floor "
            f"{floor_system}{what} {_fmt_iv(floor_value, floor_spread)}"
        )
    else:
        worst = "at or below" if higher_is_better else "at or above"
        shown = ", ".join(f"{s} {_fmt(float(v))}" for s, v in systems.items())
        reason = (
            f"every system ({shown}) is {worst} the floor {floor_system}{what} "
            f"{_fmt_iv(floor_value, floor_spread)}: none does the task better than a "
            "trivial rule"
        )
    values = {**{s: float(v) for s, v in systems.items()}, floor_system: float(floor_value)}
    sp = {**{s: _tuple(spreads.get(s)) for s in systems}, floor_system: _tuple(floor_spread)}
    return PowerCheck("floor", name, (*systems, floor_system), values, sp, passed, reason)


def degeneracy(
    systems: Iterable[str],
    differing: float,
    total: float,
    *,
    min_differing: float = 1,
    what: str = "decisions",
    name: str = "degeneracy",
) -> PowerCheck:
    """Do ``systems`` decide differently? ``differing`` of ``total`` decisions differ (answers
    changed, selections not shared, plans unequal). Passes when ``differing >= min_differing``."""
    systems = tuple(systems)
    if len(systems) < 2:
        raise ValueError("degeneracy check compares at least two systems")
    passed = bool(float(differing) >= float(min_differing))
    if passed:
        reason = f"{_fmt(differing)} of {_fmt(total)} {what} differ between {', '.join(systems)}"
    else:
        reason = (
            f"only {_fmt(differing)} of {_fmt(total)} {what} differ between "
            f"{', '.join(systems)} (needs {_fmt(min_differing)}): the compared systems "
            "make the same decisions, so their difference is noise"
        )
    return PowerCheck(
        "degeneracy",
        name,
        systems,
        {"differing": float(differing), "total": float(total)},
        {},
        passed,
        reason,
    )


def not_measured(kind: str, reason: str, systems: Iterable[str] = ()) -> PowerCheck:
    """A declared check this run could not measure (counts as not passed)."""
    return PowerCheck(
        kind, f"{kind} (not measured)", tuple(systems), {}, {}, None, f"not measured: {reason}"
    )


def _tuple(spread: Sequence[float] | None) -> Interval | None:
    return None if spread is None else (float(spread[0]), float(spread[1]))


def _row_values(rows: Iterable[Mapping[str, Any]]) -> set[str]:
    seen: set[str] = set()
    for row in rows:
        for v in row.values():
            if isinstance(v, str):
                seen.add(v)
    return seen


def validate(
    claim_name: str,
    spec: PowerSpec | None,
    checks: Sequence[PowerCheck],
    rows: Sequence[Mapping[str, Any]],
) -> None:
    """Raise ``ValueError`` (naming the claim and the field) when ``checks`` do not match the
    declaration ``spec`` or the rows: an unknown kind, a declared kind with no check, a system
    that is not in the rows, a non-finite value of a measured check."""
    if spec is None:
        if checks:
            raise ValueError(
                f"claim {claim_name!r}: Result.power has checks but the claim "
                "declares no PowerSpec (Claim.power)"
            )
        return
    for i, c in enumerate(checks):
        if not isinstance(c, PowerCheck):
            raise ValueError(
                f"claim {claim_name!r}: Result.power[{i}] is {type(c).__name__}, not PowerCheck"
            )
        if c.kind not in KINDS:
            raise ValueError(
                f"claim {claim_name!r}: Result.power[{i}].kind is {c.kind!r}; "
                f"known kinds: {', '.join(KINDS)}"
            )
        if c.kind not in spec.kinds:
            raise ValueError(
                f"claim {claim_name!r}: Result.power[{i}].kind {c.kind!r} is not "
                f"declared in its PowerSpec ({', '.join(spec.kinds)})"
            )
        if c.passed is None:
            continue
        in_rows = _row_values(rows)
        missing = [s for s in c.systems if s not in in_rows]
        if missing:
            raise ValueError(
                f"claim {claim_name!r}: Result.power[{i}] ({c.kind}).systems names "
                f"{missing!r}, which no row of the result contains"
            )
        for key, v in c.values.items():
            if not (isinstance(v, (int, float)) and math.isfinite(float(v))):
                raise ValueError(
                    f"claim {claim_name!r}: Result.power[{i}] ({c.kind}).values"
                    f"[{key!r}] is {v!r}, not a finite number"
                )
    have = {c.kind for c in checks}
    absent = [k for k in spec.kinds if k not in have]
    if absent:
        raise ValueError(
            f"claim {claim_name!r}: Result.power lacks the declared check(s) "
            f"{', '.join(absent)} (use power.not_measured(kind, why) when a run "
            "cannot measure one)"
        )


def failures(checks: Sequence[PowerCheck]) -> list[PowerCheck]:
    """The checks that did not pass (failed or not measured)."""
    return [c for c in checks if c.passed is not True]


def summary(checks: Sequence[PowerCheck]) -> str:
    """One line: why the measurement is uninformative (the failed checks' reasons)."""
    return "; ".join(f"{c.kind}: {c.reason}" for c in failures(checks))
