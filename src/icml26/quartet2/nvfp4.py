"""A PyTorch reference of the NVFP4 format and its rounding modes (the same bits on every device).

NVFP4 stores a tensor as FP4 **E2M1** elements (magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6} and a
sign bit), one FP8 **E4M3** scale per block of 16 consecutive elements along the reduction
dimension (or per 16x16 tile, NVIDIA's weight layout), and one FP32 tensor scale::

    s_tensor = amax / (scales_max * v_max),        v_max = 6 / scale_override
    s_block  = RTN_E4M3(max|x_block| / v_max / s_tensor)   (a zero scale becomes 1)
    code     = ROUND_E2M1(x / (s_block * s_tensor))        (RTN ties-to-even, or stochastic)
    x_hat    = e2m1(code) * (s_block * s_tensor)

Everything is computed in float32 with plain elementwise torch ops, so a CPU and a GPU give the
same bits. **Cast trap:** torch turns values >= 480 into NaN when casting float32 to
``float8_e4m3fn`` on CPU, while CUDA may saturate: every cast here clamps to +-448 first.

Modes (:data:`MODES`): ``rtn``; ``sr`` (elementwise stochastic rounding of the FP4 codes);
``four_over_six`` (per block, try the scale that maps the block max to 6 and the 1.5x larger one
that maps it to 4, keep the lower squared error; tensor ``scales_max`` 256 leaves headroom).
MS-EDEN, the backward estimator, lives in :mod:`icml26.quartet2.eden`.

Conventions (``compat``): ``"default"`` divides ``x / (s_block * s_tensor)``, keeps sub-2^-6
block scales subnormal, gives an all-zero block the scale 1 (byte 0x38) and an all-zero tensor
zeros. ``"torchao"`` follows torchao's ``nvfp4_quantize`` op for op (multiply by the reciprocal
``(1 / s_tensor) / s_block``, block scales clamped to [2^-6, 448] so an all-zero block gets byte
0x08, no guard on a zero tensor scale so an all-zero tensor gives NaN scales, NaN elements encoded
as +-1.5): bit-exact with it for ``mode="rtn"``, (1, 16) blocks and the default scale ceiling.

No host synchronisation: non-finite inputs are masked with ``torch.where`` (no ``bool()`` on a
device tensor), so the quantizers run inside ``torch.compile`` graphs and CUDA streams without
stalls; only ``check_finite=True`` reads a value back to raise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from icml26.core.errors import UserError

__all__ = [
    "E2M1_GRID",
    "E4M3_MAX",
    "MODES",
    "NVFP4Tensor",
    "e2m1_rtn",
    "e2m1_sr",
    "e2m1_decode",
    "e2m1_encode",
    "e2m1_rtn_values",
    "e2m1_sr_values",
    "e4m3_rtn",
    "e4m3_sr",
    "quantize_nvfp4",
    "fake_quant",
]

E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # magnitude of codes 0..7
E2M1_MAX = 6.0
E4M3_MAX = 448.0
BLOCK = 16
MODES = ("rtn", "sr", "four_over_six")
COMPATS = ("default", "torchao")
E4M3_MIN_NORMAL = 2.0 ** -6  # torchao clamps block scales to [this, 448] (finfo(e4m3fn).tiny)


def _grid(device) -> torch.Tensor:
    return torch.tensor(E2M1_GRID, dtype=torch.float32, device=device)


# ------------------------------------------------------------------------------------------
# Element format: E2M1


def _e2m1_step(m: torch.Tensor) -> torch.Tensor:
    """Spacing of the E2M1 grid at magnitude ``m``: 0.5 below 2, 1 below 4, else 2."""
    return torch.where(m < 2.0, 0.5, torch.where(m < 4.0, 1.0, 2.0))


def e2m1_rtn_values(u: torch.Tensor) -> torch.Tensor:
    """Round float32 ``u`` to the nearest E2M1 value (float32), ties to even, saturating at +-6.

    On each binade the grid is evenly spaced (step 0.5, 1, 2), so ``round(|u| / step) * step``
    with ``torch.round``'s half-to-even gives the even code on every tie: 0.25 -> 0, 0.75 -> 1,
    1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4. NaN gives a signed zero (callers keep
    non-finite inputs out of finite results). Same values as ``e2m1_decode(e2m1_rtn(u))``.
    """
    m = u.abs()
    step = _e2m1_step(m)
    q = torch.round(m / step).mul_(step).clamp_(max=E2M1_MAX)
    return torch.copysign(torch.nan_to_num_(q, nan=0.0), u)


def e2m1_sr_values(u: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Stochastically round ``u`` to E2M1 values (float32): up with probability (|u| - lo) / (hi - lo).

    ``noise`` holds uniforms in [0, 1) of ``u``'s shape. |u| is clamped to 6 first, so the result
    is unbiased for |u| <= 6 (the scale overrides keep blocks inside that range). NaN gives a
    signed zero.
    """
    mag = torch.nan_to_num(u.abs(), nan=0.0).clamp_(max=E2M1_MAX)
    step = _e2m1_step(mag)
    lo = torch.floor(mag / step).mul_(step)  # largest grid value <= mag
    hi = (lo + step).clamp_(max=E2M1_MAX)
    width = hi - lo
    p_up = torch.where(width > 0, (mag - lo) / torch.where(width > 0, width, 1.0), 0.0)
    return torch.copysign(torch.where((noise < p_up) & (width > 0), hi, lo), u)


def e2m1_encode(v: torch.Tensor) -> torch.Tensor:
    """E2M1 values (float32, on the grid) -> codes (uint8, sign in bit 3)."""
    a = v.abs()
    idx = torch.where(a <= 2.0, a * 2.0, torch.where(a <= 4.0, a + 2.0, 7.0)).to(torch.uint8)
    return idx | (torch.signbit(v).to(torch.uint8) << 3)


def e2m1_rtn(u: torch.Tensor) -> torch.Tensor:
    """Round float32 ``u`` to E2M1 codes (uint8, sign in bit 3), nearest with ties to even.

    Magnitudes above 6 saturate to 6 (code 7); NaN gives a zero magnitude. See
    :func:`e2m1_rtn_values`.
    """
    return e2m1_encode(e2m1_rtn_values(u))


def e2m1_sr(u: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Stochastically round ``u`` to E2M1 codes; see :func:`e2m1_sr_values`."""
    return e2m1_encode(e2m1_sr_values(u, noise))


_TABLES: dict[str, torch.Tensor] = {}


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (uint8) -> float32 values (code 8 is -0.0)."""
    key = str(codes.device)
    if key not in _TABLES:
        pos = torch.tensor(E2M1_GRID, dtype=torch.float32)
        _TABLES[key] = torch.cat([pos, -pos]).to(codes.device)
    return torch.take(_TABLES[key], (codes & 0xF).long())  # low nibble (torchao NaN bytes)


# ------------------------------------------------------------------------------------------
# Scale format: E4M3 (float8_e4m3fn)


def e4m3_rtn(x: torch.Tensor) -> torch.Tensor:
    """float32 -> ``float8_e4m3fn``, nearest-even, **saturating** at +-448 (NaN stays NaN)."""
    return x.float().clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def e4m3_sr(x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Stochastically round non-negative float32 ``x`` to one of its two E4M3 neighbours.

    Neighbours are found by viewing the nearest FP8 byte as an integer and stepping by one; the
    result is ``up`` with probability (x - down) / (up - down), so E[result] = x for
    0 <= x <= 448. Values above 448 saturate to 448; exactly representable values stay put.
    """
    x = x.float().clamp(0.0, E4M3_MAX)
    near = x.to(torch.float8_e4m3fn)
    byte = near.view(torch.uint8).to(torch.int16)
    near_f = near.float()
    above = near_f > x  # nearest is the upper neighbour
    down_b = torch.where(above, byte - 1, byte).clamp(0, 0x7E)
    up_b = torch.where(above, byte, byte + 1).clamp(0, 0x7E)  # 0x7E = 448; 0x7F would be NaN
    down = down_b.to(torch.uint8).view(torch.float8_e4m3fn).float()
    up = up_b.to(torch.uint8).view(torch.float8_e4m3fn).float()
    width = up - down
    p_up = torch.where(width > 0, (x - down) / torch.where(width > 0, width, 1.0), 0.0)
    out = torch.where(noise < p_up, up, down)
    out = torch.where(near_f == x, x, out)  # representable (and NaN-free): unchanged
    return out.to(torch.float8_e4m3fn)


# ------------------------------------------------------------------------------------------
# Blocks and the quantized tensor


@dataclass
class NVFP4Tensor:
    """An NVFP4-quantized tensor.

    ``codes``: uint8 of the original shape (one E2M1 code per element, sign in bit 3; see
    :meth:`packed` for two per byte). ``scales``: ``float8_e4m3fn`` of shape
    ``(rows / block[0], cols / block[1])`` where rows is the product of the leading dims.
    ``tensor_scale``: float32 scalar. ``nonfinite``: boolean mask of inputs that were NaN/inf
    (their values are kept in ``passthrough`` and restored on dequantization), or None.
    """

    codes: torch.Tensor
    scales: torch.Tensor
    tensor_scale: torch.Tensor
    block: tuple[int, int] = (1, BLOCK)
    nonfinite: torch.Tensor | None = None
    passthrough: torch.Tensor | None = None

    @property
    def shape(self) -> torch.Size:
        return self.codes.shape

    def _scale_grid(self) -> torch.Tensor:
        """float32 ``scales * tensor_scale`` shaped (rows / br, 1, cols / bc, 1) for broadcasting."""
        br, bc = self.block
        r, c = self.scales.shape
        return (self.scales.float() * self.tensor_scale).reshape(r, 1, c, 1)

    def block_scales(self) -> torch.Tensor:
        """float32 ``scales * tensor_scale`` broadcast to one value per element (codes' shape)."""
        br, bc = self.block
        r, _, c, _ = (g := self._scale_grid()).shape
        return g.expand(r, br, c, bc).reshape(self.codes.shape)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """``e2m1(code) * (s_block * s_tensor)`` in float32, then cast to ``dtype``; the scales
        are broadcast as a view, never materialised per element."""
        g = self._scale_grid()
        r, _, c, _ = g.shape
        out = (e2m1_decode(self.codes).reshape(r, self.block[0], c, self.block[1]) * g)
        out = out.reshape(self.codes.shape)
        if self.nonfinite is not None:
            out = torch.where(self.nonfinite, self.passthrough, out)
        return out.to(dtype)

    def packed(self) -> torch.Tensor:
        """Codes two per byte (element 2i in the low nibble), last dim halved; uint8."""
        c = self.codes
        return (c[..., 0::2] | (c[..., 1::2] << 4)).to(torch.uint8)


def _check_block(x: torch.Tensor, block: tuple[int, int], name: str) -> tuple[int, int]:
    if block not in ((1, BLOCK), (BLOCK, BLOCK)):
        raise ValueError(f"block must be (1, 16) or (16, 16); got {block}")
    if x.dim() < 1 or x.shape[-1] % BLOCK:
        raise UserError(f"{name}: the last dim must be a multiple of {BLOCK}; got shape {tuple(x.shape)}")
    rows = x.numel() // x.shape[-1]
    if rows % block[0]:
        raise UserError(f"{name}: 16x16 blocks need rows divisible by 16; got {rows} rows")
    return rows, x.shape[-1]


def _to_groups(x: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """(rows, cols) -> (n_blocks, block size) with blocks in row-major block order."""
    rows, cols = x.shape
    br, bc = block
    return x.reshape(rows // br, br, cols // bc, bc).permute(0, 2, 1, 3).reshape(-1, br * bc)


def _from_groups(g: torch.Tensor, rows: int, cols: int, block: tuple[int, int]) -> torch.Tensor:
    br, bc = block
    return g.reshape(rows // br, cols // bc, br, bc).permute(0, 2, 1, 3).reshape(rows, cols)


def _div(x: torch.Tensor, d: float) -> torch.Tensor:
    """``x / d`` rounded once (IEEE division) on every device. CUDA computes a tensor divided by
    a Python (CPU) scalar as ``x * (1/d)``, which differs from the division in the last bit for
    about a third of inputs and breaks CPU/GPU bit-exactness; a 0-dim tensor on ``x``'s device
    takes the true-division kernel there too. On CPU the result is the same as ``x / d``."""
    return x / torch.tensor(d, dtype=torch.float32, device=x.device)


def tensor_scale(amax: torch.Tensor, scales_max: float, v_max: float) -> torch.Tensor:
    """FP32 ``amax / (scales_max * v_max)``, or 1 when that is 0.

    A subnormal ``amax`` (below ~2.7e-42) underflows to a zero scale; the tensor then quantizes
    to zeros with scale 1 instead of dividing by zero (found by hypothesis: all-zero block plus
    one 1.4e-45).
    """
    amax = amax.float()
    s = _div(amax, scales_max * v_max)
    return torch.where(s > 0, s, torch.ones_like(s))


def block_scales_rtn(gmax: torch.Tensor, v_max: float, s_t: torch.Tensor) -> torch.Tensor:
    """E4M3 block scales ``RTN(gmax / v_max / s_t)`` as float32, zeros replaced by 1."""
    s = e4m3_rtn(_div(gmax, v_max) / s_t).float()
    return torch.where(s == 0, torch.ones_like(s), s)


def _uniform(shape, device, generator, noise) -> torch.Tensor:
    if noise is not None:
        if noise.shape != torch.Size(shape):
            raise ValueError(f"noise must have shape {tuple(shape)}; got {tuple(noise.shape)}")
        return noise.to(device=device, dtype=torch.float32)
    return torch.rand(shape, generator=generator, device=device, dtype=torch.float32)


def _check_args(mode: str, scales_max: float | None, scale_override: float, compat: str) -> float:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got {mode!r}")
    if compat not in COMPATS:
        raise ValueError(f"compat must be one of {COMPATS}; got {compat!r}")
    if scales_max is None:
        scales_max = 256.0 if mode == "four_over_six" else E4M3_MAX
    if not 0 < scales_max <= E4M3_MAX:
        raise ValueError(f"scales_max must be in (0, 448]; got {scales_max}")
    if scale_override <= 0:
        raise ValueError(f"scale_override must be > 0; got {scale_override}")
    return scales_max


def _quantize(x, mode, block, scale_override, scales_max, amax, generator, noise, check_finite,
              name, compat):
    """The shared body: E2M1 *values* per block, the float32 block scales and the tensor scale.

    Returns ``(q, s_b, s_t, finite, xf, rows, cols)``: ``q`` (n_blocks, B) signed grid values,
    ``s_b`` (n_blocks, 1) E4M3 values as float32, ``s_t`` 0-dim float32, ``finite`` the mask of
    finite inputs (rows, cols) and ``xf`` the float32 input (rows, cols). No host sync.
    """
    scales_max = _check_args(mode, scales_max, scale_override, compat)
    rows, cols = _check_block(x, block, name)
    xf = x.detach().float().reshape(rows, cols)
    ax = xf.abs()
    finite = ax < math.inf  # False for NaN and +-inf
    if check_finite:
        bad = int((~finite).sum())  # the one host read, only when asked
        if bad:
            raise UserError(f"{name} has {bad} non-finite values (NaN or inf)")
    clean = torch.where(finite, xf, 0.0)
    if amax is None:
        amax_t = torch.where(finite, ax, 0.0).amax() if xf.numel() else xf.new_zeros(())
    else:
        amax_t = torch.as_tensor(amax, dtype=torch.float32, device=xf.device).reshape(())
    v_max = E2M1_MAX / scale_override
    g = _to_groups(clean, block)  # (n_blocks, B)
    gmax = g.abs().amax(dim=1, keepdim=True)
    if compat == "torchao":
        s_t = amax_t.float() / (scales_max * v_max)  # no guard: a zero tensor gives NaN, as torchao

        def scales_for(vm: float) -> torch.Tensor:
            s = (gmax / vm) / s_t
            return s.clamp(min=E4M3_MIN_NORMAL, max=E4M3_MAX).to(torch.float8_e4m3fn).float()

        def scaled(s_b: torch.Tensor) -> torch.Tensor:  # x * ((1 / s_t) / s_b), then clamp
            return (g * ((1.0 / s_t) / s_b)).clamp(-E2M1_MAX, E2M1_MAX)
    else:
        s_t = tensor_scale(amax_t, scales_max, v_max)

        def scales_for(vm: float) -> torch.Tensor:
            return block_scales_rtn(gmax, vm, s_t)

        def scaled(s_b: torch.Tensor) -> torch.Tensor:
            return g / (s_b * s_t)
    s_b = scales_for(v_max)
    u = scaled(s_b)
    if mode == "rtn":
        q = e2m1_rtn_values(u)
    elif mode == "sr":
        q = e2m1_sr_values(u, _uniform(u.shape, u.device, generator, None if noise is None else
                                       _to_groups(noise.reshape(rows, cols), block)))
    else:  # four_over_six: the alternative scale maps the block max to 4 instead of 6
        s_b4 = scales_for(v_max * 4.0 / 6.0)
        q6 = e2m1_rtn_values(u)
        q4 = e2m1_rtn_values(scaled(s_b4))
        err6 = ((q6 * (s_b * s_t) - g) ** 2).sum(dim=1, keepdim=True)
        err4 = ((q4 * (s_b4 * s_t) - g) ** 2).sum(dim=1, keepdim=True)
        use4 = err4 < err6
        q = torch.where(use4, q4, q6)
        s_b = torch.where(use4, s_b4, s_b)
    nan_codes = None
    if compat == "torchao":  # torchao's bit-level encoder turns a NaN's payload into a code
        nan_codes = (torch.isnan(u), _torchao_nan_code(u))
        q = torch.where(nan_codes[0], e2m1_decode(nan_codes[1]), q)
    return q, s_b, s_t, finite, xf, rows, cols, nan_codes


def _torchao_nan_code(u: torch.Tensor) -> torch.Tensor:
    """The byte torchao's float32 -> E2M1 bit conversion (its "normal" branch: exponent rebias,
    round-half-even bias, shift by 22) gives a NaN ``u``, sign bit or'ed in at bit 3. Only
    meaningful where ``u`` is NaN (an all-zero tensor: torchao's zero tensor scale)."""
    bits = u.view(torch.int32)
    mag = bits & 0x7FFFFFFF
    n = mag + ((1 - 127) << 23) + ((1 << 21) - 1) + ((mag >> 22) & 1)
    sign = ((bits >> 28) & 8).to(torch.uint8)
    return (n >> 22).to(torch.uint8) | sign


def quantize_nvfp4(
    x: torch.Tensor,
    *,
    mode: str = "rtn",
    block: tuple[int, int] = (1, BLOCK),
    scale_override: float = 1.0,
    scales_max: float | None = None,
    amax: torch.Tensor | float | None = None,
    generator: torch.Generator | None = None,
    noise: torch.Tensor | None = None,
    check_finite: bool = False,
    name: str = "tensor",
    compat: str = "default",
) -> NVFP4Tensor:
    """Quantize ``x`` (any float dtype, shape (..., K), K a multiple of 16) to NVFP4 along K.

    Parameters
    ----------
    mode : "rtn" | "sr" | "four_over_six"
    block : (1, 16) (1x16 along the last dim) or (16, 16) tiles over (rows, K), rows being the
        product of the leading dims (NVIDIA's weight layout).
    scale_override : v_max = 6 / scale_override (SR uses 17/16 so blocks never clip).
    scales_max : largest block scale the tensor scale aims at; default 448, 256 for 4/6. At most 448.
    amax : tensor absmax to use (e.g. a delayed amax); default max|x| over finite values.
    generator, noise : the random source for ``sr`` (noise: uniforms [0, 1) of ``x``'s shape).
    check_finite : raise :class:`UserError` naming ``name`` on NaN/inf input (this reads one
        number back from the device). Otherwise non-finite inputs come back unchanged on
        dequantization (never mapped to finite values), with no host sync.
    compat : "default" or "torchao" (torchao's conventions, bit-exact with its NVFP4 quantizer
        for ``mode="rtn"``; see the module docstring).

    ``nonfinite`` of the result is always a mask (all False when every input is finite).
    """
    q, s_b, s_t, finite, xf, rows, cols, nan_codes = _quantize(
        x, mode, block, scale_override, scales_max, amax, generator, noise, check_finite, name,
        compat)
    codes = e2m1_encode(q)
    if nan_codes is not None:
        codes = torch.where(nan_codes[0], nan_codes[1], codes)
    codes = _from_groups(codes, rows, cols, block).reshape(x.shape)
    scales = e4m3_rtn(s_b).reshape(rows // block[0], cols // block[1])
    if compat == "torchao":  # keep NaN scales as NaN (e4m3_rtn would too); no clamp needed
        scales = s_b.to(torch.float8_e4m3fn).reshape(rows // block[0], cols // block[1])
    out = NVFP4Tensor(codes=codes, scales=scales, tensor_scale=s_t, block=block)
    out.nonfinite = ~finite.reshape(x.shape)
    out.passthrough = torch.where(finite, 0.0, xf).reshape(x.shape)
    return out


def fake_quant(
    x: torch.Tensor,
    *,
    mode: str = "rtn",
    block: tuple[int, int] = (1, BLOCK),
    scale_override: float = 1.0,
    scales_max: float | None = None,
    amax: torch.Tensor | float | None = None,
    generator: torch.Generator | None = None,
    noise: torch.Tensor | None = None,
    check_finite: bool = False,
    name: str = "tensor",
    compat: str = "default",
) -> torch.Tensor:
    """``quantize_nvfp4(x, ...).dequantize()`` in ``x``'s dtype, bit for bit, without building
    the codes: the grid values are multiplied by their block scale directly (the hot path of the
    quantized linear layers)."""
    q, s_b, s_t, finite, xf, rows, cols, _ = _quantize(
        x, mode, block, scale_override, scales_max, amax, generator, noise, check_finite, name,
        compat)
    out = _from_groups(q * (s_b * s_t), rows, cols, block)
    return torch.where(finite, out, xf).reshape(x.shape).to(x.dtype)
