"""CyberPal: one SFT step (assistant-token loss, LM head only at trained positions) + backward.

The GPU work of CyberPal is supervised fine-tuning (``cyberpal.train``): ``_loss`` runs the
decoder, applies the LM head only where the loss is taken (the assistant turn), and the step
backpropagates it under bf16 autocast with fp32 weights (the CLI's and the claim's setting).

Checked (tiny float32 Llama, byte tokenizer, CVE -> CWE chats masked by ``encode_chat``; the
same weights on the device and on the CPU; float32 matmuls without TF32):

- ``_loss`` (mean NLL, nats/token) and every parameter's gradient: device vs CPU;
- the same against an independent float64 reference: the full logits of the plain forward
  and a float64 cross-entropy on the shifted targets (-100 outside the assistant turn), so the
  trained-positions-only head and its shift are checked too;
- ``sft()`` itself on the device for one step (AdamW, fp32, no autocast): its first loss equals
  the CPU run's, and the trained-token count is identical.

Timed (ms per fwd+bwd, CUDA events on a GPU; gradients dropped between calls, no optimizer step:
AdamW is the same for both) at ``paper`` shapes: a Llama-3-8B-shaped model cut to 4 layers
(hidden 4096, 32 heads, 8 KV heads, FFN 14336, vocab 128256; fp32 weights built on the device),
one batch of SFTConfig's defaults: 8 chats of <= 384 tokens, the last 64-96 tokens of each (the
assistant answer, ~25%) trained:

- ``_loss`` + backward vs the plain HF forward with ``labels`` + backward, both bf16 autocast;
- the decoder alone (no head), to estimate the ratio at the full 32 layers (the head's share of
  a 4-layer model is ~8x its share at 32 layers), recorded as a value;
- ``_loss`` + backward in bf16 autocast vs fp32 (the project's CPU benchmark pair), if time is left.

Memory at ``paper``: 1.92 G params (4 x 218 M layers + 2 x 525 M embedding/head): fp32 weights
7.7 GB + gradients 7.7 GB + autocast bf16 weight copies 3.8 GB; activations for 3,072 tokens
~0.6 GB per layer; the baseline's full logits (3,072 x 128,256) in bf16 + fp32 + their gradient
~5 GB: < 30 GB in all.
"""

from __future__ import annotations

import copy
import math

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from icml26.core.lm import tiny_llama
from icml26.cyberpal.train import SFTConfig, _loss, encode_chat, sft

# imported with the module (before any section runs): the one-off import cost, seconds on a
# CPU for transformers, stays out of this section's timed share

WEIGHT = 1.0

CHATS = [
    ("Cross-site scripting in the search box of ExampleCMS 2.1 lets remote attackers inject "
     "arbitrary web script via the q parameter.",
     "Impact: Execute unauthorized code\nAnswer: CWE-79: Improper Neutralization of Input"),
    ("SQL injection in login.php of AcmeShop 4.0 allows attackers to run SQL commands via the "
     "user field.",
     "Impact: Read application data\nAnswer: CWE-89: SQL Injection"),
    ("A buffer overflow in the packet parser of netd 1.2 allows a crash via a long header.",
     "Impact: DoS: crash\nAnswer: CWE-120: Classic Buffer Overflow"),
    ("Path traversal in the download handler lets users read files via ../ sequences.",
     "Impact: Read files\nAnswer: CWE-22: Path Traversal"),
]
SYSTEM = "You are a security analyst. Map the CVE description to its CWE."


def records():
    return [{"messages": [{"role": "system", "content": SYSTEM},
                          {"role": "user", "content": f"Which CWE? {d}"},
                          {"role": "assistant", "content": a}]} for d, a in CHATS]


def pad_batch(encoded, pad):
    """Right-padded (ids, attention mask, trained mask), each (B, T), as ``sft()`` builds them."""
    width = max(len(x) for x, _ in encoded)
    ids = torch.full((len(encoded), width), pad, dtype=torch.long)
    attn = torch.zeros_like(ids)
    trained = torch.zeros_like(ids, dtype=torch.bool)
    for b, (x, m) in enumerate(encoded):
        ids[b, :len(x)], attn[b, :len(x)] = torch.tensor(x), 1
        trained[b, :len(x)] = torch.tensor(m)
    return ids, attn, trained


def loss_and_grads(model, batch, plain=False):
    """(loss, all parameter gradients flattened) of one fwd+bwd on ``model``'s device."""
    dev = next(model.parameters()).device
    ids, attn, trained = (t.to(dev) for t in batch)
    model.zero_grad(set_to_none=True)
    if plain:  # full logits, shifted targets, -100 outside the assistant turn, in the model's
        # dtype (HF's own ``labels=`` loss would cast float64 logits to float32)
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
        target = ids.masked_fill(~trained, -100)[:, 1:]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 target.reshape(-1), ignore_index=-100)
    else:
        loss = _loss(model, ids, attn, trained)
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters()])
    return loss.detach(), grads.detach()


def check_tiny(ctx) -> None:
    hidden = 64
    cpu_model, tok = tiny_llama(hidden=hidden, layers=2, heads=4, kv_heads=2, max_len=512)
    cpu_model.train()
    dev_model = copy.deepcopy(cpu_model).to(ctx.device)
    recs = records()
    encoded = [encode_chat(tok, r["messages"]) for r in recs]
    batch = pad_batch(encoded, tok.pad_token_id)
    n_tok, n_trained = int(batch[1].sum()), int(batch[2][:, 1:].sum())
    l_dev, g_dev = loss_and_grads(dev_model, batch)
    l_cpu, g_cpu = loss_and_grads(cpu_model, batch)
    l_ref, g_ref = loss_and_grads(copy.deepcopy(cpu_model).double(), batch, plain=True)
    # float32: ~eps * sqrt(reduction length) relative per op, x64 headroom; the loss is ~log V,
    # gradients are compared against their largest entry (a mask or shift bug is O(1) off)
    root = math.sqrt(max(hidden, batch[0].shape[1]))
    tol_loss = 64 * 2**-23 * root * math.log(len(tok))
    tol_grad = 64 * 2**-23 * root * float(g_ref.abs().max())
    what = f"{len(recs)} chats, {n_tok} tokens, {n_trained} trained, float32"
    ctx.close("_loss (nats/token), device vs CPU", l_dev, l_cpu, atol=tol_loss, note=what)
    ctx.close("gradients (all params), device vs CPU", g_dev, g_cpu, atol=tol_grad,
              note=f"{g_ref.numel()} values; tolerance relative to max |grad|")
    ctx.close("_loss, device vs float64 full-logits cross-entropy", l_dev, l_ref,
              atol=tol_loss, note="independent reference: shifted targets, -100 off the answer")
    ctx.close("gradients, device vs float64 full-logits cross-entropy", g_dev, g_ref,
              atol=tol_grad)

    cfg = SFTConfig(epochs=1, batch_size=len(recs), lr=1e-4, autocast=False)
    _, st_dev = sft(copy.deepcopy(cpu_model), tok, recs, cfg, device=str(ctx.device))
    _, st_cpu = sft(copy.deepcopy(cpu_model), tok, recs, cfg, device="cpu")
    ctx.close("sft() one step: first loss, device vs CPU", st_dev.losses[0], st_cpu.losses[0],
              atol=tol_loss, note="full sft() path: padding, device move, AdamW step")
    ctx.equal("sft() trained / seen token counts, device vs CPU",
              torch.tensor([st_dev.tokens_trained, st_dev.tokens_seen]),
              torch.tensor([st_cpu.tokens_trained, st_cpu.tokens_seen]))


def llama(*, hidden, layers, heads, kv_heads, ffn, vocab, device, seed=0):
    """A random-weight fp32 ``LlamaForCausalLM`` built directly on ``device`` (untied head)."""
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, max_position_embeddings=4096,
                      tie_word_embeddings=False, pad_token_id=0)
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(cfg)
    return model.float().train()


def random_batch(*, batch, max_len, vocab, seed=0):
    """SFT-shaped random chats: prompt then answer, the answer trained, right-padded (pad 0)."""
    g = torch.Generator().manual_seed(seed)
    encoded = []
    for _ in range(batch):
        answer = int(torch.randint(max_len // 6, max_len // 4 + 1, (), generator=g))
        prompt = int(torch.randint(max_len // 2, max_len - answer + 1, (), generator=g))
        ids = torch.randint(1, vocab, (prompt + answer,), generator=g).tolist()
        encoded.append((ids, [False] * prompt + [True] * answer))
    return pad_batch(encoded, 0)


def time_paper(ctx) -> None:
    shape = ctx.pick(tiny=dict(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=259),
                     paper=dict(hidden=4096, layers=4, heads=32, kv_heads=8, ffn=14336,
                                vocab=128256))
    bsz, max_len = ctx.pick(tiny=(2, 48), paper=(8, 384))
    reps = ctx.pick(tiny=dict(warmup=1, iters=1), paper=dict(warmup=1, iters=3))
    model = llama(**shape, device=ctx.device)
    ids, attn, trained = (t.to(ctx.device) for t in
                          random_batch(batch=bsz, max_len=max_len, vocab=shape["vocab"]))
    labels = ids.masked_fill(~trained, -100)
    n_tok, n_tr = int(attn.sum()), int(trained[:, 1:].sum())
    what = (f"{shape['layers']}-layer, hidden {shape['hidden']}, vocab {shape['vocab']}; "
            f"{bsz} chats, {n_tok} tokens, {n_tr} trained")

    def step(fn, bf16=True):
        def go():
            model.zero_grad(set_to_none=True)
            with torch.autocast(ctx.device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = fn()
            loss.backward()
        return go

    method = step(lambda: _loss(model, ids, attn, trained))
    plain = step(lambda: model(input_ids=ids, attention_mask=attn, labels=labels).loss)
    dec = model.get_decoder()
    decoder = step(lambda: dec(input_ids=ids, attention_mask=attn).last_hidden_state.float()
                   .square().mean())
    row = ctx.compare("SFT fwd+bwd, _loss (head at trained positions)",
                      "plain HF forward with labels (full logits)", plain, method, **reps,
                      note=f"ms per step, bf16 autocast, fp32 weights; {what}")
    ctx.value("SFT fwd+bwd tokens/s, _loss, bf16 autocast", f"{n_tok / row.method_ms * 1e3:,.0f}")
    if ctx.enough(2.0 if ctx.is_cuda else 0.2):
        t_dec = ctx.time(decoder, **reps)
        scale = 32 / shape["layers"]
        est = ((t_dec * scale + row.method_ms - t_dec)
               / (t_dec * scale + row.baseline_ms - t_dec))
        ctx.value("decoder-only fwd+bwd ms (no LM head)", f"{t_dec:.3g}")
        ctx.value("_loss / plain ratio estimated at 32 layers (decoder time scaled by "
                  f"{scale:g})", f"{est:.3f}")
    else:
        ctx.note("decoder-only timing skipped: this section's share is spent")
    if ctx.enough(6.0 if ctx.is_cuda else 0.3):
        ctx.compare("SFT fwd+bwd (_loss), bf16 autocast", "fp32 (no autocast, no TF32)",
                    step(lambda: _loss(model, ids, attn, trained), bf16=False), method, **reps,
                    note="ms per step; the project's CPU benchmark pair; " + what)
    else:
        ctx.note("bf16-vs-fp32 timing skipped: this section's share is spent")
    model.zero_grad(set_to_none=True)


def run(ctx) -> None:
    with ctx.exact():
        check_tiny(ctx)
        time_paper(ctx)
