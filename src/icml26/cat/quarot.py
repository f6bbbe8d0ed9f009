"""QuaRot (Ashkboos et al., NeurIPS 2024) as a baseline: the residual stream rotated by one
randomized Hadamard matrix Q, RMSNorm gains fused into the linears that read it, plus online
Hadamard rotations of the ``o_proj`` and ``down_proj`` inputs.

Layout (torch ``nn.Linear`` weights are (out, in); the residual ``h`` becomes ``h Q`` as a row):

* every RMSNorm gain gamma goes into its readers: ``W <- W diag(gamma)``, gamma <- 1; an
  RMSNorm without gain commutes with an orthogonal Q (``||h Q|| = ||h||``);
* embeddings ``E <- E Q``; readers of the residual (q/k/v, gate/up, LM head) ``W <- W Q``;
  writers (o_proj, down_proj) ``W <- Q^T W`` (bias ``b <- Q^T b``);
* the tied LM head is untied first (its gain differs from the embedding's rotation), which adds
  ``vocab x hidden`` parameters; the head and embeddings stay in full precision;
* online: a randomized Hadamard ``R`` of order ``heads*head_dim`` on o_proj's input and of order
  ``d_ff`` on down_proj's input (``x -> R x``, ``W <- W R^T`` folded by :mod:`icml26.cat.model`).

Departures from the paper (``[ours]``, docs/cat.md): QuaRot splits o_proj's Hadamard into a
per-head part fused into v_proj and an online Hadamard across heads; SmolLM2 has 9 heads and no
Hadamard of order 9 exists, so the whole order-``d`` Hadamard runs online here (the same matrix
family, applied at the same place). Keys/values are not quantized in this study, so QuaRot's
query/key rotation (for the KV cache) is not applied.

:func:`quarot_rotate_` performs the surgery (for perplexity and export);
:func:`quarot_layer_transforms` gives, for each linear of the *unrotated* model, the equivalent
input transform ``T`` and output rotation, so per-layer SQNR can be measured on the original
model's activations (a test checks that both views agree to float64 precision).
"""

from __future__ import annotations

import torch
from torch import nn

from icml26.cat.transforms import BlockTransform, hadamard, hadamard_transform, random_hadamard

__all__ = ["quarot_rotate_", "quarot_layer_transforms", "untie_head_", "online_hadamard"]

_F64 = torch.float64
READ_ATTN = ("q_proj", "k_proj", "v_proj")
READ_MLP = ("gate_proj", "up_proj")


def online_hadamard(dim: int, seed: int) -> BlockTransform:
    """A randomized Hadamard of order ``dim`` (Sylvester x Paley), or of the largest power-of-two
    block dividing ``dim`` when no order-``dim`` matrix can be built."""
    try:
        hadamard(dim)
        block = None
    except ValueError:
        block = dim & -dim
    return hadamard_transform(dim, block, seed=seed)


def _parts(model: nn.Module):
    """Embedding, decoder layers, final norm and LM head of a Llama-style model, or ValueError."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    embed = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    norm = getattr(inner, "norm", None)
    if layers is None or embed is None or head is None or norm is None:
        raise ValueError(
            f"QuaRot needs a Llama-style causal LM (model.model.layers, model.model.norm, input "
            f"and output embeddings); got {type(model).__name__}"
        )
    for i, layer in enumerate(layers):
        for path in (
            "input_layernorm",
            "post_attention_layernorm",
            *(f"self_attn.{p}" for p in (*READ_ATTN, "o_proj")),
            *(f"mlp.{p}" for p in (*READ_MLP, "down_proj")),
        ):
            try:
                layer.get_submodule(path)
            except AttributeError:
                raise ValueError(
                    f"QuaRot: layer {i} of {type(model).__name__} has no {path}; only Llama-style "
                    "blocks (RMSNorm, q/k/v/o, gate/up/down) are supported"
                ) from None
    for n, m in [("model.norm", norm)] + [
        (f"layers.{i}.{k}", getattr(layer, k))
        for i, layer in enumerate(layers)
        for k in ("input_layernorm", "post_attention_layernorm")
    ]:
        w = getattr(m, "weight", None)
        if w is None or w.dim() != 1 or getattr(m, "bias", None) is not None:
            raise ValueError(
                f"QuaRot: {n} is not an RMSNorm with a gain vector ({type(m).__name__})"
            )
        if "gemma" in type(m).__name__.lower():  # (1 + w) gain convention
            raise ValueError(f"QuaRot: {n} uses the (1 + weight) gain convention; not supported")
    return embed, layers, norm, head


def _is_tied(embed: nn.Module, head: nn.Module) -> bool:
    return embed.weight.data_ptr() == head.weight.data_ptr()


@torch.no_grad()
def untie_head_(model: nn.Module) -> int:
    """Give the LM head its own weight if it shares the embedding's; returns the number of
    parameters added (0 if already untied)."""
    embed, head = model.get_input_embeddings(), model.get_output_embeddings()
    if not _is_tied(embed, head):
        return 0
    head.weight = nn.Parameter(head.weight.detach().clone(), requires_grad=False)
    for cfg in {id(c): c for c in (model.config, model.config.get_text_config())}.values():
        cfg.tie_word_embeddings = False
    return head.weight.numel()


def _gamma(norm: nn.Module) -> torch.Tensor:
    return norm.weight.detach().to(_F64)


def _set(p: torch.Tensor, value: torch.Tensor) -> None:
    p.copy_(value.to(p.dtype))


@torch.no_grad()
def quarot_rotate_(model: nn.Module, seed: int = 0) -> dict[str, BlockTransform]:
    """Rotate ``model``'s residual stream in place (see module docstring) and return the online
    transforms ``{linear name: T}`` for every o_proj and down_proj, to pass to
    :func:`icml26.cat.model.fake_quantize` / ``apply_transform``. Without quantization the
    logits are unchanged (float64: to rounding). ``seed`` draws Q's signs (online ones use
    ``seed + 1 + 2 i`` and ``seed + 2 + 2 i`` for layer i)."""
    embed, layers, norm, head = _parts(model)
    d = embed.weight.shape[1]
    q = random_hadamard(d, seed, device=embed.weight.device)  # CPU-built, the weights' device
    untie_head_(model)

    def rot(w: torch.Tensor) -> torch.Tensor:  # Q on w's device (a model may span devices)
        return q if q.device == w.device else q.to(w.device)

    def read(lin: nn.Linear, gamma: torch.Tensor) -> None:
        w = lin.weight.to(_F64)
        _set(lin.weight, (w * gamma.to(w.device)) @ rot(w))

    def write(lin: nn.Linear) -> None:
        _set(lin.weight, rot(lin.weight).T @ lin.weight.to(_F64))
        if lin.bias is not None:
            _set(lin.bias, rot(lin.bias).T @ lin.bias.to(_F64))

    _set(embed.weight, embed.weight.to(_F64) @ rot(embed.weight))
    for layer in layers:
        g = _gamma(layer.input_layernorm)
        for p in READ_ATTN:
            read(getattr(layer.self_attn, p), g)
        layer.input_layernorm.weight.fill_(1.0)
        write(layer.self_attn.o_proj)
        g = _gamma(layer.post_attention_layernorm)
        for p in READ_MLP:
            read(getattr(layer.mlp, p), g)
        layer.post_attention_layernorm.weight.fill_(1.0)
        write(layer.mlp.down_proj)
    read(head, _gamma(norm))
    norm.weight.fill_(1.0)
    return _online(model, layers, seed)


def _online(model: nn.Module, layers, seed: int) -> dict[str, BlockTransform]:
    names = {id(m): n for n, m in model.named_modules()}
    out: dict[str, BlockTransform] = {}
    for i, layer in enumerate(layers):
        o, down = layer.self_attn.o_proj, layer.mlp.down_proj
        out[names[id(o)]] = online_hadamard(o.weight.shape[1], seed + 1 + 2 * i)
        out[names[id(down)]] = online_hadamard(down.weight.shape[1], seed + 2 + 2 * i)
    for t in out.values():
        t.kind = "quarot-online-" + t.kind
    return out


@torch.no_grad()
def quarot_layer_transforms(model: nn.Module, seed: int = 0) -> dict[str, BlockTransform]:
    """QuaRot seen from each linear of the unrotated ``model`` (not modified): for readers of the
    residual ``T = Q^T diag(1/gamma)`` (the normed input loses its gain and is rotated); for
    o_proj/down_proj the online Hadamard ``T = R`` and ``out_rotation = Q^T`` (the weight's rows
    are mixed by the residual rotation, which changes its per-row quantization). The LM head is
    not included (it stays in full precision). Same ``seed`` as :func:`quarot_rotate_`."""
    embed, layers, norm, head = _parts(model)
    q = random_hadamard(embed.weight.shape[1], seed)  # on the CPU, like every transform here
    names = {id(m): n for n, m in model.named_modules()}
    out: dict[str, BlockTransform] = {}

    def reader(norm_mod: nn.Module, lins) -> None:
        g = _gamma(norm_mod).to(q.device)
        if bool((g == 0).any()):
            raise ValueError(f"{names[id(norm_mod)]}: a zero RMSNorm gain has no inverse")
        t = BlockTransform((q.T / g)[None], kind="quarot-residual")
        for lin in lins:
            out[names[id(lin)]] = t

    for layer in layers:
        reader(layer.input_layernorm, [getattr(layer.self_attn, p) for p in READ_ATTN])
        reader(layer.post_attention_layernorm, [getattr(layer.mlp, p) for p in READ_MLP])
    for name, t in _online(model, layers, seed).items():
        t.out_rotation = q.T.clone()
        out[name] = t
    return out
