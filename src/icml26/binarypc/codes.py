"""Binary principal components of attention keys and 64-bit key codes.

``binary_pcs`` is the greedy rank-1 binary matrix factorization of the official BinaryPC code:
``A ≈ Σ_b u_b v_bᵀ`` with ``u_b ∈ {±1}^L``. ``hash_keys`` is residual sign quantization of keys
onto those directions, packed into one int64 per key (bit ``b`` set when sign ``b`` is negative).
All functions are batched over leading dimensions (batch, KV head).
"""

from __future__ import annotations

import torch

__all__ = ["binary_pcs", "gen_device", "hash_keys", "pack_signs", "unpack_signs", "reconstruct", "recon_error"]

MAX_BITS = 64


def _check_bits(bits: int) -> None:
    if not 1 <= int(bits) <= MAX_BITS:
        raise ValueError(f"bits must be in [1, {MAX_BITS}]; got {bits}")


def _sign(x: torch.Tensor) -> torch.Tensor:
    """±1 with sign(0) = +1 (so every bit is defined)."""
    return torch.where(x >= 0, 1.0, -1.0).to(x.dtype)


def gen_device(generator: torch.Generator | None) -> torch.device | None:
    """Where a draw from ``generator`` must be made (its own device; None: the default one).
    Draws are made there and moved beside the keys, so the usual CPU generator gives the same
    draws whatever device the keys are on."""
    return None if generator is None else generator.device


def binary_pcs(
    keys: torch.Tensor,
    bits: int = 64,
    iters: int = 4,
    generator: torch.Generator | None = None,
    return_signs: bool = False,
):
    """Greedy binary principal directions of ``keys``.

    keys: (..., L, D) float (post-RoPE keys of one layer and KV head per leading index).
    Returns V: (..., bits, D), same dtype (and the sign vectors U (..., bits, L) when
    ``return_signs``). For each bit: random v; ``iters`` times
    (u = sign(A v); v = Aᵀ u); v /= L (the least-squares optimum for that u); deflate A ← A − u vᵀ.
    """
    _check_bits(bits)
    if iters < 1:
        raise ValueError(f"iters must be >= 1; got {iters}")
    if keys.dim() < 2:
        raise ValueError(f"keys must be (..., L, D); got shape {tuple(keys.shape)}")
    A = keys.clone()
    L, D = A.shape[-2], A.shape[-1]
    lead = A.shape[:-2]
    init = torch.randn((bits, *lead, D), generator=generator, dtype=torch.float64,
                       device=gen_device(generator))
    out, us = [], []
    for b in range(bits):
        v = init[b].to(device=A.device, dtype=A.dtype)
        for _ in range(iters):
            u = _sign(torch.einsum("...ld,...d->...l", A, v))
            v = torch.einsum("...ld,...l->...d", A, u)
        v = v / L
        A = A - u.unsqueeze(-1) * v.unsqueeze(-2)
        out.append(v)
        us.append(u)
    V = torch.stack(out, dim=-2)
    return (V, torch.stack(us, dim=-2)) if return_signs else V


def pack_signs(signs: torch.Tensor) -> torch.Tensor:
    """(..., bits) ±1 → (...) int64; bit b is 1 where sign b is negative."""
    bits = signs.shape[-1]
    _check_bits(bits)
    neg = (signs < 0).to(torch.int64)
    shifts = torch.arange(bits, device=signs.device, dtype=torch.int64)
    return (neg << shifts).sum(-1)  # two's-complement wrap is the intended bit pattern


def unpack_signs(codes: torch.Tensor, bits: int = 64, dtype=torch.float32) -> torch.Tensor:
    """(...) int64 → (..., bits) ±1 of ``dtype`` (inverse of :func:`pack_signs`)."""
    _check_bits(bits)
    shifts = torch.arange(bits, device=codes.device, dtype=torch.int64)
    b = (codes.unsqueeze(-1) >> shifts) & 1
    return (1 - 2 * b).to(dtype)


def hash_keys(keys: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """Residual sign quantization. keys (..., L, D), V (..., bits, D) → codes (..., L) int64.

    bit_b = sign(r·v_b), r ← r − bit_b·v_b, starting from r = k.
    """
    r = keys.to(V.dtype).clone()
    signs = []
    for b in range(V.shape[-2]):
        v = V[..., b, :].unsqueeze(-2)  # (..., 1, D)
        s = _sign((r * v).sum(-1))  # (..., L)
        r = r - s.unsqueeze(-1) * v
        signs.append(s)
    return pack_signs(torch.stack(signs, dim=-1))


def reconstruct(codes: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """k̂ = Σ_b bit_b v_b. codes (..., L), V (..., bits, D) → (..., L, D)."""
    s = unpack_signs(codes, V.shape[-2], dtype=V.dtype)
    return s @ V


def recon_error(keys: torch.Tensor, codes: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """‖k − k̂‖₂ per key: (..., L)."""
    return (keys.to(V.dtype) - reconstruct(codes, V)).norm(dim=-1)
