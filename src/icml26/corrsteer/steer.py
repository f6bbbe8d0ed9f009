"""Stage 2 of CorrSteer: pick features from correlations and steer generation with them.

A :class:`Feature` is a steering vector ``coef * direction`` added to the residual entering block
``layer``. For an SAE feature ``direction = W_dec[index]`` and ``coef`` is the mean pooled
activation on correct training samples (``-|coef|`` for a negative correlate). The vector is
added straight to the residual, not through ``decode(c * e_i)`` (which would add ``b_dec``) nor
by editing feature activations (a recomputed SAE error term would cancel the edit).

:class:`Steerer` adds it at the *last position of every forward call*: the final prompt token at
prefill, then each new token under the KV cache; multiplier 1. Selection strategies
(:func:`select`): ``S`` the single best |r| over layers; ``A`` each layer's top |r| at once;
``P`` per layer, the top positive and top negative feature are each tried alone on a validation
split (at each multiplier of ``coef_grid``; the paper's is 1) and the better is kept if it beats
unsteered; the kept features are applied together.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from icml26.core.errors import UserError
from icml26.corrsteer.correlate import CorrelationAccumulator
from icml26.corrsteer.train import blocks, check_layers

__all__ = ["Feature", "Steerer", "steering_deltas", "select", "top_features", "side_effect_ratio",
           "delta_accuracy", "STRATEGIES"]

STRATEGIES = ("S", "A", "P")


@dataclass(frozen=True)
class Feature:
    """One steering term ``coef * direction`` at block ``layer``'s input.

    ``index``: SAE latent (or residual dimension in raw mode; -1 for a free vector); ``r``:
    its correlation with reward; ``source``: "sae", "raw", "caa" or "random"."""

    layer: int
    index: int
    coef: float
    r: float
    direction: torch.Tensor = field(repr=False, compare=False)
    source: str = "sae"

    def __post_init__(self):
        if not math.isfinite(self.coef):
            raise UserError(f"feature {self.index} at layer {self.layer}: coefficient is {self.coef}")
        if self.direction.ndim != 1:
            raise ValueError(f"direction must be 1-D (d,); got shape {tuple(self.direction.shape)}")

    @property
    def vector(self) -> torch.Tensor:
        return self.coef * self.direction.double()

    def to_dict(self) -> dict:
        return {"layer": self.layer, "index": self.index, "coef": self.coef, "r": self.r,
                "source": self.source, "norm": float(self.vector.norm())}


def steering_deltas(features: Sequence[Feature]) -> dict[int, torch.Tensor]:
    """Sum of the vectors per layer: ``{layer: (d,) float64}``."""
    out: dict[int, torch.Tensor] = {}
    for f in features:
        out[f.layer] = out.get(f.layer, 0) + f.vector
    return out


class Steerer:
    """Context manager adding steering vectors at the last position of each forward call.

    ``features``: a list of :class:`Feature`, or a dict ``{layer: delta}`` with ``delta`` of shape
    ``(d,)`` (all rows) or ``(B, d)`` (row ``b`` of the batch gets ``delta[b]``: several steering
    systems scored in one batch). ``calls`` counts hook invocations per layer.
    """

    def __init__(self, model, features) -> None:
        self.model = model
        deltas = features if isinstance(features, dict) else steering_deltas(features)
        self.layers = check_layers(model, deltas.keys()) if deltas else []
        d = model.config.hidden_size
        for L, v in deltas.items():
            if v.shape[-1] != d:
                raise UserError(f"steering vector at layer {L} has size {v.shape[-1]}; the model's "
                                f"hidden size is {d}")
            if not torch.isfinite(v).all():
                raise UserError(f"steering vector at layer {L} is not finite")
        self.deltas = deltas
        self.calls = {L: 0 for L in self.layers}
        self._handles: list = []

    def _hook(self, L):
        def hook(module, args, kwargs):
            h = args[0] if args else kwargs["hidden_states"]
            self.calls[L] += 1
            v = self.deltas[L].to(device=h.device, dtype=h.dtype)
            h = h.clone()
            h[:, -1] += v
            if args:
                return (h, *args[1:]), kwargs
            kwargs["hidden_states"] = h
            return args, kwargs
        return hook

    def __enter__(self) -> Steerer:
        mods = blocks(self.model)
        self._handles = [mods[L].register_forward_pre_hook(self._hook(L), with_kwargs=True)
                         for L in self.layers]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


def top_features(acc: CorrelationAccumulator, layer: int, w_dec: torch.Tensor | None, *,
                 coef_mode: str = "mean", source: str = "sae") -> tuple[Feature, Feature]:
    """Top positive and top negative correlate at one layer as Features. ``w_dec`` ``(d_sae, d)``;
    ``None`` means raw mode (directions are unit basis vectors of the residual)."""
    r = acc.corr()
    c = acc.coefficients(coef_mode)
    out = []
    for sign in (1, -1):
        i = int(np.argmax(sign * r))
        direction = torch.zeros(acc.d, dtype=torch.float64)
        if w_dec is None:
            direction[i] = 1.0
        else:
            direction = w_dec[i].detach().double().cpu()
        coef = float(c[i]) if sign > 0 else -abs(float(c[i]))
        out.append(Feature(layer, i, coef, float(r[i]), direction, source))
    return out[0], out[1]


def _best(pos: Feature, neg: Feature) -> Feature:
    return pos if abs(pos.r) >= abs(neg.r) else neg


def scaled(f: Feature, m: float) -> Feature:
    """``f`` with its coefficient multiplied by ``m``."""
    return Feature(f.layer, f.index, f.coef * m, f.r, f.direction, f.source)


def select(accs: dict[int, CorrelationAccumulator], strategy: str, w_dec: dict[int, torch.Tensor | None],
           *, validate: Callable[[list[list[Feature]]], list[float]] | None = None,
           coef_mode: str = "mean", source: str = "sae",
           coef_grid: Sequence[float] = (1.0,)) -> tuple[list[Feature], dict]:
    """Features chosen by strategy ``S``, ``A`` or ``P``; returns ``(features, info)``.

    ``validate(systems)`` scores a list of feature lists on the validation split (accuracy each);
    ``P`` needs it and records in ``info`` the unsteered and per-candidate validation accuracies.
    ``coef_grid``: multipliers of each candidate's coefficient that ``P`` validates too (the
    paper's multiplier is 1; the official robustness grid is 0.5, 1, 2, 3); a layer keeps its best
    (sign, multiplier) if that beats unsteered, the earlier in the grid on ties.
    """
    if strategy not in STRATEGIES:
        raise UserError(f"strategy must be one of {', '.join(STRATEGIES)}; got {strategy!r}")
    grid = [float(m) for m in coef_grid]
    if not grid or any(not math.isfinite(m) or m <= 0 for m in grid):
        raise UserError(f"coef_grid needs positive finite multipliers; got {list(coef_grid)}")
    cands = {L: top_features(a, L, w_dec.get(L), coef_mode=coef_mode, source=source)
             for L, a in sorted(accs.items())}
    if strategy == "S":
        best = max((_best(*pn) for pn in cands.values()), key=lambda f: abs(f.r))
        return [best], {}
    if strategy == "A":
        return [_best(*pn) for pn in cands.values()], {}
    if validate is None:
        raise UserError("strategy P needs a validation function")
    systems: list[list[Feature]] = [[]]
    for pos, neg in cands.values():
        systems += [[scaled(f, m)] for f in (pos, neg) for m in grid]
    scores = validate(systems)
    base = scores[0]
    kept, info = [], {"val_unsteered": base, "candidates": [], "coef_grid": grid}
    k = len(grid)
    for j, (L, (pos, neg)) in enumerate(cands.items()):
        sp = scores[1 + 2 * k * j:1 + 2 * k * j + k]
        sn = scores[1 + 2 * k * j + k:1 + 2 * k * (j + 1)]
        ip, i_n = int(np.argmax(sp)), int(np.argmax(sn))
        best, acc, m = (pos, sp[ip], grid[ip]) if sp[ip] >= sn[i_n] else (neg, sn[i_n], grid[i_n])
        info["candidates"].append({"layer": L, "pos": pos.to_dict() | {"val": sp[ip], "val_grid": list(sp)},
                                   "neg": neg.to_dict() | {"val": sn[i_n], "val_grid": list(sn)},
                                   "multiplier": m, "kept": acc > base})
        if acc > base:
            kept.append(scaled(best, m))
    return kept, info


def side_effect_ratio(base, steered) -> float | None:
    """``#worse / (#better + #worse)`` over paired per-sample rewards; ``None`` if none changed."""
    base, steered = np.asarray(base, np.float64), np.asarray(steered, np.float64)
    if base.shape != steered.shape:
        raise ValueError(f"paired rewards need equal shapes; got {base.shape} and {steered.shape}")
    worse, better = int((steered < base).sum()), int((steered > base).sum())
    return None if worse + better == 0 else worse / (worse + better)


def delta_accuracy(base, steered) -> float:
    """Mean reward change (= (#better - #worse)/n for 0/1 rewards)."""
    return float(np.mean(np.asarray(steered, np.float64) - np.asarray(base, np.float64)))
