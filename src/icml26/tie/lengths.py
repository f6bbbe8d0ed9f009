"""Log-t output-length distributions (TIE, Sec. 3): fits, censoring, goodness of fit.

``X ~ LogT(mu, sigma, nu)`` means ``ln X = mu + sigma * T`` with ``T ~ Student-t(nu)``; the
density is ``t_nu((ln x - mu) / sigma) / (sigma x)``. The paper fixes ``nu = 3.5``; ``nu = inf`` is
the log-normal. The untruncated mean is infinite for every ``sigma > 0`` (E[e^{sigma T}] diverges),
so all moments used for scheduling are of ``min(X, x_max)`` (:mod:`icml26.tie.score`).

Observed lengths are integers ``L >= 1`` (tokens including EOS) and a completion that hit the
generation cap is *right-censored* (true length ``>= cap``). Fits therefore maximise the
interval-censored likelihood of integers: ``P(L = k) = F(k) - F(k - 1)`` for ``k < cap`` and
``P(L >= cap) = 1 - F(cap - 1)``; this is the exact likelihood of ``L = ceil(X)`` and needs no
jitter for the many tied short lengths (choice: the paper fits the continuous density).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special, stats

__all__ = ["LogT", "fit_logt", "fit_lognormal", "ks_statistic", "ks_test", "loglik", "MAX_LENGTH",
           "whatif_predictions"]

#: the largest integer length a draw is given: float64 holds integers exactly up to 2**53, and a
#: heavy log-t tail (small nu, large sigma, no cap) otherwise overflows the int64 cast
MAX_LENGTH = 2**53


@dataclass(frozen=True)
class LogT:
    """``ln X = mu + sigma * T``, ``T ~ t(nu)``; ``nu = math.inf`` is the log-normal."""

    mu: float
    sigma: float
    nu: float = 3.5

    def __post_init__(self) -> None:
        if not math.isfinite(self.mu):
            raise ValueError(f"mu must be finite; got {self.mu}")
        if not (self.sigma > 0 and math.isfinite(self.sigma)):
            raise ValueError(f"sigma must be > 0; got {self.sigma}")
        if not self.nu > 1:
            raise ValueError(f"nu must be > 1; got {self.nu}")

    def _z(self, x):
        x = np.asarray(x, dtype=float)
        with np.errstate(divide="ignore"):
            return (np.log(x) - self.mu) / self.sigma

    def _base_cdf(self, z):
        return special.ndtr(z) if math.isinf(self.nu) else special.stdtr(self.nu, z)

    def cdf(self, x):
        """P(X <= x); x > 0 (0 gives 0)."""
        return self._base_cdf(self._z(x))

    def sf(self, x):
        return self._base_cdf(-self._z(x))

    def logpdf(self, x):
        z = self._z(x)
        base = stats.norm.logpdf(z) if math.isinf(self.nu) else stats.t.logpdf(z, self.nu)
        return base - math.log(self.sigma) - np.log(np.asarray(x, dtype=float))

    def ppf(self, q):
        q = np.asarray(q, dtype=float)
        z = special.ndtri(q) if math.isinf(self.nu) else special.stdtrit(self.nu, q)
        return np.exp(self.mu + self.sigma * z)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Continuous draws (float64, shape (n,))."""
        t = rng.standard_normal(n) if math.isinf(self.nu) else rng.standard_t(self.nu, n)
        return np.exp(np.clip(self.mu + self.sigma * t, -700, 700))

    def sample_lengths(self, rng: np.random.Generator, n: int, cap: int | None = None):
        """Integer lengths ``ceil(X)`` in ``[1, MAX_LENGTH]`` and censor flags (``L >= cap``
        becomes ``cap``, True)."""
        L = np.clip(np.ceil(self.sample(rng, n)), 1, MAX_LENGTH)
        if cap is None:
            return L.astype(np.int64), np.zeros(n, dtype=bool)
        return np.minimum(L, cap).astype(np.int64), cap <= L

    def discrete_logpmf(self, k, censored=None):
        """log P(L = k) for integer k >= 1 (``censored``: log P(L >= k))."""
        k = np.asarray(k, dtype=float)
        lo, hi = self.cdf(k - 1), self.cdf(k)
        # the upper tail is computed through sf for precision
        p = np.where(np.log(np.maximum(k, 1e-300)) > self.mu, self.sf(k - 1) - self.sf(k), hi - lo)
        if censored is not None:
            p = np.where(np.asarray(censored, bool), self.sf(k - 1), p)
        return np.log(np.maximum(p, 1e-300))


def _check(lengths, censored):
    x = np.asarray(lengths, dtype=float).ravel()
    if x.size < 2:
        raise ValueError(f"need >= 2 lengths per prompt to fit a distribution; got {x.size}")
    if (x < 1).any() or (x != np.round(x)).any():
        raise ValueError(f"lengths must be integers >= 1; got min {x.min()}")
    c = np.zeros(x.size, bool) if censored is None else np.asarray(censored, bool).ravel()
    if c.shape != x.shape:
        raise ValueError(f"censored has shape {c.shape}, lengths {x.shape}")
    if c.all():
        raise ValueError(f"all {x.size} lengths are censored at the cap: the distribution is not identifiable "
                         "(raise the cap)")
    return x, c


def loglik(dist: LogT, lengths, censored=None) -> float:
    """Interval-censored log-likelihood of integer lengths (nats)."""
    x, c = _check(lengths, censored)
    return float(dist.discrete_logpmf(x, c).sum())


def _fit(x, c, nu, free_nu):
    lx = np.log(x)
    mu0 = float(np.median(lx))
    s0 = float(max(np.median(np.abs(lx - mu0)) * 1.4826, 0.1))
    # the likelihood of LogT.discrete_logpmf, on unique (value, censored) pairs with counts and
    # precomputed logs: the optimiser calls it hundreds of times per fit
    keys, w = np.unique(np.stack([x, c.astype(float)]), axis=1, return_counts=True)
    k, cen = keys[0], keys[1].astype(bool)
    with np.errstate(divide="ignore"):
        lo, hi = np.log(k - 1), np.log(k)
    w = w.astype(float)

    def nll(theta):
        mu, ls = theta[0], theta[1]
        v = 1 + math.exp(theta[2]) if free_nu else nu
        if not (-20 < ls < 5) or abs(mu) > 50 or (free_nu and not 1.01 <= v <= 1e4):
            return 1e12
        sg = math.exp(ls)
        zl, zh = (lo - mu) / sg, (hi - mu) / sg
        F = special.ndtr if math.isinf(v) else (lambda z: special.stdtr(v, z))
        upper = hi > mu
        p = np.where(upper, F(-zl) - F(-zh), F(zh) - F(zl))
        p = np.where(cen, F(-zl), p)
        return -float(w @ np.log(np.maximum(p, 1e-300)))

    th0 = [mu0, math.log(s0)] + ([math.log(2.5)] if free_nu else [])
    res = optimize.minimize(nll, th0, method="Nelder-Mead",
                            options={"xatol": 1e-5, "fatol": 1e-7, "maxiter": 2000})
    v = min(max(1 + math.exp(res.x[2]), 1.01), 1e4) if free_nu else nu  # free nu lives in [1.01, 1e4]
    return LogT(float(res.x[0]), float(math.exp(res.x[1])), float(v))


def fit_logt(lengths, censored=None, nu: float | None = 3.5) -> LogT:
    """MLE of (mu, sigma) with ``nu`` fixed (paper: 3.5), or of (mu, sigma, nu) with ``nu=None``.

    ``lengths``: integer token counts >= 1; ``censored``: True where the cap was hit.
    """
    if nu is not None and not nu > 1:
        raise ValueError(f"nu must be > 1 (or None to fit it); got {nu}")
    x, c = _check(lengths, censored)
    return _fit(x, c, nu, nu is None)


def fit_lognormal(lengths, censored=None) -> LogT:
    """MLE of the log-normal (a LogT with ``nu = inf``)."""
    x, c = _check(lengths, censored)
    return _fit(x, c, math.inf, False)


def ks_statistic(dist: LogT, lengths, censored=None) -> float:
    """sup_k |F_n(k) - F(k)| over the integer support below the cap (censored points count as
    mass at or above the cap, so the comparison stops below it)."""
    x, c = _check(lengths, censored)
    top = x[c].min() if c.any() else np.inf
    ks = np.unique(np.concatenate([x[x < top], x[x < top] - 1]))
    ks = ks[ks >= 0]
    if ks.size == 0:
        return 0.0
    emp = np.searchsorted(np.sort(x), ks, side="right") / x.size
    return float(np.abs(emp - dist.cdf(np.maximum(ks, 1e-300) * (ks > 0))).max())


def ks_test(lengths, censored=None, family: str = "logt", nu: float | None = 3.5, cap: int | None = None,
            n_boot: int = 99, seed: int = 0) -> tuple[float, float]:
    """KS goodness of fit with estimated parameters: ``(statistic, p_value)``.

    The p-value is a parametric bootstrap (Lilliefors-style): ``n_boot`` samples of the same size
    from the fitted model, discretised and censored at ``cap`` like the data, each refitted; p =
    (1 + #{D* >= D}) / (1 + n_boot). Replicates are drawn conditionally on not being entirely
    censored (the data are not, or they could not be fitted). ``family``: ``logt`` (``nu`` fixed, or free with None) or
    ``lognormal``.
    """
    x, c = _check(lengths, censored)
    if family not in ("logt", "lognormal"):
        raise ValueError(f"family must be logt or lognormal; got {family!r}")
    fit = (lambda a, b: fit_logt(a, b, nu)) if family == "logt" else fit_lognormal
    d = fit(x, c)
    D = ks_statistic(d, x, c)
    rng = np.random.default_rng(seed)
    cap = cap if cap is not None else (int(x[c].min()) if c.any() else None)
    hits = 0
    for _ in range(n_boot):
        xb, cb = d.sample_lengths(rng, x.size, cap)
        for _retry in range(50):  # condition on what the data satisfy: not every length censored
            if not cb.all():
                break
            xb, cb = d.sample_lengths(rng, x.size, cap)
        else:
            hits += 1  # an unfittable replicate counts as at least as extreme (conservative)
            continue
        if np.unique(xb).size < 2:
            xb = np.sort(xb)
            xb[-1] = xb[-1] + 1 if cap is None or xb[-1] + 1 < cap else xb[-1]
        hits += ks_statistic(fit(xb, cb), xb, cb) >= D - 1e-12
    return D, (1 + hits) / (1 + n_boot)


def whatif_predictions(requests, noise: float = 0.5, spread: float = 0.5, nu: float = 3.5, seed: int = 0) -> list:
    """Attach a *what-if* log-t prediction to each request of a trace that has no prompts.

    The story: each request's prompt has its own output-length distribution ``LogT(mu_i, sigma_i,
    nu)`` and the trace's ``output_tokens`` is one draw from it; the predictor knows that
    distribution. So ``sigma_i = noise * exp(spread * Z_i)`` (``Z_i`` standard normal: prompts
    differ in how dispersed their lengths are) and ``mu_i = ln(output_tokens) - sigma_i * T_i``
    (``T_i ~ t(nu)``; ``nu = inf``: normal). ``noise`` is the typical sigma, so it also sets how
    far the median ``exp(mu_i)`` misses the true length; ``spread = 0`` gives every request the
    same sigma (then TIE's tail term cannot change the order). Returns copies of the requests
    with ``meta["mu"]`` and ``meta["sigma"]`` (floats, nats) added; the input is not changed.
    """
    import dataclasses

    if not (noise > 0 and math.isfinite(noise)):
        raise ValueError(f"noise must be > 0; got {noise}")
    if not spread >= 0:
        raise ValueError(f"spread must be >= 0; got {spread}")
    if not nu > 1:
        raise ValueError(f"nu must be > 1; got {nu}")
    rng = np.random.default_rng(seed)
    n = len(requests)
    sigma = noise * np.exp(spread * rng.standard_normal(n))
    t = rng.standard_normal(n) if math.isinf(nu) else rng.standard_t(nu, n)
    mu = np.log([float(r.output_tokens) for r in requests]) - sigma * t
    return [dataclasses.replace(r, meta={**r.meta, "mu": float(mu[i]), "sigma": float(sigma[i])})
            for i, r in enumerate(requests)]
