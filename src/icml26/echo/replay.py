"""Exact offline replay of tree policies on the target's greedy continuations.

Under greedy decoding speculative decoding is lossless: whatever the tree, the emitted text is the
target's greedy continuation. So the target runs *once* per prompt; at a sampled root position
``p`` of ``seq`` (prompt + greedy continuation) a policy's tree accepts the longest path equal to
``seq[p+1:]``, plus a bonus token. Each policy builds its own tree through a draft oracle memoized
per (sample, node), so a top-3 beam is computed as a top-3 beam (a recorded top-10 "superset tree"
would not be exact: a small beam is not a sub-beam of a large one).

Batches are simulated by grouping B samples into one iteration under a shared budget ``k_max``.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from icml26.echo.draft import DraftContext, TreeDraftOracle
from icml26.echo.model import TreeLM
from icml26.echo.policies import Policy, _Beam
from icml26.echo.tree import DraftTree, Path

__all__ = ["ReplaySet", "IterRecord", "replay_accept", "replay_positions"]


def replay_accept(tree: DraftTree, truth: Sequence[int]) -> int:
    """Tokens emitted when verifying ``tree`` whose root is followed by ``truth`` (the target's
    greedy tokens after the root): accepted draft depth + 1."""
    on = np.zeros(tree.size, dtype=bool)
    on[0] = True
    best = 0
    for j in range(1, tree.size):
        d = int(tree.depth[j])
        if on[tree.parents[j]] and d <= len(truth) and int(tree.tokens[j]) == int(truth[d - 1]):
            on[j] = True
            best = max(best, d)
    return best + 1


def replay_positions(prompt_len: int, seq_len: int, depth: int, stride: int = 3) -> list[int]:
    """Root positions ``p`` (index in seq of the root token) every ``stride`` tokens of the
    continuation, keeping ``depth`` + 1 known tokens after the root."""
    if stride < 1:
        raise ValueError(f"stride must be >= 1; got {stride}")
    return list(range(prompt_len, seq_len - depth - 1, stride))


@dataclass
class IterRecord:
    """One simulated iteration: per request emitted tokens, tree sizes K_i, draft widths per step."""

    samples: list[int]
    accepted: list[int]
    sizes: list[int]
    expanded: list[list[int]]
    depths: list[int] = field(default_factory=list)


class ReplaySet:
    """Samples (sequence, root position) with a memoized draft oracle over them.

    lm : the target (for a self-draft) or the draft :class:`TreeLM`. exit_layer : draft layers
    (``None`` = all of ``lm``). seqs : token lists (prompt + target greedy continuation).
    positions : per sequence, the root positions to sample.
    """

    def __init__(self, lm: TreeLM, exit_layer: int | None, seqs: Sequence[Sequence[int]],
                 positions: Sequence[Sequence[int]], progress=None, memo_file=None):
        self.seqs = [list(s) for s in seqs]
        self._trees: dict = {}  # (policy.tree_key, sample) -> (accepted, K_i, expanded, max depth)
        self.samples: list[tuple[int, int]] = [(i, p) for i, ps in enumerate(positions) for p in ps]
        self.lm, self.exit_layer = lm, exit_layer
        self._full: dict[int, list] = {}
        self.oracle = TreeDraftOracle(lm, exit_layer, _LazyContexts(self))
        self.loaded = 0
        if memo_file is not None and pathlib.Path(memo_file).exists():
            self.loaded = self.load_memo(memo_file)
        if not self.loaded:  # the draft prefixes and root distributions, computed now
            it = range(len(self.seqs))
            if progress is not None:
                it = progress.track(it, total=len(self.seqs), description="echo: draft prefixes")
            for i in it:
                self._prefill(i)

    def _prefill(self, i: int) -> list:
        """The draft's causal pass over sequence ``i``: its cache, and every sample's root
        distribution put into the memo."""
        if i not in self._full:
            logits, cache = self.lm.prefill(torch.as_tensor(self.seqs[i], dtype=torch.int64), self.exit_layer)
            self._full[i] = cache
            for s, (j, p) in enumerate(self.samples):
                if j == i and (s, ()) not in self.oracle.memo:
                    self.oracle.put(s, (), logits[p])  # the root's draft distribution, already computed
        return self._full[i]

    def save_memo(self, path) -> None:
        """Write the draft oracle's memo (every node's top-``KMAX`` ids and log-probs) to ``path``
        (.npz, no pickles) with the samples it belongs to; :meth:`load_memo` reads it back."""
        keys = list(self.oracle.memo)
        width = max((len(p) for _, p in keys), default=0)
        paths = np.full((len(keys), max(width, 1)), -1, dtype=np.int64)
        for n, (_, p) in enumerate(keys):
            paths[n, :len(p)] = p
        ids = np.stack([self.oracle.memo[k][0] for k in keys]) if keys else np.zeros((0, 1), np.int64)
        lps = np.stack([self.oracle.memo[k][1] for k in keys]) if keys else np.zeros((0, 1))
        samples = np.array(self.samples, dtype=np.int64).reshape(-1, 2)
        seq_hash = np.frombuffer(_seq_digest(self.seqs), dtype=np.uint8)
        tmp = pathlib.Path(path).with_suffix(".tmp.npz")
        np.savez(tmp, req=np.array([r for r, _ in keys], dtype=np.int64), paths=paths,
                 lens=np.array([len(p) for _, p in keys], dtype=np.int64), ids=ids, lps=lps,
                 samples=samples, seq_hash=seq_hash)
        os.replace(tmp, path)

    def load_memo(self, path) -> int:
        """Load a memo written by :meth:`save_memo` for the same sequences and samples; returns
        the number of nodes loaded (0 when the file belongs to other sequences or samples)."""
        with np.load(path, allow_pickle=False) as z:
            if (z["seq_hash"].tobytes() != _seq_digest(self.seqs)
                    or [tuple(x) for x in z["samples"].tolist()] != [tuple(x) for x in self.samples]):
                return 0
            for r, row, n, i, lp in zip(z["req"].tolist(), z["paths"], z["lens"].tolist(), z["ids"], z["lps"],
                                        strict=True):
                self.oracle.memo[int(r), tuple(int(t) for t in row[:n])] = (i.astype(np.int64), lp.astype(np.float64))
            return int(z["req"].size)

    def __len__(self) -> int:
        return len(self.samples)

    def root(self, s: int) -> int:
        i, p = self.samples[s]
        return self.seqs[i][p]

    def truth(self, s: int, depth: int = 64) -> list[int]:
        i, p = self.samples[s]
        return self.seqs[i][p + 1:p + 1 + depth]

    def warm(self, topk: int, depth: int, progress=None) -> None:
        """Precompute the EAGLE beam (``topk``, ``depth``) of every sample into the memo.

        Batched per sequence: one forward per depth over all of its samples' frontier nodes,
        attending to the sequence's draft cache up to each root and to the nodes' ancestors,
        whose K/V are kept (each node runs once).
        """
        by_seq: dict[int, list[int]] = {}
        for s, (i, _) in enumerate(self.samples):
            by_seq.setdefault(i, []).append(s)
        it = [i for i in sorted(by_seq) if not self._warm_done(by_seq[i], topk, depth)]
        if progress is not None:
            it = progress.track(it, total=len(by_seq), description="echo: draft beams")
        for i in it:
            self._warm_seq(i, by_seq[i], topk, depth)

    def _warm_done(self, samples: list[int], topk: int, depth: int) -> bool:
        """Every beam node of these samples is already memoized (e.g. loaded from a cache)."""
        for s in samples:
            frontier: list[Path] = [()]
            for _ in range(depth):
                if any((s, p) not in self.oracle.memo for p in frontier):
                    return False
                layer = {}
                for p in frontier:
                    toks, lps = self.oracle.memo[s, p]
                    score = self._score(s, p)
                    for t, lp in zip(toks[:topk], lps[:topk], strict=True):
                        layer[p + (int(t),)] = score + float(lp)
                frontier = sorted(layer, key=lambda q: (-layer[q], len(q), q))[:topk]
        return True

    def _score(self, s: int, p: Path) -> float:
        total = 0.0
        for j in range(len(p)):
            toks, lps = self.oracle.memo[s, p[:j]]
            total += float(lps[list(toks).index(p[j])])
        return total

    @torch.no_grad()
    def _warm_seq(self, i: int, samples: list[int], topk: int, depth: int) -> None:
        lm, ell = self.oracle.lm, self.oracle.n_layers
        base = self._prefill(i)
        length = base[0][0].shape[2]
        beams = {s: _Beam(self.oracle, s, topk) for s in samples}
        col: dict[tuple[int, Path], int] = {}
        nodes: list | None = None  # per layer (k, v) of computed tree nodes, (1, G, N, D)
        for _ in range(depth):
            missing = [(s, p) for s, b in beams.items() for p in b.frontier if (s, p) not in self.oracle.memo]
            # ancestors whose K/V this pass has not computed (memoized by an earlier warm of another
            # width) run again in the same forward, parents first; their memo entries are kept
            need: list[tuple[int, Path]] = []
            seen: set[tuple[int, Path]] = set()
            for s, p in missing:
                for j in range(1, len(p) + 1):
                    q = (s, p[:j])
                    if q not in col and q not in seen:
                        seen.add(q)
                        need.append(q)
            need.sort(key=lambda x: len(x[1]))
            if need:
                n_old = 0 if nodes is None else nodes[0][0].shape[2]
                w = len(need)
                new_col = {q: n_old + r for r, q in enumerate(need)}
                mask = torch.zeros(1, w, length + n_old + w, dtype=torch.bool)
                toks, pos = [], []
                for r, (s, p) in enumerate(need):
                    root_pos = self.samples[s][1]
                    mask[0, r, :root_pos + 1] = True
                    for j in range(1, len(p) + 1):
                        q = (s, p[:j])
                        mask[0, r, length + (col[q] if q in col else new_col[q])] = True
                    toks.append(p[-1])
                    pos.append(root_pos + len(p))
                cache = base if nodes is None else [(torch.cat([bk, nk], 2), torch.cat([bv, nv], 2))
                                                    for (bk, bv), (nk, nv) in zip(base, nodes, strict=True)]
                logits, kv = lm.forward(torch.tensor([toks]), torch.tensor([pos]), mask, cache, ell)
                self.oracle.calls += 1
                self.oracle.nodes_run += w
                nodes = kv if nodes is None else [(torch.cat([nk, k], 2), torch.cat([nv, v], 2))
                                                  for (nk, nv), (k, v) in zip(nodes, kv, strict=True)]
                col.update(new_col)
                for r, (s, p) in enumerate(need):
                    if (s, p) not in self.oracle.memo:
                        self.oracle.put(s, p, logits[0, r].cpu())
            for b in beams.values():
                b.grow()

    def run(self, policy: Policy, groups: Sequence[Sequence[int]], k_max: int) -> list[IterRecord]:
        """Simulate ``policy`` on each group of sample ids (one iteration each).

        Policies whose trees do not depend on the rest of the batch (``policy.tree_key`` not None:
        AR, static trees, per-request budgets) are built once per sample and key and reused across
        groups, batch sizes and bootstrap resamples (the same trees, so the same records)."""
        out = []
        for g in groups:
            key = policy.tree_key(len(g), k_max)
            if key is not None and all((key, s) in self._trees for s in g):
                per = [self._trees[key, s] for s in g]
            else:
                trees = policy.build(self.oracle, list(g), [self.root(s) for s in g], k_max)
                per = [(replay_accept(t, self.truth(s)), t.size, tuple(t.expanded), t.max_depth)
                       for t, s in zip(trees, g, strict=True)]
                if key is not None:
                    self._trees.update({(key, s): r for s, r in zip(g, per, strict=True)})
            out.append(IterRecord(list(g), [r[0] for r in per], [r[1] for r in per], [list(r[2]) for r in per],
                                  [r[3] for r in per]))
        return out


class _LazyContexts(dict):
    """Sample id -> :class:`DraftContext`, built on first use (the draft prefix pass of its
    sequence runs only when a node outside the loaded memo is needed)."""

    def __init__(self, rs: ReplaySet):
        super().__init__()
        self.rs = rs

    def __missing__(self, s: int) -> DraftContext:
        i, p = self.rs.samples[s]
        cache = self.rs._prefill(i)
        ctx = DraftContext([(k[:, :, :p], v[:, :, :p]) for k, v in cache], p, self.rs.seqs[i][p])
        self[s] = ctx
        return ctx


def _seq_digest(seqs) -> bytes:
    import hashlib

    return hashlib.sha256(json.dumps(seqs).encode()).digest()


def make_groups(n: int, b: int, n_iter: int, seed: int = 0) -> list[list[int]]:
    """``n_iter`` groups of ``b`` sample ids: shuffled passes over 0..n-1, wrapping as needed."""
    rng = np.random.default_rng(seed)
    stream: list[int] = []
    while len(stream) < b * n_iter:
        stream += rng.permutation(n).tolist()
    return [stream[i * b:(i + 1) * b] for i in range(n_iter)]
