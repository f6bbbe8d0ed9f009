"""``BinaryPCCache``: a transformers ``Cache`` that holds BinaryPC's per-request state.

Each layer is a :class:`BinaryPCLayer`, a ``DynamicLayer`` (it stores K/V exactly like HF's
default cache) that also holds what the selection method built at the last prefill of that layer:

- ``meta``: the method's metadata over the first ``P`` cached tokens (BinaryPC: the binary
  directions ``V`` (B, Hkv, bits, D), the packed 64-bit key codes (B, Hkv, P) and the
  reconstruction errors (B, Hkv, P); the baselines: their hashes, page bounds, ...), ``None`` in
  dense layers;
- ``P``: how many cached tokens those codes cover. Tokens decoded after the prefill (positions
  ≥ P) have no code and are always attended.

The cache-wide :class:`BinaryPCState` holds the config, the method, the offline directions (if any)
and the random generator of the online directions (seeded with ``cfg.seed`` when the cache is
made, so a request's draws depend on nothing outside its cache).

The attention function finds the layer through the attention kwargs: ``BinaryPCLayer.update``
receives the attention module's kwargs dict (``cache.update(..., kwargs=kwargs)``, as the
decoders of transformers >= 5.2x call it) and adds ``binarypc_layer=self`` to it, which the module
then passes on to the registered attention function. Older 5.x decoders (5.17) call
``cache.update(k, v, layer_idx)`` without the kwargs; there the layer is tagged, through a weak
reference, on the key tensor it returns, which is the very tensor the module hands to the
attention function next (:func:`layer_of`). Nothing is stored on the model.

Beam reordering, batch selection / repeat-interleave and cropping keep K/V and the metadata in
step; cropping into the coded prefix rebuilds the metadata over the kept keys.
"""

from __future__ import annotations

import weakref

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from icml26.binarypc.methods import BinaryPCConfig, make_method, select_batch

__all__ = [
    "ATTN_NAME",
    "SUPPORTED_ATTN",
    "SUPPORTED_HEAD_DIMS",
    "BinaryPCCache",
    "BinaryPCLayer",
    "BinaryPCState",
    "check_attention",
    "check_model",
]

ATTN_NAME = "binarypc"
LAYER_KWARG = "binarypc_layer"
_KEY_TAG = "_binarypc_layer"  # on the key tensor a layer's update returned (older transformers)
# attention implementations the patch can stand in for (its dense path is SDPA's, equal to eager)
SUPPORTED_ATTN = ("sdpa", "eager")
SUPPORTED_HEAD_DIMS = tuple(range(16, 257, 16))  # the tested range of the codes and kernels


def layer_of(key: torch.Tensor, attn_kwargs: dict) -> BinaryPCLayer | None:
    """The :class:`BinaryPCLayer` whose update produced ``key`` (the attention function's keys):
    from the attention kwargs (popped), else from the tag on ``key``; ``None`` without a
    BinaryPC cache."""
    layer = attn_kwargs.pop(LAYER_KWARG, None)
    if layer is None:
        ref = getattr(key, _KEY_TAG, None)
        layer = ref() if ref is not None else None
    return layer


def _decoder_layers(model) -> list:
    inner = getattr(model, "model", model)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ValueError(f"cannot patch {type(model).__name__}: no .model.layers decoder stack")
    return list(layers)


def head_dim(model) -> int:
    """The attention head size of a Llama-family model."""
    attn = _decoder_layers(model)[0].self_attn
    D = getattr(attn, "head_dim", None) or getattr(model.config, "head_dim", None)
    return int(D or model.config.hidden_size // model.config.num_attention_heads)


def check_attention(model) -> None:
    """Raise ValueError unless ``model`` runs an attention implementation the patch supports."""
    impl = model.config._attn_implementation
    if impl not in (*SUPPORTED_ATTN, ATTN_NAME):
        raise ValueError(
            f"BinaryPC patches attention implementations {', '.join(SUPPORTED_ATTN)}; this model "
            f"uses {impl!r} (load it with attn_implementation='sdpa')"
        )


def check_model(model, cfg: BinaryPCConfig, directions: torch.Tensor | None) -> None:
    """Raise ValueError when ``cfg`` / ``directions`` do not fit ``model``."""
    n = len(_decoder_layers(model))
    bad = [i for i in cfg.dense_layers if i >= n]
    if bad:
        raise ValueError(f"dense_layers {bad} out of range for a model with {n} layers")
    types = getattr(model.config, "layer_types", None)
    if types is not None and any(t != "full_attention" for t in types):
        odd = sorted({t for t in types if t != "full_attention"})
        raise ValueError(f"BinaryPC patches full-attention layers only; this model has {odd}")
    D = head_dim(model)
    if D not in SUPPORTED_HEAD_DIMS:
        raise ValueError(
            f"BinaryPC supports head_dim {', '.join(map(str, SUPPORTED_HEAD_DIMS))} (multiples "
            f"of 16 up to 256); this model has head_dim {D}"
        )
    if directions is not None:
        hkv = model.config.num_key_value_heads
        want = (n, hkv, cfg.bits, D)
        if tuple(directions.shape) != want:
            raise ValueError(
                f"directions have shape {tuple(directions.shape)}; this model and "
                f"config need {want} (layers, KV heads, bits, head_dim)"
            )


class BinaryPCState:
    """What the layers of one cache share: config, method, offline directions, generator, and the
    replay settings of :func:`icml26.binarypc.patch.sparse_replay` (``replay_P`` None otherwise)."""

    def __init__(self, cfg: BinaryPCConfig, directions: torch.Tensor | None = None):
        self.cfg = cfg
        self.method = make_method(cfg)
        self.directions = directions
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.replay_P: int | None = None
        self.replay_chunk = 32

    def reseed(self) -> None:
        self.gen.manual_seed(self.cfg.seed)

    def prepare(self, keys: torch.Tensor, layer_idx: int):
        """The method's metadata over ``keys`` (B, Hkv, L, D) of layer ``layer_idx`` (None in a
        dense layer; draws from the cache's generator otherwise)."""
        if layer_idx in self.cfg.dense_layers:
            return None
        d = None if self.directions is None else self.directions[layer_idx]
        return self.method.prepare(keys, self.gen, d)


class BinaryPCLayer(DynamicLayer):
    """One layer's K/V (as ``DynamicLayer``) plus the codes of its first ``P`` tokens."""

    def __init__(self, state: BinaryPCState, layer_idx: int):
        super().__init__()
        self.state = state
        self.layer_idx = layer_idx
        self.meta: dict | None = None
        self.P = 0

    def update(self, key_states, value_states, *args, **kwargs):
        keys, values = super().update(key_states, value_states)
        attn_kwargs = kwargs.get("kwargs")
        if isinstance(attn_kwargs, dict):
            attn_kwargs[LAYER_KWARG] = self
        else:  # transformers 5.17: update(k, v, layer_idx) gets no attention kwargs
            setattr(keys, _KEY_TAG, weakref.ref(self))
        return keys, values

    def prefill(self, keys: torch.Tensor, full: bool = False) -> None:
        """Codes over ``keys`` (the layer's whole cache after a multi-token forward). With
        ``recode="new"`` (default) and codes already there, only the tokens after ``P`` are hashed,
        on the existing directions (BinaryPC; the baselines rebuild their metadata); with
        ``recode="all"`` or ``full``, directions and codes are rebuilt over all of ``keys``."""
        extend = getattr(self.state.method, "extend", None)
        if (
            not full
            and self.state.cfg.recode == "new"
            and self.meta is not None
            and extend is not None
            and 0 < self.P <= keys.shape[2]
        ):
            if keys.shape[2] > self.P:
                self.meta = extend(self.meta, keys[:, :, self.P :])
        else:
            self.meta = self.state.prepare(keys, self.layer_idx)
        self.P = keys.shape[2]

    def code_decode_tokens(self, keys: torch.Tensor) -> None:
        """Hash the decode tokens not yet coded once ``cfg.code_decode`` of them have gathered
        (0: never, the official path: they are always attended)."""
        n = self.state.cfg.code_decode
        if n > 0 and self.meta is not None and keys.shape[2] - self.P >= n:
            extend = getattr(self.state.method, "extend", None)
            if extend is None:  # a baseline: rebuild its metadata over the whole cache
                self.meta = self.state.prepare(keys, self.layer_idx)
            else:
                self.meta = extend(self.meta, keys[:, :, self.P :])
            self.P = keys.shape[2]

    # --- keep the metadata in step with K/V -------------------------------------------------
    def _reindex(self, idx: torch.Tensor) -> None:
        self.meta = select_batch(self.state.method, self.meta, idx)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        super().reorder_cache(beam_idx)
        self._reindex(beam_idx.long())

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        n = None if self.meta is None else _batch_of(self.meta, self.state.method)
        super().batch_select_indices(indices)
        if n is not None:
            idx = indices
            if idx.dtype == torch.bool:
                idx = torch.arange(n, device=idx.device)[idx]
            self._reindex(idx.long())

    def batch_repeat_interleave(self, repeats: int) -> None:
        n = None if self.meta is None else _batch_of(self.meta, self.state.method)
        super().batch_repeat_interleave(repeats)
        if n is not None:
            self._reindex(torch.arange(n).repeat_interleave(repeats))

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)
        n = self.get_seq_length()
        if n < self.P:  # the coded prefix was cut: code the kept keys, as a prefill of them would
            if n == 0:
                self.meta, self.P = None, 0
            else:
                self.prefill(self.keys, full=True)

    def reset(self) -> None:
        super().reset()
        self.meta, self.P = None, 0

    def __repr__(self):
        return f"BinaryPCLayer({self.layer_idx}, tokens={self.get_seq_length()}, coded={self.P})"


def _batch_of(meta: dict, method) -> int | None:
    for name in method.batched:
        return int(meta[name].shape[0])
    if "shape" in meta:
        return int(meta["shape"][0])
    return None


class BinaryPCCache(DynamicCache):
    """A ``DynamicCache`` whose layers also hold BinaryPC's codes (one request's state).

    ``BinaryPCCache(model)`` uses the config and directions given to
    :func:`icml26.binarypc.apply_binarypc`; ``cfg`` / ``directions`` override them for this cache
    (``directions=None`` keeps the applied ones). The model must be patched. Use it like any HF
    cache::

        apply_binarypc(model, BinaryPCConfig())
        cache = BinaryPCCache(model)
        out = model.generate(ids, past_key_values=cache, max_new_tokens=16)
        # the same cache continues the conversation: only the new tokens are prefilled
        out2 = model.generate(torch.cat([out, more], 1), past_key_values=cache, max_new_tokens=16)

    Two caches never share state: each has its own codes and its own generator.
    """

    def __init__(
        self, model, cfg: BinaryPCConfig | None = None, directions: torch.Tensor | None = None
    ):
        applied = getattr(model, "_bpc_applied", None)
        if applied is None or model.config._attn_implementation != ATTN_NAME:
            raise ValueError(
                f"BinaryPCCache needs a model patched with apply_binarypc; "
                f"{type(model).__name__} uses attention {model.config._attn_implementation!r}"
            )
        cfg = applied[0] if cfg is None else cfg
        directions = applied[1] if directions is None else directions
        check_model(model, cfg, directions)
        self.state = BinaryPCState(cfg, directions)
        n = len(_decoder_layers(model))
        Cache.__init__(self, layers=[BinaryPCLayer(self.state, i) for i in range(n)])

    @property
    def cfg(self) -> BinaryPCConfig:
        return self.state.cfg

    def reset(self) -> None:
        """Empty every layer and reseed the generator: the cache is as new."""
        super().reset()
        self.state.reseed()

    @classmethod
    def from_cache(
        cls,
        model,
        past: Cache,
        cfg: BinaryPCConfig | None = None,
        directions: torch.Tensor | None = None,
        code: bool = True,
    ) -> BinaryPCCache:
        """A BinaryPCCache continuing ``past`` (e.g. a dense prefill's ``DynamicCache``): its
        layers take ``past``'s K/V tensors (no copy; ``past`` itself is never changed, since
        decoding appends by concatenation) and, with ``code``, the metadata a patched prefill of
        those tokens would have built (same generator draws, layer by layer)."""
        c = cls(model, cfg, directions)
        if len(past.layers) != len(c.layers):
            raise ValueError(f"past has {len(past.layers)} layers; the model has {len(c.layers)}")
        for mine, theirs in zip(c.layers, past.layers, strict=True):
            if theirs.keys is None or not getattr(theirs, "is_initialized", False):
                continue
            mine.lazy_initialization(theirs.keys, theirs.values)
            mine.keys, mine.values = theirs.keys, theirs.values
            if code and mine.keys.shape[2] > 0:
                mine.prefill(mine.keys)
        return c
