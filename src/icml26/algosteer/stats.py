"""Statistics of family distributions: shares, shifts (pp), TVD, homogeneity tests, Holm.

Inputs are lists of family labels (one per program) for a cue cell and the no-cue baseline cell.
Shares are over the labels given: pass gated programs for the paper's "output policy under fixed
correctness", or all parsable programs for the ungated row. Bootstrap CIs resample each cell's
programs independently (the cells are independent samples).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

__all__ = [
    "shares",
    "tvd",
    "shift_pp",
    "bootstrap_cells",
    "chi2_homogeneity",
    "holm",
    "compliance",
    "tvd_ratio",
]


def shares(labels: Sequence[str], families: Sequence[str]) -> np.ndarray:
    """Share of each family in ``labels``: float64 (len(families),), sums to 1 (zeros if empty).
    Labels outside ``families`` count in the denominator only."""
    n = len(labels)
    if n == 0:
        return np.zeros(len(families))
    idx = {f: k for k, f in enumerate(families)}
    out = np.zeros(len(families))
    for lab in labels:
        if lab in idx:
            out[idx[lab]] += 1
    return out / n


def tvd(p: np.ndarray, q: np.ndarray) -> float:
    """Total variation distance ``0.5 * sum |p - q|`` (in [0, 1])."""
    return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())


def shift_pp(cue: Sequence[str], base: Sequence[str], families: Sequence[str]) -> np.ndarray:
    """``100 * (p_cue(f) - p_base(f))`` per family, in percentage points."""
    return 100.0 * (shares(cue, families) - shares(base, families))


def bootstrap_cells(
    stat: Callable[..., float | np.ndarray],
    *cells: Sequence[str],
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile CI of ``stat(*cells)`` resampling each cell independently with replacement.
    Returns ``(low, high)`` arrays shaped like ``stat``'s output (NaN-safe quantiles)."""
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(c, dtype=object) for c in cells]
    draws = []
    for _ in range(n_boot):
        res = [a[rng.integers(0, len(a), len(a))] if len(a) else a for a in arrays]
        draws.append(np.asarray(stat(*[list(r) for r in res]), dtype=float))
    d = np.stack(draws)
    alpha = (1 - level) / 2
    with np.errstate(invalid="ignore"):
        return np.nanquantile(d, alpha, axis=0), np.nanquantile(d, 1 - alpha, axis=0)


def _chi2_stat(table: np.ndarray) -> tuple[float, np.ndarray]:
    rows, cols = table.sum(1, keepdims=True), table.sum(0, keepdims=True)
    expected = rows * cols / table.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(expected > 0, (table - expected) ** 2 / expected, 0.0)
    return float(terms.sum()), expected


def chi2_homogeneity(
    cue: Sequence[str],
    base: Sequence[str],
    families: Sequence[str],
    n_perm: int = 2000,
    seed: int = 0,
) -> tuple[float, float, str]:
    """Chi-square test that two cells share one family distribution.

    Returns ``(statistic, p, method)``. Families empty in both cells are dropped. With every
    expected count >= 5 the p-value is the chi-square tail (``method="chi2"``, no continuity
    correction, as ``scipy.stats.chi2_contingency(correction=False)``); otherwise a permutation
    p-value ``(1 + #{perm stat >= obs}) / (1 + n_perm)`` shuffling the pooled labels
    (``method="permutation"``). NaN when a cell is empty or only one family occurs.
    """
    fams = [f for f in families if f in set(cue) | set(base)]
    others = [x for x in list(cue) + list(base) if x not in set(families)]
    if others:
        fams.append("<other>")
    if not len(cue) or not len(base) or len(fams) < 2:
        return float("nan"), float("nan"), "none"

    def table_of(a, b):
        return np.array(
            [
                [sum(1 for x in lab if (x if x in families else "<other>") == f) for f in fams]
                for lab in (a, b)
            ],
            dtype=float,
        )

    table = table_of(cue, base)
    stat, expected = _chi2_stat(table)
    if (expected >= 5).all():
        from scipy.stats import chi2

        return stat, float(chi2.sf(stat, (table.shape[0] - 1) * (table.shape[1] - 1))), "chi2"
    rng = np.random.default_rng(seed)
    pooled = np.array(list(cue) + list(base), dtype=object)
    n1 = len(cue)
    ge = 0
    for _ in range(n_perm):
        perm = rng.permutation(pooled)
        s, _ = _chi2_stat(table_of(perm[:n1], perm[n1:]))
        ge += s >= stat - 1e-12
    return stat, (1 + ge) / (1 + n_perm), "permutation"


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (NaNs stay NaN and do not count as tests)."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full_like(p, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    m = len(ok)
    order = ok[np.argsort(p[ok], kind="stable")]
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def compliance(labels: Sequence[str], named: str) -> float:
    """Share of programs labelled ``named`` (NaN when there are none)."""
    return float(np.mean([x == named for x in labels])) if len(labels) else float("nan")


def tvd_ratio(
    cells: Mapping[tuple[str, str], Sequence[str]],
    families: Mapping[str, Sequence[str]],
    numerator: Sequence[str],
    control: str = "none_resampled",
    base: str = "none",
    min_n: int = 10,
) -> tuple[float, list[tuple[str, str]], list[str]]:
    """Mean TVD (vs ``base``) of the ``numerator`` cues / mean TVD of the ``control`` cue.

    A (task, cue) pair counts when its cell, the task's ``base`` cell and its ``control`` cell
    each have >= ``min_n`` programs. Returns ``(ratio, numerator pairs used, tasks used)``;
    NaN when nothing is informative (``inf`` when the control TVD is 0).
    """
    tasks = sorted({t for t, _ in cells})

    def enough(key) -> bool:  # a cell that is absent never counts, even with min_n = 0
        return key in cells and len(cells[key]) >= min_n

    ok = [t for t in tasks if enough((t, base)) and enough((t, control))]
    pairs = [(t, c) for t in ok for c in numerator if enough((t, c))]
    if not pairs:
        return float("nan"), [], ok

    def d(t, c):
        fam = families[t]
        return tvd(shares(cells[(t, c)], fam), shares(cells[(t, base)], fam))

    num = float(np.mean([d(t, c) for t, c in pairs]))
    den = float(np.mean([d(t, control) for t in ok]))
    ratio = num / den if den > 0 else (float("inf") if num > 0 else float("nan"))
    return ratio, pairs, ok
