"""Systems compared by the ATLAS claim, and the metrics of the paper (section 1.1, step 7).

Every system answers the same question for each test model: from few items, estimate the theta
that the whole bank gives (the full-bank WLE). Systems:

* ATLAS: :class:`~icml26.atlas.cat.AdaptiveTest` (MFI, randomesque 5, EAP, SE stop, min 30).
* random-k matched: for each model, as many uniformly random items as ATLAS gave it, EAP-scored.
* random-100 and anchor-100: one fixed subset for all models (anchor = medoids of a k-means on
  standardised (a, b, g), tinyBenchmarks-style), EAP-scored, accuracy by p-IRT.
* pure MFI (randomesque 1) and ATLAS keeping a <= 0 items (ablations).
"""

from __future__ import annotations

import numpy as np

from icml26.atlas.bank import ItemBank
from icml26.atlas.cat import AdaptiveTest, acc_hat
from icml26.atlas.scoring import eap

__all__ = ["run_cats", "score_subsets", "anchor_items", "metrics", "rank_shift", "equal_acc_split"]


def run_cats(
    bank: ItemBank, Y: np.ndarray, seed: int, progress=None, desc: str = "CAT", **kw
) -> dict:
    """One adaptive test per row of ``Y`` (T, N) (0/1, NaN = item not available to that model).

    Model m uses seed ``123 + m + 1000 * seed`` (ATLAS: 123 + model index). Returns a dict of
    theta (T,), se (T,), acc_hat (T,), used (T, N) bool.
    """
    T, N = Y.shape
    out = {
        "theta": np.zeros(T),
        "se": np.zeros(T),
        "acc_hat": np.zeros(T),
        "used": np.zeros((T, N), bool),
    }
    rows = progress.track(range(T), total=T, description=desc) if progress is not None else range(T)
    for m in rows:
        obs = ~np.isnan(Y[m])
        cat = AdaptiveTest(bank, seed=123 + m + 1000 * seed, allowed=obs, **kw)
        res = cat.run_indices(np.nan_to_num(Y[m]).astype(int))
        out["theta"][m], out["se"][m], out["acc_hat"][m] = res.theta, res.se, res.acc_hat
        out["used"][m, cat.items_idx] = True
    return out


def score_subsets(bank: ItemBank, Y: np.ndarray, used: np.ndarray) -> dict:
    """EAP theta and p-IRT accuracy of each model from the items marked in ``used`` (T, N)."""
    resp = np.where(used, Y, np.nan)
    theta, se = eap(bank, resp)
    acc = np.array(
        [
            acc_hat(
                bank,
                np.flatnonzero(used[m] & ~np.isnan(Y[m])),
                Y[m, used[m] & ~np.isnan(Y[m])],
                theta[m],
            )
            for m in range(len(Y))
        ]
    )
    return {"theta": theta, "se": se, "acc_hat": acc, "used": used & ~np.isnan(Y)}


def anchor_items(bank: ItemBank, k: int, seed: int, iters: int = 50) -> np.ndarray:
    """Indices of ``k`` medoid items of a k-means (Lloyd) on standardised (a, b, g)."""
    b = np.clip(bank.b, -8, 8)
    X = np.stack([bank.a, b, bank.g], axis=1)
    X = (X - X.mean(0)) / (X.std(0) + 1e-12)
    rng = np.random.default_rng(seed)
    C = X[rng.choice(len(X), k, replace=False)]
    for _ in range(iters):
        lab = ((X[:, None, :] - C[None]) ** 2).sum(-1).argmin(1)
        newC = np.array([X[lab == j].mean(0) if np.any(lab == j) else C[j] for j in range(k)])
        if np.allclose(newC, C):
            break
        C = newC
    dist = ((X[:, None, :] - C[None]) ** 2).sum(-1)
    chosen: list[int] = []
    for j in range(k):  # nearest distinct item to each centre
        for i in np.argsort(dist[:, j]):
            if i not in chosen:
                chosen.append(int(i))
                break
    return np.array(chosen)


def mean_overlap(used: np.ndarray) -> float:
    """Mean over pairs of |common items| / max(|A|, |B|)."""
    U = used.astype(np.float64)
    common = U @ U.T
    n = U.sum(1)
    denom = np.maximum(n[:, None], n[None, :])
    iu = np.triu_indices(len(U), 1)
    return float(np.mean(common[iu] / np.maximum(denom[iu], 1)))


def rank_shift(theta: np.ndarray, acc: np.ndarray, places: int = 10) -> float:
    """Share of models whose rank by theta and rank by accuracy differ by more than ``places``
    (ties in accuracy get their average rank)."""
    from scipy.stats import rankdata

    return float(np.mean(np.abs(rankdata(-theta) - rankdata(-acc)) > places))


def equal_acc_split(theta: np.ndarray, se: np.ndarray, correct: np.ndarray) -> tuple[int, float]:
    """Pairs of models with the same number correct, and the share of them whose thetas differ by
    more than 2 * sqrt(se_i^2 + se_j^2)."""
    pairs = split = 0
    for v in np.unique(correct):
        idx = np.flatnonzero(correct == v)
        if len(idx) < 2:
            continue
        i, j = np.triu_indices(len(idx), 1)
        i, j = idx[i], idx[j]
        pairs += len(i)
        split += int(np.sum(np.abs(theta[i] - theta[j]) > 2 * np.sqrt(se[i] ** 2 + se[j] ** 2)))
    return pairs, (split / pairs if pairs else float("nan"))


def metrics(
    out: dict, ref_theta: np.ndarray, true_theta: np.ndarray | None, acc: np.ndarray
) -> dict:
    """The paper's metrics for one system on one seed."""
    used = out["used"]
    exposure = used.mean(0)
    m = {
        "items": float(used.sum(1).mean()),
        "theta_mae": float(np.mean(np.abs(out["theta"] - ref_theta))),
        "acc_mae": float(np.mean(np.abs(out["acc_hat"] - acc))),
        "max_exposure": float(exposure.max()),
        "overlap": mean_overlap(used),
        "rank_shift": rank_shift(out["theta"], acc),
    }
    if true_theta is not None:
        m["theta_mae_true"] = float(np.mean(np.abs(out["theta"] - true_theta)))
    return m
