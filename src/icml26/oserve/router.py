"""Routers for :func:`icml26.sim.simulate`: LP weights per request type.

:class:`WeightedTypeRouter` sends a type-``j`` request to replica ``k`` in proportion to
``x[k, j]`` with smooth weighted round robin (deterministic, no sampling noise): each replica's
credit grows by its weight, the largest credit wins and pays back the total.
"""

from __future__ import annotations

import numpy as np

from icml26.sim.engine import Router

__all__ = ["WeightedTypeRouter"]


class WeightedTypeRouter(Router):
    """``x`` (R, K) req/s from a dispatch; ``classify(request) -> type index``. Types with no
    weight anywhere fall back to the least-loaded engine."""

    def __init__(self, x: np.ndarray, classify):
        super().__init__()
        self.w = np.asarray(x, dtype=float)
        self.classify = classify
        self.credit = np.zeros_like(self.w)

    def route(self, req, engines, now):
        j = int(self.classify(req))
        w = self.w[:, j]
        if w.sum() <= 0:
            return min(range(len(engines)), key=lambda i: (len(engines[i].running) + len(engines[i].queue), i))
        self.credit[:, j] += w
        k = int(np.argmax(self.credit[:, j]))
        self.credit[k, j] -= w.sum()
        return k
