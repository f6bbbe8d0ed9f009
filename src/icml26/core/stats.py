"""Honest spreads, tuned arms and budgets: the statistics every claim shares.

- :func:`clustered_bootstrap`: resample the unit that varies (seed, model build, context, trace)
  first, then items within each drawn unit; percentile CI of a mean, a difference or a ratio of
  means. An item-level bootstrap of many correlated items from a handful of sources is too narrow;
  this one is not.
- :func:`bracket`: a bracketing tuner. A log grid is extended at whichever edge holds the best
  point (the same number of extra points each time, for every arm, up to a fixed cap) until the
  best is interior. The result says whether it is.
- :func:`budgets`: training tokens (or FLOPs) per arm, and whether they match.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "ClusteredCI",
    "clustered_bootstrap",
    "item_bootstrap",
    "TuneResult",
    "bracket",
    "bracket_arms",
    "budgets",
]

STATISTICS = ("mean", "diff", "ratio")


@dataclass(frozen=True)
class ClusteredCI:
    """A point estimate, its percentile interval and how many top-level units it came from."""

    value: float
    low: float
    high: float
    n_clusters: int
    n_items: int
    statistic: str
    level: float

    @property
    def spread(self) -> tuple[float, float]:
        return (self.low, self.high)

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "low": self.low,
            "high": self.high,
            "n_clusters": self.n_clusters,
            "n_items": self.n_items,
            "statistic": self.statistic,
            "level": self.level,
            "unit": "clusters then items",
        }


def _as_clusters(a, b) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    if isinstance(a, np.ndarray) and a.ndim == 2:
        a = list(a)
    a_list = [np.asarray(x, dtype=float).ravel() for x in a]
    if not a_list:
        raise ValueError("clustered bootstrap needs at least one cluster")
    if any(len(x) == 0 for x in a_list):
        raise ValueError("clustered bootstrap: every cluster needs at least one item")
    if b is None:
        return a_list, None
    if isinstance(b, np.ndarray) and b.ndim == 2:
        b = list(b)
    b_list = [np.asarray(x, dtype=float).ravel() for x in b]
    if len(b_list) != len(a_list) or any(
        len(x) != len(y) for x, y in zip(a_list, b_list, strict=True)
    ):
        raise ValueError(
            "clustered bootstrap: a and b must have the same clusters and items "
            "(paired: same index = same item)"
        )
    return a_list, b_list


def _stat(statistic: str, sa: np.ndarray, sb: np.ndarray | None, n: np.ndarray) -> np.ndarray:
    if statistic == "mean":
        return sa / n
    if sb is None:
        raise ValueError(f"statistic {statistic!r} needs b (the paired second arm)")
    if statistic == "diff":
        return (sa - sb) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        return sa / sb


def clustered_bootstrap(
    a: Sequence[Sequence[float]],
    b: Sequence[Sequence[float]] | None = None,
    *,
    statistic: str = "ratio",
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
    resample_items: bool = True,
    chunk: int = 256,
) -> ClusteredCI:
    """Two-stage percentile bootstrap over clusters, then items.

    ``a`` (and the paired ``b``) are lists of per-cluster arrays: ``a[c][i]`` is item ``i`` of
    cluster ``c`` (a seed's per-question scores, a context's per-position recalls). Each replicate
    draws clusters with replacement, then (``resample_items``) items with replacement within each
    drawn cluster, and pools the drawn items. ``statistic``: ``"mean"`` (of ``a``), ``"diff"``
    (mean a - mean b) or ``"ratio"`` (mean a / mean b, the ratio of means). The point value is the
    statistic on all items pooled.
    """
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}; got {statistic!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level}")
    a_list, b_list = _as_clusters(a, b)
    k = len(a_list)
    sizes = np.array([len(x) for x in a_list])
    n_max = int(sizes.max())
    pad_a = np.zeros((k, n_max))
    pad_b = np.zeros((k, n_max)) if b_list is not None else None
    for c in range(k):
        pad_a[c, : sizes[c]] = a_list[c]
        if pad_b is not None:
            pad_b[c, : sizes[c]] = b_list[c]
    n_all = np.array([float(sizes.sum())])
    point = float(
        _stat(
            statistic,
            np.array([pad_a.sum()]),
            None if pad_b is None else np.array([pad_b.sum()]),
            n_all,
        )[0]
    )
    rng = np.random.default_rng(seed)
    stats = []
    for start in range(0, n_boot, chunk):
        m = min(chunk, n_boot - start)
        cl = rng.integers(0, k, size=(m, k))  # drawn clusters
        n_c = sizes[cl]  # (m, k)
        if resample_items:
            u = rng.random((m, k, n_max))
            idx = np.minimum((u * n_c[..., None]).astype(np.int64), n_c[..., None] - 1)
        else:
            idx = np.broadcast_to(np.arange(n_max), (m, k, n_max))
        valid = np.arange(n_max)[None, None, :] < n_c[..., None]
        sa = np.where(valid, pad_a[cl[..., None], idx], 0.0).sum(axis=(1, 2))
        sb = (
            np.where(valid, pad_b[cl[..., None], idx], 0.0).sum(axis=(1, 2))
            if pad_b is not None
            else None
        )
        stats.append(_stat(statistic, sa, sb, n_c.sum(axis=1).astype(float)))
    s = np.concatenate(stats)
    s = s[np.isfinite(s)]
    if len(s) == 0:
        return ClusteredCI(point, math.nan, math.nan, k, int(sizes.sum()), statistic, level)
    alpha = (1 - level) / 2
    lo, hi = float(np.quantile(s, alpha)), float(np.quantile(s, 1 - alpha))
    return ClusteredCI(point, lo, hi, k, int(sizes.sum()), statistic, level)


def item_bootstrap(a: Sequence[float], b: Sequence[float] | None = None, **kw) -> ClusteredCI:
    """The ordinary (item-level) bootstrap: every item its own cluster. For comparison rows."""
    a_items = [[x] for x in np.asarray(a, dtype=float).ravel()]
    b_items = None if b is None else [[x] for x in np.asarray(b, dtype=float).ravel()]
    kw.setdefault("resample_items", False)
    return clustered_bootstrap(a_items, b_items, **kw)


# ------------------------------------------------------------------------------ bracketing tuner


@dataclass
class TuneResult:
    """One arm's tuning: every point tried (sorted), its score, the best, and whether the best is
    interior (a grid neighbour on both sides) after at most ``cap`` extensions."""

    grid: list[float]
    scores: list[float]
    best: float
    best_score: float
    interior: bool
    extensions: int
    minimize: bool = True
    history: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "grid": list(self.grid),
            "scores": list(self.scores),
            "best": self.best,
            "best_score": self.best_score,
            "interior": self.interior,
            "extensions": self.extensions,
            "minimize": self.minimize,
        }

    def note(self, arm: str, param: str = "value") -> str | None:
        """A note for the claim's notes when the best point is still at a grid edge."""
        if self.interior:
            return None
        edge = "top" if self.best == max(self.grid) else "bottom"
        return (
            f"{arm}: best {param} {self.best:.4g} is at the {edge} edge of its grid "
            f"{[float(f'{g:.4g}') for g in self.grid]} after {self.extensions} extension(s) "
            "(cap reached): the arm may be under-tuned"
        )


def _badness(score: float, minimize: bool) -> float:
    if score is None or not math.isfinite(score):
        return math.inf  # a diverged run is the worst point
    return score if minimize else -score


def bracket(
    objective: Callable[[float], float],
    grid: Sequence[float],
    *,
    minimize: bool = True,
    extend_by: int = 2,
    cap: int = 2,
    log: bool = True,
    bounds: tuple[float, float] | None = None,
) -> TuneResult:
    """Tune one scalar by grid search, extending the grid until the best point is interior.

    ``grid``: at least 3 increasing points, evenly spaced in log (``log=True``) or linear space;
    new points continue that spacing, ``extend_by`` at a time at the edge that holds the best,
    at most ``cap`` times. ``bounds`` clips the extension (a point outside is not tried; an edge at
    a bound counts as interior only if the best is not on it). Non-finite scores (divergence) rank
    worst. ``objective`` is called once per point (memoise it yourself to resume).
    """
    pts = [float(g) for g in grid]
    if len(pts) < 3:
        raise ValueError(f"bracket needs at least 3 grid points; got {pts}")
    if any(b <= a for a, b in zip(pts, pts[1:], strict=False)):
        raise ValueError(f"bracket grid must increase strictly; got {pts}")
    if log and pts[0] <= 0:
        raise ValueError(f"a log grid needs positive points; got {pts}")
    step = (math.log(pts[1]) - math.log(pts[0])) if log else (pts[1] - pts[0])

    def nxt(x: float, k: int) -> float:
        y = math.exp(math.log(x) + k * step) if log else x + k * step
        return float(f"{y:.12g}")  # 0.1, not 0.09999999999999998

    scores: dict[float, float] = {}
    history: list[str] = []
    for p in pts:
        scores[p] = float(objective(p))
    extensions = 0
    while True:
        order = sorted(scores)
        best = min(order, key=lambda x: _badness(scores[x], minimize))
        at_low, at_high = best == order[0], best == order[-1]
        if not (at_low or at_high):
            break
        if extensions >= cap:
            break
        edge = order[0] if at_low else order[-1]
        sign = -1 if at_low else 1
        new = [nxt(edge, sign * (i + 1)) for i in range(extend_by)]
        if bounds is not None:
            new = [x for x in new if bounds[0] <= x <= bounds[1]]
        if not new:
            break
        extensions += 1
        history.append(f"extended {'down' if at_low else 'up'}: {[f'{x:.4g}' for x in new]}")
        for p in new:
            scores[p] = float(objective(p))
    order = sorted(scores)
    best = min(order, key=lambda x: _badness(scores[x], minimize))
    interior = best not in (order[0], order[-1])
    return TuneResult(
        order,
        [scores[p] for p in order],
        best,
        scores[best],
        interior,
        extensions,
        minimize,
        history,
    )


def bracket_arms(
    objectives: Mapping[str, Callable[[float], float]],
    grid: Sequence[float],
    **kw,
) -> dict[str, TuneResult]:
    """:func:`bracket` for every arm with the same start grid, extension size and cap."""
    return {arm: bracket(f, grid, **kw) for arm, f in objectives.items()}


# ------------------------------------------------------------------------------ budgets


def budgets(
    used: Mapping[str, float], *, unit: str = "tokens", tolerance: float = 0.05
) -> dict[str, Any]:
    """What each arm consumed in the unit the metric rewards, and whether the arms match.

    Returns ``{"unit", "arms", "ratio_to_min", "matched"}``: ``matched`` when every arm is within
    ``tolerance`` (relative) of the smallest. When not matched, a claim adds a matched-budget row.
    """
    if not used:
        raise ValueError("budgets needs at least one arm")
    vals = {k: float(v) for k, v in used.items()}
    for k, v in vals.items():
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"budgets: arm {k!r} used {v!r} {unit}; need a finite number >= 0")
    lo = min(vals.values())
    ratio = {k: (v / lo if lo > 0 else (1.0 if v == 0 else math.inf)) for k, v in vals.items()}
    matched = all(r <= 1 + tolerance for r in ratio.values())
    return {"unit": unit, "arms": vals, "ratio_to_min": ratio, "matched": bool(matched)}
