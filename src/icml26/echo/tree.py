"""Draft trees: tokens, parents, depths and cumulative draft log-probabilities.

A :class:`DraftTree` holds ``N`` nodes in topological order. Node 0 is the *root*: the last token
already known to be correct (the previous step's bonus token), not yet in the KV cache; nodes
``1..N-1`` are draft tokens. ``score[j]`` is the path score ``S_j = sum log q`` of the draft tokens
on the root-to-``j`` path (nats; 0 at the root), the quantity ECHO gates on (c = exp(max S)).

A verification step feeds all ``N`` nodes to the target at positions ``prefix_len + depth`` under
the ancestor mask :meth:`tree_mask`; ``K_i = N`` tokens are verified (the root included, so that
autoregressive decoding is the one-node tree with ``K = 1``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["DraftTree", "greedy_accept"]

Path = tuple[int, ...]


@dataclass
class DraftTree:
    """``tokens, parents, depth`` int64 (N,), ``score`` float64 (N,); ``parents[0] == -1``.

    ``expanded[d]`` counts the nodes at depth ``d`` that the draft model was run on to grow the
    tree (the draft forward widths, used for the draft-cost model).
    """

    tokens: np.ndarray
    parents: np.ndarray
    depth: np.ndarray
    score: np.ndarray
    expanded: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if n < 1 or self.parents[0] != -1 or self.depth[0] != 0:
            raise ValueError("a DraftTree needs a root at index 0 with parent -1 and depth 0")
        seen = set()
        for j in range(1, n):
            p = self.parents[j]
            if not 0 <= p < j or self.depth[j] != self.depth[p] + 1:
                raise ValueError(f"node {j}: parent {p} must precede it at depth {self.depth[j] - 1}")
            if (int(p), int(self.tokens[j])) in seen:
                raise ValueError(f"node {j}: token {self.tokens[j]} repeats a sibling's (paths must be unique)")
            seen.add((int(p), int(self.tokens[j])))

    @classmethod
    def from_paths(cls, root: int, paths: Mapping[Path, float], expanded=()) -> DraftTree:
        """Build from ``{path (draft tokens after the root): cumulative log q}``.

        The set must be prefix-closed (every path's parent path present); the root is added.
        Nodes are ordered by (depth, -score, path) so the layout is deterministic.
        """
        order = sorted(paths, key=lambda p: (len(p), -paths[p], p))
        index: dict[Path, int] = {(): 0}
        toks, pars, deps, scs = [root], [-1], [0], [0.0]
        for p in order:
            if len(p) == 0:
                continue
            if p[:-1] not in index:
                raise ValueError(f"paths are not prefix-closed: {p} has no parent {p[:-1]}")
            index[p] = len(toks)
            toks.append(p[-1])
            pars.append(index[p[:-1]])
            deps.append(len(p))
            scs.append(float(paths[p]))
        return cls(np.array(toks, np.int64), np.array(pars, np.int64), np.array(deps, np.int64),
                   np.array(scs, np.float64), list(expanded))

    @classmethod
    def chain(cls, root: int) -> DraftTree:
        """The one-node tree: autoregressive decoding."""
        return cls.from_paths(root, {})

    @property
    def size(self) -> int:
        """Tokens verified for this tree, ``K_i`` (root included)."""
        return len(self.tokens)

    @property
    def max_depth(self) -> int:
        return int(self.depth.max())

    def path(self, j: int) -> Path:
        """Draft tokens from the root (excluded) to node ``j`` (included)."""
        out = []
        while j > 0:
            out.append(int(self.tokens[j]))
            j = int(self.parents[j])
        return tuple(reversed(out))

    def ancestors(self, j: int) -> list[int]:
        """Node indices root..j (both included)."""
        out = [j]
        while self.parents[out[-1]] >= 0:
            out.append(int(self.parents[out[-1]]))
        return out[::-1]

    def tree_mask(self) -> torch.Tensor:
        """(N, N) bool: ``mask[i, j]`` iff ``j`` is ``i`` or an ancestor of ``i``."""
        n = self.size
        m = torch.zeros(n, n, dtype=torch.bool)
        for i in range(n):  # parents precede children: inherit the parent's row
            p = int(self.parents[i])
            if p >= 0:
                m[i] = m[p]
            m[i, i] = True
        return m

    def position_ids(self, prefix_len: int) -> torch.Tensor:
        """(N,) int64: ``prefix_len + depth`` (the root sits right after the cached prefix)."""
        return torch.as_tensor(prefix_len + self.depth, dtype=torch.int64)

    def accept(self, target_next: np.ndarray) -> tuple[list[int], int]:
        """Exact greedy acceptance. ``target_next`` (N,) int: the target's argmax after each node.

        Returns ``(path, bonus)``: node indices root..deepest accepted (root included) and the
        target's token after the last accepted node. Tokens emitted = ``len(path) - 1 + 1``.
        """
        return greedy_accept(self.tokens, self.parents, target_next)


def greedy_accept(tokens: np.ndarray, parents: np.ndarray, target_next: np.ndarray) -> tuple[list[int], int]:
    """Longest root path whose every draft token equals the target's argmax at its parent."""
    children: dict[int, dict[int, int]] = {}
    for j in range(1, len(tokens)):
        children.setdefault(int(parents[j]), {})[int(tokens[j])] = j
    path, cur = [0], 0
    while True:
        nxt = children.get(cur, {}).get(int(target_next[cur]))
        if nxt is None:
            return path, int(target_next[cur])
        path.append(nxt)
        cur = nxt
