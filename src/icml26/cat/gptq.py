"""GPTQ weight quantization (Frantar et al., ICLR 2023) with the same symmetric grid as RTN.

The optimal-brain-surgeon step (OBS, Hassibi & Stork 1993; OBQ, Frantar & Alistarh 2022): to
quantize column j of W (m, d) under the layer loss ``tr((W - Q) H (W - Q)^T)`` with the input
Hessian ``H = X^T X`` (d, d), round ``w_j`` to ``q_j`` and move the columns not yet quantized by

    delta_F = -(w_j - q_j) / [H_F^{-1}]_jj * [H_F^{-1}]_{j, F}                       (OBS)

where F is the set of columns left (j first). GPTQ visits the columns in order and gets every
``[H_F^{-1}]_{j, F}`` at once as row j of the upper Cholesky factor of ``H^{-1}`` (scaled by its
diagonal), with updates batched over ``block_size`` columns. ``tests/cat/test_cat_gptq.py`` checks
it against the explicit OBS sequence (a fresh inverse per step) in float64.

The grid is that of :func:`icml26.cat.quant.quantize_sym`: symmetric, ``q_max = 2^(b-1) - 1``
levels per side, scale ``max|w| / q_max`` per output row (``"channel"``, fixed from the weight
before any update, as in the reference) or per ``group_size`` inputs (``"group"``, fixed when the
sweep enters the group, from the updated weights). No clipping search (as RTN here).
"""

from __future__ import annotations

import numpy as np
import torch

from icml26.cat.quant import check_bits

__all__ = ["gptq_quantize", "gptq_codes"]

_F64 = torch.float64


def _check_hessian(h: torch.Tensor, d: int, n_tokens: int | None, layer: str) -> None:
    if h.shape != (d, d):
        raise ValueError(f"{layer}: Hessian has shape {tuple(h.shape)}, the weight has {d} inputs")
    if n_tokens is not None and n_tokens < d:
        raise ValueError(
            f"{layer}: GPTQ needs at least as many calibration tokens as the input width {d} for "
            f"a full-rank Hessian; got {n_tokens} (use more calibration data, or RTN)"
        )


@torch.no_grad()
def gptq_codes(
    weight: torch.Tensor,
    hessian: torch.Tensor,
    bits: int,
    granularity: str = "channel",
    group_size: int | None = None,
    *,
    damp: float = 0.01,
    block_size: int = 128,
    n_tokens: int | None = None,
    layer: str = "layer",
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPTQ of ``weight`` (m, d) under ``hessian`` (d, d) (``X^T X`` or any positive multiple).

    Returns ``(codes, scales)``: integer codes (m, d) int8 in ``[-q_max, q_max]`` and float64
    scales (m, 1) (``"channel"``) or (m, d / group_size) (``"group"``); the dequantized weight is
    ``codes * scales`` broadcast over each group. ``damp``: ``H + damp * mean(diag H) I``.
    ``n_tokens``: calibration tokens behind H; fewer than d raises (H would be singular).
    """
    check_bits(bits, "bits")
    if granularity not in ("channel", "group"):
        raise ValueError(f"granularity must be 'channel' or 'group'; got {granularity!r}")
    m, d = weight.shape
    _check_hessian(hessian, d, n_tokens, layer)
    gs = d if granularity == "channel" else group_size
    if not gs or d % gs:
        raise ValueError(f"{layer}: group_size {group_size} must divide the input width {d}")
    if damp < 0:
        raise ValueError(f"damp must be >= 0; got {damp}")
    bs = block_size if granularity == "channel" else gs * max(1, block_size // gs)
    w = weight.detach().to("cpu", _F64).clone()
    h = hessian.detach().to("cpu", _F64).clone()
    dead = torch.diagonal(h) == 0  # inputs never active: nothing to preserve there
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    h += damp * torch.diagonal(h).mean() * torch.eye(d, dtype=_F64)
    try:
        chol = torch.linalg.cholesky(h)
    except RuntimeError as e:
        raise ValueError(f"{layer}: the damped Hessian is not positive definite ({e})") from None
    hinv = torch.linalg.cholesky(torch.cholesky_inverse(chol), upper=True)  # (d, d) upper
    qmax = 2 ** (bits - 1) - 1
    tiny = torch.finfo(_F64).tiny
    # the column sweep is sequential: numpy keeps its per-column overhead small, and working
    # on W^T makes each column a contiguous row
    wt, hn = w.T.contiguous().numpy(), np.ascontiguousarray(hinv.numpy())  # (d, m), (d, d)
    codes = np.zeros((d, m))
    scales = np.zeros((d // gs, m))
    if granularity == "channel":
        scales[0] = np.maximum(np.abs(wt).max(0) / qmax, tiny)
    for i1 in range(0, d, bs):
        i2 = min(i1 + bs, d)
        w1 = wt[i1:i2].copy()  # (B, m): this block, updated column by column
        err = np.zeros_like(w1)
        hb = hn[i1:i2, i1:i2]
        for i in range(i2 - i1):
            col = i1 + i
            if granularity == "group" and col % gs == 0:
                scales[col // gs] = np.maximum(np.abs(w1[i : i + gs]).max(0) / qmax, tiny)
            s = scales[col // gs]
            c = np.clip(np.round(w1[i] / s), -qmax, qmax)
            codes[col] = c
            e = (w1[i] - c * s) / hb[i, i]
            w1[i:] -= np.outer(hb[i, i:], e)  # OBS update of this block's columns
            err[i] = e
        wt[i2:] -= hn[i1:i2, i2:].T @ err  # the deferred update of the later blocks
    codes, scales = codes.T, scales.T
    codes, scales = torch.from_numpy(codes.copy()), torch.from_numpy(scales.copy())
    return codes.to(torch.int8), scales


def gptq_quantize(weight: torch.Tensor, hessian: torch.Tensor, bits: int, *args, **kwargs):
    """:func:`gptq_codes`, dequantized: a (m, d) float64 tensor ``codes * scales``."""
    codes, scales = gptq_codes(weight, hessian, bits, *args, **kwargs)
    gs = weight.shape[1] // scales.shape[1]
    return codes.to(_F64) * scales.repeat_interleave(gs, dim=1)
