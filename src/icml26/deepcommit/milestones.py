"""Milestone grouping (DeepCommit stage 2, the clustering part): commits -> cohesive groups.

Pairwise similarity of two commits is a weighted mean of five signals, each in [0, 1]:

* ``file``: IDF-weighted Jaccard of touched files (a file every commit touches counts little),
* ``symbol``: Jaccard of Python symbols touched or used (``module.name``),
* ``message``: cosine of MiniLM embeddings of the commit messages, clipped at 0,
* ``time``: ``exp(-|t_a - t_b| / time_scale_h)``,
* ``author``: 1 for the same author e-mail.

Distance = 1 - similarity; agglomerative clustering (scipy, ``linkage`` method, default average)
cut at ``threshold``. Weights and threshold are fitted on tuning repositories only
(:func:`tune`); the LLM pass of the paper (naming, SRS, merge/split) is not part of this module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform

from icml26.deepcommit.history import Commit

__all__ = ["GroupConfig", "SIGNALS", "signal_matrices", "group", "group_from_signals"]

SIGNALS = ("file", "symbol", "message", "time", "author")


@dataclass(frozen=True)
class GroupConfig:
    """Weights of the five signals (>= 0, not all 0), the time scale (hours), the distance cut
    ``threshold`` in (0, 1] and the scipy linkage method."""

    file: float = 1.0
    symbol: float = 1.0
    message: float = 1.0
    time: float = 1.0
    author: float = 0.0
    time_scale_h: float = 12.0
    threshold: float = 0.6
    method: str = "average"

    def __post_init__(self) -> None:
        w = self.weights
        if min(w) < 0 or sum(w) <= 0:
            raise ValueError(f"signal weights must be >= 0 and not all 0; got {w}")
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1]; got {self.threshold}")
        if self.time_scale_h <= 0:
            raise ValueError(f"time_scale_h must be > 0; got {self.time_scale_h}")
        if self.method not in ("average", "complete", "single", "weighted"):
            raise ValueError(f"method must be average|complete|single|weighted; got {self.method}")

    @property
    def weights(self) -> tuple[float, ...]:
        return tuple(getattr(self, s) for s in SIGNALS)


def _jaccard(sets: Sequence[frozenset], idf: dict | None = None) -> np.ndarray:
    """(n, n) weighted Jaccard: sum of weights of the intersection / of the union (0 if empty).

    Vectorised: with X the (n, vocab) 0/1 incidence matrix and w the weights,
    inter = X diag(w) X^T and union = |A|_w + |B|_w - inter."""
    vocab = sorted({x for st in sets for x in st})
    n = len(sets)
    if not vocab:
        return np.zeros((n, n))
    index = {x: i for i, x in enumerate(vocab)}
    x = np.zeros((n, len(vocab)))
    for i, st in enumerate(sets):
        x[i, [index[v] for v in st]] = 1.0
    w = np.array([idf[v] for v in vocab]) if idf is not None else np.ones(len(vocab))
    inter = (x * w) @ x.T
    size = x @ w
    union = size[:, None] + size[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def signal_matrices(
    commits: Sequence[Commit],
    embed_fn: Callable[[list[str]], np.ndarray] | None = None,
    time_scale_h: float = 12.0,
) -> dict[str, np.ndarray]:
    """The five (n, n) float64 similarity matrices, each in [0, 1] with ones on the diagonal
    (except empty file/symbol sets). ``embed_fn`` maps texts to (n, d) unit vectors; default
    :func:`icml26.core.embed.embed` (MiniLM)."""
    n = len(commits)
    files = [frozenset(c.files) for c in commits]
    df: dict[str, int] = {}
    for f in files:
        for x in f:
            df[x] = df.get(x, 0) + 1
    idf = {x: float(np.log((n + 1) / (d + 0.5))) for x, d in df.items()}
    if embed_fn is None:
        from icml26.core.embed import embed as embed_fn
    emb = np.asarray(embed_fn([c.message or "(empty)" for c in commits]), dtype=np.float64)
    emb /= np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    t = np.array([c.time for c in commits], dtype=np.float64)
    emails = np.array([c.email.lower() for c in commits])
    return {
        "file": _jaccard(files, idf),
        "symbol": _jaccard([c.touched | c.uses for c in commits]),
        "message": np.clip(emb @ emb.T, 0.0, 1.0),
        "time": np.exp(-np.abs(t[:, None] - t[None, :]) / (3600.0 * time_scale_h)),
        "author": (emails[:, None] == emails[None, :]).astype(np.float64),
    }


def group_from_signals(
    signals: dict[str, np.ndarray], cfg: GroupConfig, times: np.ndarray | None = None
) -> np.ndarray:
    """Cluster labels (n,) int, numbered 0.. in order of each group's first commit.

    ``signals`` from :func:`signal_matrices`; when ``times`` (n,) seconds is given and
    ``cfg.time_scale_h`` differs from the one used there, the time matrix is recomputed."""
    mats = dict(signals)
    if times is not None:
        mats["time"] = np.exp(-np.abs(times[:, None] - times[None, :]) / (3600 * cfg.time_scale_h))
    n = next(iter(mats.values())).shape[0]
    if n == 0:
        return np.zeros(0, dtype=int)
    if n == 1:
        return np.zeros(1, dtype=int)
    w = np.array(cfg.weights)
    sim = sum(wi * mats[s] for wi, s in zip(w, SIGNALS, strict=True)) / w.sum()
    dist = np.clip(1.0 - sim, 0.0, None)
    np.fill_diagonal(dist, 0.0)
    dist = (dist + dist.T) / 2
    z = linkage(squareform(dist, checks=False), method=cfg.method)
    raw = fcluster(z, t=cfg.threshold, criterion="distance")
    order: dict[int, int] = {}
    return np.array([order.setdefault(int(r), len(order)) for r in raw])


def group(
    commits: Sequence[Commit],
    cfg: GroupConfig | None = None,
    embed_fn: Callable[[list[str]], np.ndarray] | None = None,
) -> np.ndarray:
    """Milestone label (n,) int of each commit (oldest-first order kept)."""
    cfg = cfg or GroupConfig()
    if embed_fn is None and cfg.message == 0:  # the message signal is off: do not load MiniLM
        embed_fn = lambda texts: np.ones((len(texts), 1))  # noqa: E731
    return group_from_signals(signal_matrices(commits, embed_fn, cfg.time_scale_h), cfg)


def with_weights(cfg: GroupConfig, **kw) -> GroupConfig:
    return replace(cfg, **kw)
