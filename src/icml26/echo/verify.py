"""Batched tree verification: every request's draft tree in one target forward (the super-tree).

Rows are padded to a width bucket (a multiple of ``bucket`` tokens, as CUDA-graph serving engines
capture fixed shapes); the padding is reported as waste. Each row attends to its own cached
prefix (right-padded to the batch's longest) and to its tree ancestors (4D mask). Acceptance is
exact greedy: the longest root path whose draft tokens equal the target's argmax, plus the bonus
token. The accepted entries, non-contiguous in the tree, are then compacted into each cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from icml26.echo.model import KV, TreeLM, append_kv
from icml26.echo.tree import DraftTree

__all__ = ["VerifyOutput", "verify_batch"]


@dataclass
class VerifyOutput:
    """``paths[i]``: accepted node indices (root first); ``bonus[i]``: the target's next token;
    ``caches[i]``: request i's cache with root + accepted nodes appended; ``verified``: sum K_i;
    ``padded``: B x W tokens actually run (W the bucketed width)."""

    paths: list[list[int]]
    bonus: list[int]
    caches: list[KV]
    verified: int
    padded: int

    @property
    def accepted(self) -> list[int]:
        """Tokens emitted per request this step: accepted draft tokens + 1 bonus."""
        return [len(p) for p in self.paths]


@torch.no_grad()
def verify_batch(target: TreeLM, trees: Sequence[DraftTree], caches: Sequence[KV], bucket: int = 8) -> VerifyOutput:
    """Verify ``trees`` (one per request) against the target in one forward.

    caches[i] : the target's full KV for request i's prefix, each layer (1, G, T_i, D).
    Tree i's root sits at position T_i.
    """
    if len(trees) != len(caches) or not trees:
        raise ValueError(f"need one cache per tree; got {len(trees)} trees and {len(caches)} caches")
    if bucket < 1:
        raise ValueError(f"bucket must be >= 1; got {bucket}")
    b = len(trees)
    lens = [c[0][0].shape[2] for c in caches]
    tmax = max(lens)
    w = -(-max(t.size for t in trees) // bucket) * bucket
    dev = target.device
    tokens = torch.zeros(b, w, dtype=torch.int64)
    pos = torch.zeros(b, w, dtype=torch.int64)
    mask = torch.zeros(b, w, tmax + w, dtype=torch.bool)
    mask[:, torch.arange(w), tmax + torch.arange(w)] = True  # padding rows see themselves
    for i, (tree, t) in enumerate(zip(trees, lens, strict=True)):
        n = tree.size
        tokens[i, :n] = torch.as_tensor(tree.tokens)
        pos[i, :n] = tree.position_ids(t)
        pos[i, n:] = t
        mask[i, :n, :t] = True
        mask[i, :n, tmax:tmax + n] = tree.tree_mask()
    padded_cache = []
    for layer in range(target.n_layers):
        k0, v0 = caches[0][layer]
        g, d = k0.shape[1], k0.shape[3]
        k = torch.zeros(b, g, tmax, d, dtype=k0.dtype, device=dev)
        v = torch.zeros_like(k)
        for i, c in enumerate(caches):
            k[i, :, :lens[i]] = c[layer][0][0]
            v[i, :, :lens[i]] = c[layer][1][0]
        padded_cache.append((k, v))
    logits, new_kv = target.forward(tokens, pos, mask, padded_cache)
    nxt = logits.argmax(-1).cpu().numpy()
    paths, bonus, out = [], [], []
    for i, tree in enumerate(trees):
        path, tok = tree.accept(nxt[i, : tree.size])
        paths.append(path)
        bonus.append(tok)
        idx = torch.as_tensor(path, device=dev)
        out.append(append_kv(caches[i], [(k[i:i + 1], v[i:i + 1]) for k, v in new_kv], idx))
    return VerifyOutput(paths, bonus, out, sum(t.size for t in trees), b * w)
