"""Draft models behind one oracle: the self-draft (first ``l`` target layers + final norm + shared
LM head, reusing the target's KV of those layers) or any same-tokenizer causal LM.

:class:`TreeDraftOracle` answers a policy's "top-k next tokens after this draft path" with one
tree-masked forward per call over the trie of the asked paths (ancestors recomputed, so no draft
KV has to be kept for tree nodes), memoized per (request, path) for the current step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from icml26.echo.model import KV, TreeLM
from icml26.echo.tree import DraftTree, Path

__all__ = ["DraftContext", "TreeDraftOracle", "exit_layer_agreement", "choose_exit_layer", "KMAX"]

KMAX = 32  # children kept per memoized node (>= every policy's top-k)


@dataclass
class DraftContext:
    """One request's draft state: ``cache`` (KV of the draft's layers for the ``prefix_len``
    tokens before the root, each (1, G, T, D)) and the root token."""

    cache: KV | None
    prefix_len: int
    root: int


class TreeDraftOracle:
    """Memoized draft top-k over tree paths (see :class:`~icml26.echo.policies.DraftOracle`).

    lm : the draft's :class:`TreeLM` (the target itself for a self-draft). n_layers : layers to run
    (the exit layer ``l``; ``None`` = all). contexts : one :class:`DraftContext` per request id.
    """

    def __init__(self, lm: TreeLM, n_layers: int | None, contexts: dict[int, DraftContext] | Sequence[DraftContext],
                 kmax: int = KMAX):
        self.lm, self.n_layers, self.kmax = lm, n_layers, kmax
        self.contexts = dict(enumerate(contexts)) if not isinstance(contexts, dict) else contexts
        self.memo: dict[tuple[int, Path], tuple[np.ndarray, np.ndarray]] = {}
        self.calls = 0
        self.nodes_run = 0

    def topk(self, req: int, paths: Sequence[Path], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        if k > self.kmax:
            raise ValueError(f"k must be <= kmax={self.kmax}; got {k}")
        missing = [p for p in dict.fromkeys(paths) if (req, p) not in self.memo]
        if missing:
            self._compute(req, missing)
        return [(self.memo[req, p][0][:k], self.memo[req, p][1][:k]) for p in paths]

    def put(self, req: int, path: Path, logits: torch.Tensor) -> None:
        """Store a precomputed draft distribution (logits (V,)) for ``(req, path)``."""
        lp = torch.log_softmax(logits.double(), -1)
        v, i = lp.topk(self.kmax)
        self.memo[req, path] = (i.numpy().astype(np.int64), v.numpy())

    @torch.no_grad()
    def _compute(self, req: int, paths: list[Path]) -> None:
        ctx = self.contexts[req]
        trie = {p[:j]: 0.0 for p in paths for j in range(1, len(p) + 1)}
        tree = DraftTree.from_paths(ctx.root, trie)
        index = {tree.path(j): j for j in range(tree.size)}
        n = tree.size
        t = ctx.prefix_len
        mask = torch.cat([torch.ones(n, t, dtype=torch.bool), tree.tree_mask()], 1).unsqueeze(0)
        logits, _ = self.lm.forward(torch.as_tensor(tree.tokens).view(1, -1),
                                    tree.position_ids(t).view(1, -1), mask, ctx.cache, self.n_layers)
        self.calls += 1
        self.nodes_run += n
        for p in paths:
            self.put(req, p, logits[0, index[p]].cpu())


@torch.no_grad()
def exit_layer_agreement(lm: TreeLM, ids: torch.Tensor, layers: Sequence[int] | None = None) -> dict[int, float]:
    """Top-1 agreement of the early-exit draft (first ``l`` layers + norm + head) with the full
    target, per ``l``, on the next-token predictions of ``ids`` (L,) int64. Values in [0, 1]."""
    layers = list(layers or range(1, lm.n_layers))
    for ell in layers:
        if not 1 <= ell < lm.n_layers:
            raise ValueError(f"exit_layer must be in [1, {lm.n_layers}); got {ell}")
    full = lm.prefill(ids)[0].argmax(-1)
    return {ell: float((lm.prefill(ids, ell)[0].argmax(-1) == full).float().mean()) for ell in layers}


def choose_exit_layer(agreement: dict[int, float], target: float = 0.5) -> int:
    """The smallest ``l`` whose agreement reaches ``target`` (else the best one)."""
    ok = [ell for ell, a in sorted(agreement.items()) if a >= target]
    return ok[0] if ok else max(agreement, key=agreement.get)
