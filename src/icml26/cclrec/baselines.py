"""Baselines with the same frame as CCLRec: MostPop, LightGCN, SGL, SimGCL and RLMRec-Con.

- LightGCN (He et al., 2020): symmetric-normalised propagation, layer mean including layer 0,
  BPR with L2 on the batch's layer-0 embeddings.
- SGL-ED (Wu et al., 2021): LightGCN plus InfoNCE between two edge-dropout views (resampled
  every pass) of the batch's users and items.
- SimGCL (Yu et al., 2022): LightGCN with random-sign uniform noise of norm ``eps`` added at each
  layer (layer 0 left out of the mean) for two views, InfoNCE between them.
- RLMRec-Con (Ren et al., 2024): LightGCN plus an MLP mapping semantic vectors to the CF space,
  aligned with the CF embeddings of the batch's users and items by InfoNCE.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from icml26.cclrec.base import Recommender
from icml26.cclrec.graph import bipartite_norm, lightgcn_propagate, to_torch_sparse

__all__ = ["MostPop", "LightGCN", "SGL", "SimGCL", "RLMRecCon", "info_nce", "bpr_triplets"]


def info_nce(a: torch.Tensor, b: torch.Tensor, tau: float) -> torch.Tensor:
    """Symmetric-free InfoNCE: row ``r`` of ``a`` (B, d) must match row ``r`` of ``b`` (B, d)
    among all rows of ``b``; cosine similarity / ``tau``; mean over rows."""
    a, b = F.normalize(a, dim=-1), F.normalize(b, dim=-1)
    logits = a @ b.T / tau
    return F.cross_entropy(logits, torch.arange(len(a), device=a.device))


def bpr_triplets(train: sp.csr_matrix, rng: np.random.Generator, batch_size: int):
    """Yield (users, pos, neg) int64 arrays: every training pair once per pass, shuffled, with a
    uniformly drawn non-interacted negative item."""
    coo = train.tocoo()
    order = rng.permutation(train.nnz)
    users, items = coo.row.astype(np.int64)[order], coo.col.astype(np.int64)[order]
    n_items = train.shape[1]
    keys = np.sort(coo.row.astype(np.int64) * n_items + coo.col)
    for s in range(0, len(users), batch_size):
        u, p = users[s : s + batch_size], items[s : s + batch_size]
        neg = rng.integers(0, n_items, len(u))
        for _ in range(20):  # resample the negatives that hit a training item
            hit = _contains(keys, u * n_items + neg)
            if not hit.any():
                break
            neg[hit] = rng.integers(0, n_items, int(hit.sum()))
        yield u, p, neg


def _contains(sorted_keys: np.ndarray, q: np.ndarray) -> np.ndarray:
    pos = np.searchsorted(sorted_keys, q)
    pos = np.minimum(pos, len(sorted_keys) - 1)
    return sorted_keys[pos] == q


class MostPop(Recommender):
    """Items ranked by training popularity, the same list for every user."""

    name = "MostPop"

    def _setup(self, train, semantics, extras):
        self._pop = torch.from_numpy(np.asarray(train.sum(0)).ravel().astype(np.float32))
        return []

    def _embeddings(self):
        return torch.ones(self.n_users_, 1), self._pop[:, None]


class LightGCN(Recommender):
    """LightGCN. Defaults: 3 layers, dim 64, Adam lr 1e-3, L2 1e-4 on layer-0, batch 2048."""

    name = "LightGCN"

    def __init__(self, *, n_layers=3, norm="sym", **kw):
        super().__init__(**kw)
        self.n_layers, self.norm = n_layers, norm

    def _setup(self, train, semantics, extras):
        ui, iu = bipartite_norm(train, self.norm)
        self._ui, self._iu = to_torch_sparse(ui, self.device), to_torch_sparse(iu, self.device)
        g = self._gen
        self._eu = torch.nn.Parameter(
            (0.1 * torch.randn(self.n_users_, self.dim, generator=g)).to(self.device)
        )
        self._ei = torch.nn.Parameter(
            (0.1 * torch.randn(self.n_items_, self.dim, generator=g)).to(self.device)
        )
        return [self._eu, self._ei]

    def _batches(self, rng):
        for u, p, n in bpr_triplets(self.train_, rng, self.batch_size):
            yield tuple(torch.as_tensor(x, device=self.device) for x in (u, p, n))

    def _embeddings(self, ui=None, iu=None, perturb=None, include_input=True):
        return lightgcn_propagate(
            ui if ui is not None else self._ui,
            iu if iu is not None else self._iu,
            self._eu,
            self._ei,
            self.n_layers,
            include_input=include_input,
            perturb=perturb,
        )

    def _bpr(self, ue, ie, u, p, n):
        x = (ue[u] * (ie[p] - ie[n])).sum(-1)
        l2 = self._eu[u].pow(2).sum() + self._ei[p].pow(2).sum() + self._ei[n].pow(2).sum()
        return -F.logsigmoid(x).mean() + self.reg * 0.5 * l2 / len(u)

    def _loss(self, batch):
        u, p, n = batch
        ue, ie = self._embeddings()
        return self._bpr(ue, ie, u, p, n)


class SGL(LightGCN):
    """SGL with edge dropout (ED). ``drop`` edge-drop ratio, ``ssl_weight``, ``ssl_tau``."""

    name = "SGL"

    def __init__(self, *, drop=0.1, ssl_weight=0.1, ssl_tau=0.2, **kw):
        super().__init__(**kw)
        self.drop, self.ssl_weight, self.ssl_tau = drop, ssl_weight, ssl_tau

    def _view(self, rng):
        coo = self.train_.tocoo()
        keep = rng.random(coo.nnz) >= self.drop
        sub = sp.csr_matrix((coo.data[keep], (coo.row[keep], coo.col[keep])), shape=coo.shape)
        ui, iu = bipartite_norm(sub, self.norm)
        return to_torch_sparse(ui, self.device), to_torch_sparse(iu, self.device)

    def _batches(self, rng):
        self._views = (self._view(rng), self._view(rng))  # resampled each pass, as in SGL
        yield from super()._batches(rng)

    def _loss(self, batch):
        u, p, n = batch
        ue, ie = self._embeddings()
        (a_ui, a_iu), (b_ui, b_iu) = self._views
        ue1, ie1 = self._embeddings(a_ui, a_iu)
        ue2, ie2 = self._embeddings(b_ui, b_iu)
        uu, ii = torch.unique(u), torch.unique(p)
        ssl = info_nce(ue1[uu], ue2[uu], self.ssl_tau) + info_nce(ie1[ii], ie2[ii], self.ssl_tau)
        return self._bpr(ue, ie, u, p, n) + self.ssl_weight * ssl


class SimGCL(LightGCN):
    """SimGCL: noise magnitude ``eps``, ``cl_weight`` (lambda), ``cl_tau``."""

    name = "SimGCL"

    def __init__(self, *, eps=0.1, cl_weight=0.2, cl_tau=0.2, **kw):
        super().__init__(**kw)
        self.eps, self.cl_weight, self.cl_tau = eps, cl_weight, cl_tau

    def _noise(self, x):
        r = torch.rand(x.shape, generator=self._gen).to(x.device)
        return x + torch.sign(x) * F.normalize(r, dim=-1) * self.eps

    def _embeddings(self, ui=None, iu=None, perturb=None, include_input=False):
        return super()._embeddings(ui, iu, perturb, include_input=include_input)

    def _loss(self, batch):
        u, p, n = batch
        ue, ie = self._embeddings()
        ue1, ie1 = self._embeddings(perturb=self._noise)
        ue2, ie2 = self._embeddings(perturb=self._noise)
        uu, ii = torch.unique(u), torch.unique(p)
        cl = info_nce(ue1[uu], ue2[uu], self.cl_tau) + info_nce(ie1[ii], ie2[ii], self.cl_tau)
        return self._bpr(ue, ie, u, p, n) + self.cl_weight * cl


class RLMRecCon(LightGCN):
    """RLMRec-Con on LightGCN: ``kd_weight``, ``kd_tau``; needs item ``semantics`` (I, d) and
    optionally ``user_semantics`` (U, d) (default: mean of the user's training items)."""

    name = "RLMRec-Con"

    def __init__(self, *, kd_weight=0.01, kd_tau=0.2, **kw):
        super().__init__(**kw)
        self.kd_weight, self.kd_tau = kd_weight, kd_tau

    def _setup(self, train, semantics, extras):
        if semantics is None:
            raise ValueError("RLMRecCon needs item semantics (n_items, d)")
        params = super()._setup(train, semantics, extras)
        us = extras.get("user_semantics")
        if us is None:
            deg = np.maximum(np.asarray(train.sum(1)), 1.0)
            us = np.asarray(train @ semantics) / deg
        self._su = torch.as_tensor(np.asarray(us, np.float32), device=self.device)
        self._si = torch.as_tensor(semantics, device=self.device)
        d = semantics.shape[1]
        h = (d + self.dim) // 2
        self._mlp = torch.nn.Sequential(
            torch.nn.Linear(d, h), torch.nn.LeakyReLU(), torch.nn.Linear(h, self.dim)
        ).to(self.device)
        return params + list(self._mlp.parameters())

    def _loss(self, batch):
        u, p, n = batch
        ue, ie = self._embeddings()
        uu, ii = torch.unique(u), torch.unique(p)
        kd = info_nce(ue[uu], self._mlp(self._su[uu]), self.kd_tau) + info_nce(
            ie[ii], self._mlp(self._si[ii]), self.kd_tau
        )
        return self._bpr(ue, ie, u, p, n) + self.kd_weight * kd
