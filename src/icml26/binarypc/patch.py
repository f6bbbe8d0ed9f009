"""Patch HF Llama-family attention with BinaryPC (or a baseline) sparse decode.

``apply_binarypc(model, cfg)`` registers an attention function through transformers'
``AttentionInterface`` and switches the model to it. Prefill (q_len > 1) runs HF's SDPA attention
unchanged and builds per-request metadata (online directions + codes for BinaryPC) from all
cached keys of each layer and KV head. Decode (q_len == 1) selects ``budget`` tokens per KV head
and attends exactly over them; it stays dense in ``dense_layers``, below ``min_context`` and
whenever the budget covers the context. The per-layer state lives on the attention modules; the
regular HF ``DynamicCache`` holds K/V. ``remove_binarypc`` restores the previous attention.
"""

from __future__ import annotations

import torch

from icml26.binarypc.methods import BinaryPCConfig, make_method
from icml26.binarypc.select import budget, select_tokens, sparse_attention

__all__ = [
    "apply_binarypc",
    "remove_binarypc",
    "sparse_decode",
    "capture_qkv",
    "calibrate",
    "load_directions",
    "attention_layers",
]

ATTN_NAME = "binarypc"
_CAPTURE = "binarypc_capture"


def attention_layers(model) -> list:
    """The self-attention modules of a decoder-only HF model (Llama family)."""
    inner = getattr(model, "model", model)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ValueError(f"cannot patch {type(model).__name__}: no .model.layers decoder stack")
    mods = []
    for layer in layers:
        attn = getattr(layer, "self_attn", None)
        if (
            attn is None
            or not hasattr(attn, "layer_idx")
            or not hasattr(attn, "num_key_value_groups")
        ):
            raise ValueError(
                f"cannot patch {type(model).__name__}: attention class "
                f"{type(attn).__name__} lacks layer_idx / num_key_value_groups"
            )
        mods.append(attn)
    return mods


def _allowed(mask, kv_len: int):
    """(B, kv_len) bool of attendable keys from an HF decode mask, or None."""
    if mask is None:
        return None
    m = mask[:, 0, -1, :kv_len]
    return m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2


def sparse_decode(method, meta, P: int, q, keys, values, scaling: float, k: int, allowed=None):
    """One decode step for one layer. q (B, Hq, D); keys/values (B, Hkv, L, D) with the first P
    scored by ``meta``. Returns (output (B, Hq, D), selected indices (B, Hkv, k))."""
    scores, forced = method.score(q, meta, k)
    idx = select_tokens(scores, k, keys.shape[2], forced=forced, allowed=allowed)
    return sparse_attention(q, keys, values, idx, scaling, allowed=allowed), idx


def _sdpa():
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ALL_ATTENTION_FUNCTIONS["sdpa"]


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    st = getattr(module, "_bpc_state", None)
    if st is None:
        return _sdpa()(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    cfg: BinaryPCConfig = st["cfg"]
    q_len, L = query.shape[2], key.shape[2]
    dense_layer = module.layer_idx in cfg.dense_layers
    if q_len > 1:
        st["meta"], st["P"] = None, L
        if not dense_layer:
            d = st["directions"]
            st["meta"] = st["method"].prepare(
                key, st["gen"], None if d is None else d[module.layer_idx]
            )
        return _sdpa()(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    k = budget(L, cfg.mask_out, cfg.min_remain, cfg.token_budget)
    if dense_layer or st.get("meta") is None or cfg.min_context > L or k >= L:
        return _sdpa()(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    scaling = module.scaling if scaling is None else scaling
    out, _ = sparse_decode(
        st["method"],
        st["meta"],
        st["P"],
        query[:, :, 0],
        key,
        value,
        scaling,
        k,
        allowed=_allowed(attention_mask, L),
    )
    return out.unsqueeze(1), None  # (B, 1, Hq, D)


def _register(name, fn) -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(name, fn)


def apply_binarypc(
    model, cfg: BinaryPCConfig | None = None, directions: torch.Tensor | None = None
):
    """Switch ``model`` to BinaryPC sparse decode (in place; returns the model).

    directions: optional offline directions (n_layers, Hkv, bits, D) from :func:`calibrate`.
    """
    cfg = cfg or BinaryPCConfig()
    mods = attention_layers(model)
    n = len(mods)
    bad = [i for i in cfg.dense_layers if i >= n]
    if bad:
        raise ValueError(f"dense_layers {bad} out of range for a model with {n} layers")
    hkv = model.config.num_key_value_heads
    D = mods[0].head_dim
    if directions is not None:
        want = (n, hkv, cfg.bits, D)
        if tuple(directions.shape) != want:
            raise ValueError(
                f"directions have shape {tuple(directions.shape)}; this model and "
                f"config need {want} (layers, KV heads, bits, head_dim)"
            )
    _register(ATTN_NAME, _attention)
    if not hasattr(model, "_bpc_prev_attn"):
        model._bpc_prev_attn = model.config._attn_implementation
    gen = torch.Generator().manual_seed(cfg.seed)
    method = make_method(cfg)
    for m in mods:
        m._bpc_state = {
            "cfg": cfg,
            "method": method,
            "gen": gen,
            "meta": None,
            "P": 0,
            "directions": directions,
        }
    model.set_attn_implementation(ATTN_NAME)
    return model


def remove_binarypc(model):
    """Undo :func:`apply_binarypc`."""
    for m in attention_layers(model):
        if hasattr(m, "_bpc_state"):
            del m._bpc_state
    prev = getattr(model, "_bpc_prev_attn", None)
    if prev is not None:
        model.set_attn_implementation(prev)
        del model._bpc_prev_attn
    return model


def _capture(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    module._bpc_capture = (query.detach(), key.detach(), value.detach())
    return _sdpa()(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
    )


@torch.no_grad()
def capture_qkv(model, input_ids: torch.Tensor):
    """Dense forward of ``input_ids`` (B, L); returns per layer the post-RoPE
    (q (B, Hq, L, D), k (B, Hkv, L, D), v (B, Hkv, L, D)) and the logits."""
    mods = attention_layers(model)
    max_pos = getattr(model.config, "max_position_embeddings", None)
    if max_pos is not None and input_ids.shape[-1] > max_pos:
        raise ValueError(
            f"context of {input_ids.shape[-1]} tokens exceeds the model's "
            f"max_position_embeddings = {max_pos}"
        )
    prev = model.config._attn_implementation
    _register(_CAPTURE, _capture)
    model.set_attn_implementation(_CAPTURE)
    try:
        out = model(input_ids=input_ids.to(model.device), use_cache=False)
    finally:
        model.set_attn_implementation(prev)
    res = [m.__dict__.pop("_bpc_capture") for m in mods]
    return res, out.logits


@torch.no_grad()
def calibrate(model, sequences, bits: int = 64, iters: int = 4, seed: int = 0) -> torch.Tensor:
    """Offline directions from calibration token sequences (list of LongTensor (L,)):
    greedy binary PCs of each layer's concatenated post-RoPE keys. Returns
    (n_layers, Hkv, bits, D) float32 (save with safetensors under the key "directions")."""
    keys = None
    for ids in sequences:
        qkv, _ = capture_qkv(model, ids.reshape(1, -1))
        ks = [k[0].float().cpu() for _, k, _ in qkv]
        keys = ks if keys is None else [torch.cat([a, b], 1) for a, b in zip(keys, ks, strict=True)]
    if keys is None:
        raise ValueError("calibrate needs at least one sequence")
    gen = torch.Generator().manual_seed(seed)
    return torch.stack([binary_pcs_cpu(k, bits, iters, gen) for k in keys])


def binary_pcs_cpu(keys, bits, iters, gen):
    from icml26.binarypc.codes import binary_pcs

    return binary_pcs(keys, bits, iters, generator=gen)


def load_directions(path) -> torch.Tensor:
    """Offline directions saved by ``icml26 binarypc calibrate`` (key "directions")."""
    from pathlib import Path

    from safetensors.torch import load_file

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"directions file not found: {p}")
    data = load_file(str(p))
    if "directions" not in data or data["directions"].dim() != 4:
        raise ValueError(
            f"{p}: expected a 4-D tensor 'directions' (layers, KV heads, bits, head_dim); "
            f"found keys {sorted(data)}"
        )
    return data["directions"]
