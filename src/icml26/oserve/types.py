"""Request types: k-means on standardised (log input tokens, log output tokens).

``WorkloadTypes(k, seed).fit(requests)`` learns ``k`` centroids; ``assign(requests)`` gives each
request its type (int64, (N,)); ``per_minute_counts(requests, minutes)`` the (T, K) arrival counts
the rate predictor trains on; ``mean_lengths_`` (K, 2) float64 mean (input, output) tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["WorkloadTypes"]


def _feats(requests) -> np.ndarray:
    return np.log(np.array([[r.prompt_tokens, r.output_tokens] for r in requests], dtype=float))


class WorkloadTypes:
    """k-means (Lloyd, k-means++ init, ``n_init`` restarts) over request lengths."""

    def __init__(self, k: int = 4, seed: int = 0, n_init: int = 8, iters: int = 100):
        if k < 1:
            raise ValueError(f"k must be >= 1; got {k}")
        self.k, self.seed, self.n_init, self.iters = k, seed, n_init, iters

    def fit(self, requests: Sequence) -> WorkloadTypes:
        if len(requests) < self.k:
            raise ValueError(f"need at least k={self.k} requests to fit {self.k} types; got {len(requests)}")
        X = _feats(requests)
        self.mean_, self.std_ = X.mean(0), X.std(0) + 1e-9
        Z = (X - self.mean_) / self.std_
        rng = np.random.default_rng(self.seed)
        best, best_inertia = None, np.inf
        for _ in range(self.n_init):
            C = Z[rng.integers(len(Z))][None]
            while len(C) < self.k:  # k-means++
                d = ((Z[:, None] - C[None]) ** 2).sum(-1).min(1)
                p = d / d.sum() if d.sum() > 0 else np.full(len(Z), 1 / len(Z))
                C = np.vstack([C, Z[rng.choice(len(Z), p=p)]])
            for _ in range(self.iters):
                lab = ((Z[:, None] - C[None]) ** 2).sum(-1).argmin(1)
                newC = np.array([Z[lab == j].mean(0) if (lab == j).any() else C[j] for j in range(self.k)])
                if np.allclose(newC, C):
                    break
                C = newC
            inertia = ((Z - C[lab]) ** 2).sum()
            if inertia < best_inertia:
                best, best_inertia = C, inertia
        # order types by centroid (input, then output) so labels are stable across seeds
        order = np.lexsort((best[:, 1], best[:, 0]))
        self.centroids_ = best[order]
        lab = self.assign(requests)
        L = np.exp(X)
        self.mean_lengths_ = np.array([L[lab == j].mean(0) if (lab == j).any() else np.exp(self.mean_)
                                       for j in range(self.k)])
        return self

    def assign(self, requests: Sequence) -> np.ndarray:
        if not hasattr(self, "centroids_"):
            raise RuntimeError("WorkloadTypes.assign called before fit")
        Z = (_feats(requests) - self.mean_) / self.std_
        return ((Z[:, None] - self.centroids_[None]) ** 2).sum(-1).argmin(1)

    def per_minute_counts(self, requests: Sequence, minutes: int | None = None) -> np.ndarray:
        """(T, K) int64 arrivals per minute and type, minute ``t`` covering ``[60 t, 60 t + 60)``."""
        lab = self.assign(requests)
        m = (np.array([r.arrival_s for r in requests]) // 60).astype(int)
        T = minutes if minutes is not None else int(m.max()) + 1
        out = np.zeros((T, self.k), dtype=np.int64)
        ok = m < T
        np.add.at(out, (m[ok], lab[ok]), 1)
        return out
