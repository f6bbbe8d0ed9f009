"""Non-uniform rank allocators beside LEMS, on LEMS's option set (dense, or a multiple-of-8 rank).

Every allocator here ends in the same multiple-choice knapsack as LEMS (:func:`solve_knapsack`,
same budget, same options: dense or a rank with r / r_eq in [lo, 0.95)), so that they differ
from LEMS only in *how* they rank the layers:

* :func:`energy_ranks` -- SVD-LLM v2's rule (Wang et al., NAACL 2025, Algorithm 1): within each
  group of same-kind layers (q, k, v, o, gate, up, down), layer l's truncation loss at the
  uniform rank, ``loss_l = sum_{i > t r_eq} s_i`` (whitened singular values), sets its removed
  fraction ``(1 - t) n_g score_l / sum_g score`` with ``score_l = 1 / log(loss_l)``. The log is
  taken of ``e * loss_l / min_g loss`` (>= 1 for every layer), which keeps the rule's order and
  makes it independent of the whitening's scale (raw whitened losses below 1 give negative logs).
* :func:`atp_ranks` -- an ATP-like depth ramp (Huang et al., ICML 2025, as run by the LEMS code):
  block b of B keeps ``t + beta (1/2 - b / (B - 1))`` (earlier blocks denser), beta on the grid
  ``i * 2 min(t, 1 - t) / steps``, i = 0..steps, each scored by the KL on the search set; the
  best beta wins.
* :func:`unit_kl_ranks` -- LEMS's knapsack with every measured KL set to 1 and no depth bias
  (gamma = 0): the whitened-energy shape alone.

Target kept fractions (energy, ATP) become ranks through :func:`project_fractions`: the option
set and budget of LEMS, minimising ``sum_l params_l (c_option - c_l)^2``.
"""

from __future__ import annotations

import math

import numpy as np

from icml26.core.errors import UserError
from icml26.lems.factorize import LayerFactors
from icml26.lems.layers import TargetLayer, swapped_weights
from icml26.lems.lems import LayerOptions, candidate_ranks, check_target, solve_knapsack

__all__ = ["project_fractions", "energy_ranks", "energy_fractions", "atp_ranks", "atp_fractions",
           "unit_kl_ranks"]


def _check(layers: list[TargetLayer], target: float, multiple: int) -> None:
    if not layers:
        raise UserError("no target layers to allocate ranks to")
    if multiple < 1:
        raise UserError(f"`multiple` must be >= 1; got {multiple}")
    check_target(target, layers, multiple=multiple)


def project_fractions(layers: list[TargetLayer], fractions: dict[str, float], target: float, *,
                      multiple: int = 8,
                      max_rank: dict[str, int] | None = None) -> dict[str, int | None]:
    """Ranks ``{name: rank or None (dense)}`` closest to the wanted kept ``fractions`` at budget
    ``target``: LEMS's options per layer (dense, or a rank multiple of ``multiple`` with
    r / r_eq in [lo, 0.95), capped by ``max_rank``), error ``params (c - fractions[name])^2``."""
    _check(layers, target, multiple)
    missing = [lay.name for lay in layers if lay.name not in fractions]
    if missing:
        raise UserError(f"fractions lack {len(missing)} layers, e.g. {missing[0]!r}")
    bad = {k: v for k, v in fractions.items() if not math.isfinite(v)}
    if bad:
        raise UserError(f"fractions must be finite; got {next(iter(bad.items()))}")
    if target >= 1:
        return {lay.name: None for lay in layers}
    opts = []
    for lay in layers:
        ranks = candidate_ranks(lay, target, multiple=multiple)
        if max_rank and lay.name in max_rank:
            ranks = ranks[ranks <= max_rank[lay.name]]
        kept = ranks * (lay.n_in + lay.n_out) / lay.params
        want = float(fractions[lay.name])
        opts.append(LayerOptions(
            ranks=np.concatenate([[-1], ranks]),
            cost=np.concatenate([[lay.params], ranks * (lay.n_in + lay.n_out)]).astype(np.float64),
            error=lay.params * (np.concatenate([[1.0], kept]) - want) ** 2))
    picks = solve_knapsack(opts, target * sum(lay.params for lay in layers))
    return {lay.name: (None if o.ranks[p] < 0 else int(o.ranks[p]))
            for lay, o, p in zip(layers, opts, picks, strict=True)}


def energy_fractions(layers: list[TargetLayer], factors: dict[str, LayerFactors],
                     target: float) -> dict[str, float]:
    """SVD-LLM v2's kept fraction per layer (see the module docstring); may leave [0, 1]."""
    groups: dict[str, list[TargetLayer]] = {}
    for lay in layers:
        groups.setdefault(lay.name.rsplit(".", 1)[-1], []).append(lay)
    out = {}
    for group in groups.values():
        loss = []
        for lay in group:
            s = factors[lay.name].s.double().cpu().numpy()
            loss.append(float(np.abs(s[int(lay.r_eq * target):]).sum()))
        loss = np.array(loss)
        if not (np.all(np.isfinite(loss)) and loss.min() > 0):  # nothing to remove: keep uniform
            out.update({lay.name: target for lay in group})
            continue
        score = 1.0 / (1.0 + np.log(loss / loss.min()))
        removed = (1.0 - target) * len(group) * score / score.sum()
        out.update({lay.name: float(1.0 - x) for lay, x in zip(group, removed, strict=True)})
    return out


def energy_ranks(layers: list[TargetLayer], factors: dict[str, LayerFactors], target: float, *,
                 multiple: int = 8) -> dict[str, int | None]:
    """SVD-LLM v2-style ranks at budget ``target`` (see the module docstring)."""
    _check(layers, target, multiple)
    return project_fractions(layers, energy_fractions(layers, factors, target), target,
                             multiple=multiple, max_rank=_max_rank(factors))


def atp_fractions(layers: list[TargetLayer], target: float, beta: float) -> dict[str, float]:
    """Kept fraction ``t + beta (1/2 - b / (B - 1))`` for a layer of block b (B blocks present)."""
    blocks = sorted({lay.block for lay in layers})
    pos = {b: i for i, b in enumerate(blocks)}
    n = len(blocks)
    return {lay.name: target + beta * (0.5 - (pos[lay.block] / (n - 1) if n > 1 else 0.5))
            for lay in layers}


def atp_ranks(model, layers: list[TargetLayer], factors: dict[str, LayerFactors], target: float,
              scorer, *, steps: int = 10, multiple: int = 8, progress=None):
    """The ATP-like depth ramp with the best beta by ``scorer`` (a :class:`KLScorer`).

    Returns ``(ranks, log)``; ``log``: one dict per beta (beta, kl, kept)."""
    _check(layers, target, multiple)
    if steps < 1:
        raise UserError(f"`steps` (ATP's beta grid) must be >= 1; got {steps}")
    if scorer is None:
        raise UserError("the ATP allocator needs search batches (a KLScorer) to score its ramps")
    from icml26.lems.lems import kept_fraction

    head = 2 * min(target, 1 - target)
    start = min(max(lay.block, 0) for lay in layers)
    cap = _max_rank(factors)
    log, best = [], (math.inf, None)
    tick = progress.task("ATP-like ramps", total=steps + 1) if progress else (lambda n=1: None)
    for i in range(steps + 1):
        beta = head * i / steps
        ranks = project_fractions(layers, atp_fractions(layers, target, beta), target,
                                  multiple=multiple, max_rank=cap)
        weights = {n: factors[n].weight(r) for n, r in ranks.items() if r is not None}
        with swapped_weights(model, weights):
            kl = scorer.score(model, start_block=start)
        log.append({"beta": beta, "kl": kl, "kept": kept_fraction(layers, ranks)})
        if kl < best[0]:
            best = (kl, ranks)
        tick(1)
    if best[1] is None:
        raise RuntimeError("every ATP ramp gave a non-finite KL")
    return best[1], log


def unit_kl_ranks(layers: list[TargetLayer], factors: dict[str, LayerFactors], n_blocks: int,
                  target: float, *, multiple: int = 8) -> dict[str, int | None]:
    """LEMS's knapsack with ``KL_l = 1`` for every layer and gamma = 0 (whitened energy only)."""
    from icml26.lems.search import solve_lems

    _check(layers, target, multiple)
    ranks, *_ = solve_lems(layers, factors, {lay.name: 1.0 for lay in layers}, n_blocks, 0.0, 0.0,
                           target, multiple)
    return ranks


def _max_rank(factors: dict[str, LayerFactors]) -> dict[str, int]:
    return {n: int(f.s.numel()) for n, f in factors.items()}
