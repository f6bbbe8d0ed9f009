"""Warm-up calibration of ECHO's sparse gates: which depths to gate (D_sig) and tau_d.

For each warm-up sample the draft's EAGLE beam (``topk``, ``depth``) is grown on the true prefix;
``c_d = exp(max_j S_{d,j})`` is the best path probability at depth d and ``A`` the accepted draft
depth of the whole beam (how far the target's greedy path is covered). The gate at depth d should
predict "acceptance passes d" (``A > d``): its ROC AUC over samples measures that. ``D_sig`` keeps
the ``max_gates`` depths with the highest AUC at or above ``auc_min``; each ``tau_d`` maximizes
Youden's J (TPR - FPR) of the rule "continue iff c_d > tau_d".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from icml26.echo.policies import _Beam
from icml26.echo.replay import ReplaySet, replay_accept
from icml26.echo.tree import DraftTree

__all__ = ["GateCalibration", "auc", "youden_tau", "gate_statistics", "calibrate_gates"]


def auc(score: np.ndarray, label: np.ndarray) -> float:
    """ROC AUC (Mann-Whitney, ties counted 1/2); NaN when a class is empty."""
    from scipy.stats import rankdata

    score, label = np.asarray(score, float), np.asarray(label, bool)
    n1, n0 = int(label.sum()), int((~label).sum())
    if n1 == 0 or n0 == 0:
        return float("nan")
    r = rankdata(score)
    return float((r[label].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def youden_tau(score: np.ndarray, label: np.ndarray, lo: float = 1e-3, hi: float = 0.999) -> float:
    """Threshold tau in [lo, hi] maximizing TPR - FPR of ``score > tau`` for ``label``."""
    score, label = np.asarray(score, float), np.asarray(label, bool)
    cands = np.unique(np.clip(np.concatenate([score, [lo, hi]]), lo, hi))
    # tau just below a score value: midpoints keep "score > tau" well defined
    mids = np.unique(np.clip(np.concatenate([[lo], (cands[1:] + cands[:-1]) / 2, [hi]]), lo, hi))
    n1, n0 = max(label.sum(), 1), max((~label).sum(), 1)
    best, tau = -np.inf, 0.5
    for t in mids:
        j = (score[label] > t).sum() / n1 - (score[~label] > t).sum() / n0
        if j > best + 1e-12:
            best, tau = j, float(t)
    return tau


def gate_statistics(rs: ReplaySet, samples: Sequence[int], topk: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """``(conf (n, depth), accepted_depth (n,))`` on warm-up samples: conf[:, d-1] = c_d."""
    conf = np.zeros((len(samples), depth))
    acc = np.zeros(len(samples), dtype=int)
    for n, s in enumerate(samples):
        beam = _Beam(rs.oracle, s, topk)
        for _ in range(depth):
            beam.grow()
        conf[n] = [np.exp(beam.best(d)) for d in range(1, depth + 1)]
        tree = DraftTree.from_paths(rs.root(s), beam.candidates())
        acc[n] = replay_accept(tree, rs.truth(s)) - 1
    return conf, acc


@dataclass(frozen=True)
class GateCalibration:
    """AUC per depth (index d-1), the chosen gates and thresholds, and ablation settings."""

    aucs: tuple[float, ...]
    gate_depths: tuple[int, ...]
    taus: tuple[float, ...]
    single_tau: float
    dense_taus: tuple[float, ...]

    def to_dict(self) -> dict:
        return {"aucs": list(self.aucs), "gate_depths": list(self.gate_depths), "taus": list(self.taus),
                "single_tau": self.single_tau, "dense_taus": list(self.dense_taus)}


def calibrate_gates(conf: np.ndarray, accepted_depth: np.ndarray, auc_min: float = 0.6,
                    max_gates: int = 2, max_depth: int | None = None) -> GateCalibration:
    """Pick D_sig and tau_d from warm-up statistics (see :func:`gate_statistics`).

    ``max_depth``: only depths ``<= max_depth`` are gate candidates (the depths a batch's budget
    lets a request reach; ``None`` = every depth). AUCs and ``dense_taus`` cover every depth.
    When no candidate reaches ``auc_min`` the single best one is kept (a gate is always present).
    """
    if not 0.5 <= auc_min < 1:
        raise ValueError(f"auc_min must be in [0.5, 1); got {auc_min}")
    if max_gates < 1:
        raise ValueError(f"max_gates must be >= 1; got {max_gates}")
    conf, a = np.asarray(conf, float), np.asarray(accepted_depth)
    depth = conf.shape[1]
    aucs = [auc(conf[:, d - 1], a > d) for d in range(1, depth + 1)]
    taus_all = [youden_tau(conf[:, d - 1], a > d) for d in range(1, depth + 1)]
    if max_depth is not None and max_depth < 1:
        raise ValueError(f"max_depth must be >= 1 or None; got {max_depth}")
    top = depth if max_depth is None else min(depth, max_depth)
    valid = [d for d in range(1, top + 1) if np.isfinite(aucs[d - 1])]
    ranked = sorted(valid, key=lambda d: -aucs[d - 1])
    chosen = [d for d in ranked if aucs[d - 1] >= auc_min][:max_gates] or ranked[:1] or [1]
    chosen = sorted(chosen)
    pooled_c = np.concatenate([conf[:, d - 1] for d in chosen])
    pooled_y = np.concatenate([a > d for d in chosen])
    return GateCalibration(tuple(float(x) for x in aucs), tuple(chosen),
                           tuple(taus_all[d - 1] for d in chosen), youden_tau(pooled_c, pooled_y),
                           tuple(taus_all))
