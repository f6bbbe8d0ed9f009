"""Agreement of found milestones / edges with a ground truth: ARI, Hungarian edge matching."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment

__all__ = ["adjusted_rand", "match_milestones", "edge_scores"]


def _comb2(x: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float64)
    return float((x * (x - 1) / 2).sum())


def adjusted_rand(a: Sequence[int], b: Sequence[int]) -> float:
    """Adjusted Rand index (Hubert & Arabie) of two labelings of the same items; 1.0 when both
    are the same partition (including all-singletons vs all-singletons)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise ValueError(f"label arrays differ in shape: {a.shape} vs {b.shape}")
    n = a.size
    if n < 2:
        return 1.0
    _, ai = np.unique(a, return_inverse=True)
    _, bi = np.unique(b, return_inverse=True)
    table = np.zeros((ai.max() + 1, bi.max() + 1))
    np.add.at(table, (ai, bi), 1)
    index = _comb2(table)
    sa, sb = _comb2(table.sum(1)), _comb2(table.sum(0))
    expected = sa * sb / _comb2(np.array([n]))
    max_index = (sa + sb) / 2
    if max_index == expected:
        return 1.0
    return (index - expected) / (max_index - expected)


def match_milestones(true: Sequence[int], found: Sequence[int]) -> dict[int, int]:
    """found milestone -> true milestone, one-to-one, maximising commit overlap (Hungarian)."""
    true, found = np.asarray(true), np.asarray(found)
    tu, fu = np.unique(true), np.unique(found)
    overlap = np.array([[np.sum((found == f) & (true == t)) for t in tu] for f in fu])
    rows, cols = linear_sum_assignment(-overlap)
    return {int(fu[r]): int(tu[c]) for r, c in zip(rows, cols, strict=True) if overlap[r, c] > 0}


def edge_scores(
    true_edges: dict[tuple[int, int], str],
    found_edges: dict[tuple[int, int], str],
    mapping: dict[int, int],
) -> dict[str, float]:
    """Precision / recall / F1 of found edges mapped through ``mapping`` onto true milestones
    (an edge whose end is unmatched, or maps onto one milestone, counts as a false positive),
    and the share of correctly typed (Strong/Weak) edges among true positives (nan if none)."""
    mapped: dict[tuple[int, int], str] = {}
    fp = 0
    for (a, b), s in found_edges.items():
        ma, mb = mapping.get(a), mapping.get(b)
        if ma is None or mb is None or ma == mb or (ma, mb) not in true_edges:
            fp += 1
        else:
            if (ma, mb) in mapped and mapped[(ma, mb)] == "Strong":
                continue
            mapped[(ma, mb)] = s
    tp = len(mapped)
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / len(true_edges) if true_edges else 1.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    acc = np.mean([mapped[e] == true_edges[e] for e in mapped]) if mapped else float("nan")
    return {"precision": p, "recall": r, "f1": f1, "strength_acc": float(acc)}
