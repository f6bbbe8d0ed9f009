"""Ability estimates with fixed item parameters: EAP, MAP, MLE and WLE.

``resp`` is (T, N) float64 over the bank's items: 1 correct, 0 wrong, NaN not administered.

* EAP: posterior mean / SD on the quadrature grid (N(mu, sigma^2) prior), like mirt/catR.
* MAP: mode of the same posterior; SE = 1 / sqrt(I(theta) + 1 / sigma^2).
* MLE: maximiser of the log-likelihood inside ``theta_lim``; all-correct / all-wrong patterns
  have none and return the bound with ``at_bound`` set. SE = 1 / sqrt(I(theta)).
* WLE (Warm 1989): root of  l'(theta) + J(theta) / (2 I(theta)) = 0  with
  J = sum_i P_i' P_i'' / (P_i Q_i); finite for extreme patterns under 1PL/2PL. SE = 1/sqrt(I).

Modes and roots: the estimating equation is scanned on ``grid_points`` nodes over ``theta_lim``;
the downward zero crossing nearest the grid maximum of the objective (log-likelihood, + log prior,
+ 0.5 log I for WLE) is refined by 48 bisection steps to ~1e-15 (vectorised over examinees).
"""

from __future__ import annotations

import numpy as np

from icml26.atlas.bank import ItemBank
from icml26.atlas.calibrate import log_irf, quadrature
from icml26.core.errors import UserError

__all__ = ["estimate_theta", "eap", "METHODS"]

METHODS = ("eap", "map", "mle", "wle")


def _prep(bank: ItemBank, resp) -> np.ndarray:
    resp = np.atleast_2d(np.asarray(resp, dtype=np.float64))
    if resp.shape[1] != bank.n_items:
        raise UserError(f"responses have {resp.shape[1]} items; the bank has {bank.n_items}")
    bad = ~np.isnan(resp) & (resp != 0) & (resp != 1)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise UserError(
            f"answer to item {bank.ids[c]!r} (row {r}) must be 0 or 1; got {resp[r, c]}"
        )
    return resp


def loglik_grid(bank: ItemBank, resp: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """log L(theta) of each pattern at each node: (T, G) float64."""
    obs = ~np.isnan(resp)
    Y = np.where(obs, resp, 0.0)
    log_p, log_q = log_irf(nodes, bank.a, bank.d, bank.g)
    return Y @ log_p.T + (obs - Y) @ log_q.T


def eap(bank: ItemBank, resp, quadpts: int = 61, theta_lim=(-6.0, 6.0), prior=(0.0, 1.0)):
    """EAP theta and posterior SD, each (T,)."""
    resp = _prep(bank, resp)
    nodes, _ = quadrature(quadpts, theta_lim)
    lp = loglik_grid(bank, resp, nodes) - 0.5 * ((nodes - prior[0]) / prior[1]) ** 2
    lp -= lp.max(axis=1, keepdims=True)
    w = np.exp(lp)
    w /= w.sum(axis=1, keepdims=True)
    mean = w @ nodes
    sd = np.sqrt(np.maximum(w @ nodes**2 - mean**2, 0.0))
    return mean, sd


def _derivs(bank: ItemBank, theta: np.ndarray, resp: np.ndarray):
    """Score l'(theta), test information I and Warm's J at theta (T,), each (T,)."""
    obs = ~np.isnan(resp)
    Y = np.where(obs, resp, 0.0)
    a, d, g = bank.a[None, :], bank.d[None, :], bank.g[None, :]
    z = np.clip(theta[:, None] * a + d, -35, 35)
    sig = 1.0 / (1.0 + np.exp(-z))
    p = g + (1 - g) * sig
    # P' = (1-g) a s (1-s), P'' = P' a (1-2s), P Q = P (1-g)(1-s): divide (1 - s) out analytically
    base = obs * (1 - g) * a * a * sig * sig * (1 - sig) / p  # P'^2 / (P Q)
    score = np.sum(obs * (Y - p) * a * sig / p, axis=1)  # sum (y - P) P' / (P Q)
    info = np.sum(base, axis=1)
    J = np.sum(base * a * (1 - 2 * sig), axis=1)  # sum P' P'' / (P Q)
    return score, info, J


def _objective_grid(bank, resp, grid, method, prior):
    ll = loglik_grid(bank, resp, grid)
    if method == "map":
        ll = ll - 0.5 * ((grid[None, :] - prior[0]) / prior[1]) ** 2
    elif method == "wle":
        obs = ~np.isnan(resp)
        info = bank.information(grid)  # (G, N)
        ll = ll + 0.5 * np.log(np.maximum(obs.astype(np.float64) @ info.T, 1e-300))
    return ll


def _target(bank, theta, resp, method, prior):
    score, info, J = _derivs(bank, theta, resp)
    if method == "map":
        return score - (theta - prior[0]) / prior[1] ** 2
    if method == "wle":
        return score + J / (2 * np.maximum(info, 1e-300))
    return score


def estimate_theta(
    bank: ItemBank,
    resp,
    method: str = "eap",
    *,
    quadpts: int = 61,
    theta_lim: tuple[float, float] = (-6.0, 6.0),
    prior: tuple[float, float] = (0.0, 1.0),
    grid_points: int = 121,
    return_flags: bool = False,
):
    """Ability and standard error for each response pattern.

    Parameters
    ----------
    resp : array (T, N) or (N,), 0/1/NaN over ``bank``'s items
    method : "eap" | "map" | "mle" | "wle"
    return_flags : also return ``at_bound`` (T,) bool: no interior optimum, theta is the bound

    Returns ``(theta, se)`` of shape (T,) float64 (plus ``at_bound`` if asked).
    """
    if method not in METHODS:
        raise UserError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    resp = _prep(bank, resp)
    if method == "eap":
        theta, se = eap(bank, resp, quadpts, theta_lim, prior)
        flags = np.zeros(len(theta), dtype=bool)
        return (theta, se, flags) if return_flags else (theta, se)
    lo, hi = theta_lim
    grid = np.linspace(lo, hi, grid_points)
    obj = _objective_grid(bank, resp, grid, method, prior)  # (T, G)
    best = obj.argmax(axis=1)
    f = np.stack([_target(bank, np.full(len(resp), t), resp, method, prior) for t in grid], axis=1)
    down = (f[:, :-1] > 0) & (f[:, 1:] <= 0)  # (T, G-1): a maximum lies in [grid_j, grid_j+1]
    # the crossing nearest the grid optimum of the objective (Warm's 3PL root need not be exact there)
    dist = np.where(down, np.abs(np.arange(grid_points - 1)[None, :] + 0.5 - best[:, None]), np.inf)
    j = dist.argmin(axis=1)
    bracket = down[np.arange(len(resp)), j]
    left, right = grid[j], grid[j + 1]
    for _ in range(48):  # grid step / 2^48: ~1e-15
        mid = 0.5 * (left + right)
        go_right = _target(bank, mid, resp, method, prior) > 0
        left = np.where(bracket & go_right, mid, left)
        right = np.where(bracket & ~go_right, mid, right)
    edge = np.where(f[:, 0] <= 0, lo, hi)  # no interior optimum: the side the score points to
    theta = np.where(bracket, 0.5 * (left + right), edge)
    at_bound = ~bracket
    _, info, _ = _derivs(bank, theta, resp)
    if method == "map":
        info = info + 1.0 / prior[1] ** 2
    with np.errstate(divide="ignore"):
        se = 1.0 / np.sqrt(info)
    return (theta, se, at_bound) if return_flags else (theta, se)
