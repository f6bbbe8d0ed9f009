"""``apply_restore(model, RestoreConfig(...))``: visual token reduction + RESTORE on HF LLaVA models.

Works on ``LlavaForConditionalGeneration`` and ``LlavaNextForConditionalGeneration`` (transformers
5.x) unchanged from a tiny random config to LLaVA-1.5-7B on a GPU. The patch

1. replaces the inner ``LlavaModel.forward`` (an instance attribute; :func:`remove_restore` deletes
   it, which is bit-exact): at prefill it encodes the images, reduces each image's tokens
   (:mod:`reducers`, :mod:`anchors`), builds the shorter sequence, its rotary positions
   (``retained`` original indices, a merged token at its group's median, or ``reindexed``
   contiguous) and per-key sizes; in decode it continues the positions (offset N_vis - n_vis
   when retained);
2. switches the language model to the attention function of :mod:`attention` (registered in
   transformers' ``AttentionInterface``), which adds the calibration bias.

State is per call: each prefill makes a fresh :class:`~icml26.restore.attention.RestoreState`,
passes it down to the attention function as a keyword argument and keeps it on the request's KV
cache for the decode steps; nothing mutable is stored on the model, so two requests on one model
(interleaved, or each with its own ``restore_config=`` keyword) do not interfere. Per-call
keywords of ``model(...)`` / ``model.generate(...)``: ``restore_config`` (a :class:`RestoreConfig`
overriding the one given to :func:`apply_restore`) and ``restore_record`` (a dict that receives
per-layer text->visual attention mass). :func:`restore_state` returns a call's state (from its
output or cache) for inspection.

The model's ``forward`` then returns logits for the *reduced* sequence; text after the last image
keeps its order, so the last ``T`` positions are the last ``T`` text tokens. ``generate`` works
as usual (the KV cache holds the reduced prefill).
"""

from __future__ import annotations

import inspect
import types
from dataclasses import asdict, dataclass

import torch

from icml26.core.hfcache import cache_field, cache_kw, output_cache, take_cache
from icml26.restore.anchors import Hybrid
from icml26.restore.attention import (
    ATTN_NAME,
    STATE_KWARG,
    RestoreState,
    flex_available,
    register,
    rope_params,
)
from icml26.restore.reducers import MERGE_POSITIONS, Reduction, check_keep, get_reducer

__all__ = ["RestoreConfig", "apply_restore", "remove_restore", "is_patched", "restore_state"]

CACHE_ATTR = "_icml26_restore_state"  # a request's RestoreState, kept on its KV cache
BACKENDS = ("auto", "sdpa", "flex")

IN_LLM = ("fastv", "pdrop")
SUPPORTED = ("LlavaForConditionalGeneration", "LlavaNextForConditionalGeneration")


@dataclass(frozen=True)
class RestoreConfig:
    """Reduction + RESTORE settings.

    reducer : "divprune" | "visionzip" | "tome" | "uniform" | "none" | "fastv" | "pdrop", or an
        object with ``reduce(feats, keep, cls_attn) -> Reduction``. ``none`` keeps every token.
    keep : visual tokens kept per image (``1 <= keep < N_vis``).
    keep_ratio : if set, overrides ``keep``: each image keeps ``max(1, round(keep_ratio * N_vis))``
        tokens; must lie in (0, 1] (1 keeps every token).
    gamma : hybrid split: the base pruner keeps ``round(gamma*keep)``, the rest merge into anchors;
        ``None`` runs the base reducer alone.
    anchors : "distinctive" (RESTORE) or "uniform" (ablation) anchors for the hybrid merge.
    c : calibration constant (> 1), paper 2.
    positions : "retained" (original indices, merged = group median) or "reindexed" (contiguous).
    calibrate : add ``log s`` (+ the distance term when ``distance_bias``).
    layer0_uniform : layer 0 sees every retained visual token at size N_vis / n_vis (official code).
    select_on : reducers see the vision-tower features ("vision") or projected ones ("projected").
    merge_position : median tie rule for merged positions: lower | upper | first | last | mean.
    fastv_layer : FastV prunes after this many layers (paper K = 2).
    pdrop_layers : PDrop stage layers (default L/4, L/2, 3L/4), keep halves per stage, scaled so
        that the final stage keeps ``keep`` tokens.
    backend : "sdpa" (float bias), "flex" (FlexAttention ``score_mod``) or "auto" (flex on CUDA
        when available, else sdpa). In-LLM pruning and attention-mass records also compute the
        explicit probabilities.
    """

    reducer: object = "divprune"
    keep: int = 64
    gamma: float | None = 0.5
    anchors: str = "distinctive"
    c: float = 2.0
    positions: str = "retained"
    calibrate: bool = True
    distance_bias: bool = True
    layer0_uniform: bool = True
    select_on: str = "vision"
    merge_position: str = "lower"
    fastv_layer: int = 2
    pdrop_layers: tuple | None = None
    keep_ratio: float | None = None
    backend: str = "auto"

    def __post_init__(self):
        if int(self.keep) != self.keep or self.keep < 1:
            raise ValueError(f"keep must be an integer >= 1; got {self.keep}")
        if self.keep_ratio is not None and not 0.0 < float(self.keep_ratio) <= 1.0:
            raise ValueError(f"keep_ratio must be in (0, 1]; got {self.keep_ratio}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}; got {self.backend!r}")
        if self.backend == "flex" and not flex_available():
            raise ValueError(
                "backend='flex' needs torch.nn.attention.flex_attention (torch >= 2.5)"
            )
        if self.gamma is not None and not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1] (or None); got {self.gamma}")
        if not self.c > 1.0:
            raise ValueError(f"c must be > 1 (c - D(Δ) must stay positive); got {self.c}")
        for name, val, ok in (
            ("positions", self.positions, ("retained", "reindexed")),
            ("select_on", self.select_on, ("vision", "projected")),
            ("anchors", self.anchors, ("distinctive", "uniform")),
            ("merge_position", self.merge_position, MERGE_POSITIONS),
        ):
            if val not in ok:
                raise ValueError(f"{name} must be one of {ok}; got {val!r}")
        if isinstance(self.reducer, str):
            if self.reducer in IN_LLM and self.calibrate:
                raise ValueError(
                    f"reducer={self.reducer!r} is an in-LLM pruner; RESTORE calibrates "
                    "text-agnostic reducers only: pass calibrate=False"
                )
            base = get_reducer(self.reducer) if self.reducer not in IN_LLM + ("none",) else None
            if base is not None and self.gamma is not None and not hasattr(base, "select"):
                raise ValueError(
                    f"reducer={self.reducer!r} has no pruning criterion for the hybrid "
                    "split; pass gamma=None (RESTORE on ToMe = positions + calibration)"
                )

    def to_dict(self) -> dict:
        d = asdict(self)
        d["reducer"] = (
            self.reducer if isinstance(self.reducer, str) else type(self.reducer).__name__
        )
        return d

    def keep_for(self, n_vis: int) -> int:
        """Tokens kept from an image of ``n_vis`` tokens (``keep``, or from ``keep_ratio``)."""
        if self.keep_ratio is None:
            return int(self.keep)
        return max(1, round(float(self.keep_ratio) * n_vis))

    def resolved_backend(self, device) -> str:
        if self.backend != "auto":
            return self.backend
        return "flex" if torch.device(device).type == "cuda" and flex_available() else "sdpa"

    def build_reducer(self):
        base = get_reducer(self.reducer)
        if self.gamma is None:
            return base
        return Hybrid(
            base, gamma=self.gamma, anchors=self.anchors, merge_position=self.merge_position
        )


@dataclass(frozen=True)
class _Patch:
    """What :func:`apply_restore` records on the model: read-only (no per-call state)."""

    config: RestoreConfig
    head_dim: int
    base: float
    prev_impl: str | None


def is_patched(model) -> bool:
    return getattr(model, "_icml26_restore", None) is not None


def restore_state(obj) -> RestoreState | None:
    """The :class:`RestoreState` of one call, from its output (``.cache``, or ``.past_key_values``
    on older transformers) or its cache; ``None`` when the call was not reduced (or ran without a
    cache). For inspection: reductions, positions."""
    if obj is None:
        return None
    st = getattr(obj, CACHE_ATTR, None)  # obj is the cache itself
    if st is not None:
        return st
    return getattr(output_cache(obj), CACHE_ATTR, None)


def apply_restore(model, config: RestoreConfig):
    """Patch ``model`` in place (returns it). Raises ``ValueError`` for an unsupported class (or a
    model without visual tokens), an M-RoPE model, FlashAttention-2, or a model already patched."""
    cls = type(model).__name__
    if not isinstance(config, RestoreConfig):
        raise TypeError(f"apply_restore needs a RestoreConfig; got {type(config).__name__}")
    if cls not in SUPPORTED:
        extra = " (M-RoPE models are not supported)" if "Qwen" in cls else ""
        if not hasattr(getattr(model, "model", None), "vision_tower") and "Qwen" not in cls:
            extra = " (it has no vision tower, so no visual tokens to reduce)"
        raise ValueError(f"apply_restore supports {', '.join(SUPPORTED)}; got {cls}{extra}")
    if is_patched(model):
        raise ValueError("apply_restore: this model is already patched; call remove_restore first")
    inner = model.model
    if getattr(inner.config, "image_token_id", None) is None:
        raise ValueError(f"{cls} has no image_token_id in its config: no visual tokens to reduce")
    lm = inner.language_model
    impl = lm.config._attn_implementation
    if impl not in ("sdpa", "eager", ATTN_NAME, None):
        raise ValueError(
            f"attention implementation {impl!r} is not supported (a float bias is "
            "needed); load the model with attn_implementation='sdpa' or 'eager'"
        )
    if getattr(lm.config, "rope_scaling", None) and "mrope_section" in (
        lm.config.rope_scaling or {}
    ):
        raise ValueError("M-RoPE text models are not supported")
    head_dim, base = rope_params(lm.config)
    register()
    patch = _Patch(config=config, head_dim=head_dim, base=base, prev_impl=impl)
    lm.config._attn_implementation = ATTN_NAME
    inner._icml26_restore = patch
    inner.forward = types.MethodType(_patched_forward, inner)

    def get_image_features(
        pixel_values,
        vision_feature_layer=None,
        vision_feature_select_strategy=None,
        image_sizes=None,
        **kwargs,
    ):
        return _patched_get_image_features(
            inner,
            pixel_values,
            vision_feature_layer,
            vision_feature_select_strategy,
            image_sizes,
            **kwargs,
        )

    inner.get_image_features = get_image_features  # generate() encodes images through this
    model.forward = _outer_forward(model)  # declares restore_config / restore_record for generate()
    model._icml26_restore = patch
    return model


def _outer_forward(model):
    """The class's own ``forward`` bound to ``model``, with a signature that also names the
    per-call keywords (``generate`` rejects keywords that ``forward`` does not declare)."""
    cls_forward = type(model).forward
    sig = inspect.signature(cls_forward)
    params = list(sig.parameters.values())[1:]  # without self
    extra = [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None)
        for n in ("restore_config", "restore_record")
    ]
    tail = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
    head = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]

    def forward(*args, **kwargs):
        return cls_forward(model, *args, **kwargs)

    forward.__signature__ = sig.replace(parameters=head + extra + tail)
    forward.__doc__ = cls_forward.__doc__
    return forward


def remove_restore(model):
    """Undo :func:`apply_restore` exactly (returns ``model``)."""
    if not is_patched(model):
        raise ValueError("remove_restore: model is not patched")
    patch = model._icml26_restore
    inner = model.model
    del inner.forward
    del inner.get_image_features
    del model.forward
    inner.language_model.config._attn_implementation = patch.prev_impl
    del inner._icml26_restore
    del model._icml26_restore
    return model


# --------------------------------------------------------------------------------------------


def _cls_hook(inner, vfl):
    """Forward pre-hook on the vision self-attention that produces layer ``vfl``; it stores
    ``(module, hidden_states)`` in the returned dict (LLaVA-1.5 / CLIP-like towers only)."""
    captured: dict = {}
    if hasattr(inner, "image_newline") or not isinstance(vfl, int):
        return None, captured
    body = getattr(inner.vision_tower, "vision_model", inner.vision_tower)
    layers = getattr(getattr(body, "encoder", None), "layers", None)
    if layers is None:
        return None, captured
    idx = vfl if vfl >= 0 else len(layers) + 1 + vfl
    if not 1 <= idx <= len(layers) or not hasattr(layers[idx - 1], "self_attn"):
        return None, captured

    def hook(mod, args, kwargs):
        captured["h"] = (mod, kwargs.get("hidden_states", args[0] if args else None))

    return layers[idx - 1].self_attn.register_forward_pre_hook(hook, with_kwargs=True), captured


def _cls_attention(mod, h) -> list:
    """Head-mean attention of the CLS query over the patch keys: list of (N,) per image."""
    b, t, _ = h.shape
    q = mod.q_proj(h).view(b, t, mod.num_heads, mod.head_dim).transpose(1, 2)
    k = mod.k_proj(h).view(b, t, mod.num_heads, mod.head_dim).transpose(1, 2)
    a = ((q[:, :, :1] @ k.transpose(-1, -2)) * mod.scale).float().softmax(-1)  # (B, H, 1, T)
    return list(a[:, :, 0, 1:].mean(1))


def _patched_get_image_features(
    self,
    pixel_values,
    vision_feature_layer=None,
    vision_feature_select_strategy=None,
    image_sizes=None,
    **kwargs,
):
    """The model's own ``get_image_features`` plus the CLS attention VisionZip needs (stored on
    the output as ``_icml26_cls``; ``None`` when unavailable)."""
    vfl = self.config.vision_feature_layer if vision_feature_layer is None else vision_feature_layer
    vfss = (
        self.config.vision_feature_select_strategy
        if vision_feature_select_strategy is None
        else vision_feature_select_strategy
    )
    handle, captured = _cls_hook(self, vfl)
    try:
        out = type(self).get_image_features(
            self,
            pixel_values=pixel_values,
            vision_feature_layer=vfl,
            vision_feature_select_strategy=vfss,
            image_sizes=image_sizes,
            **kwargs,
        )
    finally:
        if handle is not None:
            handle.remove()
    cls = None
    if "h" in captured and vfss == "default":
        with torch.no_grad():
            cls = _cls_attention(*captured["h"])
    object.__setattr__(out, "_icml26_cls", cls)
    object.__setattr__(out, "_icml26_layer", (vfl, vfss))
    return out


def _vision_inputs(inner, image_outputs):
    """Projected per-image features (list of (M_i, D)), vision-level features (list or None) and
    CLS attention (list or None) for LLaVA-1.5; LLaVA-NeXT gives projected features only."""
    is_next = hasattr(inner, "image_newline")
    proj = list(image_outputs.pooler_output)
    vfl, vfss = getattr(
        image_outputs,
        "_icml26_layer",
        (inner.config.vision_feature_layer, inner.config.vision_feature_select_strategy),
    )
    vis = None
    hs = getattr(image_outputs, "hidden_states", None)
    if not is_next and isinstance(vfl, int) and hs is not None:
        vis = list(hs[vfl][:, 1:] if vfss == "default" else hs[vfl])
    return proj, vis, getattr(image_outputs, "_icml26_cls", None), is_next


def _reduce_image(
    cfg: RestoreConfig, reducer, proj, vis, cls, newline
) -> tuple[Reduction | None, int]:
    """Reduction of one image's M tokens (None: keep all); returns (reduction, N_vis)."""
    m = proj.shape[0]
    if cfg.reducer == "none" or (isinstance(cfg.reducer, str) and cfg.reducer in IN_LLM):
        return None, m
    keep = cfg.keep_for(m)
    if cfg.keep_ratio is not None and keep >= m:
        return None, m  # keep_ratio = 1 (or rounding up to every token): nothing to reduce
    feats = vis if (cfg.select_on == "vision" and vis is not None) else proj
    if newline is not None and newline.any():
        # LLaVA-NeXT: newline tokens are always kept at size 1; the others are reduced.
        idx = torch.nonzero(~newline).flatten()
        n_nl = int(newline.sum())
        if keep <= n_nl:
            raise ValueError(
                f"keep={keep} leaves no budget after this image's {n_nl} newline tokens"
            )
        sub = reducer.reduce(feats[idx], keep - n_nl, None)
        groups = torch.full((m,), -1, dtype=torch.long)
        groups[idx] = sub.groups
        groups[newline.cpu()] = sub.n + torch.arange(n_nl)
        return Reduction.from_groups(groups, merge_position=cfg.merge_position), m
    check_keep(keep, m)
    return reducer.reduce(feats, keep, cls), m


def _patched_forward(
    self,
    input_ids=None,
    pixel_values=None,
    attention_mask=None,
    position_ids=None,
    cache=None,
    inputs_embeds=None,
    vision_feature_layer=None,
    vision_feature_select_strategy=None,
    image_sizes=None,
    mm_encoder_outputs=None,
    restore_config=None,
    restore_record=None,
    past_key_values=None,
    **kwargs,
):
    patch: _Patch = self._icml26_restore
    kwargs.pop(STATE_KWARG, None)
    # The cache arrives as ``cache`` (transformers >= 5.2x) or ``past_key_values`` (5.17: what
    # generate and the outer forward pass there); it goes on under the name each callee takes.
    cache = take_cache(kwargs, take_cache({"past_key_values": past_key_values}, cache))
    cfg = patch.config if restore_config is None else restore_config
    if not isinstance(cfg, RestoreConfig):
        raise TypeError(f"restore_config must be a RestoreConfig; got {type(cfg).__name__}")
    past = cache.get_seq_length() if cache is not None else 0
    orig = type(self).forward
    image_outputs = (mm_encoder_outputs or {}).get("image")
    if pixel_values is not None:
        if image_outputs is not None:
            raise ValueError("pass pixel_values or mm_encoder_outputs, not both")
        image_outputs = self.get_image_features(
            pixel_values=pixel_values,
            vision_feature_layer=vision_feature_layer,
            vision_feature_select_strategy=vision_feature_select_strategy,
            image_sizes=image_sizes,
        )
    if image_outputs is None:
        st: RestoreState | None = getattr(cache, CACHE_ATTR, None) if cache is not None else None
        if st is not None and past > 0:  # decode after this request's reduced prefill
            if inputs_embeds is None:
                inputs_embeds = self.get_input_embeddings()(input_ids)
            q = inputs_embeds.shape[1]
            pos = (
                st.next_pos[:, None].to(inputs_embeds.device)
                + (past - st.prefill_len)
                + torch.arange(q, device=inputs_embeds.device)[None]
            )
            st.phase = "decode"
            st.record = None
            out = self.language_model(
                inputs_embeds=inputs_embeds,
                attention_mask=None,
                position_ids=pos,
                **cache_kw(self.language_model, cache),
                **{STATE_KWARG: st},
                **kwargs,
            )
            return _output(self, out)
        return orig(
            self,
            input_ids=input_ids,
            pixel_values=None,
            attention_mask=attention_mask,
            position_ids=position_ids,
            **cache_kw(orig, cache),
            inputs_embeds=inputs_embeds,
            **kwargs,
        )
    if past > 0:
        raise ValueError("RESTORE prefill must start from an empty cache (no cached prefix)")
    if input_ids is None:
        raise ValueError("the RESTORE patch needs input_ids (to find the image placeholders)")
    st = RestoreState(
        config=cfg,
        head_dim=patch.head_dim,
        base=patch.base,
        backend=cfg.resolved_backend(input_ids.device),
        record=restore_record,
    )
    embeds, mask, pos, vis_mask, logs, logs0 = _build_prefill(
        self, st, input_ids, image_outputs, attention_mask
    )
    st.log_size, st.log_size0, st.pos, st.valid, st.visual = (
        logs,
        logs0,
        pos.cpu(),
        mask.cpu(),
        vis_mask,
    )
    st.prefill_len = embeds.shape[1]
    st.next_pos = pos.max(dim=1).values.cpu() + 1
    after_last = torch.cumsum(vis_mask.flip(1).long(), 1).flip(1) == 0
    st.text_query = after_last & mask.cpu()
    n_vis = int(vis_mask.sum(1).max())  # in-LLM pruners: visual tokens per row (none reduced yet)
    st.stages = _in_llm_stages(cfg, self.language_model.config.num_hidden_layers, n_vis)
    out = self.language_model(
        inputs_embeds=embeds,
        attention_mask=None,
        position_ids=pos,
        **cache_kw(self.language_model, cache),
        **{STATE_KWARG: st},
        **kwargs,
    )
    st.dist = None
    st.record = None
    out_cache = output_cache(out)
    if out_cache is not None:
        setattr(out_cache, CACHE_ATTR, st)
    return _output(self, out)


def _output(inner, out):
    """The model family's own output class (``LlavaModelOutputWithPast`` etc.), with its cache
    under the class's own field name (``cache`` or ``past_key_values``)."""
    import sys

    mod = sys.modules[type(inner).__module__]
    own = f"{type(inner).__name__}OutputWithPast"  # LlavaModel -> LlavaModelOutputWithPast
    cls = getattr(mod, own, None)
    if cls is None:  # a class defined in the family's module, not an imported base class
        found = [getattr(mod, n) for n in dir(mod) if n.endswith("ModelOutputWithPast")]
        cls = next(c for c in found if getattr(c, "__module__", None) == mod.__name__)
    fields = getattr(cls, "__dataclass_fields__", {})
    extra = {"image_outputs": None} if "image_outputs" in fields else {}
    return cls(
        last_hidden_state=out.last_hidden_state,
        hidden_states=out.hidden_states,
        attentions=out.attentions,
        **{cache_field(cls): output_cache(out)},
        **extra,
    )


def _in_llm_stages(cfg: RestoreConfig, n_layers: int, n_vis: int) -> list:
    keep = cfg.keep_for(n_vis)
    if cfg.reducer == "fastv":
        return [(cfg.fastv_layer, keep)]
    if cfg.reducer == "pdrop":
        layers = cfg.pdrop_layers or tuple(max(1, round(n_layers * f)) for f in (0.25, 0.5, 0.75))
        s = len(layers)
        return [(lay, keep * 2 ** (s - 1 - i)) for i, lay in enumerate(layers)]
    return []


def _build_prefill(inner, st, input_ids, image_outputs, attention_mask):
    """Reduced ``inputs_embeds`` (B, L', D), key validity (B, L') bool, positions (B, L') long,
    visual mask (B, L') bool and log sizes for layers >= 1 and layer 0 (B, L') float."""
    cfg: RestoreConfig = st.config
    text = inner.get_input_embeddings()(input_ids)
    proj, vis, cls, is_next = _vision_inputs(inner, image_outputs)
    newline_vec = inner.image_newline if is_next else None
    image_id = inner.config.image_token_id
    is_img = input_ids == image_id
    n_img_tokens = int(is_img.sum())
    n_feat = sum(p.shape[0] for p in proj)
    if n_img_tokens == 0:
        raise ValueError(
            f"input_ids hold no image token (image_token_id={image_id}) although "
            f"{len(proj)} image(s) were given: no visual tokens to reduce"
        )
    if n_img_tokens != n_feat:
        raise ValueError(
            f"image placeholders and image features do not match: {n_img_tokens} "
            f"placeholder tokens, {n_feat} features"
        )
    reducer = (
        cfg.build_reducer()
        if not (isinstance(cfg.reducer, str) and cfg.reducer in IN_LLM + ("none",))
        else None
    )
    st.reductions = []
    b, length = input_ids.shape
    am = (
        attention_mask.bool()
        if attention_mask is not None
        else torch.ones_like(input_ids, dtype=torch.bool)
    )
    orig_pos = (torch.cumsum(am.long(), 1) - 1).clamp(min=0)
    rows = []
    img_k = 0
    for r in range(b):
        emb, pos, vm, ls, ls0, val = [], [], [], [], [], []
        t = 0
        while t < length:
            if not is_img[r, t]:
                emb.append(text[r, t : t + 1])
                pos.append(int(orig_pos[r, t]))
                vm.append(False)
                ls.append(0.0)
                ls0.append(0.0)
                val.append(bool(am[r, t]))
                t += 1
                continue
            feats = proj[img_k]
            m = feats.shape[0]
            if not bool(is_img[r, t : t + m].all()):
                raise ValueError(
                    f"image {img_k}: expected {m} consecutive placeholder tokens in row {r}"
                )
            nl = None
            if newline_vec is not None:
                nl = (feats == newline_vec.to(feats)).all(-1).cpu()
            red, n_vis = _reduce_image(
                cfg, reducer, feats, vis[img_k] if vis else None, cls[img_k] if cls else None, nl
            )
            st.reductions.append(red)
            if red is None:
                x, rel, sizes = feats, torch.arange(m), torch.ones(m)
            else:
                rel = red.positions(cfg.merge_position)
                order = torch.argsort(rel, stable=True)
                x = red.merge(feats)[order.to(feats.device)]
                rel, sizes = rel[order], red.sizes[order]
            n_out = x.shape[0]
            start = int(orig_pos[r, t])
            emb.append(x.to(text.dtype))
            pos.extend((start + rel).tolist())
            vm.extend([True] * n_out)
            ls.extend(torch.log(sizes.double()).tolist())
            ls0.extend([float(torch.log(torch.tensor(n_vis / n_out, dtype=torch.float64)))] * n_out)
            val.extend([True] * n_out)
            t += m
            img_k += 1
        rows.append((torch.cat(emb, 0), pos, vm, ls, ls0, val))
    width = max(row[0].shape[0] for row in rows)
    dev = text.device
    out_e = torch.zeros(b, width, text.shape[-1], dtype=text.dtype, device=dev)
    out_p = torch.zeros(b, width, dtype=torch.long)
    out_v, out_vm = torch.zeros(b, width, dtype=torch.bool), torch.zeros(b, width, dtype=torch.bool)
    out_l, out_l0 = (
        torch.zeros(b, width, dtype=torch.float64),
        torch.zeros(b, width, dtype=torch.float64),
    )
    for r, (e, p, vm, ls, ls0, val) in enumerate(rows):
        off = width - e.shape[0]  # left padding
        out_e[r, off:] = e
        p = torch.tensor(p, dtype=torch.long)
        if cfg.positions == "reindexed":
            p = torch.cumsum(torch.tensor(val, dtype=torch.long), 0) - 1
            p = p.clamp(min=0)
        out_p[r, off:] = p
        out_v[r, off:] = torch.tensor(val)
        out_vm[r, off:] = torch.tensor(vm)
        out_l[r, off:] = torch.tensor(ls, dtype=torch.float64)
        out_l0[r, off:] = torch.tensor(ls0, dtype=torch.float64)
    return out_e, out_v.to(dev), out_p.to(dev), out_vm, out_l, out_l0
