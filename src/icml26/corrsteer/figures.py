"""The claim's figure: top |r| per layer, Δaccuracy with CI, SER per system, SAE L0 vs EV."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from icml26.core.plots import pyplot, save_figure

__all__ = ["claim_figure"]


def _ci(text: str) -> tuple[float, float]:
    lo, hi = (float(x) for x in re.findall(r"[-+]?\d+\.\d+", text)[:2])
    return lo, hi


def claim_figure(path: Path, parts: list[dict], rows: list[dict], sae_metrics: dict) -> Path:
    """``parts``: the claim's task parts (each with ``name`` and ``runs``); ``rows``: its table."""
    plt = pyplot()
    rows = [r for r in rows if "Δacc pp" in r]  # system rows (not the majority-letter floor)
    n_sys = sum(1 for r in rows if r["system"] != "unsteered")
    fig, ax = plt.subplots(2, 2, figsize=(13, max(8, 4 + 0.22 * n_sys)))
    a = ax[0, 0]
    styles = ["-", "--", ":"]
    for p, P in enumerate(parts):
        run = next((r for r in P["runs"] if r.get("top_r")), P["runs"][0])  # skip degenerate seeds
        for L, vals in sorted(run["top_r"].items()):
            a.plot(range(1, len(vals) + 1), vals, marker="o", ls=styles[p % 3], label=f"{P['name']} L{L}")
    a.set_xlabel("rank")
    a.set_ylabel("|Pearson r| with correctness")
    seed0 = next((r for r in parts[0]["runs"] if r.get("top_r")), parts[0]["runs"][0])["seed"]
    a.set_title(f"Top |r| per layer (train split, seed {seed0})")
    if a.get_lines():
        a.legend(fontsize=7)
    sys_rows = [r for r in rows if r["system"] != "unsteered"]
    names = [f"{r.get('task', '')} · {r['system']}" if len(parts) > 1 else r["system"] for r in sys_rows]
    vals = np.array([r["Δacc pp"] for r in sys_rows], dtype=float)
    cis = np.array([_ci(r["Δ 95% CI"]) for r in sys_rows], dtype=float).reshape(-1, 2)
    y = np.arange(len(names))
    a = ax[0, 1]
    colors = ["tab:blue" if r["system"].startswith("CorrSteer") else
              "tab:orange" if r["system"].startswith("SFT") else "tab:gray" for r in sys_rows]
    err = np.abs(np.stack([vals - cis[:, 0], cis[:, 1] - vals]))
    a.barh(y, vals, color=colors, xerr=err, capsize=3)
    a.axvline(0, color="k", lw=0.8)
    a.set_yticks(y, names, fontsize=7)
    a.invert_yaxis()
    a.set_xlabel("Δ test accuracy (refusal rate for HarmBench) vs unsteered (pp), 95% CI")
    a.set_title("Accuracy change")
    a = ax[1, 0]
    ser = [np.nan if r["SER"] is None else r["SER"] for r in sys_rows]
    a.barh(y, ser, color=colors)
    a.axvline(0.5, color="k", lw=0.8, ls="--")
    a.set_yticks(y, names, fontsize=7)
    a.invert_yaxis()
    a.set_xlim(0, 1)
    a.set_xlabel("side-effect ratio #worse/(#better+#worse); blank = no answer changed")
    a.set_title("Side effects (lower is better)")
    a = ax[1, 1]
    for L, m in sorted(sae_metrics.items()):
        if "l0" in m:
            a.scatter(m["l0"], m["explained_variance"], s=40)
            a.annotate(f"L{L}", (m["l0"], m["explained_variance"]))
    a.axhline(0.8, color="k", lw=0.8, ls="--")
    a.set_xlabel("L0 (active latents per token)")
    a.set_ylabel("explained variance (held-out)")
    a.set_title("SAE quality")
    fig.tight_layout()
    return save_figure(fig, path)
