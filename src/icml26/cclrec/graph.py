"""Normalised user-item graphs, sparse propagation and item co-occurrence (train edges only).

``norm="sym"`` is LightGCN's ``D^-1/2 A D^-1/2`` on the bipartite graph: ``ui = D_u^-1/2 R
D_i^-1/2`` and ``iu = ui^T``. ``norm="official"`` is what the CCLRec/LLMRec code does (its
``csr_norm(..., mean_flag=True)``): each side scales by its own degree^-1/2 only, ``ui = D_u^-1/2 R``
and ``iu = D_i^-1/2 R^T``.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import torch

__all__ = [
    "NORMS",
    "SparseOp",
    "bipartite_norm",
    "to_torch_sparse",
    "lightgcn_propagate",
    "cooccurrence",
]

NORMS = ("sym", "official")


def bipartite_norm(train: sp.csr_matrix, norm: str = "sym") -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """``(ui, iu)``: normalised (n_users, n_items) and (n_items, n_users) float32 CSR matrices."""
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}; got {norm!r}")
    r = sp.csr_matrix(train, dtype=np.float64)
    du = np.asarray(r.sum(1)).ravel()
    di = np.asarray(r.sum(0)).ravel()
    inv_u = np.where(du > 0, 1.0 / np.sqrt(np.maximum(du, 1e-12)), 0.0)
    inv_i = np.where(di > 0, 1.0 / np.sqrt(np.maximum(di, 1e-12)), 0.0)
    if norm == "sym":
        ui = sp.diags(inv_u) @ r @ sp.diags(inv_i)
        iu = ui.T
    else:
        ui = sp.diags(inv_u) @ r
        iu = sp.diags(inv_i) @ r.T
    return sp.csr_matrix(ui, dtype=np.float32), sp.csr_matrix(iu, dtype=np.float32)


def _csr_tensor(m: sp.spmatrix, device) -> torch.Tensor:
    m = sp.csr_matrix(m, dtype=np.float32)
    m.sort_indices()
    with warnings.catch_warnings():  # "sparse CSR support is in beta"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(
            torch.from_numpy(m.indptr.astype(np.int64)),
            torch.from_numpy(m.indices.astype(np.int64)),
            torch.from_numpy(m.data),
            size=m.shape,
            device=device,
        )


class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, a_t, x):
        ctx.a_t = a_t
        return a @ x

    @staticmethod
    def backward(ctx, g):
        return None, None, ctx.a_t @ g


class SparseOp:
    """A fixed sparse matrix ``A`` (n, m) as a differentiable map ``x (m, d) -> A x (n, d)``.

    Holds ``A`` and ``A^T`` as CSR tensors, so the backward pass is one CSR product too (torch's
    own sparse backward is 4-8x slower on CPU).
    """

    def __init__(self, m: sp.spmatrix, device: str | torch.device = "cpu"):
        self.shape = m.shape
        self.a = _csr_tensor(m, device)
        self.a_t = _csr_tensor(sp.csr_matrix(m).T, device)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.requires_grad:
            return _SpMM.apply(self.a, self.a_t, x)
        return self.a @ x


def to_torch_sparse(m: sp.spmatrix, device: str | torch.device = "cpu") -> SparseOp:
    """A scipy matrix as a :class:`SparseOp` (float32 CSR, differentiable in the dense input)."""
    return SparseOp(m, device)


def lightgcn_propagate(
    ui: SparseOp,
    iu: SparseOp,
    user_emb: torch.Tensor,
    item_emb: torch.Tensor,
    n_layers: int,
    include_input: bool = True,
    perturb=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """LightGCN layer mean. ``user_emb`` (U, d), ``item_emb`` (I, d) -> (U, d), (I, d).

    Each layer updates both sides from the previous layer simultaneously:
    ``u' = ui @ i``, ``i' = iu @ u``. ``perturb(x) -> x`` (SimGCL noise) is applied to every
    layer's output; ``include_input=False`` drops layer 0 from the mean (SimGCL).
    """
    us, its = ([user_emb], [item_emb]) if include_input else ([], [])
    u, i = user_emb, item_emb
    for _ in range(n_layers):
        u, i = ui(i), iu(u)
        if perturb is not None:
            u, i = perturb(u), perturb(i)
        us.append(u)
        its.append(i)
    return torch.stack(us).mean(0), torch.stack(its).mean(0)


def cooccurrence(train: sp.csr_matrix) -> sp.csr_matrix:
    """Item-item co-occurrence ``C = R^T R`` with a zero diagonal, (I, I) float32 CSR counts."""
    r = sp.csr_matrix(train, dtype=np.float32)
    r.data[:] = 1.0
    c = sp.csr_matrix(r.T @ r)
    c.setdiag(0)
    c.eliminate_zeros()
    c.sort_indices()
    return c
