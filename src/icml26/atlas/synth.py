"""Generated item banks and response matrices for tests and the claim (honestly synthetic).

:func:`hellaswag_like_bank` draws 3PL items matching summary statistics measured on the released
ATLAS HellaSwag bank (docs/atlas.md): median positive a 2.4 and 90th percentile 5.6 (log-normal),
b quantiles 10/50/90% = -5.0 / -2.75 / 0.65 (a two-piece normal), mean g 0.22 (Beta(4.4, 15.6)),
and 10% items with a < 0 (|a| log-normal around 0.5: mis-keyed items).
"""

from __future__ import annotations

import numpy as np

from icml26.atlas.bank import ItemBank, irf

__all__ = ["hellaswag_like_bank", "random_bank", "simulate"]

_Z90 = 1.2815515655446004  # standard normal 90th percentile


def hellaswag_like_bank(n_items: int = 5600, seed: int = 0, neg_share: float = 0.10) -> ItemBank:
    """A 3PL bank of ``n_items`` shaped like ATLAS's linked HellaSwag bank."""
    rng = np.random.default_rng(seed)
    a = np.exp(rng.normal(np.log(2.4), np.log(5.6 / 2.4) / _Z90, n_items))
    neg = rng.random(n_items) < neg_share
    a[neg] = -np.exp(rng.normal(np.log(0.5), 0.5, neg.sum()))
    z = rng.standard_normal(n_items)
    b = -2.75 + np.where(z < 0, (5.0 - 2.75) / _Z90, (2.75 + 0.65) / _Z90) * z
    g = rng.beta(4.4, 15.6, n_items)
    ids = [f"item{i:05d}" for i in range(n_items)]
    return ItemBank(ids, a, -a * b, g, model="3PL")


def random_bank(n_items: int, model: str = "2PL", seed: int = 0, a_range=(0.5, 2.5)) -> ItemBank:
    """A conventional bank: a ~ LogNormal(0, 0.3) clipped to ``a_range``, b ~ N(0, 1),
    g ~ U(0.1, 0.3) (3PL only)."""
    rng = np.random.default_rng(seed)
    a = np.clip(np.exp(rng.normal(0.0, 0.3, n_items)), *a_range)
    if model == "1PL":
        a[:] = 1.0
    b = rng.normal(0.0, 1.0, n_items)
    g = rng.uniform(0.1, 0.3, n_items) if model == "3PL" else np.zeros(n_items)
    return ItemBank([f"i{k}" for k in range(n_items)], a, -a * b, g, model=model)


def simulate(bank: ItemBank, theta, seed: int = 0, missing: float = 0.0) -> np.ndarray:
    """0/1 responses (T, N) float64 of examinees ``theta`` (T,); ``missing`` share set to NaN."""
    rng = np.random.default_rng(seed)
    p = irf(np.asarray(theta, float), bank.a, bank.d, bank.g)
    y = (rng.random(p.shape) < p).astype(np.float64)
    if missing > 0:
        y[rng.random(p.shape) < missing] = np.nan
    return y
