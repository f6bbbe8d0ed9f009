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
    "project_query",
    "int_code_scores",
    "code_scores",
    "topk_later_ties",
    "budget",
    "select_tokens",
    "sparse_attention",
    "gather_rows",
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


QSCALES = ("group", "head")


def project_query(
    q: torch.Tensor, V: torch.Tensor, Hkv: int, quantize: bool = True, qscale: str = "group"
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Query projection p = q·V onto each KV head's directions, optionally int8-quantized.

    q (B, Hq, D); V (B, Hkv, bits, D). Without ``quantize``: (p (B, Hq, bits) in the work dtype,
    None). With it: (round(p / scale) clamped to [-127, 127] as int32, scale (B, Hq)) where
    scale = absmax / 127 over the whole GQA group and all bits (``qscale="group"``, the official
    code: one scale per (batch, KV head)) or over each query head's bits (``"head"``).
    """
    if qscale not in QSCALES:
        raise ValueError(f"qscale must be one of {', '.join(QSCALES)}; got {qscale!r}")
    B, Hq, D = q.shape
    G = Hq // Hkv
    wd = work_dtype(q)
    Vq = V.to(wd).repeat_interleave(G, dim=1)  # (B, Hq, bits, D)
    p = torch.einsum("bhd,bhkd->bhk", q.to(wd), Vq)
    if not quantize:
        return p, None
    amax = p.abs().amax(-1)  # (B, Hq)
    if qscale == "group":
        amax = amax.reshape(B, Hkv, G).amax(-1).repeat_interleave(G, dim=1)
    scale = amax.clamp_min(1e-30) / 127.0
    pint = torch.round(p / scale[..., None]).clamp(-127, 127).to(torch.int32)
    return pint, scale


def int_code_scores(pint: torch.Tensor, scale: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """Reference scores of an int8 query: (B, Hkv, P) in ``scale``'s dtype,
    max over each GQA group of (Σ_b pint_b·sign_b(code)) · scale. The integer sum is exact
    (|Σ| ≤ 64·127 is exact in float32), so the compiled kernel reproduces this bit for bit."""
    B, Hq, _ = pint.shape
    Hkv = codes.shape[1]
    s = lut_scores(pint.to(torch.float32), codes).to(scale.dtype)  # exact integers
    s = s * scale[..., None]
    return s.reshape(B, Hkv, Hq // Hkv, -1).amax(2)


def _use_kernel(backend: str, *tensors: torch.Tensor) -> bool:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
    if backend == "torch" or any(t.device.type != "cpu" for t in tensors):
        if backend == "cpp":
            raise ValueError("backend 'cpp' needs CPU tensors")
        return False
    from icml26.binarypc import kernel

    if backend == "cpp":
        if not kernel.available():
            raise RuntimeError("backend 'cpp': the BinaryPC C++ kernel could not be built")
        return True
    return kernel.available()


BACKENDS = ("auto", "cpp", "torch")


def code_scores(
    q: torch.Tensor,
    codes: torch.Tensor,
    V: torch.Tensor,
    quantize: bool = True,
    qscale: str = "group",
    backend: str = "auto",
) -> torch.Tensor:
    """BinaryPC score of each prefill token: max over each GQA group of q·k̂.

    q (B, Hq, D); codes (B, Hkv, P); V (B, Hkv, bits, D) directions. p = q·V (per query head,
    with its KV head's directions), optionally int8-quantized (:func:`project_query`), then
    score = Σ_b p_b·bit_b. Returns (B, Hkv, P), float32 (float64 for float64 q). ``backend``:
    "cpp" the compiled kernel (int8 float32 path only), "torch" the tensor path, "auto" the
    kernel where it applies and builds — both give identical scores.
    """
    B, Hq, _ = q.shape
    Hkv = codes.shape[1]
    G = Hq // Hkv
    p, scale = project_query(q, V, Hkv, quantize, qscale)
    if scale is None:
        if backend == "cpp":
            raise ValueError("backend 'cpp' scores int8 queries only (quantize=True)")
        return lut_scores(p, codes).reshape(B, Hkv, G, -1).amax(2)
    if scale.dtype == torch.float32 and _use_kernel(backend, codes):
        from icml26.binarypc import kernel

        return kernel.scores(p, scale, codes)
    if backend == "cpp":
        raise ValueError("backend 'cpp' needs a float32 (or bf16/fp16) query")
    return int_code_scores(p, scale, codes)


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
    backend: str = "auto",
) -> torch.Tensor:
    """Indices (B, Hkv, k) of the tokens to attend, ascending in each row.

    scores: (B, Hkv, P) for the first P scored tokens. Tokens P..n_total−1 (decoded after prefill)
    are always kept; ``forced`` (B, Hkv, P) bool marks scored tokens always kept (error set,
    sinks). ``allowed`` (B, n_total) bool masks out padding (and future tokens in a replay).
    Everything kept counts toward ``k``; the remaining slots go to the highest scores.

    The selection is the k largest tokens under one total order: allowed decode tokens, then
    allowed forced tokens, then allowed scored tokens by score (NaN lowest), then tokens that
    are not allowed; **ties always go to the later token** (equal codes, Quest pages, integer
    SimHash scores). If forced tokens exceed ``k`` the latest decode tokens, then the latest
    forced ones win. ``backend``: "cpp" (float32 scores) a partial selection per row in C++,
    "torch" the tensor path below, "auto" the first where it applies — the same indices.
    """
    if allowed is not None and allowed.shape[0] != scores.shape[0]:  # scores shared by the rows
        scores = scores.expand(allowed.shape[0], -1, -1)
    B, Hkv, P = scores.shape
    if forced is not None and forced.shape[0] != B:
        forced = forced.expand(B, -1, -1)
    k = min(k, n_total)
    if scores.dtype == torch.float32 and _use_kernel(backend, scores):
        from icml26.binarypc import kernel

        return kernel.select(scores, k, n_total, forced=forced, allowed=allowed)
    if backend == "cpp":
        raise ValueError("backend 'cpp' needs float32 scores")
    big = 1e300
    pri = torch.empty((B, Hkv, n_total), device=scores.device, dtype=torch.float64)
    pri[..., :P] = scores.to(torch.float64).clamp(-1e299, 1e299).nan_to_num(nan=-big)
    if forced is not None:
        pri[..., :P] = torch.where(forced, torch.full_like(pri[..., :P], big), pri[..., :P])
    if n_total > P:
        pri[..., P:] = math.inf
    if allowed is not None:
        pri = torch.where(allowed[:, None, :], pri, torch.full_like(pri, -math.inf))
    return topk_later_ties(pri, k)


def topk_later_ties(pri: torch.Tensor, k: int) -> torch.Tensor:
    """Indices (..., k), ascending, of the k largest entries of each row of ``pri`` (..., n),
    ties to the later index: everything above the k-th largest value, then the latest entries
    equal to it. One ``torch.topk`` for the threshold, no sort."""
    n = pri.shape[-1]
    if k <= 0:
        return torch.empty((*pri.shape[:-1], 0), dtype=torch.long, device=pri.device)
    if k >= n:
        return torch.arange(n, device=pri.device).expand(*pri.shape[:-1], n).contiguous()
    t = torch.topk(pri, k, dim=-1, sorted=False).values.amin(-1, keepdim=True)
    gt = pri > t
    need = k - gt.sum(-1, keepdim=True)
    eq = pri == t
    after = eq.flip(-1).cumsum(-1).flip(-1)  # entries equal to t at this index or later
    take = gt | (eq & (after <= need))
    return take.nonzero()[:, -1].reshape(*pri.shape[:-1], k)


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
    G, k = Hq // Hkv, idx.shape[-1]
    wd = work_dtype(q)
    ks, vs = gather_rows(keys, idx).to(wd), gather_rows(values, idx).to(wd)  # (B, Hkv, k, D)
    qg = q.reshape(B * Hkv, G, D).to(wd)
    logits = torch.bmm(qg, ks.reshape(B * Hkv, k, D).transpose(1, 2)) * scaling  # (B·Hkv, G, k)
    if allowed is not None:
        ok = torch.gather(allowed[:, None, :].expand(-1, Hkv, -1), 2, idx)
        logits = logits.masked_fill(~ok.reshape(B * Hkv, 1, k), -math.inf)
    w = torch.softmax(logits, dim=-1)
    return torch.bmm(w, vs.reshape(B * Hkv, k, D)).reshape(B, Hq, D).to(q.dtype)


def gather_rows(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x (B, H, L, D), idx (B, H, k) → (B, H, k, D): the selected rows, one ``index_select`` over
    the flattened rows (a broadcast batch of x, stride 0, is read once)."""
    B, H, k = idx.shape
    L, D = x.shape[2], x.shape[3]
    if x.shape[0] == 1 or x.stride(0) == 0:
        base = (
            x[:1].reshape(H * L, D) if x[:1].is_contiguous() else x[:1].contiguous().view(H * L, D)
        )
        off = (torch.arange(H, device=idx.device) * L).reshape(1, H, 1)
    else:
        base = x.reshape(B * H * L, D)
        off = (torch.arange(B * H, device=idx.device) * L).reshape(B, H, 1)
    return base.index_select(0, (idx + off).reshape(-1)).reshape(B, H, k, D)


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
