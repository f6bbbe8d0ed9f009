"""Decode-time token selection: code scores, budgets, forced sets and exact sparse attention.

Shapes: q (B, Hq, D) one decode query per head; keys/values (B, Hkv, L, D); codes (B, Hkv, P)
int64 for the first P (prefill) tokens; Hq = G·Hkv (GQA groups of G query heads per KV head).
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "work_dtype",
    "byte_table",
    "lut_scores",
    "code_scores",
    "budget",
    "select_tokens",
    "sparse_attention",
    "dense_attention",
]


def work_dtype(x: torch.Tensor) -> torch.dtype:
    """float64 for float64 inputs (exact replays in tests), else float32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def byte_table(p: torch.Tensor) -> torch.Tensor:
    """Per-query lookup table: p (..., bits) → (..., ceil(bits/8), 256) with
    table[j, byte] = Σ_{i<8} p_{8j+i}·s_i(byte), s_i = +1 if bit i of byte is 0 else −1."""
    bits = p.shape[-1]
    nbytes = math.ceil(bits / 8)
    pad = nbytes * 8 - bits
    if pad:
        p = torch.nn.functional.pad(p, (0, pad))
    pb = p.reshape(*p.shape[:-1], nbytes, 8)
    byte = torch.arange(256, device=p.device)
    s = 1 - 2 * ((byte.unsqueeze(-1) >> torch.arange(8, device=p.device)) & 1)  # (256, 8)
    return pb @ s.to(p.dtype).T  # (..., nbytes, 256)


def lut_scores(p: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """Σ_b p_b·sign_b(code) for every code, via the byte table (no ±1 matrices).

    p: (B, Hq, bits); codes: (B, Hkv, L) int64 (B may be 1 and broadcast). Returns (B, Hq, L)
    in p's dtype. The 8 bytes of each code are read as a little-endian uint8 view and looked up
    in each query head's table; a GQA group shares the lookups of its KV head.
    """
    B, Hq, bits = p.shape
    Hkv, L = codes.shape[1], codes.shape[2]
    G = Hq // Hkv
    table = byte_table(p)  # (B, Hq, nb, 256)
    nb = table.shape[-2]
    Bc = codes.shape[0]
    raw = codes[:1] if Bc > 1 and codes.stride(0) == 0 else codes  # an expanded batch: once
    by = raw.contiguous().view(torch.uint8).reshape(raw.shape[0], Hkv, L, 8)
    if not _LITTLE:
        by = by.flip(-1)
    idx = by[..., :nb].to(torch.int32) + 256 * torch.arange(nb, dtype=torch.int32, device=p.device)
    # rows of (B·Hkv·nb·256, G): query heads of a group side by side
    t = table.reshape(B, Hkv, G, nb * 256).transpose(-1, -2).reshape(B * Hkv * nb * 256, G)
    off = nb * 256 * torch.arange(B * Hkv, dtype=torch.int32, device=p.device).reshape(B, Hkv)
    vals = torch.nn.functional.embedding(idx + off[..., None, None], t)  # (B, Hkv, L, nb, G)
    return vals.sum(-2).transpose(-1, -2).reshape(B, Hq, L)


_LITTLE = __import__("sys").byteorder == "little"


def code_scores(
    q: torch.Tensor, codes: torch.Tensor, V: torch.Tensor, quantize: bool = True
) -> torch.Tensor:
    """BinaryPC score of each prefill token: max over each GQA group of q·k̂.

    q (B, Hq, D); codes (B, Hkv, P); V (B, Hkv, bits, D) directions. p = q·V (per query head,
    with its KV head's directions), optionally int8-quantized with a per-(batch, head) absmax and
    dequantized (so heads of a group compare on one scale). Returns (B, Hkv, P) float32.
    """
    B, Hq, D = q.shape
    Hkv = codes.shape[1]
    G = Hq // Hkv
    wd = work_dtype(q)
    Vq = V.repeat_interleave(G, dim=1).to(wd)  # (B, Hq, bits, D)
    p = torch.einsum("bhd,bhkd->bhk", q.to(wd), Vq)
    if quantize:
        scale = p.abs().amax(-1, keepdim=True).clamp_min(1e-30) / 127.0
        p = torch.round(p / scale).clamp(-127, 127) * scale
    s = lut_scores(p, codes)  # (B, Hq, P)
    return s.reshape(B, Hkv, G, -1).amax(2)


def budget(
    ctx: int, mask_out: float = 0.98, min_remain: int = 128, token_budget: int | None = None
) -> int:
    """Tokens attended per query: ``token_budget`` if given, else max(⌊ctx·(1−mask_out)⌋,
    min_remain); never more than ``ctx``."""
    if token_budget is not None:
        if token_budget < 1:
            raise ValueError(f"token_budget must be >= 1; got {token_budget}")
        return min(int(token_budget), ctx)
    if not 0.0 <= mask_out < 1.0:
        raise ValueError(f"mask_out must be in [0, 1); got {mask_out}")
    return min(max(int(math.floor(ctx * (1.0 - mask_out))), int(min_remain)), ctx)


def select_tokens(
    scores: torch.Tensor,
    k: int,
    n_total: int,
    forced: torch.Tensor | None = None,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """Indices (B, Hkv, k) of the tokens to attend.

    scores: (B, Hkv, P) for the first P scored tokens. Tokens P..n_total−1 (decoded after prefill)
    are always kept; ``forced`` (B, Hkv, P) bool marks scored tokens always kept (error set,
    sinks). ``allowed`` (B, n_total) bool masks out padding (and future tokens in a replay).
    Equal scores are broken towards later tokens. Everything kept counts toward ``k``;
    the remaining slots go to the highest scores. If forced tokens exceed ``k`` the latest
    decode tokens and then the first forced ones win.
    """
    B, Hkv, P = scores.shape
    k = min(k, n_total)
    big = 1e300
    pri = torch.empty((B, Hkv, n_total), device=scores.device, dtype=torch.float64)
    s = scores.to(torch.float64).nan_to_num(nan=-big)
    s = s.clamp(-1e299, 1e299)
    # deterministic ties (equal codes, Quest pages): later tokens win, by a negligible offset
    a = s.abs()
    eps = 1e-12 * (1.0 + float(a.masked_fill(a > 1e290, 0.0).amax())) if s.numel() else 0.0
    pri[..., :P] = s + eps * torch.arange(P, device=s.device, dtype=torch.float64)
    if forced is not None:
        pri[..., :P] = torch.where(forced, torch.full_like(s, big), pri[..., :P])
    if n_total > P:
        pri[..., P:] = math.inf
    if allowed is not None:
        pri = torch.where(allowed[:, None, :], pri, torch.full_like(pri, -math.inf))
    return torch.topk(pri, k, dim=-1, sorted=False).indices


def sparse_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    idx: torch.Tensor,
    scaling: float,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """Exact softmax attention of each query head over its KV head's selected tokens.

    q (B, Hq, D); keys/values (B, Hkv, L, D); idx (B, Hkv, k). Returns (B, Hq, D) in q's dtype.
    """
    B, Hq, D = q.shape
    Hkv = keys.shape[1]
    G = Hq // Hkv
    gi = idx.unsqueeze(-1).expand(-1, -1, -1, D)
    wd = work_dtype(q)
    ks = torch.gather(keys, 2, gi).to(wd)
    vs = torch.gather(values, 2, gi).to(wd)
    qg = q.reshape(B, Hkv, G, D).to(wd)
    logits = torch.einsum("bhgd,bhkd->bhgk", qg, ks) * scaling
    if allowed is not None:
        ok = torch.gather(allowed[:, None, :].expand(-1, Hkv, -1), 2, idx)
        logits = logits.masked_fill(~ok[:, :, None, :], -math.inf)
    w = torch.softmax(logits, dim=-1)
    return torch.einsum("bhgk,bhkd->bhgd", w, vs).reshape(B, Hq, D).to(q.dtype)


def dense_attention(
    q, keys, values, scaling: float, allowed=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Full decode attention: output (B, Hq, D) and weights (B, Hq, L) float32."""
    B, Hq, D = q.shape
    Hkv, L = keys.shape[1], keys.shape[2]
    G = Hq // Hkv
    qg = q.reshape(B, Hkv, G, D).to(torch.float32)
    logits = torch.einsum("bhgd,bhkd->bhgk", qg, keys.to(torch.float32)) * scaling
    if allowed is not None:
        logits = logits.masked_fill(~allowed[:, None, None, :], -math.inf)
    w = torch.softmax(logits, dim=-1)
    o = torch.einsum("bhgk,bhkd->bhgd", w, values.to(torch.float32))
    return o.reshape(B, Hq, D).to(q.dtype), w.reshape(B, Hq, L)
