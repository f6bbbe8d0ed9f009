"""Tables and figures for the ``uds`` claim: rows per (selector, budget), loss vs budget,
time breakdown, composition of the picks."""

from __future__ import annotations

import statistics
from pathlib import Path

from icml26.core.plots import pyplot, save_figure


def _agg(vals: list[float]) -> tuple[float, float, float]:
    return statistics.fmean(vals), min(vals), max(vals)


def summarize(runs: list[dict], arms: list[tuple[str, float]]) -> list[dict]:
    """One row per arm: means over seeds with [min, max] of the held-out loss."""
    rows = []
    for name, budget in arms:
        rs = [r for r in runs if r["arm"] == name and r["budget"] == budget]
        m, lo, hi = _agg([r["test_loss"] for r in rs])
        row = {
            "selector": name,
            "budget": budget,
            "held-out loss": round(m, 4),
            "loss min-max": f"{lo:.4f}-{hi:.4f}",
            "exact match": round(statistics.fmean(r["exact_match"] for r in rs), 4),
            "answer match": round(
                statistics.fmean(r.get("answer_match", r["exact_match"]) for r in rs), 4
            ),
            "wall s (scoring+train)": round(
                statistics.fmean(r["time_scoring_s"] + r["time_training_s"] for r in rs), 1
            ),
            "scoring s": round(statistics.fmean(r["time_scoring_s"] for r in rs), 1),
            "picks noisy": round(statistics.fmean(r["frac_noisy"] for r in rs), 3),
            "picks repeated": round(statistics.fmean(r["frac_dup"] for r in rs), 3),
            "picks mean tokens": round(statistics.fmean(r["mean_len"] for r in rs), 1),
            "seeds": len(rs),
        }
        if "picks_by_family" in rs[0]:
            row["picks by source"] = ", ".join(
                f"{f} {statistics.fmean(r['picks_by_family'][f] for r in rs):.2f}"
                for f in rs[0]["picks_by_family"]
            )
        if "intra_std" in rs[0]:
            row["std intra / alpha*inter"] = (
                f"{statistics.fmean(r['intra_std'] for r in rs):.3g} / {statistics.fmean(r['alpha_inter_std'] for r in rs):.3g}"
            )
        rows.append(row)
    return rows


def figures(runs: list[dict], arms: list[tuple[str, float]], out_dir: Path) -> list[Path]:
    plt = pyplot()
    out = []
    names = sorted({a for a, _ in arms if a != "full"})
    full = [r["test_loss"] for r in runs if r["arm"] == "full"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for n in names:
        bs = sorted({b for a, b in arms if a == n})
        ms = [
            statistics.fmean(r["test_loss"] for r in runs if r["arm"] == n and r["budget"] == b)
            for b in bs
        ]
        lo = [min(r["test_loss"] for r in runs if r["arm"] == n and r["budget"] == b) for b in bs]
        hi = [max(r["test_loss"] for r in runs if r["arm"] == n and r["budget"] == b) for b in bs]
        ax.errorbar(
            bs,
            ms,
            yerr=[
                [m - a for m, a in zip(ms, lo, strict=True)],
                [b - m for m, b in zip(ms, hi, strict=True)],
            ],
            marker="o",
            capsize=3,
            label=n,
        )
    if full:
        ax.axhline(statistics.fmean(full), color="k", ls="--", label="full data")
    ax.set_xlabel("data budget (fraction of candidates trained on)")
    ax.set_ylabel("held-out loss (nats/token)")
    ax.set_title("Held-out loss vs budget (mean, min-max over seeds)")
    ax.legend(fontsize=8)
    out.append(save_figure(fig, out_dir / "loss_vs_budget.png"))

    labels = [f"{a}@{b:g}" for a, b in arms]
    sel = [[r for r in runs if r["arm"] == a and r["budget"] == b] for a, b in arms]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    score = [statistics.fmean(r["time_scoring_s"] for r in rs) for rs in sel]
    train = [statistics.fmean(r["time_training_s"] for r in rs) for rs in sel]
    ax1.bar(labels, score, label="scoring (no-grad forward + selection)")
    ax1.bar(labels, train, bottom=score, label="training forward + backward")
    ax1.set_ylabel("seconds per run")
    ax1.set_title("Wall-clock breakdown")
    ax1.tick_params(axis="x", rotation=60, labelsize=7)
    ax1.legend(fontsize=7)
    # composition: label noise and repeated templates first, then the source family of the rest
    fams = sorted({f for r in runs for f in r.get("picks_by_family", {})})
    noisy = [statistics.fmean(r["frac_noisy"] for r in rs) for rs in sel]
    dup = [statistics.fmean(r["frac_dup"] for r in rs) for rs in sel]
    bottom = [0.0] * len(labels)
    parts = [("noisy label", noisy), ("repeated templates", dup)]
    if fams:
        for f in fams:  # family shares include noisy/repeated picks; scale the rest to fit
            share = [statistics.fmean(r["picks_by_family"].get(f, 0.0) for r in rs) for rs in sel]
            parts.append(
                (
                    f"source: {f}",
                    [s * (1 - n - d) for s, n, d in zip(share, noisy, dup, strict=True)],
                )
            )
    else:
        parts.append(("clean, distinct", [1 - n - d for n, d in zip(noisy, dup, strict=True)]))
    for name, vals in parts:
        if any(vals):
            ax2.bar(labels, vals, bottom=bottom, label=name)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax2.set_ylabel("share of trained samples")
    ax2.set_title("Composition of the picks")
    ax2.tick_params(axis="x", rotation=60, labelsize=7)
    ax2.legend(fontsize=7)
    out.append(save_figure(fig, out_dir / "time_and_composition.png"))
    return out
