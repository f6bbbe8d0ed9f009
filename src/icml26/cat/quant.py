"""Symmetric uniform integer fake quantization and the quantized linear module.

Quantizer (docs/cat.md, [ours] where the paper is silent): symmetric, round-to-nearest, no
clipping search, ``q_max = 2^(b-1) - 1`` levels each side (INT4: -7..7), scale ``max|v| / q_max``
per row of weights (``"channel"``), per group of ``group_size`` inputs (``"group"``), per token of
activations (``"token"``, dynamic) or per tensor. The same quantizer serves every arm.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["QuantConfig", "quantize_sym", "rtn_codes", "dequantize_codes", "QuantLinear", "check_bits"]


def check_bits(bits: int | None, name: str) -> None:
    """None (no quantization) or an integer in [2, 8]."""
    if bits is not None and (not isinstance(bits, int) or not 2 <= bits <= 8):
        raise ValueError(f"{name} must be an integer in [2, 8] or None; got {bits!r}")


def quantize_sym(
    x: torch.Tensor, bits: int, granularity: str = "token", group_size: int | None = None
) -> torch.Tensor:
    """Fake-quantize ``x`` (..., d) with a symmetric b-bit round-to-nearest quantizer.

    granularity: ``"token"``/``"channel"`` (one scale per row over the last dim), ``"group"``
    (one scale per ``group_size`` consecutive entries of the last dim), ``"tensor"`` (one scale).
    Returns a tensor of x's shape and dtype; arithmetic in float32 (float64 for float64 input).
    """
    check_bits(bits, "bits")
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    v = x.to(work)
    qmax = 2 ** (bits - 1) - 1
    shape = v.shape
    if granularity in ("token", "channel"):
        amax = v.abs().amax(-1, keepdim=True)
    elif granularity == "group":
        if not group_size or shape[-1] % group_size:
            raise ValueError(f"group_size {group_size} must divide the last dim {shape[-1]}")
        v = v.reshape(*shape[:-1], shape[-1] // group_size, group_size)
        amax = v.abs().amax(-1, keepdim=True)
    elif granularity == "tensor":
        amax = v.abs().amax()
    else:
        raise ValueError(
            f"granularity must be 'token', 'channel', 'group' or 'tensor'; got {granularity!r}"
        )
    scale = (amax / qmax).clamp_min(torch.finfo(work).tiny)
    out = torch.clamp(torch.round(v / scale), -qmax, qmax) * scale
    return out.reshape(shape).to(x.dtype)


def rtn_codes(
    w: torch.Tensor, bits: int, granularity: str = "channel", group_size: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The integer form of :func:`quantize_sym` for a weight (m, d): codes (m, d) int8 in
    ``[-q_max, q_max]`` and float64 scales (m, 1) (``"channel"``) or (m, d / group_size)
    (``"group"``); ``dequantize_codes(codes, scales)`` equals ``quantize_sym`` in float64."""
    check_bits(bits, "bits")
    v = w.detach().to(torch.float64)
    m, d = v.shape
    if granularity == "channel":
        gs = d
    elif granularity == "group":
        gs = group_size
        if not gs or d % gs:
            raise ValueError(f"group_size {group_size} must divide the last dim {d}")
    else:
        raise ValueError(f"weight granularity must be 'channel' or 'group'; got {granularity!r}")
    qmax = 2 ** (bits - 1) - 1
    vg = v.reshape(m, d // gs, gs)  # (m, groups, gs)
    scale = (vg.abs().amax(-1) / qmax).clamp_min(torch.finfo(torch.float64).tiny)
    codes = torch.clamp(torch.round(vg / scale[..., None]), -qmax, qmax)
    return codes.reshape(m, d).to(torch.int8), scale


def dequantize_codes(codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """``codes * scales`` (m, d) float64, each scale column covering d / n_groups inputs."""
    gs = codes.shape[1] // scales.shape[1]
    return codes.to(torch.float64) * scales.to(torch.float64).repeat_interleave(gs, dim=1)


@dataclass(frozen=True)
class QuantConfig:
    """Bits and granularity of a W/A fake quantization; ``None`` bits = keep that side in fp.

    w_gran: ``"channel"`` (per output row, default) or ``"group"`` with ``w_group_size``.
    a_gran: ``"token"`` (dynamic per token, default) or ``"tensor"``.
    """

    w_bits: int | None = 4
    a_bits: int | None = 4
    w_gran: str = "channel"
    a_gran: str = "token"
    w_group_size: int | None = None

    def __post_init__(self) -> None:
        check_bits(self.w_bits, "w_bits")
        check_bits(self.a_bits, "a_bits")
        if self.w_gran not in ("channel", "group", "tensor"):
            raise ValueError(f"w_gran must be 'channel', 'group' or 'tensor'; got {self.w_gran!r}")
        if self.a_gran not in ("token", "tensor"):
            raise ValueError(f"a_gran must be 'token' or 'tensor'; got {self.a_gran!r}")
        if self.w_gran == "group" and (self.w_group_size is None or self.w_group_size < 1):
            raise ValueError(f"w_gran='group' needs w_group_size >= 1; got {self.w_group_size}")

    def to_dict(self) -> dict:
        return {
            "w_bits": self.w_bits,
            "a_bits": self.a_bits,
            "w_gran": self.w_gran,
            "a_gran": self.a_gran,
            "w_group_size": self.w_group_size,
        }


class QuantLinear(nn.Module):
    """``y = Q_w(W T^{-1}) Q_a(T x) + b``: an online block transform, dynamic activation fake
    quantization and a pre-quantized weight.

    weight: (out, in) already multiplied by ``T^{-1}``; ``blocks``: (n, b, b) T blocks or None.
    The transform runs in the module's dtype; quantizers work in float32.
    quantized: ``(codes, scales)`` from another weight quantizer (GPTQ) to use instead of RTN.
    The integer form is kept (``w_codes`` int8, ``w_scales`` float64; plain attributes, not in the state dict) for
    export to a packed-integer format (:mod:`icml26.cat.export`).
    """

    def __init__(
        self,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        blocks: torch.Tensor | None,
        config: QuantConfig,
        dtype: torch.dtype,
        quantized: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.in_features = weight.shape[1]
        self.out_features = weight.shape[0]
        w, codes, scales = weight, None, None
        if config.w_bits is not None:
            if quantized is None:
                if config.w_gran == "tensor":
                    w = quantize_sym(w.to(torch.float64), config.w_bits, "tensor")
                else:
                    quantized = rtn_codes(w, config.w_bits, config.w_gran, config.w_group_size)
            if quantized is not None:
                codes, scales = quantized
                w = dequantize_codes(codes, scales)
        self.register_buffer("weight", w.to(dtype))
        # plain attributes (not buffers): dtype casts of the model leave them exact
        self.w_codes: torch.Tensor | None = None if codes is None else codes.cpu()
        self.w_scales: torch.Tensor | None = None if scales is None else scales.cpu()
        self.register_buffer("bias", None if bias is None else bias.to(dtype))
        self.register_buffer("blocks", None if blocks is None else blocks.to(dtype))
        self.transform_kind = "none"

    def transform_input(self, x: torch.Tensor) -> torch.Tensor:
        """``x T^T`` for x (..., in)."""
        if self.blocks is None:
            return x
        n, b, _ = self.blocks.shape
        if b == 1:  # diagonal
            return x * self.blocks.reshape(-1)
        xb = x.reshape(*x.shape[:-1], n, b)  # (..., n, b)
        return torch.einsum("...nj,nij->...ni", xb, self.blocks).reshape(x.shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.transform_input(x.to(self.weight.dtype))
        if self.config.a_bits is not None:
            x = quantize_sym(x, self.config.a_bits, self.config.a_gran)
        return nn.functional.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        c = self.config
        return (
            f"in={self.in_features}, out={self.out_features}, W{c.w_bits}A{c.a_bits}, "
            f"transform={self.transform_kind}"
        )
