"""Mean/sigma linking of separately fitted item chunks onto one scale, and chunked calibration.

If the reference chunk's scale relates to chunk k's by ``theta_ref = A * theta_k + B``, an item of
chunk k keeps every probability when written on the reference scale as

    a* = a / A,        d* = d - a * B / A        (b* = A * b + B)

because ``a* theta_ref + d* = (a / A)(A theta_k + B) + d - a B / A = a theta_k + d``.
Mean/sigma takes ``A = sd(theta_ref) / sd(theta_k)``, ``B = mean(theta_ref) - A mean(theta_k)``
from the same persons' EAP scores on each chunk. The ATLAS code's ``d* = A d + B a`` (kept as
``formula="official"``) equals the above only when A = 1 and B = 0.

Note: EAP scores shrink towards the prior, and chunks fitted under the same N(0, 1) prior on the
same persons start near A = 1, B = 0, so linking mostly corrects little; concurrent calibration
(one EM over all items) is the default, chunks + linking the route to scale out (one job each).
"""

from __future__ import annotations

import numpy as np

from icml26.atlas.bank import ItemBank
from icml26.core.errors import UserError

__all__ = ["mean_sigma", "link_items", "calibrate_chunked", "FORMULAS"]

FORMULAS = ("correct", "official", "none")


def mean_sigma(theta_ref, theta_k) -> tuple[float, float]:
    """Linking constants (A, B) with theta_ref ~ A * theta_k + B, from paired scores (P,)."""
    theta_ref, theta_k = np.asarray(theta_ref, float), np.asarray(theta_k, float)
    if theta_ref.shape != theta_k.shape or theta_ref.size < 2:
        raise ValueError("mean/sigma linking needs two paired score vectors of equal length >= 2")
    sd_k = theta_k.std(ddof=1)
    if sd_k <= 0:
        raise ValueError("mean/sigma linking: chunk scores have zero spread")
    A = float(theta_ref.std(ddof=1) / sd_k)
    return A, float(theta_ref.mean() - A * theta_k.mean())


def link_items(a, d, A: float, B: float, formula: str = "correct") -> tuple[np.ndarray, np.ndarray]:
    """Put (a, d) of shape (N,) onto the reference scale; returns (a*, d*)."""
    a, d = np.asarray(a, float), np.asarray(d, float)
    if A <= 0:
        raise ValueError(f"linking slope A must be > 0; got {A}")
    if formula == "correct":
        return a / A, d - a * B / A
    if formula == "official":
        return a / A, A * d + B * a
    if formula == "none":
        return a.copy(), d.copy()
    raise ValueError(f"linking formula must be one of {', '.join(FORMULAS)}; got {formula!r}")


def calibrate_chunked(
    R, cfg, chunk: int, link_formula: str = "correct", progress=None, return_chunks: bool = False
):
    """Fit column chunks of ``chunk`` items separately (each an independent job), then link each
    chunk to the first by mean/sigma on the calibration persons' EAP scores.

    ``R``: cleaned Responses. Returns an ItemBank whose ``linking`` records (A, B) per chunk;
    with ``return_chunks`` also the raw per-chunk fits [(cols, a, d, g, theta_eap)] so callers
    can apply other linking formulas to the same fits.
    """
    from icml26.atlas.calibrate import em_fit
    from icml26.atlas.scoring import eap

    if chunk < 2:
        raise UserError(f"`chunk` must be >= 2 items; got {chunk}")
    if link_formula not in FORMULAS:
        raise UserError(
            f"`link_formula` must be one of {', '.join(FORMULAS)}; got {link_formula!r}"
        )
    mat = R.matrix
    n_items = mat.shape[1]
    bounds = list(range(0, n_items, chunk))
    if len(bounds) > 1 and n_items - bounds[-1] < max(2, chunk // 4):
        bounds.pop()  # fold a tiny last chunk into the one before
    bounds.append(n_items)
    fits = []
    tick = progress.task("EM per chunk", total=len(bounds) - 1) if progress is not None else None
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        sub = mat[:, lo:hi]
        obs = (~np.isnan(sub)).astype(np.float64)
        Y = np.nan_to_num(sub, nan=0.0)
        a, d, g, fit = em_fit(Y, obs, cfg)
        part = ItemBank(R.items[lo:hi], a, d, g, model=cfg.model)
        theta, _ = eap(part, sub, cfg.quadpts, cfg.theta_lim)
        fits.append((np.arange(lo, hi), a, d, g, theta, fit))
        if tick is not None:
            tick(1)
    bank = assemble(R.items, fits, link_formula, cfg.model)
    return (bank, fits) if return_chunks else bank


def assemble(items, fits, formula: str, model: str) -> ItemBank:
    """Link per-chunk fits to the first chunk's scale with ``formula`` and join them."""
    a_all, d_all, g_all = (np.zeros(len(items)) for _ in range(3))
    theta_ref = fits[0][4]
    consts, converged, iters = [], True, []
    for cols, a, d, g, theta, fit in fits:
        A, B = mean_sigma(theta_ref, theta)
        a_all[cols], d_all[cols] = link_items(a, d, A, B, formula)
        g_all[cols] = g
        consts.append({"first_item": int(cols[0]), "n_items": int(len(cols)), "A": A, "B": B})
        converged &= bool(fit["converged"])
        iters.append(fit["iterations"])
    fit = {
        "converged": converged,
        "iterations": max(iters),
        "chunks": len(fits),
        "quadpts": fits[0][5]["quadpts"],
        "theta_lim": fits[0][5]["theta_lim"],
        "n_models": fits[0][5]["n_models"],
        "n_items": len(items),
    }
    bank = ItemBank(items, a_all, d_all, g_all, model=model, fit=fit)
    bank.linking = {
        "method": "mean_sigma",
        "formula": formula,
        "reference_chunk": 0,
        "chunks": consts,
    }
    return bank
