"""Figures of a grid run: family shares per task and cue, TVD heat map, pass rates."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from icml26.algosteer.stats import shares, tvd
from icml26.algosteer.tasks import get_task
from icml26.core.plots import pyplot, save_figure

__all__ = ["plot_all"]


def _cells(rows, gated):
    out: dict = {}
    for r in rows:
        out.setdefault((r["task"], r["cue"]), [])
        if (r["outcome"] == "pass") if gated else (r["family"] != "unparsable"):
            out[(r["task"], r["cue"])].append(r["family"])
    return out


def plot_all(rows: list[dict], table: list[dict], config, out_dir: Path) -> list[Path]:
    """Write ``shares.png``, ``tvd_heatmap.png`` and ``pass_rates.png`` under ``out_dir``."""
    plt = pyplot()
    out_dir = Path(out_dir)
    tasks, cues = list(config.tasks), list(config.cues)
    paths = []
    # 1. family shares per cue, per task; gated (top) and ungated (bottom)
    # tasks wrap after 4 columns; each band of tasks is a passing row over a parsable row
    ncols = min(4, len(tasks))
    bands = -(-len(tasks) // ncols)
    fig, axes = plt.subplots(
        2 * bands, ncols, figsize=(4.2 * ncols, 3.6 * 2 * bands), squeeze=False
    )
    for k in range(len(tasks), bands * ncols):
        axes[2 * (k // ncols)][k % ncols].axis("off")
        axes[2 * (k // ncols) + 1][k % ncols].axis("off")
    for row_i, gated in enumerate((True, False)):
        cells = _cells(rows, gated)
        for idx, t in enumerate(tasks):
            j = idx % ncols
            ax = axes[2 * (idx // ncols) + row_i][j]
            fams = (*get_task(t).families, "other")
            bottom = np.zeros(len(cues))
            for f_i, f in enumerate(fams):
                vals = np.array([shares(cells.get((t, c), []), fams)[f_i] for c in cues])
                ax.bar(range(len(cues)), 100 * vals, bottom=100 * bottom, label=f)
                bottom += vals
            ns = [len(cells.get((t, c), [])) for c in cues]
            for k, n in enumerate(ns):
                ax.text(k, 102, str(n), ha="center", fontsize=7)
            ax.set_xticks(range(len(cues)), cues, rotation=60, ha="right", fontsize=7)
            ax.set_ylim(0, 110)
            ax.set_title(
                f"{t}: {'passing programs' if gated else 'all parsable programs'}", fontsize=9
            )
            if j == 0:
                ax.set_ylabel("family share (%); n above bars")
            if row_i == 0:
                ax.legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    paths.append(save_figure(fig, out_dir / "shares.png"))
    # 2. TVD vs no cue, gated and ungated
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.6 * len(tasks) + 2.2))
    for ax, gated in zip(axes, (True, False), strict=True):
        cells = _cells(rows, gated)
        m = np.full((len(tasks), len(cues)), np.nan)
        for i, t in enumerate(tasks):
            fams = (*get_task(t).families, "other")
            base = cells.get((t, "none"), [])
            for k, c in enumerate(cues):
                cur = cells.get((t, c), [])
                if base and cur:
                    m[i, k] = 100 * tvd(shares(cur, fams), shares(base, fams))
        im = ax.imshow(m, vmin=0, vmax=100, cmap="magma_r", aspect="auto")
        for i in range(len(tasks)):
            for k in range(len(cues)):
                if np.isfinite(m[i, k]):
                    ax.text(
                        k,
                        i,
                        f"{m[i, k]:.0f}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="white" if m[i, k] > 50 else "black",
                    )
        ax.set_xticks(range(len(cues)), cues, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(len(tasks)), tasks)
        ax.set_title(
            f"TVD vs no cue (pp), {'passing' if gated else 'parsable'} programs", fontsize=9
        )
    fig.colorbar(im, ax=axes, shrink=0.8)
    paths.append(save_figure(fig, out_dir / "tvd_heatmap.png"))
    # 3. pass rates per cell
    fig, ax = plt.subplots(figsize=(max(8.0, 4 + 0.9 * len(tasks)), 3.6))
    width = 0.8 / len(tasks)
    for i, t in enumerate(tasks):
        vals = [
            next((r["pass_rate"] for r in table if r["task"] == t and r["cue"] == c), 0)
            for c in cues
        ]
        ax.bar(np.arange(len(cues)) + i * width, 100 * np.array(vals), width, label=t)
    ax.set_xticks(np.arange(len(cues)) + 0.4 - width / 2, cues, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("functional tests passed (%)")
    ax.legend(fontsize=7, ncol=2 if len(tasks) > 4 else 1)
    ax.set_title("Pass rate per cell")
    fig.tight_layout()
    paths.append(save_figure(fig, out_dir / "pass_rates.png"))
    return paths
