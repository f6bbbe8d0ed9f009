"""Serving metrics from :class:`~icml26.sim.engine.RequestRecord` lists, and spreads over seeds.

Definitions (seconds): TTFT = first token - arrival; e2e = finish - arrival; PTLA (per-token
latency, the TIE paper's metric) = e2e / output tokens; TPOT = (finish - first token) /
(output tokens - 1) over requests with >= 2 output tokens; throughput = output tokens / (last
finish - first arrival); time-to-finish-N = the time (from the first arrival) at which N requests
have finished (the offline "synthetic data generation" metric).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from icml26.core.errors import UserError

__all__ = ["summarize", "time_to_finish", "over_seeds"]


def _stats(prefix: str, x: np.ndarray) -> dict[str, float]:
    return {f"{prefix}_mean": float(x.mean()), f"{prefix}_p50": float(np.percentile(x, 50)),
            f"{prefix}_p90": float(np.percentile(x, 90)), f"{prefix}_p99": float(np.percentile(x, 99))}


def summarize(records: Sequence) -> dict[str, float]:
    """Mean / P50 / P90 / P99 of TTFT, e2e, PTLA and TPOT, plus throughput and counts."""
    if not records:
        # a UserError (a ValueError): the CLIs print it without a traceback
        raise UserError("no finished requests to summarize (an empty trace, or every request was dropped)")
    arr = np.array([r.arrival_s for r in records])
    first = np.array([r.first_token_s for r in records])
    fin = np.array([r.finish_s for r in records])
    out_t = np.array([r.output_tokens for r in records], dtype=float)
    res = {"n": len(records)}
    res |= _stats("ttft", first - arr)
    res |= _stats("e2e", fin - arr)
    res |= _stats("ptla", (fin - arr) / out_t)
    multi = out_t >= 2
    if multi.any():
        res |= _stats("tpot", (fin[multi] - first[multi]) / (out_t[multi] - 1))
    span = fin.max() - arr.min()
    res["throughput_tok_s"] = float(out_t.sum() / span) if span > 0 else float("inf")
    res["makespan_s"] = float(span)
    res["preemptions"] = int(sum(r.preemptions for r in records))
    return res


def time_to_finish(records: Sequence, n: int) -> float:
    """Seconds from the first arrival until ``n`` requests have finished (inf if fewer did)."""
    if n < 1:
        raise ValueError(f"n must be >= 1; got {n}")
    if len(records) < n:
        return float("inf")
    fin = np.sort([r.finish_s for r in records])
    return float(fin[n - 1] - min(r.arrival_s for r in records))


def over_seeds(values: Sequence[float], level: float = 0.95) -> dict[str, float]:
    """Mean, min, max and a Student-t CI of the mean of per-seed values."""
    from scipy import stats

    v = np.asarray(values, dtype=float)
    if v.size == 0:
        raise ValueError("over_seeds needs at least one value")
    m = float(v.mean())
    if v.size < 2:
        return {"mean": m, "min": m, "max": m, "ci_lo": m, "ci_hi": m}
    h = float(stats.t.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    return {"mean": m, "min": float(v.min()), "max": float(v.max()), "ci_lo": m - h, "ci_hi": m + h}
