"""RESTORE's distinctive anchor selection (density-peak clustering) and hybrid reduction.

Section "Distinctive anchor selection" of the paper: with cosine-normalised features
``X̂`` (N, d) and ``C = X̂ X̂ᵀ``,

- representativeness  ``R_i = Σ_j C_ij``;
- discriminativeness ``δ_i = 1 - max{ C_ij : R_j > R_i }`` (``δ = 1`` for the densest token);
- anchor score ``R_i · δ_i``; the top-``k`` tokens are anchors (Rodriguez & Laio's density peaks),
  every other token joins its most similar anchor and each anchor becomes its group's mean, with
  size ``s`` = group size.

:class:`Hybrid` is the paper's hybrid reduction: the base reducer's own pruning criterion keeps
``round(γ·n)`` tokens, the remaining tokens merge into ``n - round(γ·n)`` anchors.
"""

from __future__ import annotations

import torch

from icml26.restore.reducers import Reduction, UniformAnchors, _unit, assign_to_anchors, check_keep

__all__ = ["anchor_scores", "distinctive_anchors", "Hybrid", "hybrid"]


def anchor_scores(x: torch.Tensor) -> torch.Tensor:
    """Density-peak anchor score ``R_i · (1 - max{C_ij : R_j > R_i})`` of each row of ``x`` (N, d);
    returns (N,) in float32 (float64 for float64 input)."""
    xs = _unit(x)
    c = xs @ xs.T
    r = c.sum(dim=1)
    denser = r[None, :] > r[:, None]  # denser[i, j] = R_j > R_i
    masked = torch.where(denser, c, torch.full_like(c, -float("inf")))
    mx = masked.max(dim=1).values
    mx = torch.where(torch.isinf(mx), torch.zeros_like(mx), mx)  # the densest: δ = 1
    return r * (1.0 - mx)


def distinctive_anchors(x: torch.Tensor, k: int, merge_position: str = "lower") -> Reduction:
    """Merge all N rows of ``x`` (N, d) into ``k`` distinctive anchors; ``1 <= k <= N``."""
    n = x.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}]; got {k}")
    score = anchor_scores(x.detach())
    anchors = torch.topk(score.cpu(), k).indices
    slot = assign_to_anchors(x.detach().cpu(), anchors, torch.arange(n))
    return Reduction.from_groups(slot, rep=anchors, merge_position=merge_position)


class Hybrid:
    """Base pruning keeps ``round(gamma * keep)`` tokens; every other token merges into the rest of
    the budget as anchors (``anchors="distinctive"`` RESTORE, or ``"uniform"`` for the ablation).
    ``base`` must have ``select(feats, k, cls_attn) -> LongTensor`` (DivPrune, VisionZipLike)."""

    def __init__(
        self, base, gamma: float = 0.5, anchors: str = "distinctive", merge_position: str = "lower"
    ):
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1]; got {gamma}")
        if anchors not in ("distinctive", "uniform"):
            raise ValueError(f"anchors must be 'distinctive' or 'uniform'; got {anchors!r}")
        if gamma > 0 and not hasattr(base, "select"):
            raise ValueError(
                f"hybrid needs a pruning reducer with select(); {type(base).__name__} has none"
            )
        self.base, self.gamma, self.anchors, self.merge_position = (
            base,
            gamma,
            anchors,
            merge_position,
        )
        self.name = f"hybrid({getattr(base, 'name', type(base).__name__)},{gamma})"

    def reduce(
        self, feats: torch.Tensor, keep: int, cls_attn: torch.Tensor | None = None
    ) -> Reduction:
        n = feats.shape[0]
        check_keep(keep, n)
        n_keep = round(self.gamma * keep)
        n_anchor = keep - n_keep
        kept = (
            self.base.select(feats, n_keep, cls_attn)
            if n_keep > 0
            else torch.zeros(0, dtype=torch.long)
        )
        groups = torch.full((n,), -1, dtype=torch.long)
        groups[kept] = torch.arange(n_keep)
        rep = [kept]
        if n_anchor > 0:
            rest = torch.nonzero(groups < 0).flatten()
            if self.anchors == "distinctive":
                sub = distinctive_anchors(feats[rest], n_anchor, self.merge_position)
                groups[rest] = n_keep + sub.groups
                rep.append(rest[sub.kept])
            else:
                anchors = rest[UniformAnchors().select(feats[rest], n_anchor)]
                groups[rest] = n_keep + assign_to_anchors(feats.cpu(), anchors, rest)
                rep.append(anchors)
        return Reduction.from_groups(groups, rep=torch.cat(rep), merge_position=self.merge_position)


def hybrid(base, gamma: float = 0.5, anchors: str = "distinctive") -> Hybrid:
    """Shorthand for :class:`Hybrid`."""
    return Hybrid(base, gamma=gamma, anchors=anchors)
