"""Ability estimates with fixed item parameters: EAP, MAP, MLE and WLE.

``resp`` is (T, N) float64 over the bank's items: 1 correct, 0 wrong, NaN not administered.

* EAP: posterior mean / SD on the quadrature grid (N(mu, sigma^2) prior), like mirt/catR.
* MAP: mode of the same posterior; SE = 1 / sqrt(I(theta) + 1 / sigma^2).
* MLE: maximiser of the log-likelihood inside ``theta_lim``; all-correct / all-wrong patterns
  have none and return the bound with ``at_bound`` set. SE = 1 / sqrt(I(theta)).
* WLE (Warm 1989): root of  l'(theta) + J(theta) / (2 I(theta)) = 0  with
  J = sum_i P_i' P_i'' / (P_i Q_i); finite for extreme patterns under 1PL/2PL. SE = 1/sqrt(I).

Modes and roots: the estimating equation is scanned on ``grid_points`` nodes over ``theta_lim``
(per-item terms on the grid summed by matrix products, :func:`grid_tables` / :func:`grid_sums`);
the downward zero crossing nearest the grid maximum of the objective (log-likelihood, + log prior,
+ 0.5 log I for WLE) is refined by Illinois regula falsi to a bracket of 1e-14 (vectorised over
examinees; :func:`solve`). An adaptive test keeps the grid sums as running totals, so each step
costs O(grid) plus a few evaluations on the administered items.
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


def _derivs(a, d, g, theta: np.ndarray, Y: np.ndarray, obs: np.ndarray):
    """Score l'(theta), test information I and Warm's J at theta (T,), each (T,), for items
    ``a, d, g`` (N,) and answers ``Y``/``obs`` (T, N) (0 and False where not administered)."""
    a, d, g = a[None, :], d[None, :], g[None, :]
    z = np.clip(theta[:, None] * a + d, -35, 35)
    sig = 1.0 / (1.0 + np.exp(-z))
    p = g + (1 - g) * sig
    # P' = (1-g) a s (1-s), P'' = P' a (1-2s), P Q = P (1-g)(1-s): divide (1 - s) out analytically
    base = obs * (1 - g) * a * a * sig * sig * (1 - sig) / p  # P'^2 / (P Q)
    score = np.sum(obs * (Y - p) * a * sig / p, axis=1)  # sum (y - P) P' / (P Q)
    info = np.sum(base, axis=1)
    J = np.sum(base * a * (1 - 2 * sig), axis=1)  # sum P' P'' / (P Q)
    return score, info, J


def grid_tables(a, d, g, grid: np.ndarray) -> dict[str, np.ndarray]:
    """Per-item terms of the log-likelihood and its estimating equations at each grid node,
    each (G, N): summed over an examinee's items (matrix products here, running sums in an
    adaptive test) they give log L, l', I and J on the whole grid at once."""
    log_p, log_q = log_irf(grid, a, d, g)
    z = np.clip(grid[:, None] * a[None, :] + d[None, :], -35, 35)
    sig = 1.0 / (1.0 + np.exp(-z))
    p = g[None, :] + (1 - g[None, :]) * sig
    base = (1 - g[None, :]) * a[None, :] ** 2 * sig * sig * (1 - sig) / p
    return {
        "log_p": log_p,
        "log_q": log_q,
        "y_score": a[None, :] * sig / p,  # (y - P) a s / P = y (a s / P) - a s
        "score": a[None, :] * sig,
        "info": base,
        "J": base * a[None, :] * (1 - 2 * sig),
    }


def grid_sums(tables: dict, Y: np.ndarray, obs: np.ndarray) -> dict[str, np.ndarray]:
    """log L, l', I and J of each pattern at each grid node: (T, G) each."""
    obs = obs.astype(np.float64)
    return {
        "ll": Y @ tables["log_p"].T + (obs - Y) @ tables["log_q"].T,
        "score": Y @ tables["y_score"].T - obs @ tables["score"].T,
        "info": obs @ tables["info"].T,
        "J": obs @ tables["J"].T,
    }


def objective_target(sums: dict, grid, method, prior):
    """The objective (log L, + log prior for MAP, + 0.5 log I for WLE) and the estimating
    equation on the grid, (T, G) each, from :func:`grid_sums`."""
    ll, score = sums["ll"], sums["score"]
    if method == "map":
        return (
            ll - 0.5 * ((grid[None, :] - prior[0]) / prior[1]) ** 2,
            score - (grid[None, :] - prior[0]) / prior[1] ** 2,
        )
    if method == "wle":
        info = np.maximum(sums["info"], 1e-300)
        return ll + 0.5 * np.log(info), score + sums["J"] / (2 * info)
    return ll, score


def _target(a, d, g, theta, Y, obs, method, prior):
    score, info, J = _derivs(a, d, g, theta, Y, obs)
    if method == "map":
        return score - (theta - prior[0]) / prior[1] ** 2
    if method == "wle":
        return score + J / (2 * np.maximum(info, 1e-300))
    return score


def solve(a, d, g, Y, obs, method, prior, grid, obj, f):
    """Roots of the estimating equation, vectorised over patterns.

    ``obj`` and ``f`` (T, G): objective and estimating equation on ``grid``. The downward zero
    crossing of f nearest the grid maximum of the objective brackets the root; the Illinois
    variant of regula falsi shrinks the bracket to 1e-14 (superlinear: a handful of
    evaluations where bisection needs 48). Patterns without a crossing take the bound the score
    points to. Returns (theta (T,), at_bound (T,) bool).
    """
    T, G = f.shape
    best = obj.argmax(axis=1)
    down = (f[:, :-1] > 0) & (f[:, 1:] <= 0)  # (T, G-1): a maximum lies in [grid_j, grid_j+1]
    # the crossing nearest the grid optimum of the objective (Warm's 3PL root need not be exact there)
    dist = np.where(down, np.abs(np.arange(G - 1)[None, :] + 0.5 - best[:, None]), np.inf)
    j = dist.argmin(axis=1)
    rows = np.arange(T)
    bracket = down[rows, j]
    left, right = grid[j].astype(np.float64), grid[j + 1].astype(np.float64)
    fl, fr = f[rows, j].copy(), f[rows, j + 1].copy()  # fl > 0 >= fr on bracketed rows
    x = np.where(fr == 0, right, 0.5 * (left + right))
    side = np.zeros(T, dtype=np.int8)  # the end that moved last: -1 left, +1 right
    todo = np.flatnonzero(bracket & (fr != 0))
    for _ in range(200):
        if todo.size == 0:
            break
        lt, rt, flt, frt = left[todo], right[todo], fl[todo], fr[todo]
        xs = rt - frt * (rt - lt) / (frt - flt)
        xs = np.where((xs > lt) & (xs < rt), xs, 0.5 * (lt + rt))
        fx = _target(a, d, g, xs, Y[todo], obs[todo], method, prior)
        x[todo] = xs
        pos = fx > 0  # the root lies right of xs: move the left end, else the right end
        newl, newr = np.where(pos, xs, lt), np.where(pos, rt, xs)
        newfl, newfr = np.where(pos, fx, flt), np.where(pos, frt, fx)
        last = side[todo]
        # Illinois: an end kept twice in a row has its value halved, so that it moves next
        newfr = np.where(pos & (last == -1), 0.5 * newfr, newfr)
        newfl = np.where(~pos & (last == 1), 0.5 * newfl, newfl)
        left[todo], right[todo], fl[todo], fr[todo] = newl, newr, newfl, newfr
        side[todo] = np.where(pos, -1, 1)
        done = (fx == 0) | (newr - newl <= 1e-14 * np.maximum(1.0, np.abs(xs)))
        todo = todo[~done]
    edge = np.where(f[:, 0] <= 0, grid[0], grid[-1])  # no interior optimum: where the score points
    return np.where(bracket, x, edge), ~bracket


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
    obs = ~np.isnan(resp)
    Y = np.where(obs, resp, 0.0)
    sums = grid_sums(grid_tables(bank.a, bank.d, bank.g, grid), Y, obs)
    obj, f = objective_target(sums, grid, method, prior)
    theta, at_bound = solve(bank.a, bank.d, bank.g, Y, obs, method, prior, grid, obj, f)
    se = standard_error(bank.a, bank.d, bank.g, theta, Y, obs, method, prior)
    return (theta, se, at_bound) if return_flags else (theta, se)


def standard_error(a, d, g, theta, Y, obs, method, prior=(0.0, 1.0)) -> np.ndarray:
    """1 / sqrt(I(theta)) (MAP: 1 / sqrt(I + 1 / sigma^2)), (T,)."""
    _, info, _ = _derivs(a, d, g, theta, Y, obs)
    if method == "map":
        info = info + 1.0 / prior[1] ** 2
    with np.errstate(divide="ignore"):
        return 1.0 / np.sqrt(info)
