"""Deployment search: which replicas (each its own ``tp x pp``) to run on the cluster.

The score of a deployment is :func:`~icml26.oserve.dispatch.capacity_scale`: the largest ``a``
such that ``a * lam`` is served in full under the LP dispatch. For ``a >= 1`` this is
``1 / (min over dispatches of the max utilisation)``, so maximising it maximises the served flow
first and then minimises the peak utilisation (the paper's flow value with a tie-break).

:func:`search` is the paper's upper level: solve the dispatch, take the most utilised replica as
the bottleneck (the LP dual of its utilisation row is its marginal value) and a less utilised one
as redundant, move GPUs from the redundant replica to the bottleneck (or to a new replica),
re-enumerate the ``tp x pp`` layouts of the changed replicas, keep the best if it improves, and
stop after ``patience`` non-improving steps. :func:`exhaustive` tries every multiset of layouts.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from icml26.oserve.capacity import Cluster, ReplicaConfig, place, rate_table, valid_configs
from icml26.oserve.dispatch import capacity_scale, dispatch
from icml26.sim.cost import ModelSpec

__all__ = ["Plan", "Scorer", "search", "exhaustive", "best_homogeneous"]


@dataclass
class Plan:
    """A placed deployment, its score (capacity scale), dispatch ``x`` (R, K) req/s and the
    search's wall time (s) and number of scored deployments."""

    replicas: list[ReplicaConfig]
    score: float
    x: np.ndarray
    seconds: float = 0.0
    evaluated: int = 0
    history: list[float] = field(default_factory=list)

    def describe(self) -> str:
        c = {}
        for r in self.replicas:
            c[str(r)] = c.get(str(r), 0) + 1
        return " + ".join(f"{v}x{k}" for k, v in sorted(c.items()))


class Scorer:
    """Scores deployments (tuples of ``(tp, pp)``) for one model, cluster and type table.

    ``type_lengths`` (K, 2) mean tokens; ``lam`` (K,) req/s. Memoised by sorted layout tuple.
    """

    def __init__(self, model: ModelSpec, cluster: Cluster, type_lengths, lam, **rate_kw):
        self.model, self.cluster = model, cluster
        #: measured per-layout costs (``rate_kw["profile"]``): only those layouts are searched
        self.profile = rate_kw.get("profile")
        self.type_lengths = np.asarray(type_lengths, dtype=float)
        self.lam = np.asarray(lam, dtype=float)
        self.rate_kw = rate_kw
        self._rates: dict = {}
        self._scores: dict = {}
        self.evaluated = 0

    def rates(self, layouts: Sequence[tuple[int, int]]) -> np.ndarray:
        return rate_table(self.model, self.cluster, [ReplicaConfig(*lay) for lay in layouts],
                          self.type_lengths, cache=self._rates, **self.rate_kw)

    def __call__(self, layouts: Sequence[tuple[int, int]]) -> float:
        key = tuple(sorted(layouts))
        if key not in self._scores:
            self.evaluated += 1
            ok = sum(t * p for t, p in key) <= self.cluster.n_gpus and \
                place([ReplicaConfig(*lay) for lay in key], self.cluster) is not None
            self._scores[key] = capacity_scale(self.rates(key), self.lam) if ok and key else -1.0
        return self._scores[key]

    def plan(self, layouts, seconds=0.0, history=()) -> Plan:
        key = sorted(layouts, key=lambda lay: (-lay[0] * lay[1], lay))
        placed = place([ReplicaConfig(*lay) for lay in key], self.cluster)
        x = dispatch(self.rates(key), self.lam).x
        return Plan(placed, self(key), x, seconds, self.evaluated, list(history))


def _layouts_by_gpus(model, cluster, profile=None) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for c in valid_configs(model, cluster, profile=profile):
        out.setdefault(c.gpus, []).append(c.layout)
    return out


def best_homogeneous(scorer: Scorer) -> Plan:
    """The best deployment of identical replicas (exhaustive over the uniform layouts)."""
    t0 = time.perf_counter()
    best, best_s = None, -np.inf
    for c in valid_configs(scorer.model, scorer.cluster, profile=scorer.profile):
        m = scorer.cluster.n_gpus // c.gpus
        while m >= 1 and scorer([c.layout] * m) < 0:
            m -= 1
        if m >= 1 and scorer([c.layout] * m) > best_s:
            best, best_s = [c.layout] * m, scorer([c.layout] * m)
    if best is None:
        from icml26.core.errors import UserError
        from icml26.oserve.capacity import min_gpus
        min_gpus(scorer.model, scorer.cluster)  # raises naming the minimum
        if scorer.profile is not None:
            have = ", ".join(f"tp={t} pp={p}" for t, p in sorted(scorer.profile.costs))
            raise UserError(f"{scorer.profile.source}: none of the profiled layouts ({have}) is valid "
                            f"for {scorer.model.name} on {scorer.cluster.n_gpus} x {scorer.cluster.gpu.name}")
    return scorer.plan(best, time.perf_counter() - t0)


def search(scorer: Scorer, start: Sequence[tuple[int, int]] | None = None, patience: int = 20,
           seed: int = 0, progress: Callable[[], None] | None = None) -> Plan:
    """The paper's bottleneck/redundant GPU-moving search (see the module docstring)."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    by_g = _layouts_by_gpus(scorer.model, scorer.cluster, scorer.profile)
    cur = list(start) if start is not None else [r.layout for r in best_homogeneous(scorer).replicas]
    cur_s = scorer(cur)
    hist, stale = [cur_s], 0
    while stale < patience:
        if progress:
            progress()
        d = dispatch(scorer.rates(cur), scorer.lam * max(cur_s, 1e-9))
        order = np.argsort(-(d.util + 1e-6 * d.duals))  # most loaded first
        recv = int(order[0]) if rng.random() < 0.7 or len(cur) < 2 else int(rng.integers(len(cur)))
        others = [i for i in range(len(cur)) if i != recv]
        if not others:
            break
        w = 1.0 - d.util[others] + 1e-3
        donor = int(rng.choice(others, p=w / w.sum()))
        free = scorer.cluster.n_gpus - sum(t * p for t, p in cur)
        gd, gr = cur[donor][0] * cur[donor][1], cur[recv][0] * cur[recv][1]
        best, best_s = None, cur_s
        rest = [cur[i] for i in range(len(cur)) if i not in (donor, recv)]
        for delta in range(1, gd + 1):
            nd = gd - delta
            if nd and nd not in by_g:
                continue
            for target in ("recv", "new"):
                nr = gr + delta + (free if target == "recv" else 0)
                if target == "recv" and nr not in by_g:
                    continue
                if target == "new" and (delta + free) not in by_g:
                    continue
                d_opts = by_g[nd] if nd else [None]
                r_opts = by_g[nr] if target == "recv" else by_g[delta + free]
                for ld, lr in itertools.product(d_opts, r_opts):
                    cand = rest + ([ld] if ld else []) + ([lr] if target == "recv" else [cur[recv], lr])
                    s = scorer(cand)
                    if s > best_s + 1e-9:
                        best, best_s = cand, s
        if best is None:
            stale += 1
        else:
            cur, cur_s, stale = best, best_s, 0
        hist.append(cur_s)
    return scorer.plan(cur, time.perf_counter() - t0, hist)


def exhaustive(scorer: Scorer, max_gpus: int = 16) -> Plan:
    """Best score over every multiset of valid layouts that fits the cluster (<= ``max_gpus``)."""
    if scorer.cluster.n_gpus > max_gpus:
        raise ValueError(f"exhaustive search is limited to {max_gpus} GPUs; cluster has {scorer.cluster.n_gpus}")
    t0 = time.perf_counter()
    lays = sorted(lay for ls in _layouts_by_gpus(scorer.model, scorer.cluster, scorer.profile).values() for lay in ls)
    gmin = min(t * p for t, p in lays)
    D = scorer.cluster.n_gpus
    best, best_s = None, -np.inf

    def rec(i, cur, used):
        nonlocal best, best_s
        if D - used < gmin and cur:  # maximal: no further replica fits
            s = scorer(cur)
            if s > best_s:
                best, best_s = list(cur), s
            return
        progressed = False
        for k in range(i, len(lays)):
            g = lays[k][0] * lays[k][1]
            if used + g <= D:
                progressed = True
                rec(k, cur + [lays[k]], used + g)
        if not progressed and cur:
            s = scorer(cur)
            if s > best_s:
                best, best_s = list(cur), s

    rec(0, [], 0)
    return scorer.plan(best, time.perf_counter() - t0)
