"""Randomized Hadamard transforms and MS-EDEN, Quartet II's unbiased NVFP4 gradient estimator.

MS-EDEN (micro-scaled EDEN, Quartet II Sec. 3) quantizes one GEMM operand along its reduction
dimension K:

1. rotate groups of ``h`` consecutive elements: ``x~ = H_h D x`` (``D`` random signs, redrawn at
   every backward call and shared by both operands of a GEMM, so ``(HD)^T (HD) = I`` and the
   product is unchanged);
2. NVFP4 with ``scales_max = 255.99`` and ``v_max = 6 / ((17/16) * 0.93)``; RTN element codes;
3. per rotation group, the EDEN correction ``c = sum(u^2) / sum(u * q)`` with
   ``u = x~ / (s_block * s_tensor)`` the scaled pre-rounding values and ``q`` the RTN values
   (``c = 1`` when the denominator is 0); every micro-scale of the group is multiplied by ``c``;
4. each corrected micro-scale is **stochastically rounded** to one of its E4M3 neighbours.

The randomness moves from every element (stochastic rounding) to one scale per 16 elements and
the rotation, which keeps the estimate unbiased at much lower variance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from icml26.quartet2.nvfp4 import (
    BLOCK,
    E2M1_MAX,
    E4M3_MAX,
    NVFP4Tensor,
    block_scales_rtn,
    e2m1_encode,
    e2m1_rtn_values,
    e4m3_rtn,
    e4m3_sr,
    quantize_nvfp4,
    tensor_scale,
)

__all__ = [
    "BACKWARD_SCALE_OVERRIDE",
    "EDEN_SCALES_MAX",
    "hadamard_matrix",
    "fwht",
    "random_signs",
    "rht",
    "inverse_rht",
    "EdenOutput",
    "ms_eden",
    "ms_eden_values",
    "quantized_matmul",
    "check_hadamard_dim",
]

BACKWARD_SCALE_OVERRIDE = (17 / 16) * 0.93  # 0.93 tuned for minimum MSE with E4M3 scales [P]
EDEN_SCALES_MAX = 255.99  # headroom so that corrected scales (c > 1) still fit in E4M3


def check_hadamard_dim(h: int) -> int:
    """``h`` must be a power of two >= 16 (a multiple of the 16-element micro-block)."""
    if not isinstance(h, int) or h < BLOCK or h & (h - 1):
        raise ValueError(f"hadamard_dim must be a power of two >= 16; got {h!r}")
    return h


_H_CACHE: dict[tuple[int, str, torch.dtype], torch.Tensor] = {}


def hadamard_matrix(h: int, device="cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Orthonormal Sylvester Hadamard matrix ``H_h / sqrt(h)`` of shape (h, h); symmetric."""
    if h < 1 or h & (h - 1):
        raise ValueError(f"h must be a power of two; got {h}")
    key = (h, str(device), dtype)
    if key not in _H_CACHE:
        m = torch.ones(1, 1, dtype=torch.float64)
        while m.shape[0] < h:
            m = torch.cat([torch.cat([m, m], 1), torch.cat([m, -m], 1)], 0)
        _H_CACHE[key] = (m / math.sqrt(h)).to(device=device, dtype=dtype)
    return _H_CACHE[key]


def fwht(x: torch.Tensor) -> torch.Tensor:
    """Fast Walsh-Hadamard transform over the last dim (a power of two), orthonormal.

    Equals ``x @ hadamard_matrix(n)`` in O(n log n); the butterflies work in ``x``'s dtype.
    """
    n = x.shape[-1]
    if n & (n - 1):
        raise ValueError(f"fwht needs a power-of-two last dim; got {n}")
    lead = x.shape[:-1]
    y = x.reshape(-1, n)
    s = 1
    while s < n:
        y = y.reshape(-1, n // (2 * s), 2, s)
        a, b = y[:, :, 0, :], y[:, :, 1, :]
        y = torch.stack((a + b, a - b), dim=2)
        s *= 2
    return (y.reshape(*lead, n) / math.sqrt(n)).to(x.dtype)


def random_signs(h: int, generator: torch.Generator | None = None, device="cpu") -> torch.Tensor:
    """``D``'s diagonal: ``h`` independent +-1 (float32)."""
    bits = torch.randint(0, 2, (h,), generator=generator, device=device)
    return (bits * 2 - 1).to(torch.float32)


def rht(x: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
    """Randomized Hadamard transform ``H D`` over groups of h = len(signs) along the last dim.

    x: (..., K) with K % h == 0 -> same shape, float32.
    """
    h = signs.numel()
    k = x.shape[-1]
    if k % h:
        raise ValueError(f"the last dim ({k}) must be a multiple of the Hadamard size {h}")
    xg = x.float().reshape(*x.shape[:-1], k // h, h) * signs
    return (xg @ hadamard_matrix(h, x.device)).reshape(x.shape)


def inverse_rht(y: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
    """``D H^T y`` over the same groups: the inverse of :func:`rht`."""
    h = signs.numel()
    yg = y.float().reshape(*y.shape[:-1], y.shape[-1] // h, h)
    return ((yg @ hadamard_matrix(h, y.device)) * signs).reshape(y.shape)


@dataclass
class EdenOutput:
    """What :func:`ms_eden` returns. ``q`` holds the *rotated* operand in NVFP4 (RTN codes,
    stochastically rounded corrected scales); ``correction`` is c per rotation group, shape
    (rows, K / h); ``amax`` the tensor absmax used (for delayed amax)."""

    q: NVFP4Tensor
    correction: torch.Tensor
    amax: torch.Tensor
    signs: torch.Tensor

    def dequantize(self, rotated: bool = True) -> torch.Tensor:
        """float32 values, in the rotated basis (for GEMMs) or rotated back (``rotated=False``)."""
        y = self.q.dequantize()
        return y if rotated else inverse_rht(y, self.signs)


def ms_eden(
    x: torch.Tensor,
    signs: torch.Tensor,
    *,
    scale_override: float = BACKWARD_SCALE_OVERRIDE,
    scales_max: float = EDEN_SCALES_MAX,
    amax: torch.Tensor | float | None = None,
    generator: torch.Generator | None = None,
    scale_noise: torch.Tensor | None = None,
) -> EdenOutput:
    """MS-EDEN-quantize ``x`` of shape (..., K) along K (K % len(signs) == 0, len(signs) % 16 == 0).

    ``signs``: the RHT's random signs (h,). ``amax``: absmax of the *rotated* tensor to build the
    tensor scale from (default: computed). ``generator`` / ``scale_noise`` (uniforms, one per
    16-block, shape (rows, K / 16)): the random source of the scales' stochastic rounding.
    Returns an :class:`EdenOutput` whose NVFP4 tensor lives in the rotated basis.
    """
    qv, scales, s_t, c, amax_t, rows, k = _ms_eden_core(x, signs, scale_override, scales_max,
                                                       amax, generator, scale_noise)
    h = signs.numel()
    q = NVFP4Tensor(codes=e2m1_encode(qv).reshape(x.shape),
                    scales=scales.reshape(rows, k // BLOCK), tensor_scale=s_t)
    return EdenOutput(q=q, correction=c.reshape(rows, k // h), amax=amax_t, signs=signs)


def ms_eden_values(
    x: torch.Tensor,
    signs: torch.Tensor,
    *,
    scale_override: float = BACKWARD_SCALE_OVERRIDE,
    scales_max: float = EDEN_SCALES_MAX,
    amax: torch.Tensor | float | None = None,
    generator: torch.Generator | None = None,
    scale_noise: torch.Tensor | None = None,
) -> torch.Tensor:
    """``ms_eden(x, signs, ...).dequantize()`` bit for bit (float32, rotated basis, ``x``'s
    shape), without building codes: the GEMM operand of the quantized linear's backward."""
    qv, scales, s_t, _, _, _, _ = _ms_eden_core(x, signs, scale_override, scales_max, amax,
                                                generator, scale_noise)
    return (qv * (scales.float() * s_t).reshape(-1, 1)).reshape(x.shape)


def _ms_eden_core(x, signs, scale_override, scales_max, amax, generator, scale_noise):
    """Rotated RTN grid values (rows*K/16, 16), SR-rounded corrected E4M3 scales (rows*K/16,),
    tensor scale, corrections (rows*K/h, 1), amax, rows, K. No host sync."""
    h = check_hadamard_dim(int(signs.numel()))
    if not 0 < scales_max <= E4M3_MAX:
        raise ValueError(f"scales_max must be in (0, 448]; got {scales_max}")
    k = x.shape[-1]
    rows = x.numel() // k if k else 0
    xr = rht(x, signs).reshape(rows, k)  # (rows, K), rotated
    amax_t = (xr.abs().max() if amax is None else torch.as_tensor(amax, dtype=torch.float32,
                                                                    device=x.device)).reshape(())
    v_max = E2M1_MAX / scale_override
    s_t = tensor_scale(amax_t, scales_max, v_max)
    g = xr.reshape(-1, BLOCK)  # (rows*K/16, 16) micro-blocks
    s_b = block_scales_rtn(g.abs().amax(dim=1, keepdim=True), v_max, s_t)
    u = g / (s_b * s_t)  # scaled pre-rounding values
    qv = e2m1_rtn_values(u)
    per = h // BLOCK
    ur, qr = u.reshape(-1, h), qv.reshape(-1, h)
    num = (ur * ur).sum(dim=1, keepdim=True)
    den = (ur * qr).sum(dim=1, keepdim=True)
    c = torch.where(den == 0, torch.ones_like(num), num / torch.where(den == 0, 1.0, den))
    corrected = (s_b.reshape(-1, per) * c).reshape(-1)
    noise = (torch.rand(corrected.shape, generator=generator, device=x.device)
             if scale_noise is None else scale_noise.reshape(-1).to(x.device, torch.float32))
    scales = e4m3_sr(corrected, noise)
    return qv, scales, s_t, c, amax_t, rows, k


def _pad_k(x: torch.Tensor, multiple: int) -> torch.Tensor:
    k = x.shape[-1]
    pad = (-k) % multiple
    return torch.nn.functional.pad(x, (0, pad)) if pad else x


def quantized_matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    mode: str,
    *,
    hadamard_dim: int | None = 128,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``Q(a) @ Q(b)^T`` for a (M, K), b (N, K), both quantized along K after a shared RHT.

    mode: "ms_eden" | "sr" (scale override 17/16) | "rtn" | "four_over_six" | "none" (fp32).
    K is zero-padded to a multiple of ``hadamard_dim`` (zeros leave the product unchanged);
    ``hadamard_dim=None`` skips the rotation (K padded to 16). Returns float32 (M, N).
    """
    mult = hadamard_dim or BLOCK
    a, b = _pad_k(a.float(), mult), _pad_k(b.float(), mult)
    if mode == "none":
        return a @ b.T
    signs = None
    if hadamard_dim:
        signs = random_signs(check_hadamard_dim(hadamard_dim), generator, a.device)
    if mode == "ms_eden":
        if signs is None:
            raise ValueError("ms_eden needs a hadamard_dim (the rotation is part of the estimator)")
        qa = ms_eden(a, signs, generator=generator).dequantize()
        qb = ms_eden(b, signs, generator=generator).dequantize()
        return qa @ qb.T
    if signs is not None:
        a, b = rht(a, signs), rht(b, signs)
    kw = {"sr": {"mode": "sr", "scale_override": 17 / 16}, "rtn": {"mode": "rtn"},
          "four_over_six": {"mode": "four_over_six"}}
    if mode not in kw:
        raise ValueError(f"mode must be one of ms_eden, sr, rtn, four_over_six, none; got {mode!r}")
    qa = quantize_nvfp4(a, generator=generator, **kw[mode]).dequantize()
    qb = quantize_nvfp4(b, generator=generator, **kw[mode]).dequantize()
    return qa @ qb.T


def e4m3_representable(x: torch.Tensor) -> torch.Tensor:
    """True where float32 ``x`` is exactly an E4M3 value (|x| <= 448)."""
    return e4m3_rtn(x).float() == x
