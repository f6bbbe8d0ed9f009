"""Patch HF Llama-family attention with BinaryPC (or a baseline) sparse decode.

``apply_binarypc(model, cfg)`` registers an attention function through transformers'
``AttentionInterface`` and switches the model to it. All per-request state (codes, directions,
the prefix length they cover, the generator) lives in a :class:`~icml26.binarypc.cache.
BinaryPCCache`; the model only keeps the config it was patched with. Prefill (q_len > 1) runs HF's
SDPA attention unchanged and builds the metadata (online directions + codes for BinaryPC) from all
cached keys of each layer and KV head, into the cache layer. Decode (q_len == 1) selects
``budget`` tokens per KV head and attends exactly over them; it stays dense in ``dense_layers``,
below ``min_context`` and whenever the budget covers the context. ``remove_binarypc`` restores
the previous attention.

A patched model used without a cache (``use_cache`` on) or with an empty ``DynamicCache`` (what
``model.generate`` makes) gets a fresh ``BinaryPCCache`` in its place (read the cache back from
the outputs, as ``generate`` does); a non-empty plain cache is refused (use :func:`prime`).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache

from icml26.binarypc.cache import (
    ATTN_NAME,
    BinaryPCCache,
    BinaryPCLayer,
    BinaryPCState,
    _decoder_layers,
    check_attention,
    check_model,
    layer_of,
)
from icml26.binarypc.methods import BinaryPCConfig
from icml26.binarypc.select import budget, select_tokens, sparse_attention
from icml26.core.hfcache import NAMES, cache_kw, cache_kwarg, take_cache

__all__ = [
    "apply_binarypc",
    "remove_binarypc",
    "BinaryPCCache",
    "sparse_decode",
    "sparse_replay",
    "prime",
    "expand_meta",
    "capture_qkv",
    "calibrate",
    "load_directions",
    "attention_layers",
]

_CAPTURE = "binarypc_capture"


def attention_layers(model) -> list:
    """The self-attention modules of a decoder-only HF model (Llama family)."""
    mods = []
    for layer in _decoder_layers(model):
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


def sparse_decode(
    method, meta, P: int, q, keys, values, scaling: float, k: int, allowed=None, positions=None
):
    """One decode step for one layer. q (B, Hq, D); keys/values (B, Hkv, L, D) with the first P
    scored by ``meta``; ``positions`` (B,) the query positions (default L − 1; a replay passes
    them with ``allowed`` masking later tokens). Returns (output (B, Hq, D), selection): the
    selected indices (B, Hkv, k) for score-and-select methods, or a (B, Hq, L) bool mask of the
    attended set for sampling methods (MagicPIG)."""
    if hasattr(method, "attend"):
        return method.attend(
            q, keys, values, meta, k, scaling, allowed=allowed, positions=positions
        )
    scores, forced = method.score(q, meta, k)
    backend = getattr(method.cfg, "backend", "auto")
    idx = select_tokens(scores, k, keys.shape[2], forced=forced, allowed=allowed, backend=backend)
    return sparse_attention(q, keys, values, idx, scaling, allowed=allowed), idx


def _sdpa():
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ALL_ATTENTION_FUNCTIONS["sdpa"]


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    layer: BinaryPCLayer | None = layer_of(key, kwargs)

    def dense():
        return _sdpa()(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )

    if layer is None:  # no cache (use_cache=False): every forward is a dense prefill
        return dense()
    st: BinaryPCState = layer.state
    if st.replay_P is not None:
        return _replay(module, st, query, key, value, attention_mask, scaling, dropout, **kwargs)
    cfg = st.cfg
    q_len, L = query.shape[2], key.shape[2]
    if q_len > 1:
        layer.prefill(key)
        return dense()
    k = budget(L, cfg.mask_out, cfg.min_remain, cfg.token_budget)
    if layer.meta is None or cfg.min_context > L or k >= L:
        return dense()
    layer.code_decode_tokens(key)
    scaling = module.scaling if scaling is None else scaling
    out, _ = sparse_decode(
        st.method,
        layer.meta,
        layer.P,
        query[:, :, 0],
        key,
        value,
        scaling,
        k,
        allowed=_allowed(attention_mask, L),
    )
    return out.unsqueeze(1), None  # (B, 1, Hq, D)


def expand_meta(meta: dict, B: int) -> dict:
    """Broadcast per-request metadata of batch 1 to B rows (views, no copies)."""
    return {
        k: (v.expand(B, *v.shape[1:]) if torch.is_tensor(v) and v.dim() >= 3 else v)
        for k, v in meta.items()
    }


def _replay(module, st: BinaryPCState, query, key, value, attention_mask, scaling, dropout, **kw):
    """One forward over prefix + continuation: rows < P are the dense prefill; every row t >= P
    attends over the selection the decode step at position t would make (same budget, same
    dense fallbacks, decode tokens P..t kept, later tokens masked)."""
    cfg: BinaryPCConfig = st.cfg
    P = st.replay_P
    B, Hq, T, D = query.shape
    L = key.shape[2]
    if B != 1 or L - T > P:
        raise ValueError("sparse_replay needs batch 1 and a past cache no longer than the prefix")
    off = L - T  # query row i is position off + i
    out, w = _sdpa()(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kw
    )
    meta = st.prepare(key[:, :, :P], module.layer_idx)
    if meta is None:  # dense layer
        return out, w
    scaling = module.scaling if scaling is None else scaling
    out = out.clone()
    groups: dict[int, list[int]] = {}
    for t in range(max(P, off), L):
        k = budget(t + 1, cfg.mask_out, cfg.min_remain, cfg.token_budget)
        if cfg.min_context > t + 1 or k >= t + 1:
            continue  # the decode step is dense there: keep the SDPA row
        groups.setdefault(k, []).append(t)
    pos = torch.arange(L, device=key.device)
    chunk = st.replay_chunk
    for k, rows in groups.items():
        for c in range(0, len(rows), chunk):
            r = torch.tensor(rows[c : c + chunk], device=key.device)
            n = r.numel()
            qs = query[0, :, r - off].transpose(0, 1)  # (n, Hq, D)
            allowed = pos[None, :] <= r[:, None]
            o, _ = sparse_decode(
                st.method,
                expand_meta(meta, n),
                P,
                qs,
                key.expand(n, -1, -1, -1),
                value.expand(n, -1, -1, -1),
                scaling,
                k,
                allowed=allowed,
                positions=r,
            )
            out[0, r - off] = o.to(out.dtype)
    return out, None


def _check_patched(model, what: str) -> None:
    if getattr(model, "_bpc_applied", None) is None:
        raise ValueError(f"{what} needs a model patched with apply_binarypc")


@torch.no_grad()
def sparse_replay(
    model,
    input_ids: torch.Tensor,
    prefix_len: int,
    chunk: int = 32,
    past=None,
    cfg: BinaryPCConfig | None = None,
    directions: torch.Tensor | None = None,
):
    """Logits (1, T, vocab) of ``input_ids`` (1, T) in one forward, as a model patched with
    :func:`apply_binarypc` would compute them by prefilling the first ``prefix_len`` tokens
    densely and then decoding the rest one token at a time (teacher-forced): every continuation
    query attends over its own per-query selection. Proven equal to step-by-step decode in
    tests/binarypc/test_binarypc_patch.py.

    past: optional HF cache of a dense forward over the first ``past.get_seq_length() <=
    prefix_len`` tokens; ``input_ids`` then continue it (only those rows are computed). ``past``
    is left unchanged (the forward runs on a BinaryPCCache sharing its K/V), so one dense
    prefill serves every method. cfg / directions: as for :class:`BinaryPCCache` (default: the
    ones the model was patched with)."""
    _check_patched(model, "sparse_replay")
    c = cfg or model._bpc_applied[0]
    if c.code_decode:
        raise ValueError(
            f"sparse_replay replays decode with uncoded decode tokens; got code_decode="
            f"{c.code_decode} (use step-by-step decoding, or code_decode=0)"
        )
    n_past = 0 if past is None else past.get_seq_length()
    T = input_ids.shape[-1] + n_past
    if input_ids.dim() != 2 or input_ids.shape[0] != 1 or not n_past <= prefix_len < T:
        raise ValueError(
            f"sparse_replay needs input_ids (1, T), past length <= prefix_len < total length; "
            f"got shape {tuple(input_ids.shape)}, past {n_past}, prefix_len {prefix_len}"
        )
    max_pos = getattr(model.config, "max_position_embeddings", None)
    if max_pos is not None and max_pos < T:
        raise ValueError(f"context of {T} tokens exceeds max_position_embeddings = {max_pos}")
    if past is None:
        cache = BinaryPCCache(model, cfg, directions)
    else:
        cache = BinaryPCCache.from_cache(model, past, cfg, directions, code=False)
    cache.state.replay_P = int(prefix_len)
    cache.state.replay_chunk = int(chunk)
    ids = input_ids.to(model.device)
    return model(input_ids=ids, **cache_kw(model, cache), use_cache=True).logits


@torch.no_grad()
def prime(
    model, past, cfg: BinaryPCConfig | None = None, directions: torch.Tensor | None = None
) -> BinaryPCCache:
    """A :class:`BinaryPCCache` that continues ``past`` (a dense prefill's cache) with the codes
    the patched model's own prefill would have built (same generator draws, layer by layer), so
    decoding can go on sparsely without a second prefill. ``past`` is not changed (the new cache
    shares its K/V tensors and appends by concatenation), so one dense prefill can serve every
    method. cfg / directions: as for :class:`BinaryPCCache`."""
    _check_patched(model, "prime")
    return BinaryPCCache.from_cache(model, past, cfg, directions, code=True)


def _register(name, fn) -> None:
    """Register ``fn`` as attention ``name``, with SDPA's mask builder: transformers builds no
    mask at all for an attention name it has no mask function for (padding and cached
    multi-token forwards would then be wrong)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(name, fn)
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


def _cache_hook(model):
    """Forward pre-hook of the decoder stack: give a patched model a BinaryPCCache when it is
    called without one (use_cache on) or with an empty DynamicCache (what generate builds)."""

    def hook(module, args, kwargs):
        if len(args) > 3:  # cache passed positionally: leave the call alone
            return None
        cache = next((kwargs[n] for n in NAMES if kwargs.get(n) is not None), None)
        if isinstance(cache, BinaryPCCache):
            return None
        if cache is None:
            use = kwargs.get("use_cache")
            if use is None:
                use = getattr(module.config, "use_cache", True)
            if not use:
                return None
        elif type(cache) is not DynamicCache or cache.get_seq_length() > 0:
            raise ValueError(
                f"a model patched with apply_binarypc needs a BinaryPCCache; got "
                f"{type(cache).__name__} holding {cache.get_seq_length()} tokens (continue a dense "
                f"cache with icml26.binarypc.prime(model, past))"
            )
        kwargs = dict(kwargs)
        take_cache(kwargs)
        kwargs[cache_kwarg(module)] = BinaryPCCache(model)  # the name this decoder takes
        return args, kwargs

    return hook


def apply_binarypc(
    model, cfg: BinaryPCConfig | None = None, directions: torch.Tensor | None = None
):
    """Switch ``model`` to BinaryPC sparse decode (in place; returns the model).

    cfg: the default config of the caches this model makes (a :class:`BinaryPCCache` passed to
    ``generate`` / ``forward`` may carry another). directions: optional offline directions
    (n_layers, Hkv, bits, D) from :func:`calibrate`. Applying again replaces the config.
    """
    cfg = cfg or BinaryPCConfig()
    attention_layers(model)  # raises for models it cannot patch
    check_attention(model)
    check_model(model, cfg, directions)
    _register(ATTN_NAME, _attention)
    if not hasattr(model, "_bpc_prev_attn"):
        model._bpc_prev_attn = model.config._attn_implementation
    old = getattr(model, "_bpc_hook", None)
    if old is not None:
        old.remove()
    inner = getattr(model, "model", model)
    model._bpc_hook = inner.register_forward_pre_hook(_cache_hook(model), with_kwargs=True)
    model._bpc_applied = (cfg, directions)
    model.set_attn_implementation(ATTN_NAME)
    return model


def remove_binarypc(model):
    """Undo :func:`apply_binarypc`."""
    hook = getattr(model, "_bpc_hook", None)
    if hook is not None:
        hook.remove()
        del model._bpc_hook
    if hasattr(model, "_bpc_applied"):
        del model._bpc_applied
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
