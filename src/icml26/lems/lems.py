"""LEMS: global rank allocation by a layer-wise error model and a multiple-choice knapsack.

For layer l with whitened singular values s (descending), equivalent rank r_eq, and block b:

* spectral shape    e(r) = 1 - sum_{i<=r} s_i^2 / sum_i s_i^2,  shape(r) = e(r) / e(r_ref),
                    r_ref = floor(0.1 r_eq)                            (:func:`energy_shape`)
* scale             KL_l = KL(p_orig || p_l) with layer l alone at rank r_ref (measured;
                    :mod:`icml26.lems.search`)
* surrogate         err_l(r) = KL_l * shape_l(r)
* depth bias        m(b) = 1 + gamma * norm(sum_{k=b}^{B-1} (k+1)^-alpha), norm mapping the last
                    block to 0 and the first to 1                      (:func:`depth_multiplier`)
* choice            per layer one option: dense (cost n_in n_out, error 0) or a rank r, multiple
                    of 8, with c = r / r_eq in [lo, 0.95), lo = 0.3 (0.1 if target < 0.5), cost
                    c n_in n_out = r (n_in + n_out), error m(b) err_l(r); minimise the total error
                    subject to total cost <= target * total dense cost (:func:`solve_knapsack`,
                    HiGHS through ``scipy.optimize.milp``).

The uniform baseline gives every layer the same kept fraction (:func:`uniform_ranks`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from icml26.core.errors import UserError
from icml26.lems.layers import TargetLayer

__all__ = [
    "LayerOptions",
    "energy_shape",
    "depth_multiplier",
    "candidate_ranks",
    "layer_options",
    "solve_knapsack",
    "uniform_ranks",
    "kept_fraction",
    "check_target",
]


def energy_shape(s: np.ndarray, r_ref: int) -> np.ndarray:
    """``shape(r) = e(r) / e(r_ref)`` for r = 0..k, e(r) the fraction of whitened energy removed.

    ``s``: (k,) singular values (any order is sorted descending). Returns float64 (k+1,);
    non-increasing, 1 at r_ref (0 everywhere when the spectrum is exactly rank <= r_ref).
    """
    s = np.sort(np.asarray(s, dtype=np.float64))[::-1]
    energy = np.concatenate([[0.0], np.cumsum(s**2)])
    total = energy[-1]
    if total <= 0:
        return np.zeros(s.size + 1)
    removed = np.clip(1.0 - energy / total, 0.0, 1.0)
    ref = removed[min(max(r_ref, 0), s.size)]
    if ref <= 0:
        return np.zeros_like(removed)
    return removed / ref


def depth_multiplier(n_blocks: int, alpha: float, gamma: float) -> np.ndarray:
    """``m(b)`` for b = 0..B-1: 1 + gamma at the first block, 1 at the last (B = 1: [1])."""
    if n_blocks < 1:
        raise ValueError(f"n_blocks must be >= 1; got {n_blocks}")
    k = np.arange(n_blocks, dtype=np.float64)
    terms = (k + 1.0) ** (-alpha)
    tail = np.cumsum(terms[::-1])[::-1]  # sum_{k=b}^{B-1}
    span = tail[0] - tail[-1]
    norm = (tail - tail[-1]) / span if span > 0 else np.zeros(n_blocks)
    return 1.0 + gamma * norm


def candidate_ranks(layer: TargetLayer, target: float, *, multiple: int = 8,
                    hi: float = 0.95) -> np.ndarray:
    """Ranks r, multiples of ``multiple``, with r / r_eq in [lo, hi); lo = 0.3, or 0.1 if target < 0.5."""
    lo = 0.3 if target >= 0.5 else 0.1
    r_lo = math.ceil(lo * layer.r_eq / multiple) * multiple
    r_lo = max(r_lo, multiple)
    ranks = np.arange(r_lo, hi * layer.r_eq, multiple, dtype=np.int64)
    return ranks[ranks < hi * layer.r_eq]


@dataclass(frozen=True)
class LayerOptions:
    """The knapsack options of one layer: ``ranks[i]`` (-1 = dense), ``cost[i]``, ``error[i]``."""

    ranks: np.ndarray
    cost: np.ndarray
    error: np.ndarray


def layer_options(layer: TargetLayer, s: np.ndarray, kl_ref: float, multiplier: float,
                  target: float, *, multiple: int = 8) -> LayerOptions:
    """Dense plus every candidate rank, with LEMS's surrogate error ``m * KL_ref * shape(r)``."""
    r_ref = math.floor(0.1 * layer.r_eq)
    shape = energy_shape(s, r_ref)
    ranks = candidate_ranks(layer, target, multiple=multiple)
    ranks = ranks[ranks <= s.size]
    err = multiplier * kl_ref * shape[ranks]
    return LayerOptions(
        ranks=np.concatenate([[-1], ranks]),
        cost=np.concatenate([[layer.params], ranks * (layer.n_in + layer.n_out)]).astype(np.float64),
        error=np.concatenate([[0.0], err]),
    )


def solve_knapsack(options: list[LayerOptions], budget: float) -> list[int]:
    """Pick one option per layer minimising total error with total cost <= budget (exact MILP).

    Returns the chosen option index per layer. Raises UserError when even the cheapest options
    exceed the budget.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import lil_matrix

    cheapest = sum(float(o.cost.min()) for o in options)
    if cheapest > budget * (1 + 1e-12):
        raise UserError(f"budget {budget:.0f} is below the cheapest allocation {cheapest:.0f}")
    sizes = [len(o.cost) for o in options]
    n = sum(sizes)
    c = np.concatenate([o.error for o in options])
    # scale errors: HiGHS tolerances are absolute
    c_scale = float(np.abs(c).max()) or 1.0
    a = lil_matrix((len(options) + 1, n))
    start = 0
    for i, k in enumerate(sizes):
        a[i, start : start + k] = 1.0
        start += k
    cost = np.concatenate([o.cost for o in options])
    cost_scale = float(cost.max())
    a[len(options), :] = cost / cost_scale
    lb = np.concatenate([np.ones(len(options)), [-np.inf]])
    ub = np.concatenate([np.ones(len(options)), [budget / cost_scale]])
    res = milp(c / c_scale, constraints=LinearConstraint(a.tocsr(), lb, ub),
               integrality=np.ones(n), bounds=Bounds(0, 1),
               options={"mip_rel_gap": 1e-9, "presolve": True})
    if res.x is None:
        raise RuntimeError(f"knapsack solver failed: {res.message}")
    x = np.round(res.x)
    picks, start = [], 0
    for k in sizes:
        picks.append(int(np.argmax(x[start : start + k])))
        start += k
    # guard the rounding: cost must respect the budget exactly
    total = sum(float(o.cost[p]) for o, p in zip(options, picks, strict=True))
    if total > budget * (1 + 1e-9):
        raise RuntimeError(f"knapsack solution costs {total:.0f} > budget {budget:.0f}")
    return picks


def kept_fraction(layers: list[TargetLayer], ranks: dict[str, int | None]) -> float:
    """Kept linear parameters / dense linear parameters (rank None = dense)."""
    dense = sum(layer.params for layer in layers)
    kept = sum(layer.params if ranks.get(layer.name) is None
               else ranks[layer.name] * (layer.n_in + layer.n_out) for layer in layers)
    return kept / dense


def check_target(target: float, layers: list[TargetLayer], *, multiple: int = 8) -> None:
    """UserError unless 0 < target <= 1 and the target is reachable at rank >= ``multiple``."""
    if not 0 < target <= 1:
        raise UserError(f"ratio (fraction of linear parameters kept) must be in (0, 1]; got {target}")
    minimum = kept_fraction(layers, {layer.name: multiple for layer in layers})
    if target < minimum:
        raise UserError(
            f"ratio {target} is below the achievable minimum {minimum:.4f} (every layer at rank "
            f"{multiple}) for these {len(layers)} layers")


def uniform_ranks(layers: list[TargetLayer], target: float, *, multiple: int = 8,
                  max_rank: dict[str, int] | None = None) -> dict[str, int | None]:
    """Every layer at the same kept fraction ``target`` (rank ~ target * r_eq), multiples of 8.

    Ranks start at ``floor(target r_eq / multiple) * multiple`` (at least ``multiple``); then, while
    the budget allows, the layer furthest below ``target r_eq`` gains ``multiple``. The achieved
    fraction is <= target. ``target == 1`` keeps every layer dense (rank None).
    """
    check_target(target, layers, multiple=multiple)
    if target >= 1:
        return {layer.name: None for layer in layers}
    ranks = {lay.name: max(multiple, int(target * lay.r_eq // multiple) * multiple) for lay in layers}
    if max_rank:
        ranks = {k: min(v, max_rank.get(k, v)) for k, v in ranks.items()}
    budget = target * sum(lay.params for lay in layers)
    spent = sum(ranks[lay.name] * (lay.n_in + lay.n_out) for lay in layers)
    while True:
        order = sorted(layers, key=lambda lay: ranks[lay.name] - target * lay.r_eq)
        for lay in order:
            step = multiple * (lay.n_in + lay.n_out)
            cap = max_rank.get(lay.name, 1 << 30) if max_rank else 1 << 30
            if (spent + step <= budget and ranks[lay.name] + multiple <= cap
                    and ranks[lay.name] + multiple < target * lay.r_eq + multiple):
                ranks[lay.name] += multiple
                spent += step
                break
        else:
            return dict(ranks)
