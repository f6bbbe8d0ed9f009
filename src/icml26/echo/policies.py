"""Tree policies: who drafts what, under one batch verification budget ``k_max``.

Every policy turns a batch of requests into one :class:`~icml26.echo.tree.DraftTree` each through
a :class:`DraftOracle` (the draft model's top-k next tokens after a draft path, memoized). Depth
``d`` counts draft tokens on a path: the root's children are depth 1. ``K_i`` = tree size, root
included (AR is ``K_i = 1``).

- :class:`StaticTree` -- EAGLE-2/3: beam of ``topk`` by cumulative score per depth, every
  expanded child kept as a candidate, rerank to the best ``total``. Ignores the budget.
- :class:`DenseDynamic` -- DDD / OPT-Tree-like: one gate at *every* depth (stop when the best path
  probability at that depth is ``<= tau``), per-request budget ``k_max // B``.
- :class:`AdaptiveChain` -- vLLM "adaptive verification": one top-1 chain per request, slots
  admitted across the batch by survival probability (product of draft probabilities) until
  ``sum K_i = k_max``.
- :class:`Echo` -- ECHO: root check (best root prob < ``root_tau``: truncate at depth 1 and widen
  to ``root_topk``), sparse gates at calibrated depths with depth-wise ``tau_d``
  (c_{i,d} = exp(max_j S_{i,d,j}) <= tau_d truncates after depth d), budget first to *depth* of the
  open requests by confidence (one node per extension, best-first across requests), leftover to
  *width* at truncation points, stopping at ``sum K_i = k_max``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from icml26.echo.tree import DraftTree, Path

__all__ = ["DraftOracle", "Policy", "AR", "StaticTree", "DenseDynamic", "AdaptiveChain", "Echo",
           "make_policy"]


class DraftOracle(Protocol):
    def topk(self, req: int, paths: Sequence[Path], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """For each draft path after request ``req``'s root: the draft's ``k`` most likely next
        tokens (int64, descending) and their log-probabilities (float64, nats)."""


class _Beam:
    """EAGLE beam over one request: ``layers[d-1]`` = all expanded children at depth d."""

    def __init__(self, oracle: DraftOracle, req: int, topk: int):
        self.oracle, self.req, self.topk = oracle, req, topk
        self.frontier: list[Path] = [()]
        self.score: dict[Path, float] = {(): 0.0}
        self.layers: list[dict[Path, float]] = []
        self.expanded: list[int] = []

    @property
    def depth(self) -> int:
        return len(self.layers)

    def grow(self, k: int | None = None) -> dict[Path, float]:
        """Draft one more depth: ``k`` (default ``topk``) children of every frontier node."""
        k = k or self.topk
        layer: dict[Path, float] = {}
        for p, (toks, lps) in zip(self.frontier, self.oracle.topk(self.req, self.frontier, k), strict=True):
            for t, lp in zip(toks[:k], lps[:k], strict=True):
                layer[p + (int(t),)] = self.score[p] + float(lp)
        self.expanded.append(len(self.frontier))
        self.frontier = _ranked(layer)[: self.topk]
        self.score.update(layer)
        self.layers.append(layer)
        return layer

    def best(self, d: int) -> float:
        """max_j S at depth d (nats)."""
        return max(self.layers[d - 1].values())

    def candidates(self) -> dict[Path, float]:
        return {p: s for layer in self.layers for p, s in layer.items()}


def _ranked(cands: dict[Path, float]) -> list[Path]:
    """Best first: higher score, then shallower, then token order (deterministic)."""
    return sorted(cands, key=lambda p: (-cands[p], len(p), p))


def top_closed(cands: dict[Path, float], n: int) -> dict[Path, float]:
    """The best ``n`` candidates, kept prefix-closed (a node enters only after its parent)."""
    out: dict[Path, float] = {}
    for p in _ranked(cands):
        if len(out) >= n:
            break
        if len(p) == 1 or p[:-1] in out:
            out[p] = cands[p]
    return out


class Policy:
    """Base class. ``build(oracle, reqs, roots, k_max) -> list[DraftTree]``, one per request."""

    name = "policy"

    def tree_key(self, n_reqs: int, k_max: int):
        """A hashable key when each request's tree depends only on that request (and on ``n_reqs``,
        ``k_max`` through the key), so replays may reuse it across groups; ``None`` (the default)
        when trees depend on the rest of the batch."""
        return None

    def build(self, oracle: DraftOracle, reqs: Sequence[int], roots: Sequence[int],
              k_max: int) -> list[DraftTree]:
        raise NotImplementedError

    @staticmethod
    def _check(reqs: Sequence[int], k_max: int) -> None:
        if k_max < len(reqs):
            raise ValueError(f"k_max must be >= the batch size (one root per request); got "
                             f"k_max={k_max} < B={len(reqs)}")


@dataclass(frozen=True)
class AR(Policy):
    """Autoregressive decoding: the root only."""

    name = "AR"

    def tree_key(self, n_reqs, k_max):
        return (self,)

    def build(self, oracle, reqs, roots, k_max):
        return [DraftTree.chain(r) for r in roots]


def _check_shape(depth: int, topk: int, total: int | None = None) -> None:
    if depth < 1:
        raise ValueError(f"depth must be >= 1; got {depth}")
    if topk < 1:
        raise ValueError(f"topk must be >= 1; got {topk}")
    if total is not None and total < 1:
        raise ValueError(f"total must be >= 1; got {total}")


@dataclass(frozen=True)
class StaticTree(Policy):
    """EAGLE-3's static tree: ``depth`` 8, ``topk`` 10, ``total`` 60 draft tokens (SGLang: 5/4/8)."""

    depth: int = 8
    topk: int = 10
    total: int = 60
    name: str = "StaticTree"

    def __post_init__(self):
        _check_shape(self.depth, self.topk, self.total)

    def tree_key(self, n_reqs, k_max):
        return (self,)  # ignores the budget and the batch

    def build(self, oracle, reqs, roots, k_max):
        out = []
        for req, root in zip(reqs, roots, strict=True):
            beam = _Beam(oracle, req, self.topk)
            for _ in range(self.depth):
                beam.grow()
            out.append(DraftTree.from_paths(root, top_closed(beam.candidates(), self.total), beam.expanded))
        return out


@dataclass(frozen=True)
class DenseDynamic(Policy):
    """A gate at every depth with one threshold ``tau``; a per-request budget of ``per_request``
    draft nodes (``None``: the even share ``k_max // B - 1``; a tuned value may exceed it)."""

    tau: float = 0.3
    depth: int = 8
    topk: int = 10
    total: int = 60
    per_request: int | None = None
    name: str = "DenseDynamic"

    def __post_init__(self):
        _check_tau(self.tau, "tau")
        _check_shape(self.depth, self.topk, self.total)
        if self.per_request is not None and self.per_request < 0:
            raise ValueError(f"per_request must be >= 0 or None; got {self.per_request}")

    def tree_key(self, n_reqs, k_max):
        return (self, k_max // max(n_reqs, 1) if self.per_request is None else None)

    def build(self, oracle, reqs, roots, k_max):
        self._check(reqs, k_max)
        per = k_max // len(reqs) - 1 if self.per_request is None else self.per_request
        out = []
        for req, root in zip(reqs, roots, strict=True):
            beam = _Beam(oracle, req, self.topk)
            if per > 0:
                for d in range(1, self.depth + 1):
                    beam.grow()
                    if math.exp(beam.best(d)) <= self.tau:
                        break
            n = min(self.total, per)
            out.append(DraftTree.from_paths(root, top_closed(beam.candidates(), n) if n > 0 else {},
                                            beam.expanded))
        return out


@dataclass(frozen=True)
class AdaptiveChain(Policy):
    """vLLM adaptive verification: top-1 chains (at most ``depth`` deep), slots admitted across the
    batch by survival probability (product of the draft's probabilities along the chain) until
    ``sum K_i = k_max``.

    Survival is non-increasing along a chain, so admitting best-first (pop the best next slot,
    draft one more token of that chain only) admits exactly the top ``k_max - B`` slots of fully
    drafted chains while each chain is drafted only as deep as it is admitted, plus the one draft
    step that priced its first refused slot (charged like :class:`Echo`'s extensions).
    """

    depth: int = 8
    name: str = "AdaptiveChain"

    def __post_init__(self):
        _check_shape(self.depth, 1)

    def build(self, oracle, reqs, roots, k_max):
        self._check(reqs, k_max)
        budget = k_max - len(reqs)
        beams = [_Beam(oracle, req, 1) for req in reqs]
        chosen: list[dict[Path, float]] = [{} for _ in reqs]
        heap = []  # (-survival log prob of the next slot, depth, i)
        if budget > 0:
            for i, beam in enumerate(beams):
                beam.grow()
                heapq.heappush(heap, (-beam.best(1), 1, i))
        while heap and budget > 0:
            neg, d, i = heapq.heappop(heap)
            beam = beams[i]
            (p, s), = beam.layers[d - 1].items()
            chosen[i][p] = s
            budget -= 1
            if d < self.depth and budget > 0:
                beam.grow()
                heapq.heappush(heap, (-beam.best(d + 1), d + 1, i))
        return [DraftTree.from_paths(r, c, b.expanded) for r, c, b in zip(roots, chosen, beams, strict=True)]


def _check_tau(tau: float, name: str) -> None:
    if not 0 < tau < 1:
        raise ValueError(f"{name} must be in (0, 1); got {tau}")


@dataclass(frozen=True)
class Echo(Policy):
    """ECHO's sparse-gated, budgeted elastic trees (see the module docstring and docs/echo.md).

    gate_depths, taus : the calibrated gate depths D_sig (1-based draft depth) and their tau_d.
    depth, topk : the beam's depth limit and width. root_tau, root_topk : the root check.
    width_topk : children per parent considered when widening a truncation point.
    total : per-request cap on draft nodes (the shared starting tree limit; EAGLE's 60).
    """

    gate_depths: tuple[int, ...] = (2, 4)
    taus: tuple[float, ...] = (0.3, 0.5)
    depth: int = 8
    topk: int = 10
    root_tau: float = 0.2
    root_topk: int = 20
    width_topk: int = 20
    total: int = 60
    name: str = "Echo"

    def __post_init__(self):
        _check_shape(self.depth, self.topk)
        if len(self.gate_depths) != len(self.taus):
            raise ValueError(f"gate_depths and taus must have equal lengths; got "
                             f"{len(self.gate_depths)} and {len(self.taus)}")
        for d in self.gate_depths:
            if not 1 <= d <= self.depth:
                raise ValueError(f"gate depth must be in [1, depth={self.depth}]; got {d}")
        for t in self.taus:
            _check_tau(t, "tau")
        _check_tau(self.root_tau, "root_tau")
        if self.root_topk < 1 or self.width_topk < 1 or self.total < 1:
            raise ValueError("root_topk, width_topk and total must be >= 1")

    def build(self, oracle, reqs, roots, k_max):
        self._check(reqs, k_max)
        gates = dict(zip(self.gate_depths, self.taus, strict=True))
        budget = k_max - len(reqs)
        beams = [_Beam(oracle, req, self.topk) for req in reqs]
        trees: list[dict[Path, float]] = [{} for _ in reqs]
        truncated = [0] * len(reqs)  # depth of the truncation point, 0 = not truncated
        heap = []  # (-score of the best next-layer node, i)
        for i, beam in enumerate(beams):
            beam.grow()
            if math.exp(beam.best(1)) < self.root_tau:
                truncated[i] = 1  # root check: depth 0 in the paper's code, widen the root
            else:
                heapq.heappush(heap, (-beam.best(1), i))
        # 1) depth: best-first over open requests, one node (plus missing ancestors) per step
        while heap and budget > 0:
            _, i = heapq.heappop(heap)
            beam, tree = beams[i], trees[i]
            d = beam.depth
            best = _ranked(beam.layers[d - 1])[0]
            need = [best[:j] for j in range(1, d + 1) if best[:j] not in tree]
            if len(need) > budget or len(tree) + len(need) > self.total:
                continue
            for p in need:
                tree[p] = beam.score[p]
            budget -= len(need)
            tau = gates.get(d)
            if tau is not None and math.exp(beam.best(d)) <= tau:
                truncated[i] = d
            elif d < self.depth:
                beam.grow()
                heapq.heappush(heap, (-beam.best(d + 1), i))
        # 2) width: leftover budget, best path probability first, at depths already reached;
        #    truncation points are widened to ``width_topk`` children per parent
        if budget > 0:
            pool = []
            for i, beam in enumerate(beams):
                cands = beam.candidates()
                t = truncated[i]
                if t > 0:
                    parents = list(_ranked(beam.layers[t - 2]))[: self.topk] if t > 1 else [()]
                    k = self.root_topk if t == 1 else self.width_topk
                    for p, (toks, lps) in zip(parents, oracle.topk(beam.req, parents, k), strict=True):
                        for tk, lp in zip(toks[:k], lps[:k], strict=True):
                            cands.setdefault(p + (int(tk),), beam.score[p] + float(lp))
                    beam.score.update(cands)
                reach = max((len(p) for p in trees[i]), default=0) if t == 0 else t
                pool += [(-s, len(p), p, i) for p, s in cands.items() if len(p) <= reach and p not in trees[i]]
            for _neg, _, p, i in sorted(pool):
                if budget <= 0:
                    break
                need = [p[:j] for j in range(1, len(p) + 1) if p[:j] not in trees[i]]
                if len(need) <= budget and len(trees[i]) + len(need) <= self.total:
                    for q in need:
                        trees[i][q] = beams[i].score[q]
                    budget -= len(need)
        return [DraftTree.from_paths(r, t, b.expanded) for r, t, b in zip(roots, trees, beams, strict=True)]


def make_policy(name: str, **kw) -> Policy:
    """``ar | static | sglang | dense | chain | echo`` -> a policy; unknown names are rejected."""
    table = {"ar": AR, "static": StaticTree, "dense": DenseDynamic, "chain": AdaptiveChain, "echo": Echo}
    if name == "sglang":
        return StaticTree(depth=5, topk=4, total=8, name="StaticTree-SGLang", **kw)
    if name not in table:
        raise ValueError(f"unknown policy {name!r}; choose one of ar, static, sglang, dense, chain, echo")
    return table[name](**kw)
