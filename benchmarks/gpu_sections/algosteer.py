"""Algosteer: the grid's sampling step, ``HFBackend.generate`` (chat template, per-request seeds,
stop at a closed code fence) over a local causal LM; the sandboxed tests and the AST labels that
follow are CPU code (subprocesses, ``ast``) and are not timed here.

Checked (tiny float32 Llama with a byte tokenizer and a plain chat template; the same weights on
the device and on the CPU; the LM head scaled so argmax and sampling decisions sit far from
float32 noise; requests are real task x cue prompts with the grid's per-sample seeds):

- greedy replies (text and new-token counts): device vs CPU, and vs a float64 naive greedy loop
  (the full sequence rerun per token, stopped at EOS as the backend stops);
- sampled replies at the grid's temperature 0.8: device vs CPU, and batch 1 vs batch 4 on the
  device (the backend's claim: a sample depends on its seed, not on its batch neighbours).

Timed (ms per call, CUDA events on a GPU) at ``paper`` shapes: one grid cell, 16 samples of the
same prompt with their own seeds, 16 new tokens each at temperature 0.8 (the grid's 160 cut to
fit), on a Llama-3-8B-shaped model cut to 2 layers (hidden 4096, 32 heads, 8 KV heads, FFN 14336,
vocab 128256; bf16, built on the device): ``HFBackend`` at batch 16 vs batch 1 (the benchmark's
knob, ``benchmarks/algosteer.py --lm``), and the share of the batched time spent in the sampler
(``core.generate.sample_rows``: float64 softmax on the CPU). The byte tokenizer makes the prompt ~4x longer in tokens
than Llama-3's; the prompt is prefilled once either way (shared prefix), so decoding dominates.

Memory at ``paper``: 1.49 G params = 3.0 GB bf16 (6 GB float32 while built); the decode cache
(16 rows x ~250 positions x 2 layers) and the per-step logits are < 0.1 GB.
"""

from __future__ import annotations

import copy
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from icml26.algosteer.backends import HFBackend
from icml26.algosteer.cues import build_messages, get_cue
from icml26.algosteer.grid import sample_seed
from icml26.algosteer.tasks import get_task
from icml26.core.generate import sample_rows
from icml26.core.lm import byte_tokenizer

# imported with the module (before any section runs): the one-off import cost, seconds on a
# CPU for transformers, stays out of this section's timed share

WEIGHT = 0.5

TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
CELLS = [("fib", "none"), ("fib", "performance"), ("dedup", "persona"), ("tree", "comment")]


def chat_tokenizer():
    """The byte tokenizer (259 ids, EOS 258) with a plain ``<|role|>`` chat template."""
    tok = byte_tokenizer()
    tok.chat_template = TEMPLATE
    return tok


def llama(tok, *, hidden, layers, heads, kv_heads, ffn, vocab, device, dtype, seed=0):
    """A random-weight ``LlamaForCausalLM`` built on ``device`` (untied head); ids beyond the
    tokenizer's 259 decode to nothing."""
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, max_position_embeddings=4096,
                      tie_word_embeddings=False, pad_token_id=tok.pad_token_id,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(cfg)
    return model.to(dtype).eval()


def requests(cells, samples: int):
    """(messages, seed) per sample, seeds as the grid derives them."""
    return [(build_messages(get_task(t), get_cue(c)), sample_seed(0, t, c, i))
            for t, c in cells for i in range(samples)]


def greedy_ref(model, tok, messages, n_new) -> str:
    """Naive greedy decoding of one prompt (no cache), stopped at EOS; the reply text."""
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    x = tok(text, add_special_tokens=False)["input_ids"]
    out = []
    with torch.inference_mode():
        for _ in range(n_new):
            t = int(model(input_ids=torch.tensor([x])).logits[0, -1].argmax())
            out.append(t)
            x.append(t)
            if t == tok.eos_token_id:
                break
    return tok.decode(out, skip_special_tokens=True)


def replies(gens):
    return [(g.text, g.meta["new_tokens"]) for g in gens]


def check_tiny(ctx) -> None:
    tok = chat_tokenizer()
    cpu_model = llama(tok, hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=len(tok),
                      device="cpu", dtype=torch.float32)
    with torch.no_grad():
        cpu_model.lm_head.weight.mul_(10.0)  # logits spread ~10x: no near-ties at float32
    dev_model = copy.deepcopy(cpu_model).to(ctx.device)
    reqs = requests(CELLS, 1)
    n_new = 6
    dev = HFBackend(model=(dev_model, tok), device=str(ctx.device), batch_size=len(reqs))
    dev1 = HFBackend(model=(dev_model, tok), device=str(ctx.device), batch_size=1)
    cpu = HFBackend(model=(cpu_model, tok), device="cpu", batch_size=len(reqs))
    what = f"{len(reqs)} task x cue prompts, {n_new} new tokens"

    g_dev = replies(dev.generate(reqs, 0.0, n_new))
    ctx.check("greedy replies (text, new tokens), device vs CPU",
              g_dev == replies(cpu.generate(reqs, 0.0, n_new)), note=what)
    m64 = copy.deepcopy(cpu_model).double()
    ref = [greedy_ref(m64, tok, m, n_new) for m, _ in reqs]
    ctx.check("greedy reply texts, device vs float64 naive loop (no cache)",
              [t for t, _ in g_dev] == ref, note="independent reference")
    s_dev = replies(dev.generate(reqs, 0.8, n_new))
    ctx.check("sampled replies (T 0.8, per-sample seeds), device vs CPU",
              s_dev == replies(cpu.generate(reqs, 0.8, n_new)), note=what)
    ctx.check("sampled replies, batch 1 vs batch 4 (device)",
              s_dev == replies(dev1.generate(reqs, 0.8, n_new)),
              note="a sample depends on its seed only")
    ctx.check("sampling used the seeds (replies differ from greedy)", s_dev != g_dev,
              note=f"{sum(a != b for a, b in zip(s_dev, g_dev, strict=True))} of {len(reqs)} "
                   "differ")


def time_paper(ctx) -> None:
    shape = ctx.pick(tiny=dict(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=259),
                     paper=dict(hidden=4096, layers=2, heads=32, kv_heads=8, ffn=14336,
                                vocab=128256))
    samples, n_new = ctx.pick(tiny=(3, 3), paper=(16, 16))
    tok = chat_tokenizer()
    model = llama(tok, **shape, device=ctx.device, dtype=ctx.dtype)
    reqs = requests(CELLS[:1], samples)
    one = HFBackend(model=(model, tok), device=str(ctx.device), batch_size=1)
    many = HFBackend(model=(model, tok), device=str(ctx.device), batch_size=samples)
    base = lambda: one.generate(reqs, 0.8, n_new)  # noqa: E731
    meth = lambda: many.generate(reqs, 0.8, n_new)  # noqa: E731
    t0 = time.perf_counter()  # warm-up, and the cost of one round of both
    base()
    meth()
    ctx.sync()
    both = time.perf_counter() - t0
    iters = 3 if ctx.enough(4 * both) else 2 if ctx.enough(3 * both) else 1
    if not ctx.enough(1.5 * both):
        ctx.note(f"batch-1 vs batch-{samples} timing skipped: one round takes {both:.1f} s")
        return
    row = ctx.compare(f"grid cell, {samples} samples x {n_new} tokens at batch {samples}",
                      "the same samples at batch 1", base, meth, warmup=0, iters=iters,
                      note=f"ms per cell; T 0.8; {shape['layers']}-layer, hidden "
                           f"{shape['hidden']}, vocab {shape['vocab']}, "
                           f"{str(ctx.dtype).removeprefix('torch.')}; {iters} rounds")
    ctx.value(f"new tokens/s, batch {samples}", f"{samples * n_new / row.method_ms * 1e3:,.0f}")
    ctx.value("new tokens/s, batch 1", f"{samples * n_new / row.baseline_ms * 1e3:,.0f}")
    # the draw itself: core.generate samples on the CPU in float64 (device-independent samples),
    # so each step moves the (rows, vocab) logits off the device
    logits = torch.randn(samples, shape["vocab"], device=ctx.device, dtype=ctx.dtype)
    u = torch.rand(samples, dtype=torch.float64)
    ms = ctx.time(lambda: sample_rows(logits, u, 0.8, 1.0), warmup=1, iters=3)
    ctx.value(f"of which the sampler per step ({samples} x {shape['vocab']} logits, CPU float64)",
              f"{ms:.3g} ms = {ms * n_new / row.method_ms:.0%} of the batched cell")


def run(ctx) -> None:
    with ctx.exact():
        check_tiny(ctx)
    time_paper(ctx)
