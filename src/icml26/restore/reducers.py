"""Text-agnostic visual token reducers (the baselines RESTORE builds on) and their common output.

Every reducer maps one image's visual features ``feats`` ``(N, d)`` to a :class:`Reduction`: which
original tokens end up in which of the ``n`` output tokens. Pruned tokens belong to no output
(group ``-1``); merged tokens share one. Features of an output token are the mean of its group's
original features (a size-weighted mean of any intermediate merges, which is the same thing), and
its size ``s`` is the group's token count (ToMe's proportional-attention size).

Reducers:

- :class:`DivPrune` - max-min diversity subset (greedy MMDP on cosine distance).
- :class:`VisionZipLike` - dominant tokens by CLS attention, the rest merged into uniformly
  spaced "contextual" targets by cosine similarity.
- :class:`ToMe` - iterative bipartite soft matching, size-weighted merging.
- :class:`UniformAnchors` - merge every token into evenly spaced anchors (the ablation's
  "uniform anchors").

In-LLM pruners (FastV, PDrop-like) are configured in :mod:`icml26.restore.patch`; they rank
tokens by attention inside the language model and so cannot be a function of ``feats`` alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "Reduction",
    "DivPrune",
    "VisionZipLike",
    "ToMe",
    "UniformAnchors",
    "get_reducer",
    "check_keep",
]

MERGE_POSITIONS = ("lower", "upper", "first", "last", "mean")


def check_keep(keep: int, n: int) -> None:
    """``ValueError`` unless ``1 <= keep < n`` (a reducer that keeps everything is no reducer)."""
    if int(keep) != keep or keep < 1 or keep >= n:
        raise ValueError(
            f"keep must be an integer in [1, {n - 1}] for {n} visual tokens; got {keep}"
        )


@dataclass(frozen=True)
class Reduction:
    """One image's reduction, outputs ordered by their (merged) original position.

    Attributes
    ----------
    groups : LongTensor (N,)
        Output slot in ``[0, n)`` of each original token, ``-1`` when pruned.
    sizes : FloatTensor (n,)
        Number of original tokens in each output token (``s_n`` of the calibration).
    kept : LongTensor (n,)
        Representative original index of each output token (the kept token, or the anchor).
    """

    groups: torch.Tensor
    sizes: torch.Tensor
    kept: torch.Tensor

    @property
    def n(self) -> int:
        return int(self.sizes.numel())

    @staticmethod
    def from_groups(
        groups: torch.Tensor, rep: torch.Tensor | None = None, merge_position: str = "lower"
    ) -> Reduction:
        """Relabel arbitrary slot ids in ``groups`` (``-1`` = pruned) so that outputs are sorted by
        their merged position; ``rep`` maps old slot id -> representative index (default: the
        merged position)."""
        groups = groups.long().cpu()
        labels = torch.unique(groups[groups >= 0])
        pos = []
        for lab in labels.tolist():
            pos.append(_merged_position(torch.nonzero(groups == lab).flatten(), merge_position))
        pos_t = torch.tensor(pos, dtype=torch.long)
        order = torch.argsort(pos_t, stable=True)
        remap = torch.full((int(labels.max()) + 1 if labels.numel() else 1,), -1, dtype=torch.long)
        remap[labels[order]] = torch.arange(labels.numel())
        new = torch.where(groups >= 0, remap[groups.clamp(min=0)], groups)
        sizes = torch.bincount(new[new >= 0], minlength=labels.numel()).float()
        kept = rep[labels[order]].long().cpu() if rep is not None else pos_t[order]
        return Reduction(groups=new, sizes=sizes, kept=kept)

    def positions(self, merge_position: str = "lower") -> torch.Tensor:
        """Original index of each output token (LongTensor (n,)): a kept token's own index, a
        merged token's group median (``lower`` median for even groups by default)."""
        return torch.tensor(
            [
                _merged_position(torch.nonzero(self.groups == j).flatten(), merge_position)
                for j in range(self.n)
            ],
            dtype=torch.long,
        )

    def merge(self, x: torch.Tensor) -> torch.Tensor:
        """Mean of each group's rows of ``x`` (N, d) -> (n, d), in ``x``'s dtype (summed in float32
        or wider)."""
        acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        g = self.groups.to(x.device)
        keep = g >= 0
        out = torch.zeros(self.n, x.shape[-1], dtype=acc, device=x.device)
        out.index_add_(0, g[keep], x[keep].to(acc))
        return (out / self.sizes.to(x.device, acc)[:, None]).to(x.dtype)


def _merged_position(idx: torch.Tensor, how: str) -> int:
    idx = torch.sort(idx).values
    m = idx.numel()
    if how == "lower":
        return int(idx[(m - 1) // 2])
    if how == "upper":
        return int(idx[m // 2])
    if how == "first":
        return int(idx[0])
    if how == "last":
        return int(idx[-1])
    if how == "mean":
        return int(torch.floor(idx.double().mean()))
    raise ValueError(f"merge_position must be one of {MERGE_POSITIONS}; got {how!r}")


def _unit(x: torch.Tensor) -> torch.Tensor:
    x = x.float() if x.dtype not in (torch.float32, torch.float64) else x
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def assign_to_anchors(
    x: torch.Tensor, anchors: torch.Tensor, members: torch.Tensor
) -> torch.Tensor:
    """Slot (index into ``anchors``) of each row in ``members``: the most cosine-similar anchor
    (an anchor is assigned to itself). ``x`` (N, d); returns LongTensor (len(members),)."""
    xs = _unit(x)
    sim = xs[members] @ xs[anchors].T
    slot = sim.argmax(dim=1)
    is_anchor = members[:, None] == anchors[None, :]
    hit = is_anchor.any(dim=1)
    slot[hit] = is_anchor[hit].float().argmax(dim=1)
    return slot


class DivPrune:
    """Max-min diversity pruning: greedily add the token farthest (cosine distance) from the
    selected set, starting from the token whose nearest neighbour is farthest."""

    name = "divprune"

    def select(
        self, feats: torch.Tensor, k: int, cls_attn: torch.Tensor | None = None
    ) -> torch.Tensor:
        n = feats.shape[0]
        xs = _unit(feats)
        dist = 1.0 - xs @ xs.T  # (N, N)
        d_off = dist + torch.eye(n, dtype=dist.dtype, device=dist.device) * 1e9
        first = int(d_off.min(dim=1).values.argmax())
        chosen = [first]
        mind = dist[first].clone()
        mind[first] = -1e9
        for _ in range(k - 1):
            j = int(mind.argmax())
            chosen.append(j)
            mind = torch.minimum(mind, dist[j])
            mind[torch.tensor(chosen)] = -1e9
        return torch.tensor(sorted(chosen), dtype=torch.long)

    def reduce(
        self, feats: torch.Tensor, keep: int, cls_attn: torch.Tensor | None = None
    ) -> Reduction:
        check_keep(keep, feats.shape[0])
        return _prune(self.select(feats, keep, cls_attn), feats.shape[0])


def _prune(idx: torch.Tensor, n: int) -> Reduction:
    groups = torch.full((n,), -1, dtype=torch.long)
    groups[idx.cpu()] = torch.arange(idx.numel())
    return Reduction.from_groups(groups, rep=idx.cpu())


class VisionZipLike:
    """VisionZip-style: ``round(keep * dominant)`` tokens with the highest CLS attention, the
    remaining tokens merged into ``keep - dominant`` uniformly spaced contextual targets by
    cosine similarity (VisionZip's 54 + 10 of 64 gives ``dominant = 54/64``)."""

    name = "visionzip"

    def __init__(self, dominant: float = 54 / 64):
        if not 0.0 < dominant <= 1.0:
            raise ValueError(f"dominant must be in (0, 1]; got {dominant}")
        self.dominant = dominant

    def select(
        self, feats: torch.Tensor, k: int, cls_attn: torch.Tensor | None = None
    ) -> torch.Tensor:
        if cls_attn is None:
            raise ValueError(
                "VisionZipLike needs cls_attn, the CLS token's attention (N,) over patches"
            )
        return torch.sort(torch.topk(cls_attn.float().cpu(), k).indices).values

    def reduce(
        self, feats: torch.Tensor, keep: int, cls_attn: torch.Tensor | None = None
    ) -> Reduction:
        n = feats.shape[0]
        check_keep(keep, n)
        n_dom = max(1, min(keep, round(keep * self.dominant)))
        dom = self.select(feats, n_dom, cls_attn)
        groups = torch.full((n,), -1, dtype=torch.long)
        groups[dom] = torch.arange(n_dom)
        n_ctx = keep - n_dom
        if n_ctx > 0:
            rest = torch.nonzero(groups < 0).flatten()
            step = rest.numel() / n_ctx
            targets = rest[(torch.arange(n_ctx) * step).long()]
            slot = assign_to_anchors(feats.cpu(), targets, rest)
            groups[rest] = n_dom + slot
        rep = torch.cat([dom, targets]) if n_ctx > 0 else dom
        return Reduction.from_groups(groups, rep=rep)


class ToMe:
    """Token merging by iterative bipartite soft matching (Bolya et al. 2023): alternate tokens
    form sets A and B; the ``r`` A-tokens most similar to their best B-token merge into it
    (size-weighted mean), until ``keep`` tokens remain."""

    name = "tome"

    def reduce(
        self, feats: torch.Tensor, keep: int, cls_attn: torch.Tensor | None = None
    ) -> Reduction:
        n = feats.shape[0]
        check_keep(keep, n)
        x = feats.detach().double().cpu()
        size = torch.ones(n, dtype=torch.float64)
        owner = torch.arange(n)  # current token index of each original token
        alive = torch.arange(n)  # original index of the representative of each current token
        cur = x.clone()
        while cur.shape[0] > keep:
            m = cur.shape[0]
            r = min(m - keep, m // 2)
            a, b = torch.arange(0, m, 2), torch.arange(1, m, 2)
            sim = _unit(cur[a]) @ _unit(cur[b]).T
            best, dst = sim.max(dim=1)
            srt = torch.argsort(best, descending=True, stable=True)
            src_sel = srt[:r]
            merged_a = a[src_sel]
            into_b = b[dst[src_sel]]
            # size-weighted merge of each chosen A-token into its B-token
            tot = cur * size[:, None]
            tot.index_add_(0, into_b, tot[merged_a])
            sz = size.clone()
            sz.index_add_(0, into_b, size[merged_a])
            survivors = torch.ones(m, dtype=torch.bool)
            survivors[merged_a] = False
            redirect = torch.arange(m)
            redirect[merged_a] = into_b
            newid = torch.cumsum(survivors.long(), 0) - 1
            owner = newid[redirect[owner]]
            cur = (tot / sz[:, None])[survivors]
            size = sz[survivors]
            alive = alive[survivors]
        return Reduction.from_groups(owner, rep=alive)


class UniformAnchors:
    """All tokens merged into ``keep`` evenly spaced anchors, each token joining its most
    cosine-similar anchor."""

    name = "uniform"

    def select(
        self, feats: torch.Tensor, k: int, cls_attn: torch.Tensor | None = None
    ) -> torch.Tensor:
        n = feats.shape[0]
        return (torch.arange(k) * (n / k)).long()

    def reduce(
        self, feats: torch.Tensor, keep: int, cls_attn: torch.Tensor | None = None
    ) -> Reduction:
        n = feats.shape[0]
        check_keep(keep, n)
        anchors = self.select(feats, keep)
        slot = assign_to_anchors(feats.cpu(), anchors, torch.arange(n))
        return Reduction.from_groups(slot, rep=anchors)


_REDUCERS = {
    "divprune": DivPrune,
    "visionzip": VisionZipLike,
    "tome": ToMe,
    "uniform": UniformAnchors,
}


def get_reducer(name_or_obj):
    """A reducer from its name (``divprune``, ``visionzip``, ``tome``, ``uniform``) or any object
    with ``reduce(feats, keep, cls_attn)``."""
    if hasattr(name_or_obj, "reduce"):
        return name_or_obj
    try:
        return _REDUCERS[str(name_or_obj).lower()]()
    except KeyError:
        raise ValueError(
            f"unknown reducer {name_or_obj!r}; use one of {', '.join(_REDUCERS)} "
            "(in-LLM pruners: RestoreConfig(reducer='fastv'|'pdrop'))"
        ) from None
