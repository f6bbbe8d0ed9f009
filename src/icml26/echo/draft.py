"""Draft models behind one oracle: the self-draft (first ``l`` target layers + final norm + shared
LM head, reusing the target's KV of those layers) or any same-tokenizer causal LM.

:class:`TreeDraftOracle` answers a policy's "top-k next tokens after this draft path" with one
tree-masked forward per call over the asked nodes not run yet (the K/V of nodes already run are
kept as extra cache columns, so each tree node runs once), memoized per (request, path) for the
current step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from icml26.echo.model import KV, TreeLM
from icml26.echo.tree import Path

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
        self._nodes: dict[int, tuple[dict[Path, int], KV | None]] = {}  # per request: column of each run node, K/V

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
        """One tree-masked forward over the asked paths' nodes that have not run yet for ``req``
        (root included); the K/V of nodes already run in this oracle are reused as cache columns,
        so each tree node runs once per oracle (a live step drafts depth by depth)."""
        ctx = self.contexts[req]
        cols, store = self._nodes.get(req, ({}, None))
        need: list[Path] = []
        seen: set[Path] = set()
        for p in paths:
            for j in range(len(p) + 1):
                q = p[:j]
                if q not in cols and q not in seen:
                    seen.add(q)
                    need.append(q)
        need.sort(key=len)  # parents first
        t, n_old, w = ctx.prefix_len, len(cols), len(need)
        if ctx.cache is not None and ctx.cache[0][0].shape[2] != t:
            raise ValueError(f"draft cache of request {req} holds {ctx.cache[0][0].shape[2]} tokens, "
                             f"prefix_len is {t}")
        new_col = {q: r for r, q in enumerate(need)}
        mask = torch.zeros(1, w, t + n_old + w, dtype=torch.bool)
        mask[0, :, :t] = True
        for r, q in enumerate(need):
            for j in range(len(q) + 1):
                a = q[:j]
                mask[0, r, t + cols[a] if a in cols else t + n_old + new_col[a]] = True
        toks = torch.tensor([[q[-1] if q else ctx.root for q in need]])
        pos = torch.tensor([[t + len(q) for q in need]])
        if store is None:
            cache = ctx.cache
        elif ctx.cache is None:
            cache = store
        else:
            cache = [(torch.cat([ck, sk], 2), torch.cat([cv, sv], 2))
                     for (ck, cv), (sk, sv) in zip(ctx.cache, store, strict=True)]
        logits, kv = self.lm.forward(toks, pos, mask, cache, self.n_layers)
        self.calls += 1
        self.nodes_run += w
        store = kv if store is None else [(torch.cat([sk, k], 2), torch.cat([sv, v], 2))
                                          for (sk, sv), (k, v) in zip(store, kv, strict=True)]
        cols.update({q: n_old + r for r, q in enumerate(need)})
        self._nodes[req] = (cols, store)
        for r, q in enumerate(need):
            if (req, q) not in self.memo:
                self.put(req, q, logits[0, r].cpu())


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
