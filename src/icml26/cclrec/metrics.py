"""Full-ranking top-K metrics: every item is ranked for every user, seen items masked.

Recall@K = |top-K ∩ T_u| / |T_u|; NDCG@K = Σ_{r<K, item_r∈T_u} 1/log2(r+2) divided by the ideal
DCG Σ_{r<min(|T_u|,K)} 1/log2(r+2) (the LLMRec/LightGCN definitions). Users with an empty target
set are skipped; metrics are means over the remaining users.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import scipy.sparse as sp
import torch

__all__ = ["rank_metrics", "evaluate", "topk_masked"]


def topk_masked(scores: torch.Tensor, mask_rows: Sequence[np.ndarray], k: int) -> torch.Tensor:
    """Top-``k`` item indices per row of ``scores`` (B, I) after setting masked items to -inf."""
    scores = scores.clone()
    rows = (
        np.concatenate([np.full(len(m), r) for r, m in enumerate(mask_rows)]) if mask_rows else []
    )
    cols = np.concatenate(list(mask_rows)) if mask_rows else []
    if len(rows):
        scores[
            torch.as_tensor(rows, dtype=torch.long), torch.as_tensor(cols, dtype=torch.long)
        ] = -torch.inf
    return torch.topk(scores, k, dim=1).indices


def rank_metrics(
    topk: np.ndarray, targets: Sequence[np.ndarray], ks: Sequence[int]
) -> dict[str, np.ndarray]:
    """Per-user ``recall@k`` and ``ndcg@k`` arrays from ranked lists ``topk`` (B, >=max(ks))."""
    ks = sorted(set(int(k) for k in ks))
    kmax = ks[-1]
    disc = 1.0 / np.log2(np.arange(kmax) + 2.0)
    hits = np.zeros((len(targets), kmax), dtype=bool)
    n_t = np.array([len(t) for t in targets], dtype=np.float64)
    for r, t in enumerate(targets):
        hits[r] = np.isin(topk[r, :kmax], t)
    out = {}
    cum_ideal = np.cumsum(disc)
    for k in ks:
        h = hits[:, :k]
        out[f"recall@{k}"] = h.sum(1) / np.maximum(n_t, 1)
        idcg = cum_ideal[np.minimum(n_t, k).astype(int) - 1]
        out[f"ndcg@{k}"] = (h * disc[:k]).sum(1) / idcg
    return out


def evaluate(
    score_fn: Callable[[np.ndarray], torch.Tensor],
    target: sp.csr_matrix,
    exclude: Sequence[sp.csr_matrix],
    ks: Sequence[int] = (10, 20, 50),
    batch_users: int = 1024,
    per_user: bool = False,
) -> dict:
    """Full-ranking metrics of ``score_fn(users) -> (B, I) scores`` on ``target`` (users x items).

    Items in any matrix of ``exclude`` (train, and validation when testing) are masked. Returns
    ``{"recall@k": mean, "ndcg@k": mean, "n_users": n}``, plus ``"users"`` and per-user arrays
    under ``"per_user"`` when asked.
    """
    target = sp.csr_matrix(target)
    users = np.flatnonzero(np.diff(target.indptr) > 0)
    ex = [sp.csr_matrix(e) for e in exclude]
    kmax = max(ks)
    n_items = target.shape[1]
    if kmax > n_items:
        raise ValueError(f"k={kmax} is larger than the number of items ({n_items})")
    parts: dict[str, list[np.ndarray]] = {}
    for start in range(0, len(users), batch_users):
        ub = users[start : start + batch_users]
        with torch.no_grad():
            s = score_fn(ub).float()
        masks = [
            np.concatenate([e.indices[e.indptr[u] : e.indptr[u + 1]] for e in ex])
            if ex
            else np.zeros(0, np.int64)
            for u in ub
        ]
        top = topk_masked(s, masks, kmax).cpu().numpy()
        tg = [target.indices[target.indptr[u] : target.indptr[u + 1]] for u in ub]
        for name, v in rank_metrics(top, tg, ks).items():
            parts.setdefault(name, []).append(v)
    res: dict = {"n_users": int(len(users))}
    per = {k: np.concatenate(v) for k, v in parts.items()}
    res.update({k: float(v.mean()) if len(v) else float("nan") for k, v in per.items()})
    if per_user:
        res["users"] = users
        res["per_user"] = per
    return res
