"""Per-build evaluation and the build-clustered summaries of the restore claim.

Every build (training seed) of the tiny LLaVA answers the same held-out questions under every
system. Spreads resample builds first, then questions within each drawn build
(:func:`icml26.core.stats.clustered_bootstrap`), so the CI carries the build-to-build variance
that one build's question-level CI leaves out.
"""

from __future__ import annotations

import numpy as np

from icml26.core.stats import clustered_bootstrap
from icml26.restore.evaluate import run_system

__all__ = ["evaluate_build", "arm_row", "ratio_ci", "gate_decision", "GATE_RULES"]

GATE_RULES = ("median", "all", "any")


def evaluate_build(
    model,
    images,
    qs,
    n_tok: int,
    jobs,
    *,
    progress=None,
    batch_size: int = 32,
    record=lambda name: False,
) -> dict:
    """One build's answers: ``full`` (bool (Q,)), ``results[(keep, name)]`` (bool (Q,)),
    ``answers[(keep, name)]`` (predicted token ids) and ``mass[name]`` (per-layer text->visual
    attention mass) for the systems where ``record(name)``. ``jobs``: (keep, name, config)."""
    full, full_mass = run_system(model, None, images, qs, n_tok, batch_size=batch_size, record=True)
    out = {"full": full, "results": {}, "answers": {}, "mass": {"full": full_mass}}
    it = progress.track(jobs, total=len(jobs), description="systems") if progress else jobs
    for keep, name, cfg in it:
        ans = np.zeros(len(qs), dtype=np.int64)
        correct, m = run_system(
            model, cfg, images, qs, n_tok, batch_size=batch_size, record=record(name), answers=ans
        )
        out["results"][(keep, name)], out["answers"][(keep, name)] = correct, ans
        if m is not None:
            out["mass"][name.removeprefix("ablation:")] = m
    return out


def ratio_ci(a: list[np.ndarray], b: list[np.ndarray], seed: int = 0):
    """Ratio of mean accuracies a / b, CI clustered over builds then questions (paired)."""
    return clustered_bootstrap(
        [x.astype(float) for x in a], [y.astype(float) for y in b], statistic="ratio", seed=seed
    )


def arm_row(
    name: str, keep, cols: list[np.ndarray], fulls: list[np.ndarray], seed: int = 0
) -> dict:
    """A system's row over builds: mean accuracy, per-build accuracies (their min-max spread) and
    retention = accuracy / full accuracy with its build-clustered 95 % CI."""
    accs = [float(c.mean()) for c in cols]
    ret = ratio_ci(cols, fulls, seed=seed)
    return {
        "system": name,
        "keep": keep,
        "accuracy": round(float(np.mean(accs)), 4),
        "accuracy per build": [round(a, 3) for a in accs],
        "build min-max": f"[{min(accs):.3f}, {max(accs):.3f}]",
        "retention_%": round(100 * ret.value, 2),
        "retention 95% CI (builds, then questions)": f"[{100 * ret.low:.1f}, {100 * ret.high:.1f}]",
    }


def gate_decision(full_accs: list[float], gate: float, rule: str = "median") -> str | None:
    """Why the verdict is uninformative under the per-build accuracy gate, or ``None``.

    ``median``: the median build's full-token accuracy must reach ``gate`` (builds below it are
    reported, and still enter the headline: dropping them would select builds by outcome);
    ``all``: every build must; ``any``: at least one must."""
    if rule not in GATE_RULES:
        raise ValueError(f"gate rule must be one of {GATE_RULES}; got {rule!r}")
    accs = np.asarray(full_accs, float)
    below = [f"{a:.3f}" for a in accs if a < gate]
    ok = {
        "median": float(np.median(accs)) >= gate,
        "all": not below,
        "any": len(below) < len(accs),
    }[rule]
    if ok:
        return None
    return (
        f"per-build full-token accuracy {', '.join(f'{a:.3f}' for a in accs)} (median "
        f"{float(np.median(accs)):.3f}) fails the gate {gate} under rule {rule!r}: the models "
        "have not learned the task well enough for reduction effects to mean much"
    )
