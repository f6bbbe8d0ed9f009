"""Replay a trace through a deployment plan in :mod:`icml26.sim`, and per-type latency metrics.

:func:`build_engines` starts one simulated engine per replica of a plan, priced by
:func:`~icml26.oserve.capacity.replica_cost` and with the engine limits scaled from its KV
capacity (:func:`~icml26.oserve.capacity.replica_engine_config`). :func:`replay` returns the
finished records and the requests refused for not fitting a replica's KV cache;
:func:`type_metrics` groups them by type: per-type P99 end-to-end latency, P99 / SLO and SLO
attainment (a refused request misses its SLO and counts as infinitely late).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from icml26.oserve.capacity import replica_cost, replica_engine_config
from icml26.sim import Engine, FCFSQueue, simulate, summarize

__all__ = ["build_engines", "replay", "simulate_plan", "type_metrics"]


def build_engines(plan, model, cluster, profile=None, oversize: str = "error", **limits) -> list[Engine]:
    """One FCFS engine per replica of ``plan``; ``limits`` (e.g. ``max_num_seqs=256``) override
    the scaled engine limits."""
    engines = []
    limits = {k: v for k, v in limits.items() if v is not None}
    for i, r in enumerate(plan.replicas):
        cost = replica_cost(model, cluster, r, profile=profile)
        engines.append(Engine(replica_engine_config(cost, oversize=oversize, **limits), cost, FCFSQueue(), index=i))
    return engines


def replay(plan, model, cluster, requests, router, profile=None, oversize: str = "drop", **limits):
    """``(records, rejected)``: the finished requests' records and the refused requests."""
    engines = build_engines(plan, model, cluster, profile, oversize, **limits)
    recs = simulate(requests, engines, router)
    return recs, [q for e in engines for q in e.rejected]


def simulate_plan(plan, model, cluster, requests, router, max_num_seqs=None, profile=None) -> dict:
    """Replay ``requests`` on ``plan``'s replicas (measured ``profile`` costs when given, else the
    layout model); ``summarize`` of the records. A request too large for its replica's KV cache
    is a UserError naming it."""
    engines = build_engines(plan, model, cluster, profile, "error", max_num_seqs=max_num_seqs)
    return summarize(simulate(requests, engines, router))


def type_metrics(records: Sequence, rejected: Sequence, slo_s: Mapping[str, float],
                 requests: Sequence | None = None) -> dict:
    """Per type (by ``Request.type``, the generating type): ``n``, ``dropped``, ``p99`` e2e (s),
    ``p99/slo`` and ``attainment`` (fraction of the type's requests finished within its SLO);
    plus ``worst p99/slo`` (the largest over types), ``attainment`` over all requests and the
    overall ``e2e_p99``. Refused requests count as infinitely late."""
    by: dict[str, list[float]] = {t: [] for t in slo_s}
    for r in records:
        by.setdefault(str(r.type), []).append(r.finish_s - r.arrival_s)
    for q in rejected:
        by.setdefault(str(q.type), []).append(np.inf)
    out: dict = {"types": {}}
    met = tot = 0
    for t, e2e in by.items():
        if not e2e:
            continue
        e = np.asarray(e2e)
        p99 = float(np.percentile(e, 99, method="higher")) if np.isinf(e).any() else float(np.percentile(e, 99))
        slo = float(slo_s[t])
        ok = int((e <= slo).sum())
        met, tot = met + ok, tot + len(e)
        out["types"][t] = {"n": len(e), "dropped": int(np.isinf(e).sum()), "p99": p99, "p99/slo": p99 / slo,
                           "attainment": ok / len(e)}
    out["worst p99/slo"] = max(v["p99/slo"] for v in out["types"].values())
    out["attainment"] = met / max(tot, 1)
    out["dropped"] = len(rejected)
    allv = np.concatenate([np.asarray(v) for v in by.values() if v])
    out["e2e_p99"] = float(np.percentile(allv, 99))
    if records:
        out["throughput_tok_s"] = summarize(records)["throughput_tok_s"]
    return out
