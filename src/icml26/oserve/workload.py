"""Synthetic Azure-schema workloads with a controlled type mix, measured in *work*.

Two type sets (name, mean input tokens, mean output tokens; lognormal lengths, sigma 0.4):

- :data:`AZURE_TYPES`, the claim's: ``code`` (2048 / 20) and ``conversation`` (1024 / 200), shaped
  like the two public Azure LLM inference traces of 2023 (``AzureLLMInferenceTrace_code`` /
  ``_conv``), plus the paper's long-output types ``long-out`` (256 / 1024) and ``long/long``
  (2048 / 1024);
- :data:`TYPE_LENGTHS`, the paper's four quadrants (short/short, long-in, long-out, long/long).

**Mix CV over work.** A type's *work* ``g_j`` is the GPU-seconds one request costs
(:func:`work_per_request`: ``min_k gpus_k / n[k, j]`` over the valid layouts, the cheapest way the
cluster can serve it). With count shares ``c_j`` the work shares are ``c_j g_j / sum_i c_i g_i``
(:func:`work_shares`) and the mix CV is their population std / mean (:func:`work_cv`): a mix of
many cheap requests and few expensive ones can be balanced in work although its counts are not.
:func:`mix_weights` gives work shares with a given CV (``1 + cv * z`` for a fixed zero-mean ramp
``z``, assigned to types in a seeded order so no type is favoured); :func:`count_weights` turns them
into the count shares a trace is drawn with. The paper does not define its CV.
"""

from __future__ import annotations

import numpy as np

from icml26.sim.trace import LengthDist, RequestType, synthetic_trace

__all__ = ["TYPE_LENGTHS", "AZURE_TYPES", "mix_weights", "request_types", "make_trace",
           "work_per_request", "work_shares", "work_cv", "count_weights"]

#: (name, mean input, mean output) of the four paper types: short/short, long-in, long-out, long/long
TYPE_LENGTHS = (("short/short", 256, 64), ("long-in", 3000, 64), ("long-out", 256, 1024),
                ("long/long", 2048, 1024))

#: the claim's types: the two Azure 2023 traces' shapes and the paper's long-output types
AZURE_TYPES = (("code", 2048, 20), ("conversation", 1024, 200), ("long-out", 256, 1024),
               ("long/long", 2048, 1024))


def mix_weights(k: int, cv: float, seed: int) -> np.ndarray:
    """(k,) float64 weights summing to 1 whose CV (population) is ``cv``."""
    if k < 1:
        raise ValueError(f"k must be >= 1; got {k}")
    if k == 1:
        return np.ones(1)
    z = np.linspace(-1, 1, k)
    z = z / z.std()
    if not 0 <= cv < 1 / np.abs(z).max():
        raise ValueError(f"mix cv must be in [0, {1 / np.abs(z).max():.3f}) for {k} types; got {cv}")
    w = 1 + cv * np.random.default_rng(seed).permutation(z)
    return w / w.sum()


def work_per_request(n: np.ndarray, gpus) -> np.ndarray:
    """(K,) GPU-seconds per request of each type: ``min_k gpus[k] / n[k, j]`` over the layouts of
    the rate table ``n`` (R, K) req/s (``inf`` for a type no layout serves)."""
    n = np.asarray(n, dtype=float)
    g = np.asarray(gpus, dtype=float)[:, None]
    with np.errstate(divide="ignore"):
        per = np.where(n > 0, g / np.where(n > 0, n, 1.0), np.inf)
    return per.min(0)


def work_shares(count_weights, work) -> np.ndarray:
    """(K,) work shares ``c_j g_j / sum_i c_i g_i`` of count shares ``c`` and per-request work ``g``."""
    w = np.asarray(count_weights, dtype=float) * np.asarray(work, dtype=float)
    if not (np.isfinite(w).all() and w.sum() > 0):
        raise ValueError(f"work shares need finite work and some mass; got counts {count_weights}, work {work}")
    return w / w.sum()


def work_cv(count_weights, work) -> float:
    """Population CV (std / mean) of the work shares of a mix."""
    s = work_shares(count_weights, work)
    return float(s.std() / s.mean())


def count_weights(work_share, work) -> np.ndarray:
    """The count shares (summing to 1) whose work shares are ``work_share``."""
    c = np.asarray(work_share, dtype=float) / np.asarray(work, dtype=float)
    if not (np.isfinite(c).all() and c.sum() > 0):
        raise ValueError(f"count weights need finite positive work; got {work}")
    return c / c.sum()


def request_types(weights, k: int | None = None, sigma: float = 0.4, lengths=None) -> list[RequestType]:
    """Lognormal types with ``weights`` (count shares); ``lengths`` a ``(name, in, out)`` tuple
    (default :data:`TYPE_LENGTHS`: all four for k = 4, short/short and long/long for k = 2)."""
    k = k or len(weights)
    if lengths is None:
        names = TYPE_LENGTHS if k == 4 else (TYPE_LENGTHS[0], TYPE_LENGTHS[3]) if k == 2 else TYPE_LENGTHS[:k]
    else:
        names = tuple(lengths)[:k]
    return [RequestType(n, float(w), LengthDist("lognormal", np.log(i) - sigma**2 / 2, sigma, hi=4096),
                        LengthDist("lognormal", np.log(o) - sigma**2 / 2, sigma, hi=2048))
            for (n, i, o), w in zip(names, weights, strict=False)]


def make_trace(n: int, rate: float, weights, seed: int, lengths=None, **kw):
    """``n`` Poisson requests at ``rate`` req/s with count shares ``weights`` (Azure schema fields);
    ``lengths``: the type set (default :data:`TYPE_LENGTHS`)."""
    return synthetic_trace(n, rate, mix=request_types(weights, lengths=lengths), seed=seed, **kw)
