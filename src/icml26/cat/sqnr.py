"""SQNR of a quantized linear layer and its concentration-alignment decomposition.

For ``y = W x`` with ``x' = T x``, ``W' = W T^{-1}``, both quantized by symmetric b-bit RTN
(weights per output row, activations per token) and uniform noise of power ``Delta^2 / 12``:

    SQNR ~= B * (1 / kappa) * A                                            (eq. S, [ours])

* bit-width term ``B = 12 / (q_w^-2 + q_a^-2)`` with ``q = 2^(b-1) - 1`` (``6 q^2`` at equal bits);
* concentration ``kappa = (kappa_W / q_w^2 + kappa_x / q_a^2) / (q_w^-2 + q_a^-2) >= 1``, the
  bit-weighted mean of the weight and activation peak-to-average ratios
  ``kappa(v) = d max_i v_i^2 / ||v||^2`` (energy-weighted over rows / tokens);
* alignment ``A = d tr(W' Sigma' W'^T) / (||W'||_F^2 tr Sigma')`` in (0, d], invariant under
  orthogonal T; ``Sigma' = T Sigma T^T``.

The derivation (first-order noise, noise independent of signal and white across channels) is in
docs/cat.md. Measured SQNR is ``||Y||^2 / ||Y - Y_hat||^2`` on the same tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from icml26.cat.quant import check_bits, quantize_sym
from icml26.cat.transforms import BlockTransform

__all__ = ["concentration", "SQNRStats", "sqnr_terms", "db"]


def db(x: float) -> float:
    """10 log10(x); -inf for 0, inf for inf."""
    if x <= 0:
        return -math.inf
    return 10.0 * math.log10(x) if math.isfinite(x) else math.inf


def concentration(v: torch.Tensor) -> torch.Tensor:
    """Peak-to-average power ratio ``d max_i v_i^2 / ||v||^2`` of each row of v (..., d), in
    [1, d]; 1 is perfectly flat, d a single spike. Zero rows give 1."""
    p = v.double().pow(2)
    tot = p.sum(-1)
    return torch.where(tot > 0, v.shape[-1] * p.amax(-1) / tot.clamp_min(1e-300), 1.0)


def _qmax(bits: int) -> int:
    return 2 ** (bits - 1) - 1


@dataclass
class SQNRStats:
    """Streaming SQNR of one linear under one transform; feed token batches with :meth:`update`.

    weight: (m, d) original W (the statistics are computed on its device); transform: a
    :class:`BlockTransform` or None (identity);
    w_bits / a_bits: None keeps that side in fp. ``dtype`` is the compute dtype.
    """

    weight: torch.Tensor
    w_bits: int | None
    a_bits: int | None
    transform: BlockTransform | None = None
    dtype: torch.dtype = torch.float64

    def __post_init__(self) -> None:
        check_bits(self.w_bits, "w_bits")
        check_bits(self.a_bits, "a_bits")
        w = self.weight.to(torch.float64)
        wp = w if self.transform is None else self.transform.inverse_into(w)
        rot = getattr(self.transform, "out_rotation", None)
        if rot is not None:  # outputs rotated too (norm-preserving): y' = R y, W' = R W T^-1
            wp = rot.to(device=wp.device, dtype=torch.float64) @ wp
        self._wp = wp.to(self.dtype)
        self._wq = (
            self._wp if self.w_bits is None else quantize_sym(wp, self.w_bits, "channel")
        ).to(self.dtype)
        d = wp.shape[1]
        self.d = d
        self.w_fro2 = float(wp.pow(2).sum())
        self.kappa_w = float(d * wp.pow(2).amax(1).sum() / max(self.w_fro2, 1e-300))
        self.signal = self.noise = self.x_energy = self.x_kappa_energy = 0.0
        self.n_tokens = 0

    def update(self, x: torch.Tensor) -> None:
        """Add tokens x (..., d) of the layer's original (untransformed) input (moved to the
        weight's device)."""
        x = x.reshape(-1, self.d).to(device=self._wp.device, dtype=self.dtype)
        xp = x if self.transform is None else self.transform.apply(x)
        y = xp @ self._wp.T
        xq = xp if self.a_bits is None else quantize_sym(xp, self.a_bits, "token")
        yq = xq @ self._wq.T
        e = xp.double().pow(2)
        self.signal += float(y.double().pow(2).sum())
        self.noise += float((y - yq).double().pow(2).sum())
        self.x_energy += float(e.sum())
        self.x_kappa_energy += float(self.d * e.amax(-1).sum())
        self.n_tokens += x.shape[0]

    def terms(self) -> dict[str, float]:
        """bits/concentration/alignment terms and predicted and measured SQNR, all in dB, plus
        the raw ``kappa_w``, ``kappa_x`` and ``alignment`` (a ratio in (0, d])."""
        if self.n_tokens == 0:
            raise ValueError("SQNRStats.terms() needs at least one update() with tokens")
        kappa_x = self.x_kappa_energy / max(self.x_energy, 1e-300)
        inv = []  # (q^-2, kappa) for each quantized side
        if self.w_bits is not None:
            inv.append((_qmax(self.w_bits) ** -2, self.kappa_w))
        if self.a_bits is not None:
            inv.append((_qmax(self.a_bits) ** -2, kappa_x))
        align = self.d * self.signal / max(self.w_fro2 * self.x_energy, 1e-300)
        if inv:
            wsum = sum(w for w, _ in inv)
            bits = 12.0 / wsum
            kappa = sum(w * k for w, k in inv) / wsum
        else:
            bits, kappa = math.inf, 1.0
        return {
            "bits_db": db(bits),
            "concentration_db": -db(kappa),
            "alignment_db": db(align),
            "predicted_db": db(bits) - db(kappa) + db(align),
            "measured_db": db(self.signal / self.noise) if self.noise > 0 else math.inf,
            "kappa_w": self.kappa_w,
            "kappa_x": kappa_x,
            "alignment": align,
            "tokens": float(self.n_tokens),
        }


def sqnr_terms(
    weight: torch.Tensor,
    x: torch.Tensor,
    w_bits: int | None = 4,
    a_bits: int | None = 4,
    transform: BlockTransform | None = None,
) -> dict[str, float]:
    """Decompose the SQNR of ``y = W x`` quantized at W``w_bits``A``a_bits`` on tokens x (N, d)
    (eq. S); all terms in dB, float64. See :class:`SQNRStats` for streaming use."""
    stats = SQNRStats(weight, w_bits, a_bits, transform)
    stats.update(x)
    return stats.terms()
