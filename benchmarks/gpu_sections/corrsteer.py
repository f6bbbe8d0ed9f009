"""CorrSteer: SAE encode and the steering hook on the device against the CPU, and their cost.

Checks (same weights and inputs on both devices):

- TopK SAE encode (d_in 32, 256 latents, k 8): float64 codes and the selected latents equal the
  CPU's, and equal a brute-force reference (full sort, ReLU of the top k) on the CPU; float32
  selections equal wherever the k-th and (k+1)-th pre-activations are further apart than float32
  accuracy (rows closer than that are a legitimate tie and are counted, not compared);
- JumpReLU SAE encode (float32): the active set equals the CPU's except where a pre-activation is
  within float32 accuracy of its threshold (counted), codes within float32 accuracy;
- ``Steerer`` (tiny float64 Llama, 3 blocks): steered logits at block 1 on the device equal the
  CPU's (float32 accuracy: transformers runs RMSNorm/RoPE in float32); at block 0 they equal the
  unhooked model fed ``inputs_embeds`` with the vector added to the last row (independent
  reference); positions before the last are unchanged by steering; one hook call per forward.

Timings (``paper``: Gemma-2-2B-shaped ``Gemma2ForCausalLM`` — d_model 2304, d_ff 9216, 8 heads,
4 KV heads, head_dim 256, 256k vocab — with 4 blocks, random bf16 weights built on the device, its
default eager attention, prefill 8 x 1024 tokens with ``logits_to_keep=1`` as in generation;
``tiny``: the float32 tiny Llama), ms:

- prefill forward with the ``Steerer`` at block 2 vs the bare forward;
- prefill forward plus a JumpReLU SAE-16k (16384 latents, bf16 like benchmarks/corrsteer.py)
  encoding every position entering block 2 (what harvesting and SAE evaluation do) vs the bare
  forward.

Paper memory (bf16): embeddings 256000 x 2304 = 1.18 GB, 4 blocks x 75M = 0.6 GB, SAE 2 x 2304 x
16384 = 0.15 GB; activations: eager attention scores 8 x 8 x 1024^2 in float32 0.27 GB per block,
SAE codes 8192 x 16384 (0.27 GB, a few alive) -> < 4 GiB.
"""

from __future__ import annotations

import copy
import math

import torch

from gpu_sections.cat import EPS32, EPS64, fp32_tol

WEIGHT = 1.0


def _sae(arch: str, d_in: int, d_sae: int, k: int, dtype, seed: int):
    """An SAE with random non-zero biases (and thresholds near the median pre-activation)."""
    from icml26.corrsteer.sae import SAE

    sae = SAE(d_in, d_sae, arch, k, dtype=torch.float64, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        sae.b_enc.copy_(0.1 * torch.randn(d_sae, generator=g, dtype=torch.float64))
        sae.b_dec.copy_(0.1 * torch.randn(d_in, generator=g, dtype=torch.float64))
        if arch == "jumprelu":
            sae.threshold.copy_(0.5 + 0.5 * torch.rand(d_sae, generator=g, dtype=torch.float64))
    return sae.to(dtype).requires_grad_(False)


def _big_sae(d_in: int, d_sae: int, device, dtype):
    """A JumpReLU SAE of the given width with random weights drawn on ``device`` (SAE() itself
    draws its decoder in float64 on the CPU: 38M values at 2304 x 16384, seconds)."""
    from icml26.corrsteer.sae import SAE

    sae = SAE(d_in, 1, "jumprelu", dtype=dtype)
    with torch.device(device):
        w = torch.randn(d_sae, d_in, dtype=dtype) / math.sqrt(d_in)
        params = {"W_dec": w, "W_enc": w.T.contiguous(), "b_enc": torch.zeros(d_sae, dtype=dtype),
                  "b_dec": torch.zeros(d_in, dtype=dtype),
                  "threshold": torch.full((d_sae,), 0.5, dtype=dtype)}
    for name, t in params.items():
        setattr(sae, name, torch.nn.Parameter(t, requires_grad=False))
    sae.d_sae = d_sae
    return sae


def _x(n: int, d: int, seed: int, dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (2 * torch.randn(n, d, generator=g, dtype=torch.float64)).to(dtype)


def _topk_ref(sae, x: torch.Tensor) -> torch.Tensor:
    """Brute force: full descending sort of the pre-activations, ReLU of the first k kept."""
    h = (x.double() - sae.b_dec.double()) @ sae.W_enc.double() + sae.b_enc.double()
    order = torch.sort(h, dim=-1, descending=True).indices[:, : sae.k]
    out = torch.zeros_like(h)
    for r in range(h.shape[0]):
        for j in order[r].tolist():
            out[r, j] = max(float(h[r, j]), 0.0)
    return out


def _check_sae(ctx) -> None:
    sae64 = _sae("topk", 32, 256, 8, torch.float64, seed=0)
    x64 = _x(48, 32, 1, torch.float64)
    ref = sae64.encode(x64)
    got = copy.deepcopy(sae64).to(ctx.device).encode(x64.to(ctx.device))
    ctx.equal("TopK SAE active latents (float64), device vs CPU",
              got.cpu() != 0, ref != 0)
    ctx.close("TopK SAE codes (float64), device vs CPU", got, ref,
              atol=64 * EPS64 * math.sqrt(32) * float(ref.abs().max()))
    ctx.close("TopK SAE codes (float64, CPU) vs brute force (sort, ReLU top k)", ref,
              _topk_ref(sae64, x64), atol=64 * EPS64 * math.sqrt(32) * float(ref.abs().max()))
    # float32: compare selections where the k-th / (k+1)-th gap exceeds float32 accuracy
    sae32 = sae64.to(torch.float32)
    x32 = x64.float()
    pre = sae32.pre_acts(x32).double()
    tol = 16 * EPS32 * math.sqrt(32) * float(pre.abs().max())
    top = torch.topk(pre, sae32.k + 1, dim=-1).values
    clear = (top[:, -2] - top[:, -1]) > 2 * tol  # (n,) rows without a boundary tie
    ref32 = sae32.encode(x32)
    got32 = copy.deepcopy(sae32).to(ctx.device).encode(x32.to(ctx.device)).cpu()
    ctx.equal("TopK SAE active latents (float32), device vs CPU, rows without a tie",
              got32[clear] != 0, ref32[clear] != 0,
              note=f"{int((~clear).sum())} of {len(clear)} rows within 2x float32 accuracy of a "
                   "k-th place tie left out")
    ctx.close("TopK SAE codes (float32), device vs CPU, rows without a tie", got32[clear],
              ref32[clear], atol=tol)
    jr = _sae("jumprelu", 32, 256, 8, torch.float32, seed=5)
    pre = jr.pre_acts(x32).double()
    tol = 16 * EPS32 * math.sqrt(32) * float(pre.abs().max())
    ok = (pre - jr.threshold.double()).abs() > 2 * tol  # decisions not on the threshold
    ref_j = jr.encode(x32)
    got_j = copy.deepcopy(jr).to(ctx.device).encode(x32.to(ctx.device)).cpu()
    ctx.equal("JumpReLU SAE active set (float32), device vs CPU, off-threshold entries",
              (got_j != 0)[ok], (ref_j != 0)[ok],
              note=f"{int((~ok).sum())} of {ok.numel()} entries within 2x float32 accuracy of "
                   f"the threshold left out; {float((ref_j != 0).float().mean()):.0%} active")
    ctx.close("JumpReLU SAE codes (float32), device vs CPU, off-threshold entries",
              got_j[ok], ref_j[ok], atol=tol)


def _tiny(dtype, layers: int = 3):
    from icml26.core.lm import tiny_llama

    model, _ = tiny_llama(hidden=32, layers=layers, heads=4, kv_heads=2, ffn=64, seed=0,
                          dtype=dtype)
    return model.requires_grad_(False)


def _check_steer(ctx) -> None:
    from icml26.corrsteer.steer import Steerer

    m_cpu = _tiny(torch.float64)
    m_dev = copy.deepcopy(m_cpu).to(ctx.device)
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, 259, (2, 10), generator=g)
    v = torch.randn(32, generator=g, dtype=torch.float64)
    with torch.no_grad():
        with Steerer(m_cpu, {1: v}) as s_c:
            ref = m_cpu(input_ids=ids).logits
        with Steerer(m_dev, {1: v}) as s_d:
            got = m_dev(input_ids=ids.to(ctx.device)).logits
        bare = m_dev(input_ids=ids.to(ctx.device)).logits
        tol = fp32_tol(float(ref.abs().max()), 64, 3)
        ctx.close("steered logits (block 1, float64 model), device vs CPU", got, ref, atol=tol)
        ctx.check("Steerer hook calls per forward (device, CPU)",
                  s_d.calls == {1: 1} and s_c.calls == {1: 1}, note=f"{s_d.calls}, {s_c.calls}")
        ctx.close("positions before the last unchanged by steering (device)", got[:, :-1],
                  bare[:, :-1], atol=tol)
        ctx.check("the last position is changed by steering (device)",
                  float((got[:, -1] - bare[:, -1]).abs().max()) > 1e3 * tol)
        # independent: block 0's input is the embedding; add v to the last row by hand
        emb = m_dev.get_input_embeddings()(ids.to(ctx.device)).clone()
        emb[:, -1] += v.to(ctx.device)
        hand = m_dev(inputs_embeds=emb).logits
        with Steerer(m_dev, {0: v}):
            hooked = m_dev(input_ids=ids.to(ctx.device)).logits
        ctx.close("Steerer at block 0 = inputs_embeds with v added to the last row (device)",
                  hooked, hand, atol=tol)


def _gemma2(layers: int, device, dtype):
    """Gemma-2-2B's shapes (transformers' Gemma2Config defaults) with ``layers`` blocks."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    cfg = Gemma2Config(num_hidden_layers=layers, hidden_size=2304, intermediate_size=9216,
                       num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                       vocab_size=256000)
    with torch.device(device):
        try:
            model = Gemma2ForCausalLM._from_config(cfg, dtype=dtype)
        except TypeError:
            model = Gemma2ForCausalLM._from_config(cfg, torch_dtype=dtype)
    return model.eval().requires_grad_(False)


def _timings(ctx, model, sae, ids, layer: int) -> None:
    from icml26.corrsteer.steer import Steerer
    from icml26.corrsteer.train import blocks

    x = ids.to(ctx.device)
    d = model.config.hidden_size
    v = torch.randn(d, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    steer = Steerer(model, {layer: v})

    def bare():
        with torch.no_grad():
            model(input_ids=x, use_cache=False, logits_to_keep=1)

    def steered():
        with steer, torch.no_grad():
            model(input_ids=x, use_cache=False, logits_to_keep=1)

    def encode_hook(module, args, kwargs):
        h = args[0] if args else kwargs["hidden_states"]
        sae.encode(h)

    def with_sae():
        handle = blocks(model)[layer].register_forward_pre_hook(encode_hook, with_kwargs=True)
        try:
            with torch.no_grad():
                model(input_ids=x, use_cache=False, logits_to_keep=1)
        finally:
            handle.remove()

    shape = "x".join(map(str, ids.shape))
    warm, iters = (2, 5) if ctx.scale == "paper" else (1, 2)
    ctx.compare(f"prefill {shape}, Steerer at block {layer}", "bare forward", bare, steered,
                warmup=warm, iters=iters, note="steering adds the vector at the last position")
    ctx.compare(f"prefill {shape} + SAE-{sae.d_sae} JumpReLU encode of every position "
                f"(block {layer})", "bare forward", bare, with_sae, warmup=warm, iters=iters,
                note=f"SAE in {str(sae.W_enc.dtype).removeprefix('torch.')}")


def run(ctx) -> None:
    with ctx.exact():
        _check_sae(ctx)
        _check_steer(ctx)
    if ctx.scale == "paper" and not ctx.is_cuda:
        ctx.note("paper shapes need a GPU (Gemma-2-2B-shaped blocks): timings skipped on CPU")
        return
    if ctx.scale == "paper":
        model = _gemma2(4, ctx.device, ctx.dtype)
        sae = _big_sae(2304, 16384, ctx.device, ctx.dtype)
        ids = torch.randint(0, 256000, (8, 1024), generator=torch.Generator().manual_seed(1))
        ctx.value("timed model", "Gemma-2-2B-shaped Gemma2ForCausalLM, 4 of 26 blocks, random "
                                 "bf16 weights, eager attention; SAE 2304 -> 16384 JumpReLU")
    else:
        model = _tiny(ctx.dtype).to(ctx.device)
        sae = _sae("jumprelu", 32, 256, 8, ctx.dtype, seed=0).to(ctx.device)
        ids = torch.randint(0, 259, (2, 16), generator=torch.Generator().manual_seed(1))
    _timings(ctx, model, sae, ids, layer=2)
