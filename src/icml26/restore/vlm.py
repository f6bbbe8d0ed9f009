"""Tiny real HF LLaVA / LLaVA-NeXT models from small configs (tests, the claim's model).

``tiny_llava`` builds a ``LlavaForConditionalGeneration``: a ``CLIPVisionModel`` (square images,
``(image_size / patch)^2`` patch tokens + CLS), the MLP-GELU projector and a Llama text model.
Nothing here is LLaVA-specific at run time: the RESTORE patch sees the same classes as for
LLaVA-1.5-7B.
"""

from __future__ import annotations

import torch

__all__ = ["tiny_llava", "tiny_llava_next"]


def _configs(
    vocab_size,
    image_size,
    patch,
    vision_width,
    vision_layers,
    hidden,
    layers,
    heads,
    kv_heads,
    rope_theta,
    max_len,
):
    from transformers import CLIPVisionConfig, LlamaConfig

    vc = CLIPVisionConfig(
        image_size=image_size,
        patch_size=patch,
        hidden_size=vision_width,
        intermediate_size=4 * vision_width,
        num_hidden_layers=vision_layers,
        num_attention_heads=max(1, vision_width // 32),
        projection_dim=vision_width,
    )
    tc = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_len,
        rope_theta=rope_theta,
        tie_word_embeddings=True,
    )
    return vc, tc


def tiny_llava(
    vocab_size: int = 64,
    *,
    image_size: int = 32,
    patch: int = 4,
    vision_width: int = 64,
    vision_layers: int = 2,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    rope_theta: float = 10000.0,
    max_len: int = 2048,
    image_token_id: int | None = None,
    seed: int = 0,
    dtype=torch.float32,
    attn_implementation: str = "sdpa",
):
    """Random ``LlavaForConditionalGeneration``; ``image_token_id`` defaults to ``vocab_size - 1``.
    Visual tokens per image: ``(image_size // patch) ** 2`` (CLS dropped, LLaVA's "default")."""
    from transformers import LlavaConfig, LlavaForConditionalGeneration

    vc, tc = _configs(
        vocab_size,
        image_size,
        patch,
        vision_width,
        vision_layers,
        hidden,
        layers,
        heads,
        kv_heads,
        rope_theta,
        max_len,
    )
    cfg = LlavaConfig(
        vision_config=vc,
        text_config=tc,
        image_token_id=vocab_size - 1 if image_token_id is None else image_token_id,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
    )
    cfg._attn_implementation = attn_implementation
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(cfg)
    return model.to(dtype).eval()


def tiny_llava_next(
    vocab_size: int = 64,
    *,
    image_size: int = 16,
    patch: int = 4,
    seed: int = 0,
    dtype=torch.float32,
    **kw,
):
    """Random ``LlavaNextForConditionalGeneration`` (grid pinpoints of 1x1 and 1x2 tiles)."""
    from transformers import LlavaNextConfig, LlavaNextForConditionalGeneration

    vc, tc = _configs(
        vocab_size,
        image_size,
        patch,
        kw.get("vision_width", 64),
        2,
        kw.get("hidden", 64),
        2,
        4,
        2,
        10000.0,
        4096,
    )
    cfg = LlavaNextConfig(
        vision_config=vc,
        text_config=tc,
        image_token_id=vocab_size - 1,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        image_grid_pinpoints=[[image_size, image_size], [image_size, 2 * image_size]],
        projector_hidden_act="gelu",
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return LlavaNextForConditionalGeneration(cfg).to(dtype).eval()
