"""Synthetic Azure-schema workloads with a controlled type mix.

``mix_cv`` (our definition; the paper does not define it) is the coefficient of variation
(population std / mean) of the type weights: weights ``1 + cv * z`` with ``z`` a fixed zero-mean,
unit-std ramp over the types, assigned to types in a seeded random order so that no type is
favoured. CV 0 is a uniform mix.
"""

from __future__ import annotations

import numpy as np

from icml26.sim.trace import LengthDist, RequestType, synthetic_trace

__all__ = ["TYPE_LENGTHS", "mix_weights", "request_types", "make_trace"]

#: (name, mean input, mean output) of the four paper types: short/short, long-in, long-out, long/long
TYPE_LENGTHS = (("short/short", 256, 64), ("long-in", 3000, 64), ("long-out", 256, 1024),
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


def request_types(weights, k: int | None = None, sigma: float = 0.4) -> list[RequestType]:
    k = k or len(weights)
    names = TYPE_LENGTHS if k == 4 else (TYPE_LENGTHS[0], TYPE_LENGTHS[3]) if k == 2 else TYPE_LENGTHS[:k]
    return [RequestType(n, float(w), LengthDist("lognormal", np.log(i) - sigma**2 / 2, sigma, hi=4096),
                        LengthDist("lognormal", np.log(o) - sigma**2 / 2, sigma, hi=2048))
            for (n, i, o), w in zip(names, weights, strict=False)]


def make_trace(n: int, rate: float, weights, seed: int, **kw):
    """``n`` Poisson requests at ``rate`` req/s with type weights ``weights`` (Azure schema fields)."""
    return synthetic_trace(n, rate, mix=request_types(weights), seed=seed, **kw)
