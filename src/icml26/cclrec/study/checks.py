"""The cclrec claim's targets and power checks, from per-seed fit records.

A record (one fit) holds ``users`` (test users, dense ids), ``per_user_ndcg20`` (same order),
``ndcg@20`` (their mean) and, for CCLRec variants, the sampler's ``rates``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "EQUAL",
    "MIN_CONSENSUS",
    "both_targets",
    "ci_text",
    "clusters",
    "power_checks",
    "ratio_ci",
]

EQUAL = "CCLRec w±=1"
# the consensus weights must touch at least this share of sampled users, else CCLRec and its
# equal-weight arm train the same model (degeneracy)
MIN_CONSENSUS = 0.01


def clusters(per_seed: list[dict]) -> list[list[float]]:
    return [x["per_user_ndcg20"] for x in per_seed]


def ratio_ci(res, a: str, b: str, seed: int):
    """Clustered (seeds, then test users) bootstrap CI of mean NDCG@20 of ``a`` / ``b``."""
    from icml26.core.stats import clustered_bootstrap

    for x, y in zip(res[a], res[b], strict=True):
        if x["users"] != y["users"]:
            raise ValueError(f"{a} and {b} were tested on different users")
    return clustered_bootstrap(clusters(res[a]), clusters(res[b]), statistic="ratio", seed=seed)


def both_targets(*targets: tuple[float, float, float]) -> tuple[float, tuple[float, float]]:
    """One headline for "every target holds" from ``(value, low, high)`` ratios (higher is
    better, target 1): the smallest value, the smallest low and the smallest high end. Its
    interval lies above 1 iff every target's does, and below 1 iff some target's does (an
    intersection-union test, valid at each interval's level without correction)."""
    value = min(t[0] for t in targets)
    return value, (min(t[1] for t in targets), min(t[2] for t in targets))


def ci_text(ci) -> str:
    return f"{ci.value:.4f}× [{ci.low:.4f}, {ci.high:.4f}]"


def power_checks(res: dict[str, list[dict]], compared: list[str], method: str, seed: int = 0):
    """Control, floor and degeneracy from the per-seed records (``{system: [per seed]}``, each
    with ``per_user_ndcg20``, ``users``, ``ndcg@20`` and, for CCLRec variants, ``rates``).

    Control: LightGCN / MostPop on test NDCG@20, its paired clustered interval wholly above 1.
    Floor: MostPop (interval: clustered bootstrap of its mean); some compared system's mean must
    lie above it. Degeneracy: CCLRec's consensus weights must touch at least
    :data:`MIN_CONSENSUS` of the sampled users (w+ or w− ≠ 1), else CCLRec and its equal-weight
    arm are the same model and target 2 cannot differ.
    """
    from icml26.core import power
    from icml26.core.stats import clustered_bootstrap

    def mean(n):
        return float(np.mean([x["ndcg@20"] for x in res[n]]))

    checks = []
    if "LightGCN" in res and "MostPop" in res:
        ci = ratio_ci(res, "LightGCN", "MostPop", seed)
        checks.append(
            power.control(
                "LightGCN",
                mean("LightGCN"),
                "MostPop",
                mean("MostPop"),
                paired=ci.spread,
                paired_null=1.0,
                metric="test NDCG@20 (ratio, clustered CI over seeds then users)",
            )
        )
    else:
        checks.append(power.not_measured("control", "LightGCN or MostPop not among the systems"))
    if "MostPop" in res:
        f_ci = clustered_bootstrap(clusters(res["MostPop"]), statistic="mean", seed=seed)
        others = [n for n in [*compared, method] if n in res]
        checks.append(
            power.floor(
                {n: mean(n) for n in others},
                "MostPop",
                mean("MostPop"),
                floor_spread=f_ci.spread,
                metric="test NDCG@20",
            )
        )
    else:
        checks.append(power.not_measured("floor", "MostPop not among the systems"))
    if EQUAL in res and method in res and res[method][0].get("rates"):
        share = float(np.mean([x["rates"].get("any_consensus", math.nan) for x in res[method]]))
        if not math.isfinite(share):
            share = float(
                np.mean(
                    [
                        min(1.0, x["rates"]["pos_consensus"] + x["rates"]["neg_consensus"])
                        for x in res[method]
                    ]
                )
            )
        checks.append(
            power.degeneracy(
                (method, EQUAL),
                round(100 * share, 3),
                100,
                min_differing=100 * MIN_CONSENSUS,
                what=(
                    "% of sampled users whose contrastive terms CCLRec weights (w+ or w− ≠ 1) "
                    f"and {EQUAL} does not (mean over batches and seeds)"
                ),
            )
        )
    else:
        checks.append(
            power.not_measured("degeneracy", f"{EQUAL} or {method} not among the systems")
        )
    return checks
