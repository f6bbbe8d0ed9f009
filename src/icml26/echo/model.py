"""A tree-attention forward pass over an HF Llama-family model, with explicit KV caches.

ECHO needs three things transformers' ``forward`` does not give directly: an arbitrary boolean
mask over (cached prefix + new tokens) per row (tree attention), running only the first ``l``
layers followed by the final norm and the shared LM head (the self-draft), and a KV cache that can
be compacted to a non-contiguous subset of the new tokens (the accepted tree path). This module
re-runs the model's own sub-modules (embeddings, RMSNorms, projections, rotary embedding, MLP)
in that pattern; it never copies weights. Llama, Mistral, Qwen2 (qkv bias) and Qwen3 (q/k norm)
decoder layers share this structure.

Shapes: ``B`` rows, ``W`` new tokens per row, ``T`` cached tokens per row, ``H`` query heads,
``G`` KV heads, ``D`` head dim. A cache is a list over layers of ``(k, v)`` with shape
``(B, G, T, D)`` (positions already rotated), in the model's dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["TreeLM", "KV"]

KV = list[tuple[torch.Tensor, torch.Tensor]]


class TreeLM:
    """Wraps a causal LM (``LlamaForCausalLM``-like) for tree-masked forwards with explicit caches.

    Parameters
    ----------
    model : an HF causal LM whose ``model.model.layers[i]`` have ``input_layernorm``, ``self_attn``
        (``q_proj, k_proj, v_proj, o_proj``), ``post_attention_layernorm`` and ``mlp``.
    """

    def __init__(self, model):
        inner = getattr(model, "model", None)
        layers = getattr(inner, "layers", None)
        if layers is None or not hasattr(inner, "rotary_emb"):
            raise ValueError(
                f"{type(model).__name__} is not a Llama-family causal LM (needs model.layers and "
                "model.rotary_emb); ECHO's tree forward supports Llama, Mistral, Qwen2 and Qwen3")
        self.model, self.inner, self.layers = model, inner, layers
        cfg = model.config
        self.n_layers = len(layers)
        self.n_heads = cfg.num_attention_heads
        self.n_kv = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.vocab = cfg.vocab_size
        self.max_positions = getattr(cfg, "max_position_embeddings", None) or 1 << 30
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                cache: KV | None = None, n_layers: int | None = None) -> tuple[torch.Tensor, KV]:
        """Run ``n_layers`` (default all) layers, then the final norm and LM head.

        tokens, positions : (B, W) int64.  mask : (B, W, T + W) bool, True = may attend
        (columns ``[0, T)`` are the cache, ``[T, T + W)`` the new tokens).  cache : KV of the
        first ``n_layers`` layers, each (B, G, T, D), or None (T = 0).
        Returns ``(logits (B, W, V) float32, new_kv)``, new_kv the new tokens' (B, G, W, D) K/V.
        """
        n_layers = self.n_layers if n_layers is None else n_layers
        if not 1 <= n_layers <= self.n_layers:
            raise ValueError(f"n_layers must be in [1, {self.n_layers}]; got {n_layers}")
        b, w = tokens.shape
        t = 0 if cache is None else cache[0][0].shape[2]
        if mask.shape != (b, w, t + w):
            raise ValueError(f"mask must have shape {(b, w, t + w)}; got {tuple(mask.shape)}")
        h = self.inner.embed_tokens(tokens.to(self.device))
        cos, sin = self.inner.rotary_emb(h, positions.to(self.device))
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, W, D)
        attn_mask = mask.to(self.device).unsqueeze(1)  # (B, 1, W, T + W)
        new_kv: KV = []
        for i in range(n_layers):
            layer = self.layers[i]
            a = layer.self_attn
            x = layer.input_layernorm(h)
            q = a.q_proj(x).view(b, w, -1, self.head_dim)
            k = a.k_proj(x).view(b, w, -1, self.head_dim)
            v = a.v_proj(x).view(b, w, -1, self.head_dim)
            if hasattr(a, "q_norm"):  # Qwen3
                q, k = a.q_norm(q), a.k_norm(k)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, heads, W, D)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            new_kv.append((k, v))
            if cache is not None:
                k = torch.cat([cache[i][0], k], dim=2)
                v = torch.cat([cache[i][1], v], dim=2)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, enable_gqa=True)
            h = h + a.o_proj(o.transpose(1, 2).reshape(b, w, -1))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        logits = self.model.lm_head(self.inner.norm(h))
        return logits.float(), new_kv

    def prefill(self, ids: torch.Tensor, n_layers: int | None = None) -> tuple[torch.Tensor, KV]:
        """Causal forward of one sequence ``ids`` (L,) int64: ``(logits (L, V), cache (1, G, L, D))``."""
        n = ids.numel()
        mask = torch.ones(n, n, dtype=torch.bool).tril().unsqueeze(0)
        logits, kv = self.forward(ids.view(1, -1), torch.arange(n).view(1, -1), mask, None, n_layers)
        return logits[0], kv


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def append_kv(cache: KV | None, new: KV, index: torch.Tensor | None = None) -> KV:
    """Append the new tokens' K/V (optionally only columns ``index``, the accepted path) to a
    one-row cache: compaction of non-contiguous tree entries. Shapes (1, G, T, D)."""
    out = []
    for i, (k, v) in enumerate(new):
        if index is not None:
            k, v = k.index_select(2, index), v.index_select(2, index)
        if cache is not None:
            k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
        out.append((k, v))
    return out
