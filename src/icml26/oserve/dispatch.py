"""Request dispatch: how much of each type's rate goes to each replica.

The LP (exact; [I] formulation of the paper's flow network)::

    max  sum_{k,j} x[k,j]
    s.t. sum_k x[k,j] <= lam[j]              (type j's arrival rate, req/s)
         sum_j x[k,j] / n[k,j] <= 1          (replica k's utilisation)
         x >= 0,  x[k,j] = 0 where n[k,j] = 0

Once all load is served the optimum is not unique; a second stage (``balance=True``) keeps the
served total and minimises the maximum utilisation. ``method="maxflow"`` is the paper's
preflow-push network: S -> w_j (cap lam_j) -> c_k (cap n[k,j]) -> sink (cap max_j n[k,j]); it is
exact for one type and an upper bound otherwise (plain flow cannot charge a type-j request
``1/n[k,j]`` of the replica). Duals of the utilisation rows mark bottleneck replicas.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Dispatch", "dispatch", "capacity_scale"]


@dataclass(frozen=True)
class Dispatch:
    """``x`` (R, K) req/s; ``served`` req/s; ``util`` (R,) in [0, 1]; ``duals`` (R,) >= 0, the
    marginal served rate per unit of replica capacity (stage one; zeros for maxflow)."""

    x: np.ndarray
    served: float
    util: np.ndarray
    duals: np.ndarray


def _check(n, lam):
    n = np.asarray(n, dtype=float)
    lam = np.asarray(lam, dtype=float)
    if n.ndim != 2 or lam.shape != (n.shape[1],):
        raise ValueError(f"n must be (replicas, types) and lam (types,); got {n.shape} and {lam.shape}")
    if not (np.isfinite(lam).all() and (lam >= 0).all()):
        raise ValueError(f"lam must be finite and >= 0; got {lam.tolist()}")
    if not (np.isfinite(n).all() and (n >= 0).all()):
        raise ValueError("n must be finite and >= 0")
    return n, lam


def _util(x, n):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n > 0, x / np.where(n > 0, n, 1), 0.0).sum(1)


def dispatch(n, lam, method: str = "lp", balance: bool = True) -> Dispatch:
    """Route rates ``lam`` (K,) over replicas with rates ``n`` (R, K); see the module docstring."""
    n, lam = _check(n, lam)
    if method == "maxflow":
        return _maxflow(n, lam)
    if method != "lp":
        raise ValueError(f"method must be 'lp' or 'maxflow'; got {method!r}")
    from scipy.optimize import linprog

    R, K = n.shape
    inv = np.where(n > 0, 1.0 / np.where(n > 0, n, 1), 0.0)
    A_type = np.kron(np.ones((1, R)), np.eye(K))          # (K, R*K): sum over k
    A_rep = np.zeros((R, R * K))
    for k in range(R):
        A_rep[k, k * K:(k + 1) * K] = inv[k]
    bounds = [(0, None) if n[k, j] > 0 else (0, 0) for k in range(R) for j in range(K)]
    A = np.vstack([A_type, A_rep])
    b = np.concatenate([lam, np.ones(R)])
    r1 = linprog(-np.ones(R * K), A_ub=A, b_ub=b, bounds=bounds, method="highs")
    if r1.status != 0:
        raise RuntimeError(f"dispatch LP failed: {r1.message}")
    served = -r1.fun
    duals = np.maximum(-np.asarray(r1.ineqlin.marginals[K:]), 0.0)
    x = r1.x
    if balance and served > 0:
        # variables (x, u): min u s.t. types, util_k - u <= 0, -sum x <= -served*(1-1e-9)
        A2 = np.zeros((K + R + 1, R * K + 1))
        A2[:K, :-1] = A_type
        A2[K:K + R, :-1] = A_rep
        A2[K:K + R, -1] = -1.0
        A2[-1, :-1] = -1.0
        b2 = np.concatenate([lam, np.zeros(R), [-served * (1 - 1e-9)]])
        c2 = np.zeros(R * K + 1)
        c2[-1] = 1.0
        r2 = linprog(c2, A_ub=A2, b_ub=b2, bounds=bounds + [(0, 1)], method="highs")
        if r2.status == 0:
            x = r2.x[:-1]
    x = np.maximum(x.reshape(R, K), 0.0)
    return Dispatch(x, float(x.sum()), _util(x, n), duals)


def _maxflow(n, lam) -> Dispatch:
    import networkx as nx
    from networkx.algorithms.flow import preflow_push

    R, K = n.shape
    g = nx.DiGraph()
    for j in range(K):
        g.add_edge("S", ("w", j), capacity=float(lam[j]))
        for k in range(R):
            if n[k, j] > 0:
                g.add_edge(("w", j), ("in", k), capacity=float(n[k, j]))
    for k in range(R):
        g.add_edge(("in", k), ("out", k), capacity=float(n[k].max()))
        g.add_edge(("out", k), "T", capacity=float(n[k].max()))
    if "T" not in g:
        return Dispatch(np.zeros((R, K)), 0.0, np.zeros(R), np.zeros(R))
    value, flow = nx.maximum_flow(g, "S", "T", flow_func=preflow_push)
    x = np.zeros((R, K))
    for j in range(K):
        for k in range(R):
            x[k, j] = flow.get(("w", j), {}).get(("in", k), 0.0)
    return Dispatch(x, float(value), _util(x, n), np.zeros(R))


def capacity_scale(n, mix) -> float:
    """Largest ``a`` such that rates ``a * mix`` (K,) are served in full: an LP in (x, a)."""
    from scipy.optimize import linprog

    n, mix = _check(n, mix)
    R, K = n.shape
    inv = np.where(n > 0, 1.0 / np.where(n > 0, n, 1), 0.0)
    A_eq = np.zeros((K, R * K + 1))
    A_eq[:, :-1] = np.kron(np.ones((1, R)), np.eye(K))
    A_eq[:, -1] = -mix
    A_ub = np.zeros((R, R * K + 1))
    for k in range(R):
        A_ub[k, k * K:(k + 1) * K] = inv[k]
    bounds = [(0, None) if n[k, j] > 0 else (0, 0) for k in range(R) for j in range(K)] + [(0, None)]
    c = np.zeros(R * K + 1)
    c[-1] = -1.0
    r = linprog(c, A_ub=A_ub, b_ub=np.ones(R), A_eq=A_eq, b_eq=np.zeros(K), bounds=bounds, method="highs")
    if r.status != 0:
        raise RuntimeError(f"capacity LP failed: {r.message}")
    return float(r.x[-1])
