"""Figures of the SSO claim: the μP plot (loss vs LR per width) and training curves."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from icml26.core.plots import pyplot, save_figure

__all__ = ["plot_lr_transfer", "plot_curves"]

COLORS = {"adamw": "tab:gray", "muon": "tab:blue", "sso": "tab:red", "muonsphere": "tab:orange"}


def plot_lr_transfer(hist: dict, widths, seed: int, best: dict, path: Path) -> Path:
    """Final validation loss against LR, one panel per optimizer, one line per width."""
    plt = pyplot()
    kinds = ("adamw", "muon", "sso")
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), sharey=True)
    for ax, k in zip(axes, kinds, strict=True):
        for i, w in enumerate(widths):
            pts = sorted((lr, h["val_loss"][-1]) for (kk, ww, lr, s), h in hist.items()
                         if kk == k and ww == w and s == seed)
            if not pts:
                continue
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, "o-", color=pyplot().cm.viridis(i / max(1, len(widths) - 1)),
                    label=f"width {w}")
            b = best[(k, w)]
            ax.plot([b], [dict(pts)[b]], "*", ms=12, color="k")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(plt.NullFormatter())  # minor labels overlap on short decades
        ax.set_title(k)
        ax.set_xlabel("learning rate")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("final validation loss (nats/byte)")
    axes[0].legend()
    fig.suptitle("LR transfer across widths (star = best LR per width)")
    return save_figure(fig, path)


def plot_curves(hist: dict, best: dict, width: int, seed: int, path: Path) -> Path:
    """Validation loss, activation RMS and ‖W‖₂/R over steps at each optimizer's best LR."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    target = None
    for k in ("adamw", "muon", "sso", "muonsphere"):
        lr = best.get((k, width), best[("sso", width)])  # MuonSphere: tuned, or SSO's LR
        h = hist.get((k, width, lr, seed))
        if h is None:
            continue
        steps = h["eval_steps"]
        axes[0].plot(steps[1:], h["val_loss"][1:], color=COLORS[k], label=f"{k} (lr {lr:g})")
        if k == "adamw":
            target = h["val_loss"][-1]
        rms = [np.mean(a["attn_rms"] + a["mlp_rms"]) for a in h["acts"]]
        axes[1].plot(steps[: len(rms)], rms, color=COLORS[k], label=k)
        sr = np.array(h["sphere_ratio"])
        axes[2].fill_between(steps[: len(sr)], sr[:, 0], sr[:, 1], color=COLORS[k], alpha=0.3,
                             label=k)
    if target is not None:
        axes[0].axhline(target, ls="--", color="k", lw=0.8, label="AdamW final")
    axes[0].set_title(f"validation loss, width {width}")
    axes[0].set_xlabel("step")
    axes[0].legend(fontsize=7)
    axes[1].set_title("mean activation RMS (attn + MLP outputs)")
    axes[1].set_xlabel("step")
    axes[1].set_yscale("log")
    axes[2].set_title("‖W‖₂ / R of hidden atoms (min..max)")
    axes[2].set_xlabel("step")
    axes[2].set_yscale("log")
    axes[2].legend(fontsize=7)
    for ax in axes:
        ax.grid(alpha=0.3)
    return save_figure(fig, path)
