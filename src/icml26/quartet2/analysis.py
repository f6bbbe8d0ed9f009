"""Error metrics for NVFP4 quantizers: relative MSE, effective bits, GEMM bias against repeats.

``relative MSE = ||Q(x) - x||^2 / ||x||^2`` and ``effective bits = -log2(relative MSE) / 2``
(the notebook's convention: 9.0e-3 -> 3.40 bits). All quantizers act along the last dim after
the same randomized Hadamard transform, as in the paper's comparison.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from icml26.quartet2.eden import (
    BACKWARD_SCALE_OVERRIDE,
    check_hadamard_dim,
    ms_eden,
    quantized_matmul,
    random_signs,
    rht,
)
from icml26.quartet2.nvfp4 import quantize_nvfp4

__all__ = ["ERROR_MODES", "ROLES", "relative_mse", "effective_bits", "quantizer_errors",
           "recipe_errors", "gemm_bias_curve", "bits_slope", "gaussian_rows"]

ERROR_MODES = ("rtn", "four_over_six", "sr", "ms_eden")


def relative_mse(q: torch.Tensor, x: torch.Tensor) -> float:
    """``||q - x||^2 / ||x||^2`` in float64 (0 for an all-zero ``x`` reproduced exactly)."""
    x64, q64 = x.double(), q.double()
    den = float((x64 ** 2).sum())
    num = float(((q64 - x64) ** 2).sum())
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


def effective_bits(rel_mse: float) -> float:
    return -0.5 * math.log2(rel_mse) if rel_mse > 0 else math.inf


def gaussian_rows(rows: int, cols: int, *, seed: int = 0, max_log2_scale: float = 8.0) -> torch.Tensor:
    """Gaussian (rows, cols) with per-row scale 2^U, U ~ Uniform[0, max_log2_scale] (heavy-tailed
    rows, as in the paper's unbiasedness notebook)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, cols, generator=g) * torch.exp2(torch.rand(rows, 1, generator=g) * max_log2_scale)


def quantizer_errors(
    x: torch.Tensor, *, hadamard_dim: int = 128, seed: int = 0, modes=ERROR_MODES
) -> dict[str, float]:
    """Relative MSE of each mode on ``x`` (rows, K) quantized along K after one shared RHT.

    rtn: scale override 1, scales_max 448. four_over_six: 4/6 scales, scales_max 256. sr: FP4
    stochastic rounding with override 17/16 (NVIDIA's). ms_eden: override (17/16)*0.93,
    scales_max 255.99, EDEN-corrected stochastically rounded scales. K is zero-padded to h.
    """
    h = check_hadamard_dim(hadamard_dim)
    x = x.float().reshape(-1, x.shape[-1])
    if x.shape[-1] % h:
        x = torch.nn.functional.pad(x, (0, (-x.shape[-1]) % h))
    g = torch.Generator(device=x.device).manual_seed(seed)
    signs = random_signs(h, g, x.device)
    xr = rht(x, signs)
    out: dict[str, float] = {}
    for mode in modes:
        if mode == "ms_eden":
            q = ms_eden(x, signs, scale_override=BACKWARD_SCALE_OVERRIDE, generator=g).dequantize()
        elif mode == "sr":
            q = quantize_nvfp4(xr, mode="sr", scale_override=17 / 16, generator=g).dequantize()
        else:
            q = quantize_nvfp4(xr, mode=mode).dequantize()
        out[mode] = relative_mse(q, xr)
    return out


#: the backward GEMM operands, each quantized along its reduction dim: (name, GEMM, K)
ROLES = {
    "dx_dy": "dY along out (dX GEMM)",
    "dx_w": "Q(W)^T along out (dX GEMM)",
    "dw_dy": "dY^T along tokens (dW GEMM)",
    "dw_x": "X^T along tokens (dW GEMM)",
}


def recipe_errors(x: torch.Tensor, role: str, *, hadamard_dim: int = 128, seed: int = 0) -> dict:
    """Relative MSE of what each *recipe* does to the backward operand ``x`` (rows, K), K the
    reduction dim, ``role`` one of :data:`ROLES`.

    quartet2: MS-EDEN after an RHT of size ``hadamard_dim`` on every operand. nvidia (TE's
    ``NVFP4BlockScaling``): dY for dX -> SR (override 17/16) with **no** rotation; dY^T for dW ->
    SR after a 16-point RHT; X^T for dW -> RTN after a 16-point RHT; Q(W)^T for dX -> not
    re-quantized (NVIDIA reuses its 16x16 forward tiles): ``None``.
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {tuple(ROLES)}; got {role!r}")
    x = x.float().reshape(-1, x.shape[-1])
    g = torch.Generator(device=x.device).manual_seed(seed)
    out = {"quartet2": quantizer_errors(x, hadamard_dim=hadamard_dim, seed=seed,
                                        modes=("ms_eden",))["ms_eden"]}
    if role == "dx_w":
        out["nvidia"] = None
        return out
    xp = torch.nn.functional.pad(x, (0, (-x.shape[-1]) % 16))
    if role == "dx_dy":
        q = quantize_nvfp4(xp, mode="sr", scale_override=17 / 16, generator=g).dequantize()
        out["nvidia"] = relative_mse(q, xp)
        return out
    xr = rht(xp, random_signs(16, g, x.device))
    kw = {"mode": "sr", "scale_override": 17 / 16, "generator": g} if role == "dw_dy" else {}
    out["nvidia"] = relative_mse(quantize_nvfp4(xr, **kw).dequantize(), xr)
    return out


def gemm_bias_curve(
    a: torch.Tensor,
    b: torch.Tensor,
    mode: str,
    ks: list[int],
    *,
    hadamard_dim: int = 128,
    seed: int = 0,
    progress=None,
) -> list[float]:
    """Effective bits of ``mean_K Q(a) Q(b)^T`` against ``a b^T`` at each K in ``ks``.

    Each of the max(ks) draws uses a fresh RHT (and fresh rounding noise); a (M, K), b (N, K).
    An unbiased estimator gains ~1 bit per 4x K (error ~ 1/sqrt(K)); a biased one plateaus.
    """
    g = torch.Generator(device=a.device).manual_seed(seed)
    exact = a.double() @ b.double().T
    acc = torch.zeros_like(exact)
    bits, want = [], sorted(set(ks))
    for k in range(1, want[-1] + 1):
        acc += quantized_matmul(a, b, mode, hadamard_dim=hadamard_dim, generator=g).double()
        if k in want:
            bits.append(effective_bits(relative_mse(acc / k, exact)))
        if progress is not None:
            progress(1)
    return bits


def bits_slope(ks: list[int], bits: list[float]) -> float:
    """Least-squares slope of effective bits against log4(K): bits gained per 4x more repeats."""
    x = np.log(np.asarray(ks, dtype=float)) / np.log(4.0)
    y = np.asarray(bits, dtype=float)
    return float(np.polyfit(x, y, 1)[0])
