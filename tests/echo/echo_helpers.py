"""Shared helpers for the ECHO tests (imported by path-unique name)."""

from __future__ import annotations

import hashlib

import numpy as np


class SyntheticOracle:
    """Deterministic draft oracle: node ``path`` of request ``req`` has children with
    probabilities proportional to ``ratio[req] ** j`` over ``width`` tokens picked by a hash."""

    def __init__(self, ratios, width=24, vocab=1000):
        self.ratios, self.width, self.vocab = list(ratios), width, vocab
        self.calls = 0

    def topk(self, req, paths, k):
        self.calls += 1
        out = []
        r = self.ratios[req]
        p = r ** np.arange(self.width)
        lp = np.log(p / p.sum())
        for path in paths:
            h = int(hashlib.sha256(repr((req, path)).encode()).hexdigest(), 16)
            toks = np.array([(h + 7 * j) % self.vocab for j in range(self.width)], dtype=np.int64)
            out.append((toks[:k], lp[:k]))
        return out
