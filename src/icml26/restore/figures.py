"""Figures of the RESTORE claim: accuracy vs keep, attention mass per layer, anchors on an image."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from icml26.core.plots import pyplot, save_figure

__all__ = ["plot_accuracy", "plot_mass", "plot_anchors"]


def plot_accuracy(rows: list[dict], acc_full: float, path: Path) -> Path:
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=True)
    for ax, base in zip(axes, ("divprune", "visionzip", "tome"), strict=True):
        for name, style in (
            (base, "o--"),
            (f"{base}+restore", "o-"),
            ("fastv", "x:"),
            ("pdrop", "s:"),
        ):
            pts = sorted((r["keep"], r["accuracy"]) for r in rows if r.get("system") == name)
            if pts:
                ax.plot(*zip(*pts, strict=True), style, label=name)
        ax.axhline(acc_full, color="k", lw=0.8, label="full")
        ax.set_title(base)
        ax.set_xlabel("visual tokens kept")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("accuracy")
    return save_figure(fig, path)


def plot_mass(mass: dict[str, np.ndarray], path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    full = mass["full"]
    for name, m in mass.items():
        ax.plot(np.arange(len(m)), m / np.maximum(full, 1e-9), "o-", label=name)
    ax.set_xlabel("layer")
    ax.set_ylabel("text->visual attention mass / full")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


@torch.no_grad()
def plot_anchors(model, image: np.ndarray, keep: int, path: Path) -> Path:
    """Hybrid DivPrune + distinctive anchors on one image: kept tokens boxed white, merged groups
    coloured, anchors starred."""
    from icml26.restore import scenes
    from icml26.restore.patch import RestoreConfig, apply_restore, remove_restore, restore_state
    from icml26.restore.train import N_IMAGE_TOKENS

    plt = pyplot()
    q = scenes.Question(0, "digit", ("digit",), "0")
    ids = torch.tensor([scenes.encode(q, N_IMAGE_TOKENS)])
    px = scenes.pixel_values(image[None]).to(next(model.parameters()).dtype)
    apply_restore(model, RestoreConfig(reducer="divprune", keep=keep))
    try:
        out = model(input_ids=ids, pixel_values=px, logits_to_keep=1, use_cache=True)
        red = restore_state(out).reductions[0]
    finally:
        remove_restore(model)
    side = int(round(N_IMAGE_TOKENS**0.5))
    cell = image.shape[0] / side
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.imshow(image, extent=(0, image.shape[1], image.shape[0], 0))
    cmap = plt.get_cmap("tab20")
    pos = red.positions()
    for j in range(red.n):
        members = torch.nonzero(red.groups == j).flatten().tolist()
        if red.sizes[j] == 1:
            r, c = divmod(members[0], side)
            ax.add_patch(
                plt.Rectangle((c * cell, r * cell), cell, cell, fill=False, ec="white", lw=1.2)
            )
            continue
        for i in members:
            r, c = divmod(i, side)
            ax.add_patch(
                plt.Rectangle((c * cell, r * cell), cell, cell, color=cmap(j % 20), alpha=0.35)
            )
        r, c = divmod(int(red.kept[j]), side)
        ax.plot(c * cell + cell / 2, r * cell + cell / 2, "*", color=cmap(j % 20), ms=9, mec="k")
        r, c = divmod(int(pos[j]), side)
        ax.plot(c * cell + cell / 2, r * cell + cell / 2, ".", color="k", ms=4)
    ax.set_title(
        f"keep {keep}/{N_IMAGE_TOKENS}: boxes kept, colours merged groups (* anchor, . median)",
        fontsize=8,
    )
    ax.axis("off")
    return save_figure(fig, path)
