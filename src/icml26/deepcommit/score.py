"""EvoClaw scoring of an agent's run (``score_reliable``) and the resolve rate.

Per graded milestone, after removing the filtered (flaky) tests from every list:
``N_target = |F2P| + |N2P|``, ``N_fixed`` = required F2P and N2P tests that passed,
``N_broken`` = P2P tests that failed **plus P2P tests missing from the run**;
``recall = N_fixed / N_target`` (1 when ``N_target`` is 0),
``precision = (N_fixed + 1) / (N_fixed + N_broken + 1)``, ``score = F1(precision, recall)``;
a run whose tests could not be collected scores 0. The trial score is the mean over graded
milestones x 100. *Resolved*: every F2P and N2P test passes and no P2P test fails or is missing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["MilestoneTests", "RunOutcome", "MilestoneScore", "score_milestone", "score_trial"]


@dataclass(frozen=True)
class MilestoneTests:
    """A milestone's test classification (test IDs) and its filter list."""

    f2p: frozenset[str] = frozenset()
    p2p: frozenset[str] = frozenset()
    n2p: frozenset[str] = frozenset()
    filtered: frozenset[str] = frozenset()

    @classmethod
    def of(
        cls,
        f2p: Iterable[str] = (),
        p2p: Iterable[str] = (),
        n2p: Iterable[str] = (),
        filtered: Iterable[str] = (),
    ) -> MilestoneTests:
        return cls(frozenset(f2p), frozenset(p2p), frozenset(n2p), frozenset(filtered))


@dataclass(frozen=True)
class RunOutcome:
    """Test IDs that passed / failed when the agent's source ran against the hidden tests;
    ``collected=False`` when the suite could not even be collected (compilation failure)."""

    passed: frozenset[str] = frozenset()
    failed: frozenset[str] = frozenset()
    collected: bool = True

    @classmethod
    def of(
        cls, passed: Iterable[str] = (), failed: Iterable[str] = (), collected: bool = True
    ) -> RunOutcome:
        return cls(frozenset(passed), frozenset(failed), collected)


@dataclass(frozen=True)
class MilestoneScore:
    n_target: int
    n_fixed: int
    n_broken: int
    p2p_missing: int
    precision: float
    recall: float
    score: float
    resolved: bool
    notes: tuple[str, ...] = field(default=())


def score_milestone(spec: MilestoneTests, run: RunOutcome | None) -> MilestoneScore:
    """Score one milestone; ``run=None`` (never submitted) scores 0 and is not resolved."""
    keep = lambda s: s - spec.filtered  # noqa: E731
    f2p, p2p, n2p = keep(spec.f2p), keep(spec.p2p), keep(spec.n2p)
    n_target = len(f2p) + len(n2p)
    if run is None or not run.collected:
        note = "not submitted" if run is None else "test collection failed"
        return MilestoneScore(n_target, 0, 0, 0, 0.0, 0.0, 0.0, False, (note,))
    n_fixed = len(f2p & run.passed) + len(n2p & run.passed)
    failed = len(p2p & run.failed)
    missing = len(p2p - run.passed - run.failed)
    n_broken = failed + missing
    recall = n_fixed / n_target if n_target else 1.0
    precision = (n_fixed + 1) / (n_fixed + n_broken + 1)
    score = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    resolved = n_fixed == n_target and n_broken == 0
    return MilestoneScore(n_target, n_fixed, n_broken, missing, precision, recall, score, resolved)


def score_trial(
    specs: Mapping[str, MilestoneTests],
    runs: Mapping[str, RunOutcome | None],
    graded: Iterable[str] | None = None,
) -> dict:
    """{"score": mean F1 x 100, "resolve_rate": %, "per_milestone": {id: MilestoneScore}} over
    the graded milestones (default: all in ``specs``)."""
    ids = list(graded) if graded is not None else list(specs)
    unknown = [m for m in ids if m not in specs]
    if unknown:
        raise ValueError(f"graded milestones without a test classification: {unknown}")
    per = {m: score_milestone(specs[m], runs.get(m)) for m in ids}
    n = max(len(per), 1)
    return {
        "score": 100 * sum(s.score for s in per.values()) / n,
        "resolve_rate": 100 * sum(s.resolved for s in per.values()) / n,
        "per_milestone": per,
    }
