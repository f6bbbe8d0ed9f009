"""Request types: k-means on standardised (log input tokens, log output tokens).

``WorkloadTypes(k, seed).fit(requests)`` learns ``k`` centroids; ``assign(requests)`` gives each
request its type (int64, (N,)); ``per_minute_counts(requests, minutes)`` the (T, K) arrival counts
the rate predictor trains on; ``mean_lengths_`` (K, 2) float64 mean (input, output) tokens.

The output length is unknown when a request arrives, so a router cannot use ``assign``.
``input_posterior(prompt_tokens)`` gives P(type | log prompt tokens) (N, K) from per-type
Gaussians over the standardised log prompt length and the types' frequencies (fitted with the
centroids); ``assign_input`` is its argmax. ``to_dict`` / ``from_dict`` carry a fitted classifier
through ``plan.json`` / ``router.json`` (version ``VERSION``), so a replay uses the plan's types.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["WorkloadTypes"]


def _feats(requests) -> np.ndarray:
    return np.log(np.array([[r.prompt_tokens, r.output_tokens] for r in requests], dtype=float))


class WorkloadTypes:
    """k-means (Lloyd, k-means++ init, ``n_init`` restarts) over request lengths."""

    VERSION = 1

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
        # input-only classifier: per-type Gaussian over the standardised log prompt length
        z = Z[:, 0]
        self.input_prior_ = np.array([(lab == j).mean() for j in range(self.k)])
        self.input_mean_ = np.array([z[lab == j].mean() if (lab == j).any() else 0.0 for j in range(self.k)])
        self.input_std_ = np.array([max(z[lab == j].std(), 0.05) if (lab == j).sum() > 1 else 1.0
                                    for j in range(self.k)])
        return self

    def input_posterior(self, prompt_tokens) -> np.ndarray:
        """P(type | log prompt tokens), (N, K) float64 rows summing to 1; ``prompt_tokens`` (N,)."""
        if not hasattr(self, "input_prior_"):
            raise RuntimeError("WorkloadTypes.input_posterior called before fit")
        z = (np.log(np.asarray(prompt_tokens, float)) - self.mean_[0]) / self.std_[0]
        with np.errstate(divide="ignore"):
            logp = (np.log(self.input_prior_)[None] - np.log(self.input_std_)[None]
                    - 0.5 * ((z[:, None] - self.input_mean_[None]) / self.input_std_[None]) ** 2)
        logp -= logp.max(1, keepdims=True)
        p = np.exp(logp)
        return p / p.sum(1, keepdims=True)

    def assign_input(self, requests: Sequence) -> np.ndarray:
        """The most probable type of each request from its prompt length alone (int64, (N,))."""
        return self.input_posterior([r.prompt_tokens for r in requests]).argmax(1)

    def assign_predicted(self, prompt_tokens, predicted_output_tokens) -> np.ndarray:
        """Nearest centroid on (log prompt, log *predicted* output), e.g. a TIE length prediction."""
        if not hasattr(self, "centroids_"):
            raise RuntimeError("WorkloadTypes.assign_predicted called before fit")
        X = np.log(np.stack([np.asarray(prompt_tokens, float), np.asarray(predicted_output_tokens, float)], 1))
        Z = (X - self.mean_) / self.std_
        return ((Z[:, None] - self.centroids_[None]) ** 2).sum(-1).argmin(1)

    _FITTED = ("mean_", "std_", "centroids_", "mean_lengths_", "input_prior_", "input_mean_", "input_std_")

    def to_dict(self) -> dict:
        """The fitted classifier as plain JSON-able lists (features: log prompt, log output tokens)."""
        if not hasattr(self, "input_prior_"):
            raise RuntimeError("WorkloadTypes.to_dict called before fit")
        return {"version": self.VERSION, "k": self.k, "features": ["log prompt_tokens", "log output_tokens"],
                **{name.rstrip("_"): getattr(self, name).tolist() for name in self._FITTED}}

    @classmethod
    def from_dict(cls, d: dict) -> WorkloadTypes:
        """Inverse of :meth:`to_dict`; ValueError naming the missing field or a version mismatch."""
        if d.get("version") != cls.VERSION:
            raise ValueError(f"classifier version {d.get('version')!r}; this icml26 reads version {cls.VERSION}")
        missing = [n.rstrip("_") for n in cls._FITTED if n.rstrip("_") not in d] + (["k"] if "k" not in d else [])
        if missing:
            raise ValueError(f"classifier lacks field(s) {missing}")
        t = cls(int(d["k"]))
        for name in cls._FITTED:
            setattr(t, name, np.asarray(d[name.rstrip("_")], dtype=float))
        if t.centroids_.shape != (t.k, 2) or t.input_prior_.shape != (t.k,):
            raise ValueError(f"classifier shapes do not match k={t.k}: centroids {t.centroids_.shape}")
        return t

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
