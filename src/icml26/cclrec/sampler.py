"""CCLRec's per-user structural and semantic sampler and its consensus weights.

For a batch of users, 2 items each of six kinds (official ``utility/load_data.py``, restated):

- random positive (history, without replacement when possible) and random negative;
- structural positive: the history items with the highest support ``s(i) = Σ_{j∈H_u} C[i, j]``
  (``C = RᵀR``, zero diagonal; ties broken by lower item index);
- structural negative: a random non-history item ``i`` with ``C[c, i] < theta_co`` (5) for all
  ``n_core`` (5) core items ``c`` (the top-supported history items); 100 tries, then random;
- semantic positive: 2 of the ``sem_topk`` (10) history items nearest (cosine) to the user centre
  ``normalize(mean_{i∈H_u} normalize(e_i))``;
- semantic negative: a random non-history item with cosine to the centre ``< theta_sem`` (0.3);
  50 tries, then random.

Consensus (``consensus="sampled"``, official): ``w+ = w_pos`` for a user whose 2 structural and 2
semantic positives share an item, ``w- = w_neg`` when its negatives share one. ``"pool"`` (the
abstract's "intersection of structural neighbours and semantically similar items"): ``w+`` when
the top-``sem_topk`` structural and semantic pools intersect, ``w-`` when a sampled structural
negative is also semantically far or a sampled semantic negative is also structurally unrelated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from icml26.cclrec.graph import cooccurrence

__all__ = ["SamplerConfig", "ConsensusSampler", "Sample"]


@dataclass(frozen=True)
class SamplerConfig:
    n_samples: int = 2
    n_core: int = 5
    theta_co: float = 5.0
    sem_topk: int = 10
    theta_sem: float = 0.3
    struct_tries: int = 100
    sem_tries: int = 50
    consensus: str = "sampled"
    w_pos: float = 3.0
    w_neg: float = 10.0

    def __post_init__(self):
        if self.consensus not in ("sampled", "pool"):
            raise ValueError(f"consensus must be 'sampled' or 'pool'; got {self.consensus!r}")
        if self.n_samples < 1 or self.n_core < 1 or self.sem_topk < 1:
            raise ValueError("n_samples, n_core and sem_topk must be >= 1")
        if self.w_pos <= 0 or self.w_neg <= 0:
            raise ValueError(f"weights must be > 0; got w_pos={self.w_pos} w_neg={self.w_neg}")


@dataclass
class Sample:
    """One batch: ``users`` (B,) and (B, n_samples) int64 item arrays; weights (B,) float32."""

    users: np.ndarray
    rand_pos: np.ndarray
    rand_neg: np.ndarray
    struct_pos: np.ndarray
    struct_neg: np.ndarray
    sem_pos: np.ndarray
    sem_neg: np.ndarray
    w_pos: np.ndarray
    w_neg: np.ndarray
    stats: dict


def _top_by(values: np.ndarray, items: np.ndarray, k: int) -> np.ndarray:
    """``items`` sorted by ``values`` descending (ties: lower item first), first ``k``."""
    order = np.lexsort((items, -values))
    return items[order[:k]]


def _first_valid(valid: np.ndarray, cand: np.ndarray, k: int):
    """First ``k`` valid candidates per row: (B, k) items and (B, k) found flags."""
    c = np.cumsum(valid, axis=1)
    out = np.zeros((len(cand), k), dtype=np.int64)
    found = np.zeros((len(cand), k), dtype=bool)
    for j in range(k):
        hit = c >= j + 1
        idx = hit.argmax(1)
        found[:, j] = hit[np.arange(len(cand)), idx]
        out[:, j] = cand[np.arange(len(cand)), idx]
    return out, found


class ConsensusSampler:
    """Precomputes the static per-user pools from ``train`` (U, I) and ``semantics`` (I, d)."""

    def __init__(self, train: sp.csr_matrix, semantics: np.ndarray, config: SamplerConfig):
        cfg = self.config = config
        tr = self.train = sp.csr_matrix(train, dtype=np.float32)
        tr.sort_indices()
        self.n_users, self.n_items = tr.shape
        sem = np.asarray(semantics, dtype=np.float32)
        self.sem = sem / np.maximum(np.linalg.norm(sem, axis=1, keepdims=True), 1e-12)
        self.C = cooccurrence(tr)
        self.C_thr = sp.csr_matrix(cfg.theta_co <= self.C, dtype=np.float32)
        self.seen = tr.toarray() > 0 if self.n_users * self.n_items <= 2e8 else None
        self._seen_keys = np.sort(tr.tocoo().row.astype(np.int64) * self.n_items + tr.tocoo().col)
        k, kc, ks = cfg.n_samples, cfg.n_core, cfg.sem_topk
        self.struct_top = np.full((self.n_users, max(k, ks)), -1, np.int64)
        self.core = np.full((self.n_users, kc), -1, np.int64)
        self.sem_pool = np.full((self.n_users, ks), -1, np.int64)
        self.center = np.zeros((self.n_users, sem.shape[1]), np.float32)
        for s in range(0, self.n_users, 512):
            rows = tr[s : s + 512]
            dense = np.asarray((rows @ self.C).todense())  # (b, I) support of every item
            for r in range(rows.shape[0]):
                u = s + r
                h = tr.indices[tr.indptr[u] : tr.indptr[u + 1]].astype(np.int64)
                if len(h) == 0:
                    continue
                sup = dense[r, h]
                top = _top_by(sup, h, max(k, ks))
                self.struct_top[u, : len(top)] = top
                self.core[u, : min(kc, len(h))] = top[:kc]
                c = self.sem[h].mean(0)
                c = c / max(float(np.linalg.norm(c)), 1e-12)
                self.center[u] = c
                sp_ = _top_by(self.sem[h] @ c, h, ks)
                self.sem_pool[u, : len(sp_)] = sp_
        self.hist_len = np.diff(tr.indptr)
        self.related_all = (
            self._related(np.arange(self.n_users)) if (self.n_users * self.n_items <= 2e8) else None
        )

    # -- helpers -------------------------------------------------------------------------------
    def _is_seen(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        if self.seen is not None:
            return self.seen[users, items]
        q = users * self.n_items + items
        pos = np.minimum(np.searchsorted(self._seen_keys, q), len(self._seen_keys) - 1)
        return self._seen_keys[pos] == q

    def _related(self, users: np.ndarray) -> np.ndarray:
        """(B, I) bool: ``C[c, i] >= theta_co`` for some core item ``c`` of each user."""
        core = self.core[users]
        r, c = np.nonzero(core >= 0)
        m = sp.csr_matrix(
            (np.ones(len(r), np.float32), (r, core[r, c])), shape=(len(users), self.n_items)
        )
        return np.asarray((m @ self.C_thr).todense()) > 0

    def _rand_hist(self, users, rng, n):
        """n history items per user, without replacement when the history allows."""
        start, length = self.train.indptr[users], self.hist_len[users]
        a = (rng.random(len(users)) * length).astype(np.int64)
        picks = [a]
        if n >= 2:
            b = (rng.random(len(users)) * np.maximum(length - 1, 1)).astype(np.int64)
            b = np.where(length >= 2, b + (b >= a), b)
            picks.append(b)
        for _ in range(2, n):
            picks.append((rng.random(len(users)) * length).astype(np.int64))
        return self.train.indices[start[:, None] + np.stack(picks, 1)].astype(np.int64)

    def _rand_neg(self, users, rng, n):
        neg = rng.integers(0, self.n_items, (len(users), n))
        for _ in range(50):
            bad = self._is_seen(np.repeat(users[:, None], n, 1), neg)
            if not bad.any():
                break
            neg[bad] = rng.integers(0, self.n_items, int(bad.sum()))
        return neg

    def _from_pool(self, pool, users, rng, n):
        """n items of each user's padded pool (without replacement when >= n valid)."""
        p = pool[users]
        size = (p >= 0).sum(1)
        out = self._rand_hist(users, rng, n)  # fallback: random history items
        a = (rng.random(len(users)) * np.maximum(size, 1)).astype(np.int64)
        b = (rng.random(len(users)) * np.maximum(size - 1, 1)).astype(np.int64)
        b = b + (b >= a)
        ok = size >= n
        idx = np.stack([a, b] + [a] * (n - 2), 1)[:, :n]
        out[ok] = np.take_along_axis(p[ok], idx[ok], 1)
        return out

    # -- the sampler ---------------------------------------------------------------------------
    def sample(self, users: np.ndarray, rng: np.random.Generator) -> Sample:
        cfg, k = self.config, self.config.n_samples
        users = np.asarray(users, dtype=np.int64)
        b = len(users)
        rand_pos = self._rand_hist(users, rng, k)
        rand_neg = self._rand_neg(users, rng, k)
        # structural positives: the top-k supported history items; short histories filled randomly
        struct_pos = self.struct_top[users, :k].copy()
        short = struct_pos < 0
        if short.any():
            struct_pos[short] = self._rand_hist(users, rng, k)[short]
        # structural negatives: unseen and unrelated to every core item
        cand = rng.integers(0, self.n_items, (b, cfg.struct_tries))
        rel = (
            self.related_all[users[:, None], cand]
            if self.related_all is not None
            else np.take_along_axis(self._related(users), cand, 1)
        )
        ok_s = ~rel & ~self._is_seen(np.repeat(users[:, None], cfg.struct_tries, 1), cand)
        struct_neg, found_s = _first_valid(ok_s, cand, k)
        fb = self._rand_neg(users, rng, k)
        struct_neg = np.where(found_s, struct_neg, fb)
        # semantic positives and negatives
        sem_pos = self._from_pool(self.sem_pool, users, rng, k)
        cand2 = rng.integers(0, self.n_items, (b, cfg.sem_tries))
        cos = np.einsum("bd,btd->bt", self.center[users], self.sem[cand2])
        ok_m = (cos < cfg.theta_sem) & ~self._is_seen(
            np.repeat(users[:, None], cfg.sem_tries, 1), cand2
        )
        sem_neg, found_m = _first_valid(ok_m, cand2, k)
        fb = self._rand_neg(users, rng, k)
        sem_neg = np.where(found_m, sem_neg, fb)
        # consensus
        if cfg.consensus == "sampled":
            pos_hit = (struct_pos[:, :, None] == sem_pos[:, None, :]).any((1, 2))
            neg_hit = (struct_neg[:, :, None] == sem_neg[:, None, :]).any((1, 2))
        else:
            sp_pool = self.struct_top[users, : cfg.sem_topk]
            sm_pool = self.sem_pool[users]
            pos_hit = (
                (sp_pool[:, :, None] == sm_pool[:, None, :]) & (sp_pool[:, :, None] >= 0)
            ).any((1, 2))
            far = np.einsum("bd,bkd->bk", self.center[users], self.sem[struct_neg]) < cfg.theta_sem
            rel_m = (
                self.related_all[users[:, None], sem_neg]
                if self.related_all is not None
                else np.take_along_axis(self._related(users), sem_neg, 1)
            )
            neg_hit = far.any(1) | (~rel_m).any(1)
        w_pos = np.where(pos_hit, cfg.w_pos, 1.0).astype(np.float32)
        w_neg = np.where(neg_hit, cfg.w_neg, 1.0).astype(np.float32)
        stats = {
            "pos_consensus": float(pos_hit.mean()),
            "neg_consensus": float(neg_hit.mean()),
            "any_consensus": float((pos_hit | neg_hit).mean()),
            "struct_neg_pass": float(ok_s.mean()),
            "sem_neg_pass": float(ok_m.mean()),
            "struct_neg_fallback": float(1 - found_s.mean()),
            "sem_neg_fallback": float(1 - found_m.mean()),
        }
        return Sample(
            users, rand_pos, rand_neg, struct_pos, struct_neg, sem_pos, sem_neg, w_pos, w_neg, stats
        )
