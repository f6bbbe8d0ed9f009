"""Figures of the cclrec claim: NDCG@20 with spread, validation curves, consensus rates and
the gain by item-popularity decile."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from icml26.cclrec.metrics import topk_masked
from icml26.core.plots import pyplot, save_figure

__all__ = ["all_figures", "hits_by_popularity"]


def hits_by_popularity(model, sp_, k=20, n_bins=10):
    """Hit rate@k of test pairs grouped by the test item's training-popularity decile: (n_bins,)."""
    pop = np.asarray(sp_.train.sum(0)).ravel()
    order = np.argsort(np.argsort(pop, kind="stable"), kind="stable")
    decile = np.minimum(order * n_bins // len(pop), n_bins - 1)
    test = sp_.test
    users = np.flatnonzero(np.diff(test.indptr) > 0)
    hit_sum, cnt = np.zeros(n_bins), np.zeros(n_bins)
    for s in range(0, len(users), 1024):
        ub = users[s : s + 1024]
        masks = [
            np.concatenate([m.indices[m.indptr[u] : m.indptr[u + 1]] for m in (sp_.train, sp_.val)])
            for u in ub
        ]
        top = topk_masked(model.score(ub).float().cpu(), masks, k).numpy()
        for r, u in enumerate(ub):
            t = test.indices[test.indptr[u] : test.indptr[u + 1]]
            h = np.isin(t, top[r])
            np.add.at(hit_sum, decile[t], h)
            np.add.at(cnt, decile[t], 1)
    return hit_sum / np.maximum(cnt, 1)


def all_figures(out_dir: Path, names, res, curves, pop_hits, method, baselines) -> list[Path]:
    """``res``: per-system per-seed metric dicts; ``curves``: per-system [[pass, val NDCG@20]]
    of the first seed; ``pop_hits``: per-system hit rates by popularity decile (first seed)."""
    plt = pyplot()
    out_dir = Path(out_dir)
    paths = []
    # 1. NDCG@20 with min/max over seeds
    fig, ax = plt.subplots(figsize=(7, 3.8))
    vals = [np.array([x["ndcg@20"] for x in res[n]]) for n in names]
    mean = np.array([v.mean() for v in vals])
    err = np.array(
        [
            [m - v.min() for m, v in zip(mean, vals, strict=True)],
            [v.max() - m for m, v in zip(mean, vals, strict=True)],
        ]
    )
    colors = ["tab:red" if n.startswith("CCLRec") else "tab:blue" for n in names]
    ax.bar(range(len(names)), mean, yerr=err, color=colors, capsize=3)
    ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("test NDCG@20 (mean, min/max over seeds)")
    ax.set_ylim(min(mean) * 0.8, max(mean) * 1.08)
    ax.set_title("Full-ranking NDCG@20")
    paths.append(save_figure(fig, out_dir / "ndcg20.png"))
    # 2. validation curves (first seed)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for n in names:
        h = curves.get(n) or []
        if h:
            ax.plot([p for p, _ in h], [v for _, v in h], marker=".", label=n)
    ax.set_xlabel("pass")
    ax.set_ylabel("validation NDCG@20")
    ax.legend(fontsize=6)
    ax.set_title("Validation curves (first seed)")
    paths.append(save_figure(fig, out_dir / "val_curves.png"))
    # 3. consensus hit rates and threshold pass shares
    cc = [n for n in names if res[n] and res[n][0]["rates"]]
    if cc:
        keys = ("pos_consensus", "neg_consensus", "struct_neg_pass", "sem_neg_pass")
        fig, ax = plt.subplots(figsize=(6, 3.5))
        w = 0.8 / len(cc)
        for j, n in enumerate(cc):
            ax.bar(
                np.arange(len(keys)) + j * w,
                [np.mean([x["rates"][k] for x in res[n]]) for k in keys],
                w,
                label=n,
            )
        ax.set_xticks(np.arange(len(keys)) + 0.4 - w / 2, keys, fontsize=8)
        ax.set_ylabel("share (per user / per candidate)")
        ax.legend(fontsize=6)
        ax.set_title("Consensus hits and threshold pass rates")
        paths.append(save_figure(fig, out_dir / "consensus_rates.png"))
    # 4. gain by item-popularity decile: method vs best baseline (first seed)
    best = max(baselines, key=lambda b: np.mean([x["ndcg@20"] for x in res[b]]))
    if pop_hits.get(method) is not None and pop_hits.get(best) is not None:
        hm, hb = np.asarray(pop_hits[method]), np.asarray(pop_hits[best])
        fig, ax = plt.subplots(figsize=(6, 3.5))
        x = np.arange(len(hm))
        ax.bar(x - 0.2, hb, 0.4, label=best)
        ax.bar(x + 0.2, hm, 0.4, label=method, color="tab:red")
        ax.set_xlabel("test item popularity decile (0 = rarest)")
        ax.set_ylabel("hit rate@20 of test pairs")
        ax.legend(fontsize=8)
        ax.set_title("Hits by item popularity (first seed)")
        paths.append(save_figure(fig, out_dir / "popularity_deciles.png"))
    return paths
