"""Marginal maximum likelihood calibration of 1PL/2PL/3PL items by EM on a fixed quadrature.

Bock-Aitkin EM, the algorithm mirt runs for a unidimensional model (theta ~ N(0, 1), fixed):

* E-step, for every model m and quadrature node q, with Y (M, N) the 0/1 answers (0 where
  missing) and obs (M, N) the observed mask::

      log L[m, q] = Y @ log P(theta_q).T + (obs - Y) @ log(1 - P(theta_q)).T        (M, Q)
      W = softmax_q(log L + log w_q);  r = Y.T @ W,  n = obs.T @ W                  (N, Q)

  Missing cells drop out of both products, so nothing is imputed.
* M-step: every item maximises ``sum_q r log P + (n - r) log(1 - P)`` over (a, d[, logit g]) by
  batched Fisher scoring (3x3 systems solved for all items at once) with step halving, so each
  cycle raises the marginal log-likelihood (a generalised EM; tested with hypothesis).

Convergence: the largest absolute change of any a, d or g between cycles below ``tol`` (mirt's
rule). A run that stops at ``max_iter`` is kept with ``fit["converged"] = False`` and a warning.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from icml26.atlas.bank import MODELS, ItemBank
from icml26.atlas.data import Responses, clean
from icml26.core.errors import UserError

__all__ = [
    "EMConfig",
    "calibrate",
    "quadrature",
    "log_irf",
    "em_fit",
    "MIN_EXAMINEES",
    "G_PRIOR_3PL",
]

PX_TOL = 0.01  # PX-EM rescales only while the aggregate posterior is off N(0, 1) by more
MIN_EXAMINEES = {"1PL": 20, "2PL": 50, "3PL": 500}
# Beta(5, 17) on g (mode 0.2, mean 0.23): the BILOG-style prior mirt users add to 3PL fits with
# ``PRIOR = (1-N, g, expbeta, 5, 17)``; ``calibrate(g_prior=None)`` fits plain ML instead.
G_PRIOR_3PL = (5.0, 17.0)
_SMALLER = {"3PL": "2PL", "2PL": "1PL"}


@dataclass(frozen=True)
class EMConfig:
    """EM settings (mirt's defaults where mirt has one).

    model: "1PL" (one common slope), "2PL" or "3PL". quadpts / theta_lim: the fixed
    quadrature (61 nodes on [-6, 6]). tol: largest parameter change to stop. max_iter: EM cycles.
    newton_steps: at most this many Fisher-scoring steps per M-step (stops when steps
    fall under 1e-9); too few make EM stall early with a small parameter change. g_start: 3PL starting lower asymptote.
    g_prior: optional Beta(alpha, beta) prior on g (None = plain ML, mirt's default; the
    :func:`calibrate` front end adds :data:`G_PRIOR_3PL` to 3PL fits unless told otherwise). With
    a prior, EM maximises the log-likelihood plus the log prior density of the g's, and
    ``loglik_trace`` traces that sum (``loglik`` stays the plain marginal log-likelihood).
    a_max: |a| bound, keeps nearly constant items from running away (mirt has none).
    accelerate: "squarem" (default) or None for plain EM (mirt accelerates too, with Ramsay's
    method).
    px: parameter-expanded EM (Liu, Rubin & Wu 1998): after each M-step the items are rescaled
    so that the examinees' aggregate posterior is N(0, 1) in mean and SD, when the log-likelihood
    does not fall, until mean and SD are within PX_TOL = 0.01 (then plain EM, whose fixed point
    is kept); it removes EM's slow drift of the latent scale
    (3PL banks with steep items otherwise need thousands of cycles, as ATLAS ran mirt for).
    """

    model: str = "3PL"
    quadpts: int = 61
    theta_lim: tuple[float, float] = (-6.0, 6.0)
    tol: float = 1e-4
    max_iter: int = 500
    newton_steps: int = 20
    g_start: float = 0.15
    g_prior: tuple[float, float] | None = None
    a_max: float = 30.0
    accelerate: str | None = "squarem"
    px: bool = True

    def __post_init__(self) -> None:
        if self.accelerate not in (None, "squarem"):
            raise UserError(f"`accelerate` must be None or 'squarem'; got {self.accelerate!r}")
        if self.model not in MODELS:
            raise UserError(f"`model` must be one of {', '.join(MODELS)}; got {self.model!r}")
        if self.quadpts < 5:
            raise UserError(f"`quadpts` must be >= 5; got {self.quadpts}")
        lo, hi = self.theta_lim
        if not lo < hi:
            raise UserError(
                f"`theta_lim` must be (low, high) with low < high; got {self.theta_lim}"
            )
        if self.tol <= 0 or self.max_iter < 1 or self.newton_steps < 1:
            raise UserError("`tol` must be > 0, `max_iter` and `newton_steps` >= 1")
        if not 0 < self.g_start < 1:
            raise UserError(f"`g_start` must be in (0, 1); got {self.g_start}")
        if self.g_prior is not None and min(self.g_prior) <= 0:
            raise UserError(f"`g_prior` must be Beta(alpha > 0, beta > 0); got {self.g_prior}")


def quadrature(quadpts: int = 61, theta_lim=(-6.0, 6.0)) -> tuple[np.ndarray, np.ndarray]:
    """Nodes (Q,) and normalised N(0, 1) weights (Q,), float64, equally spaced as in mirt."""
    nodes = np.linspace(theta_lim[0], theta_lim[1], quadpts)
    w = np.exp(-0.5 * nodes**2)
    return nodes, w / w.sum()


def log_irf(theta, a, d, g) -> tuple[np.ndarray, np.ndarray]:
    """Stable ``(log P, log(1 - P))``, each (T, N), for theta (T,) and items (N,)."""
    z = np.asarray(theta, dtype=np.float64)[:, None] * a[None, :] + d[None, :]
    e = np.exp(-np.abs(z))
    l1p = np.log1p(e)
    log_sig = -(np.maximum(-z, 0.0) + l1p)  # log sigmoid(z)
    log_1m_sig = -(np.maximum(z, 0.0) + l1p)  # log sigmoid(-z)
    if not np.any(g):
        return log_sig, log_1m_sig
    sig = np.exp(log_sig)
    g = g[None, :]
    with np.errstate(divide="ignore"):
        log_p = np.log(g + (1.0 - g) * sig)
    return log_p, np.log1p(-g) + log_1m_sig


def e_step(Y, OmY, a, d, g, nodes, logw, complete: bool = False):
    """Posterior weights: returns (marginal loglik, r (N, Q), n (N, Q), post (Q,)).

    ``complete``: no missing cell (OmY = 1 - Y), which saves two of the four matrix products.
    """
    log_p, log_q = log_irf(nodes, a, d, g)  # (Q, N)
    if complete:
        ll = Y @ (log_p - log_q).T
        ll += log_q.sum(axis=1)[None, :] + logw[None, :]
    else:
        ll = Y @ log_p.T
        ll += OmY @ log_q.T
        ll += logw[None, :]  # (M, Q)
    mx = ll.max(axis=1, keepdims=True)
    ll -= mx
    w = np.exp(ll, out=ll)
    s = w.sum(axis=1, keepdims=True)
    loglik = float(np.sum(np.log(s) + mx))
    w /= s
    r = Y.T @ w
    post = w.sum(axis=0)  # expected examinees at each node (Q,)
    n = np.broadcast_to(post[None, :], r.shape) if complete else (OmY.T @ w) + r
    return loglik, r, n, post


def _item_objective(a, d, g, r, n, nodes, g_prior):
    log_p, log_q = log_irf(nodes, a, d, g)  # (Q, N)
    f = np.sum(r.T * log_p + (n - r).T * log_q, axis=0)
    if g_prior is not None:
        al, be = g_prior
        with np.errstate(divide="ignore"):
            f = f + (al - 1) * np.log(g) + (be - 1) * np.log1p(-g)
    return f


def _score_fisher(a, d, g, r, n, nodes, model, g_prior):
    """Gradient (N, k) and expected information (N, k, k) in (a, d[, logit g])."""
    z = np.clip(nodes[None, :] * a[:, None] + d[:, None], -35, 35)  # (N, Q)
    sig = 1.0 / (1.0 + np.exp(-z))
    gg = g[:, None]
    p = gg + (1 - gg) * sig
    pq = p * (1 - p)
    s = sig / p  # dP/dd / (P(1-P))
    resid = r - n * p
    cols = [s * nodes[None, :], s]
    if model == "3PL":
        cols.append(gg / p)  # dP/dlogit(g) / (P(1-P))
    J = np.stack(cols, axis=-1)  # (N, Q, k)
    grad = np.einsum("nq,nqk->nk", resid, J)
    H = np.einsum("nq,nqk,nql->nkl", n * pq, J, J)
    if model == "3PL" and g_prior is not None:
        al, be = g_prior
        grad[:, 2] += (al - 1) * (1 - g) - (be - 1) * g
        H[:, 2, 2] += (al + be - 2) * g * (1 - g)
    return grad, H


def m_step(a, d, g, r, n, nodes, cfg: EMConfig):
    """Fisher scoring with step halving, batched over the items still moving; new (a, d, g)."""
    if cfg.model == "1PL":
        return _m_step_1pl(a, d, r, n, nodes, cfg)
    three = cfg.model == "3PL"
    a, d, g = a.copy(), d.copy(), g.copy()
    active = np.arange(len(a))
    for _ in range(cfg.newton_steps):
        if active.size == 0:
            break
        A, D, G, rr, nn = a[active], d[active], g[active], r[active], n[active]
        f0 = _item_objective(A, D, G, rr, nn, nodes, cfg.g_prior)
        grad, H = _score_fisher(A, D, G, rr, nn, nodes, cfg.model, cfg.g_prior)
        k = H.shape[-1]
        ridge = 1e-9 * (np.trace(H, axis1=1, axis2=2)[:, None, None] + 1e-12) * np.eye(k)
        step = np.linalg.solve(H + ridge, grad[..., None])[..., 0]
        # shrink long steps as whole vectors (clipping components would break the ascent direction)
        step /= np.maximum(1.0, np.abs(step).max(axis=1, keepdims=True))
        LG = np.log(G) - np.log1p(-G) if three else None
        newA, newD, newG = A.copy(), D.copy(), G.copy()
        t = np.ones(len(A))
        todo = np.arange(len(A))
        for _h in range(10):
            A1 = np.clip(A[todo] + t[todo] * step[todo, 0], -cfg.a_max, cfg.a_max)
            D1 = D[todo] + t[todo] * step[todo, 1]
            G1 = (
                (1 / (1 + np.exp(-np.clip(LG[todo] + t[todo] * step[todo, 2], -15, 15))))
                if three
                else G[todo]
            )
            f1 = _item_objective(A1, D1, G1, rr[todo], nn[todo], nodes, cfg.g_prior)
            ok = f1 >= f0[todo] - 1e-12 * np.abs(f0[todo])
            newA[todo[ok]], newD[todo[ok]], newG[todo[ok]] = A1[ok], D1[ok], G1[ok]
            todo = todo[~ok]
            if todo.size == 0:
                break
            t[todo] *= 0.5
        moved = np.maximum(np.maximum(np.abs(newA - A), np.abs(newD - D)), np.abs(newG - G))
        a[active], d[active], g[active] = newA, newD, newG
        active = active[moved > 1e-9]
    return a, d, g


def _m_step_1pl(a, d, r, n, nodes, cfg: EMConfig):
    """1PL: one common slope. Per-item d steps and a pooled a step, accepted together only when
    the summed objective does not fall."""
    g = np.zeros_like(a)
    f_old = _item_objective(a, d, g, r, n, nodes, None).sum()
    for _ in range(cfg.newton_steps):
        grad, H = _score_fisher(a, d, g, r, n, nodes, "2PL", None)
        step_d = np.clip(grad[:, 1] / (H[:, 1, 1] + 1e-12), -1, 1)
        step_a = float(np.clip(grad[:, 0].sum() / (H[:, 0, 0].sum() + 1e-12), -1, 1))
        t, accepted = 1.0, False
        for _h in range(12):
            a1, d1 = np.clip(a + t * step_a, -cfg.a_max, cfg.a_max), d + t * step_d
            f1 = _item_objective(a1, d1, g, r, n, nodes, None).sum()
            if f1 >= f_old - 1e-12 * abs(f_old):
                accepted = True
                break
            t *= 0.5
        if not accepted:
            break
        moved = max(abs(a1[0] - a[0]), float(np.max(np.abs(d1 - d))))
        a, d, f_old = a1, d1, f1
        if moved < 1e-9:
            break
    return a, d, g


def start_values(Y, obs, cfg: EMConfig):
    """a from the item-rest correlation (a ~ 1.7 r / sqrt(1 - r^2)), d from the p-value.

    The rest score of model m for item j is m's proportion correct on its other observed items;
    the correlation runs over the models that answered j.
    """
    nobs = obs.sum(0)
    p = np.clip(Y.sum(0) / np.maximum(nobs, 1), 0.02, 0.98)
    others = obs.sum(1)[:, None] - obs  # (M, N) observed items besides j
    rest = (Y.sum(1)[:, None] - Y) / np.maximum(others, 1)
    w = obs
    mean_rest = (w * rest).sum(0) / np.maximum(nobs, 1)
    mean_y = (w * Y).sum(0) / np.maximum(nobs, 1)
    rc = (rest - mean_rest[None, :]) * w
    yc = (Y - mean_y[None, :]) * w
    num = (rc * yc).sum(0)
    den = np.sqrt((rc**2).sum(0) * (yc**2).sum(0)) + 1e-12
    rho = np.clip(num / den, -0.9, 0.9)
    a = np.clip(1.7 * rho / np.sqrt(1 - rho**2), -3, 3)
    # keep the sign: a small negative slope (a mis-keyed item) starts at -0.2, not +0.2
    a = np.where(np.abs(a) < 0.2, np.where(a < 0, -0.2, 0.2), a)
    if cfg.model == "1PL":
        a = np.full_like(a, 1.0)
    g = np.full(len(p), cfg.g_start if cfg.model == "3PL" else 0.0)
    pp = np.clip((p - g) / (1 - g), 0.02, 0.98)
    d = np.log(pp / (1 - pp)) * np.sqrt(1 + 0.35 * a**2)
    return a, d, g


def log_prior(g, cfg: EMConfig) -> float:
    """Log density (up to a constant) of the Beta ``cfg.g_prior`` at the g's; 0 without one."""
    if cfg.model != "3PL" or cfg.g_prior is None:
        return 0.0
    al, be = cfg.g_prior
    with np.errstate(divide="ignore"):
        return float(np.sum((al - 1) * np.log(g) + (be - 1) * np.log1p(-g)))


def _pack(a, d, g, three):
    return np.concatenate([a, d, np.log(g) - np.log1p(-g)]) if three else np.concatenate([a, d])


def _unpack(x, n, three, cfg):
    a, d = np.clip(x[:n], -cfg.a_max, cfg.a_max), x[n : 2 * n]
    g = 1 / (1 + np.exp(-np.clip(x[2 * n :], -15, 15))) if three else np.zeros(n)
    return a, d, g


def em_fit(Y, obs, cfg: EMConfig, progress=None, init=None):
    """Run EM on arrays ``Y, obs`` (M, N) float64; returns (a, d, g, fit_log dict).

    ``cfg.accelerate="squarem"`` (default) runs SQUAREM (Varadhan & Roland 2008, scheme S3) on
    (a, d, logit g): two EM maps, one extrapolated point, kept only if its marginal
    log-likelihood is not lower (otherwise the second EM map), so the trace never falls.
    The extrapolation is accepted only if it beats the second map's log-likelihood.
    ``iterations`` counts EM maps (M-steps).
    """
    nodes, w = quadrature(cfg.quadpts, cfg.theta_lim)
    logw = np.log(w)
    OmY = obs - Y
    complete = bool(obs.all())
    a, d, g = init if init is not None else start_values(Y, obs, cfg)
    n_items, three = len(a), cfg.model == "3PL"
    trace: list[float] = []
    converged = False
    tick = progress.task(f"EM {cfg.model}", total=cfg.max_iter) if progress is not None else None
    maps, extrapolated, max_alpha = 0, 0, 1.0
    M = max(Y.shape[0], 1)
    px_on = cfg.px

    def em_map(a, d, g, r, n, post, ll):
        """One M-step, parameter-expanded (PX-EM) while the latent scale is still off."""
        nonlocal maps, px_on
        a1, d1, g1 = m_step(a, d, g, r, n, nodes, cfg)
        maps += 1
        if tick is not None:
            tick(1)
        if px_on:
            mu = float(post @ nodes) / M
            sd = float(np.sqrt(max(post @ (nodes - mu) ** 2 / M, 1e-12)))
            # off for good once the scale is within 1%: the fixed point stays plain EM's
            px_on = abs(mu) > PX_TOL or abs(sd - 1) > PX_TOL
            if px_on:  # theta = mu + sd z: put the items on z's scale
                a2, d2 = a1 * sd, d1 + a1 * mu
                cand = e_step(Y, OmY, a2, d2, g1, nodes, logw, complete)
                if cand[0] + log_prior(g1, cfg) >= ll + log_prior(g, cfg):
                    delta = max(
                        np.max(np.abs(a2 - a)), np.max(np.abs(d2 - d)), np.max(np.abs(g1 - g))
                    )
                    return (a2, d2, g1), delta, cand
        delta = max(np.max(np.abs(a1 - a)), np.max(np.abs(d1 - d)), np.max(np.abs(g1 - g)))
        return (a1, d1, g1), delta, e_step(Y, OmY, a1, d1, g1, nodes, logw, complete)

    loglik, r, n, post = e_step(Y, OmY, a, d, g, nodes, logw, complete)
    trace.append(loglik + log_prior(g, cfg))
    while maps < cfg.max_iter:
        p1, delta, (ll1, r1, n1, post1) = em_map(a, d, g, r, n, post, loglik)
        trace.append(ll1 + log_prior(p1[2], cfg))
        if delta < cfg.tol:
            a, d, g, converged = *p1, True
            break
        if cfg.accelerate != "squarem" or maps >= cfg.max_iter:
            a, d, g, r, n, post, loglik = *p1, r1, n1, post1, ll1
            continue
        p2, delta, e2 = em_map(*p1, r1, n1, post1, ll1)
        if delta < cfg.tol:
            a, d, g, converged = *p2, True
            break
        x0, x1, x2 = _pack(a, d, g, three), _pack(*p1, three), _pack(*p2, three)
        rr, v = x1 - x0, x2 - 2 * x1 + x0
        alpha = -float(np.linalg.norm(rr) / max(np.linalg.norm(v), 1e-300))
        alpha = max(min(alpha, -1.0), -max_alpha)
        if alpha < -1.0:
            xn = _unpack(x0 - 2 * alpha * rr + alpha**2 * v, n_items, three, cfg)
            en = e_step(Y, OmY, *xn, nodes, logw, complete)
            # compare log posteriors (the prior on g moves with the extrapolated g)
            if np.isfinite(en[0]) and en[0] + log_prior(xn[2], cfg) >= e2[0] + log_prior(
                p2[2], cfg
            ):
                a, d, g = xn
                loglik, r, n, post = en
                trace.append(loglik + log_prior(g, cfg))
                extrapolated += 1
                max_alpha = max_alpha * 4 if alpha == -max_alpha else max_alpha
                continue
            max_alpha = max(1.0, max_alpha / 4)
        else:
            max_alpha *= 4
        a, d, g = p2
        loglik, r, n, post = e2
        trace.append(loglik + log_prior(g, cfg))
    final = e_step(Y, OmY, a, d, g, nodes, logw, complete)[0]
    if final + log_prior(g, cfg) != trace[-1]:
        trace.append(final + log_prior(g, cfg))
    fit = {
        "converged": converged,
        "iterations": maps,
        "extrapolations": extrapolated,
        "accelerate": cfg.accelerate,
        "loglik": final,
        "loglik_trace": trace,
        "quadpts": cfg.quadpts,
        "theta_lim": list(cfg.theta_lim),
        "tol": cfg.tol,
        "g_prior": list(cfg.g_prior) if cfg.g_prior and cfg.model == "3PL" else None,
        "log_prior": log_prior(g, cfg),
        "n_models": int(Y.shape[0]),
        "n_items": int(Y.shape[1]),
        "missing_share": float(1 - obs.mean()) if obs.size else 0.0,
    }
    return a, d, g, fit


def calibrate(
    R,
    model: str = "3PL",
    quadpts: int = 61,
    theta_lim: tuple[float, float] = (-6.0, 6.0),
    tol: float = 1e-4,
    chunk: int | None = None,
    *,
    max_iter: int = 500,
    g_prior: tuple[float, float] | None | str = "default",
    link_formula: str = "correct",
    drop_constant_models: bool = True,
    force: bool = False,
    progress=None,
) -> ItemBank:
    """Fit an item bank to a response matrix.

    Parameters
    ----------
    R : Responses, or ndarray of shape (n_models, n_items) with 0/1 and NaN for missing
    model : "1PL" | "2PL" | "3PL"
    chunk : int or None
        None fits all items concurrently (the default). An int fits column chunks of that many
        items separately and links them to the first chunk by mean/sigma on the persons' EAP
        scores (see :mod:`icml26.atlas.linking`; ``link_formula`` "correct" or "official").
    drop_constant_models : bool
        ATLAS drops all-right / all-wrong models (default True); mirt keeps them (False).
    force : bool
        Allow fewer examinees than MIN_EXAMINEES[model] (3PL 500, 2PL 50).
    g_prior : (alpha, beta), None or "default"
        Beta prior on the 3PL lower asymptotes. "default" is :data:`G_PRIOR_3PL` = Beta(5, 17)
        for 3PL (ignored for 1PL/2PL); None fits plain ML (mirt's default without a PRIOR).

    Returns an :class:`ItemBank` with the fit log and the exclusions made while cleaning.
    """
    if isinstance(g_prior, str):
        if g_prior != "default":
            raise UserError(f"`g_prior` must be (alpha, beta), None or 'default'; got {g_prior!r}")
        g_prior = G_PRIOR_3PL if model == "3PL" else None
    cfg = EMConfig(
        model=model,
        quadpts=quadpts,
        theta_lim=tuple(theta_lim),
        tol=tol,
        max_iter=max_iter,
        g_prior=g_prior,
    )
    if not isinstance(R, Responses):
        R = Responses.from_array(R)
    cleaned, excluded = clean(R, drop_constant_models=drop_constant_models)
    n_models = cleaned.matrix.shape[0]
    if n_models < MIN_EXAMINEES[model] and not force:
        smaller = _SMALLER.get(model)
        hint = f"use model={smaller!r} (`--model {smaller}`) or " if smaller else ""
        raise UserError(
            f"{model} needs at least {MIN_EXAMINEES[model]} examinees; {R.source} has {n_models} after "
            f"cleaning: {hint}force it (`--force`)"
        )
    if chunk is not None:
        from icml26.atlas.linking import calibrate_chunked

        bank = calibrate_chunked(cleaned, cfg, chunk, link_formula=link_formula, progress=progress)
    else:
        obs = (~np.isnan(cleaned.matrix)).astype(np.float64)
        Y = np.nan_to_num(cleaned.matrix, nan=0.0)
        a, d, g, fit = em_fit(Y, obs, cfg, progress=progress)
        bank = ItemBank(cleaned.items, a, d, g, model=model, fit=fit)
    bank.excluded = excluded
    if not bank.fit.get("converged", True):
        warnings.warn(
            f"EM did not converge in {max_iter} cycles (tol {tol}); the bank says converged: false",
            RuntimeWarning,
            stacklevel=2,
        )
    return bank
