"""Routers for :func:`icml26.sim.simulate`: LP weights per request type (:class:`WeightedTypeRouter`
needs the type, an oracle in the simulator; :class:`InputRouter` is what a deployment can run).

:class:`WeightedTypeRouter` sends a type-``j`` request to replica ``k`` in proportion to
``x[k, j]`` with smooth weighted round robin (deterministic, no sampling noise): each replica's
credit grows by its weight, the largest credit wins and pays back the total.
"""

from __future__ import annotations

import numpy as np

from icml26.sim.engine import Router

__all__ = ["WeightedTypeRouter", "InputRouter"]


def _least_loaded(engines) -> int:
    return min(range(len(engines)), key=lambda i: (len(engines[i].running) + len(engines[i].queue), i))


def _pick(credit: np.ndarray, q: np.ndarray, engines, overflow: bool) -> int:
    """The replica with the largest credit among those with ``q > 0``; with ``overflow``, only
    among those whose waiting queue is empty, else the one with the fewest waiting per unit share."""
    cand = q > 0
    if overflow:
        idle = np.array([len(e.queue) == 0 for e in engines]) & cand
        if idle.any():
            cand = idle
        else:
            waiting = np.array([len(e.queue) for e in engines], dtype=float)
            score = np.where(q > 0, (waiting + 1) / np.where(q > 0, q, 1.0), np.inf)
            return int(np.argmin(score))
    return int(np.argmax(np.where(cand, credit, -np.inf)))


class WeightedTypeRouter(Router):
    """``x`` (R, K) req/s from a dispatch; ``classify(request) -> type index``. Types with no
    weight anywhere fall back to the least-loaded engine. ``overflow``: as :class:`InputRouter`."""

    def __init__(self, x: np.ndarray, classify, overflow: bool = False):
        super().__init__()
        self.w = np.asarray(x, dtype=float)
        self.classify = classify
        self.overflow = overflow
        self.credit = np.zeros_like(self.w)

    def route(self, req, engines, now):
        j = int(self.classify(req))
        w = self.w[:, j]
        if w.sum() <= 0:
            return _least_loaded(engines)
        self.credit[:, j] += w
        k = _pick(self.credit[:, j], w, engines, self.overflow)
        self.credit[k, j] -= w.sum()
        return k


class InputRouter(Router):
    """Routes on what is known when a request arrives: its prompt length, and a predicted output
    length when one comes with it (``request.meta["pred_output_tokens"]``, e.g. from a TIE
    predictor sidecar). Never reads ``output_tokens``.

    ``x`` (R, K) req/s from the plan's dispatch, ``types`` the plan's fitted
    :class:`~icml26.oserve.types.WorkloadTypes`. Each served type j has replica shares
    ``s[:, j] = x[:, j] / sum_k x[k, j]``; a request with type probabilities ``p`` (K,)
    (:meth:`~WorkloadTypes.input_posterior`, or one-hot from the predicted length) targets
    ``q = s @ p`` (renormalised over served types), chosen by smooth weighted round robin on one
    credit vector: ``credit += q``, the largest credit wins and pays back 1. So each replica gets
    ``sum q`` of the requests, deterministically. No mass on a served type: least-loaded engine.

    ``overflow`` (default False: the pure LP split, blind to load): the split is followed among the
    replicas with ``q > 0`` whose waiting queue is empty; when every such replica has requests
    waiting, the request goes to the one with the fewest waiting per unit of ``q``. On identical
    replicas this is close to least-load; it keeps the LP split while no replica backs up.
    """

    def __init__(self, x: np.ndarray, types, overflow: bool = False):
        super().__init__()
        self.overflow = overflow
        x = np.asarray(x, dtype=float)
        tot = x.sum(0)
        self.served = tot > 0
        self.share = np.where(self.served[None], x / np.maximum(tot[None], 1e-300), 0.0)
        self.types = types
        self.credit = np.zeros(x.shape[0])

    def probabilities(self, req) -> np.ndarray:
        """The type probabilities (K,) this router uses for ``req``."""
        pred = req.meta.get("pred_output_tokens") if req.meta else None
        if pred is not None:
            p = np.zeros(self.types.k)
            p[int(self.types.assign_predicted([req.prompt_tokens], [max(float(pred), 1.0)])[0])] = 1.0
            return p
        return self.types.input_posterior([req.prompt_tokens])[0]

    def route(self, req, engines, now):
        p = self.probabilities(req) * self.served
        if p.sum() <= 1e-12:
            return _least_loaded(engines)
        q = self.share @ (p / p.sum())
        self.credit += q
        k = _pick(self.credit, q, engines, self.overflow)
        self.credit[k] -= 1.0
        return k
