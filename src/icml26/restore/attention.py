"""RESTORE's attention calibration (Eq. 4) and the attention function the patch registers.

Calibrated logits ``z'_{mn} = z_{mn} + log s_n + log(c - D(|p_m - p_n|))`` with the RoPE decay

    D(Δ) = (2/d_h) Σ_{j=1}^{d_h/2} cos(Δ θ_j),   θ_j = base^(-2(j-1)/d_h),

so ``D(0) = 1``, ``|D| <= 1`` and with ``c = 2`` the multiplier ``c - D`` lies in ``[1, 3]``.
Per the official code: the distance term covers every (query, key) pair allowed by the causal
mask (text keys included) and is used in prefill only; ``log s`` is added in every layer, in
prefill and decode, with layer 0 seeing every retained visual token at the uniform size
``N_vis / n_vis``.

:func:`restore_attention` is registered in transformers' ``AttentionInterface`` under
:data:`ATTN_NAME`. It reads the call's :class:`RestoreState` from its keyword arguments
(:data:`STATE_KWARG`, passed down by the patched forward; one state per request, carried on that
request's KV cache between prefill and decode), never from the module, so two requests on one
model cannot clobber each other. Without a state it is exactly ``sdpa_attention_forward``. With
one, it builds a float bias (B, 1, Q, K) - causal + padding mask, log sizes, distance term, in-LLM
pruning masks - and calls ``scaled_dot_product_attention`` with it (no flash path: a float mask),
or, with ``backend="flex"`` (the default ``"auto"`` picks it on CUDA when FlexAttention imports),
``flex_attention`` with the same bias expressed as a ``score_mod`` (:meth:`RestoreState.score_mod`:
a per-key log-size vector plus a distance table indexed by ``|p_q - p_k|``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

__all__ = [
    "ATTN_NAME",
    "STATE_KWARG",
    "rope_decay",
    "rope_params",
    "distance_bias",
    "distance_table",
    "RestoreState",
    "restore_attention",
    "register",
    "flex_available",
]

ATTN_NAME = "icml26_restore"
STATE_KWARG = (
    "icml26_restore_state"  # keyword under which the patched forward passes the call's state
)


def rope_decay(delta: torch.Tensor, head_dim: int, base: float) -> torch.Tensor:
    """``D(Δ)`` for integer distances ``delta`` (any shape); returns float64 of the same shape."""
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"head_dim must be an even integer >= 2; got {head_dim}")
    j = torch.arange(head_dim // 2, dtype=torch.float64, device=delta.device)
    theta = float(base) ** (-2.0 * j / head_dim)
    ang = delta.to(torch.float64)[..., None] * theta
    return torch.cos(ang).sum(-1) * (2.0 / head_dim)


def rope_params(text_config) -> tuple[int, float]:
    """``(head_dim, rope base)`` read from a text config (LLaVA-1.5: 128, 1e4; SmolLM2: 64, 1e5)."""
    head_dim = getattr(text_config, "head_dim", None) or (
        text_config.hidden_size // text_config.num_attention_heads
    )
    base = None
    rp = getattr(text_config, "rope_parameters", None)
    if isinstance(rp, dict):
        base = rp.get("rope_theta")
    if base is None:
        base = getattr(text_config, "rope_theta", None)
    if base is None:
        raise ValueError(
            f"cannot read the RoPE base (rope_theta) from {type(text_config).__name__}"
        )
    return int(head_dim), float(base)


def distance_bias(
    pos_q: torch.Tensor, pos_k: torch.Tensor, head_dim: int, base: float, c: float = 2.0
) -> torch.Tensor:
    """``log(c - D(|p_m - p_n|))`` for positions ``pos_q`` (B, Q) and ``pos_k`` (B, K): (B, Q, K)
    float64. Uses a table over the distances present (cheap: at most max position + 1 entries)."""
    if c <= 1.0:
        raise ValueError(f"c must be > 1 so that c - D(Δ) > 0; got {c}")
    delta = (pos_q[:, :, None] - pos_k[:, None, :]).abs()
    return distance_table(int(delta.max()), head_dim, base, c, device=delta.device)[delta]


def distance_table(
    max_delta: int, head_dim: int, base: float, c: float = 2.0, device=None
) -> torch.Tensor:
    """``log(c - D(Δ))`` for ``Δ = 0 .. max_delta``: (max_delta + 1,) float64."""
    if c <= 1.0:
        raise ValueError(f"c must be > 1 so that c - D(Δ) > 0; got {c}")
    return torch.log(
        c - rope_decay(torch.arange(int(max_delta) + 1, device=device), head_dim, base)
    )


def flex_available() -> bool:
    """Whether ``torch.nn.attention.flex_attention`` imports (torch >= 2.5)."""
    try:
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class RestoreState:
    """One request's state: made by the patched forward at prefill, passed to the attention
    function as a keyword argument and kept on that request's KV cache for its decode steps.

    Set at prefill by the patch: ``log_size`` / ``log_size0`` (B, Lp) per-key log sizes for layers
    >= 1 / layer 0 (0 for text), ``pos`` (B, Lp) rotary positions, ``valid`` (B, Lp) non-padding
    keys, ``visual`` (B, Lp) visual keys, ``text_query`` (B, Lp) rows counted as text queries for
    the attention-mass record. ``backend``: "sdpa" (float bias) or "flex" (``score_mod``).
    """

    config: object
    head_dim: int
    base: float
    backend: str = "sdpa"
    phase: str = "prefill"  # "prefill" | "decode"
    log_size: torch.Tensor | None = None
    log_size0: torch.Tensor | None = None
    pos: torch.Tensor | None = None
    valid: torch.Tensor | None = None
    visual: torch.Tensor | None = None
    text_query: torch.Tensor | None = None
    next_pos: torch.Tensor | None = None  # (B,) position of the first decoded token
    prefill_len: int = 0
    drop: torch.Tensor | None = None  # (B, Lp) keys pruned by an in-LLM pruner from prune_layer on
    stages: list = field(default_factory=list)  # in-LLM pruning: [(layer, keep), ...]
    record: dict | None = None  # layer -> list of (B,) text->visual attention mass
    reductions: list = field(default_factory=list)  # last prefill's Reduction per image
    dist: torch.Tensor | None = None  # (B, Lp, Lp) float64 distance term of the current prefill

    def _pad(self, t: torch.Tensor | None, k: int, fill) -> torch.Tensor | None:
        if t is None or t.shape[1] == k:
            return t
        extra = torch.full((t.shape[0], k - t.shape[1]), fill, dtype=t.dtype, device=t.device)
        return torch.cat([t, extra], dim=1)

    def bias(self, layer: int, q: int, k: int, dtype: torch.dtype, device) -> torch.Tensor:
        """Additive attention bias (B, 1, Q, K) for this layer and call: float64 for float64
        queries, float32 otherwise (cast to the query dtype at the SDPA call)."""
        cfg = self.config
        valid = self._pad(self.valid, k, True).to(device)
        qi = torch.arange(k - q, k, device=device)
        allowed = (torch.arange(k, device=device)[None, :] <= qi[:, None])[None] & valid[:, None, :]
        drop = self._drop_for(layer, k)
        if drop is not None:
            allowed = allowed & ~drop.to(device)[:, None, :]
        b = torch.zeros(allowed.shape, dtype=torch.float64, device=device)
        if cfg.calibrate:
            ls = self.log_size0 if (layer == 0 and cfg.layer0_uniform) else self.log_size
            b = b + self._pad(ls, k, 0.0).to(device, torch.float64)[:, None, :]
            if cfg.distance_bias and self.phase == "prefill":
                if self.dist is None or self.dist.shape[-1] != k:  # once per prefill
                    self.dist = distance_bias(
                        self.pos.to(device), self.pos.to(device), self.head_dim, self.base, cfg.c
                    )
                b = b + self.dist
        work = torch.float64 if dtype == torch.float64 else torch.float32
        b = torch.where(allowed, b, torch.full_like(b, torch.finfo(work).min))
        return b.to(work)[:, None]

    def score_mod(self, layer: int, q: int, k: int, dtype: torch.dtype, device):
        """The same bias as :meth:`bias` as a FlexAttention ``score_mod(score, b, h, q_idx, kv_idx)``:
        a per-key vector (log sizes; masked keys at the dtype's minimum) plus, in prefill, a
        distance table indexed by ``|pos[b, q] - pos[b, kv]|`` (Eq. 4), and the causal test."""
        cfg = self.config
        work = torch.float64 if dtype == torch.float64 else torch.float32
        neg = torch.finfo(work).min
        valid = self._pad(self.valid, k, True).to(device)
        drop = self._drop_for(layer, k)
        if drop is not None:
            valid = valid & ~drop.to(device)
        key = torch.zeros(valid.shape, dtype=work, device=device)
        if cfg.calibrate:
            ls = self.log_size0 if (layer == 0 and cfg.layer0_uniform) else self.log_size
            key = key + self._pad(ls, k, 0.0).to(device, work)
        off = k - q
        use_dist = cfg.calibrate and cfg.distance_bias and self.phase == "prefill"
        if use_dist:
            pos = self.pos.to(device)
            table = distance_table(
                int(pos.max() - pos.min()), self.head_dim, self.base, cfg.c, device=device
            ).to(work)

        def score_mod(score, b, h, q_idx, kv_idx):
            s = score + key[b, kv_idx]
            if use_dist:
                s = s + table[(pos[b, q_idx + off] - pos[b, kv_idx]).abs()]
            ok = (kv_idx <= q_idx + off) & valid[b, kv_idx]
            return torch.where(ok, s, neg)

        return score_mod

    def _drop_for(self, layer: int, k: int) -> torch.Tensor | None:
        if self.drop is None:
            return None
        d = None
        for lay, mask in self.drop:
            if layer >= lay:
                d = mask
        return None if d is None else self._pad(d, k, False)


def _repeat_kv(x: torch.Tensor, n: int) -> torch.Tensor:
    return x if n == 1 else x.repeat_interleave(n, dim=1)


def restore_attention(
    module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs
):
    """``AttentionInterface`` function: query (B, H, Q, d), key/value (B, Hkv, K, d) -> output
    (B, Q, H, d) and ``None`` weights. The call's :class:`RestoreState` comes in ``kwargs``
    under :data:`STATE_KWARG`; without one this is plain SDPA."""
    st: RestoreState | None = kwargs.pop(STATE_KWARG, None)
    if st is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    layer = int(module.layer_idx)
    b, h, q, d = query.shape
    k = key.shape[2]
    scale = scaling if scaling is not None else 1.0 / math.sqrt(d)
    need_probs = st.phase == "prefill" and (
        st.record is not None or any(lay - 1 == layer for lay, _ in st.stages)
    )
    if need_probs:
        kr = _repeat_kv(key, h // key.shape[1])
        bias = st.bias(layer, q, k, query.dtype, query.device)
        logits = (query.float() @ kr.float().transpose(-1, -2)) * scale + bias
        probs = logits.softmax(-1)
        if st.record is not None:
            vis = st.visual.to(query.device).float()  # (B, K)
            mass = (probs * vis[:, None, None, :]).sum(-1).mean(1)  # (B, Q)
            tq = st.text_query.to(query.device).float()
            st.record.setdefault(layer, []).append((mass * tq).sum(1) / tq.sum(1).clamp_min(1))
        for lay, keep in st.stages:
            if lay - 1 == layer:
                _prune_in_llm(st, lay, keep, probs)
    if st.backend == "flex":
        from torch.nn.attention.flex_attention import flex_attention

        out = flex_attention(
            query,
            key,
            value,
            score_mod=st.score_mod(layer, q, k, query.dtype, query.device),
            scale=scale,
            enable_gqa=key.shape[1] != h,
        )
        return out.transpose(1, 2).contiguous(), None
    key = _repeat_kv(key, h // key.shape[1])
    value = _repeat_kv(value, h // value.shape[1])
    bias = st.bias(layer, q, k, query.dtype, query.device)
    out = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=bias.to(query.dtype),
        dropout_p=dropout if module.training else 0.0,
        scale=scale,
    )
    return out.transpose(1, 2).contiguous(), None


def _prune_in_llm(st: RestoreState, layer: int, keep: int, probs: torch.Tensor) -> None:
    """FastV / PDrop ranking: attention of each row's last valid query (head mean) over the visual
    keys still alive; keep the top ``keep``, drop the rest from ``layer`` on."""
    score = probs[:, :, -1, :].mean(1).cpu()  # (B, K)
    alive = st.visual.clone()
    if st.drop is not None and st.drop:
        alive &= ~st.drop[-1][1]
    score = torch.where(alive, score, torch.full_like(score, -1.0))
    drop = alive.clone()
    for i in range(score.shape[0]):
        n_keep = min(keep, int(alive[i].sum()))
        drop[i, torch.topk(score[i], n_keep).indices] = False
    prev = st.drop[-1][1] if st.drop else torch.zeros_like(drop)
    st.drop = (st.drop or []) + [(layer, drop | prev)]


_REGISTERED = False


def register() -> None:
    """Register :func:`restore_attention` (and SDPA's mask builder) under :data:`ATTN_NAME`."""
    global _REGISTERED
    if _REGISTERED:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTN_NAME, restore_attention)
    AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)
    _REGISTERED = True
