"""TIE: the shared decode engine on the device (tokens/s vs HF ``generate``), and the sampled
lengths -> log-t fit -> ``ScoreTable`` chain equal on the device and the CPU.

TIE's GPU work is sampling output lengths (``tie.sampling.sample_lengths``, whose fast path is
``icml26.core.generate.generate``); the score itself (``tie.score.ScoreTable``, ``tie_score``)
is numpy on the CPU by design, so "ScoreTable on the GPU" is checked as the chain that ends in
it: lengths drawn with the model on the device, fitted and scored on the CPU.

Checked (a tiny float32 random Llama, 2 layers, hidden 64, byte vocabulary):

- ``core.generate`` greedy tokens (batch 2 over 3 prompts: a refill) on the device == the CPU's,
  bit-exact (the smallest top-1/top-2 logit gap on the path is recorded);
- ``core.generate`` == HF ``model.generate`` (greedy, left-padded) on the CPU: the independent
  reference, so the CPU rehearsal tests something;
- ``sample_lengths`` (inverse-CDF draws from one CPU generator, 26 stop ids so lengths vary) on
  the device == on the CPU, bit-exact; then ``fit_logt`` + ``ScoreTable`` integer scores of each
  prompt equal; and ``ScoreTable`` (a 128 x 32 grid) within 1 + 1% of the exact quadrature
  ``tie_score``.

Timed (ms per call, median, CUDA events; tokens/s as values): ``core.generate`` vs HF
``model.generate`` (the baseline of benchmarks/generate.py), greedy, no EOS, the same random
prompts, on a random Llama-3-8B-shaped model (hidden 4096, 32/8 heads, FFN 14,336, vocabulary
128,256, bf16) with 2 decoder layers, at batch 32 and 128, 64 prompt + 32 new tokens per row.
Memory: weights 2 x 1.05 GB (embedding, head) + 2 x 0.44 GB (layers); KV 2 layers x 2 x
128·8·96·128·2 B = 0.1 GB; prefill logits at most 128·64·128,256·6 B = 6.3 GB (HF keeps one row
per sequence): under 12 GB.
"""

from __future__ import annotations

import copy

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from icml26.core.generate import generate
from icml26.core.lm import tiny_llama
from icml26.tie.lengths import fit_logt
from icml26.tie.sampling import SampleConfig, sample_lengths
from icml26.tie.score import ScoreTable, tie_score

WEIGHT = 2.0


def run(ctx) -> None:
    models = _tiny(ctx)
    with ctx.exact():
        _check_generate(ctx, *models)
        _check_lengths(ctx, *models)
    _time_generate(ctx)


# -- correctness ---------------------------------------------------------------------------------
def _tiny(ctx):
    """The same tiny float32 model on the CPU and on the device, and its byte tokenizer."""
    model, tok = tiny_llama(hidden=64, layers=2, heads=4, kv_heads=2, max_len=128, seed=0)
    return model.eval(), copy.deepcopy(model).to(ctx.device).eval(), tok


def _prompts(n, lo, hi, vocab, seed=0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(lo, hi + 1, (n,), generator=g).tolist()
    return [torch.randint(3, vocab, (m,), generator=g).tolist() for m in lens]


@torch.no_grad()
def _hf_generate(model, prompts, new) -> list[list[int]]:
    """One left-padded HF ``generate`` over ``prompts``, greedy, no EOS (benchmarks/generate.py)."""
    dev = next(model.parameters()).device
    P = max(map(len, prompts))
    ids = torch.zeros(len(prompts), P, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, p in enumerate(prompts):
        ids[r, P - len(p):] = torch.tensor(p)
        mask[r, P - len(p):] = 1
    model.generation_config.eos_token_id = None
    out = model.generate(input_ids=ids.to(dev), attention_mask=mask.to(dev), max_new_tokens=new,
                         min_new_tokens=new, do_sample=False, pad_token_id=0, temperature=None,
                         top_p=None, top_k=None)
    return out[:, P:].tolist()


def _core(model, prompts, new, batch) -> list[list[int]]:
    return [g.token_ids for g in generate(model, None, prompts, max_new_tokens=new,
                                          batch_size=batch, eos_token_ids=())]


@torch.no_grad()
def _min_gap(model, prompts, outs) -> float:
    """Smallest top-1 minus top-2 logit along the greedy paths (CPU, one forward per prompt)."""
    gaps = []
    for p, o in zip(prompts, outs, strict=True):
        logits = model(torch.tensor([p + o])).logits[0, len(p) - 1:-1].double()
        top = logits.topk(2, -1).values
        gaps.append(float((top[:, 0] - top[:, 1]).min()))
    return min(gaps)


def _check_generate(ctx, cpu_model, dev_model, tok) -> None:
    prompts = _prompts(3, 5, 12, 255)
    new = 8
    got = {label: _core(model, prompts, new, batch=2)
           for label, model in (("cpu", cpu_model), ("dev", dev_model))}
    gap = _min_gap(cpu_model, prompts, got["cpu"])
    ctx.equal("core.generate greedy tokens (float32): device == CPU", torch.tensor(got["dev"]),
              torch.tensor(got["cpu"]),
              note=f"3 prompts x {new} tokens, batch 2 (a refill); min top-1/top-2 gap {gap:.2e}")
    hf = _hf_generate(cpu_model, prompts, new)
    ctx.equal("core.generate == HF generate (greedy, float32, CPU reference)",
              torch.tensor(got["cpu"]), torch.tensor(hf))


def _check_lengths(ctx, cpu_model, dev_model, tok) -> None:
    texts = ["a short prompt", "another, slightly longer prompt text"]
    cfg = SampleConfig(n_samples=4, cap=12, temperature=1.0, batch_size=4, seed=0)
    table = ScoreTable(n_mu=128, n_sigma=32)  # 1/16 of the default grid: 0.25 s to build
    res = {}
    for label, model in (("cpu", cpu_model), ("dev", dev_model)):
        # 26 stop ids (of 259) as well as EOS: lengths spread over 1..cap instead of all capped
        model.generation_config.eos_token_id = list(range(100, 126))
        out = sample_lengths(model, tok, texts, cfg)
        lengths = torch.tensor([out[t]["lengths"] for t in texts])
        censored = torch.tensor([out[t]["censored"] for t in texts])
        fits = [fit_logt(out[t]["lengths"], out[t]["censored"]) for t in texts]
        mu = [f.mu for f in fits]
        sg = [f.sigma for f in fits]
        res[label] = (lengths, censored, torch.as_tensor(table(mu, sg, queue_len=64)),
                      torch.as_tensor(tie_score(mu, sg, queue_len=64)))
    (l_c, c_c, s_c, e_c), (l_d, c_d, s_d, _) = res["cpu"], res["dev"]
    ctx.equal("sample_lengths (inverse-CDF, CPU generator): device == CPU",
              torch.cat([l_d, c_d.long()]), torch.cat([l_c, c_c.long()]),
              note=f"2 prompts x {cfg.n_samples} samples, cap {cfg.cap}; lengths and censor flags")
    ctx.equal("fit_logt + ScoreTable scores of those lengths: device == CPU", s_d, s_c,
              note="ScoreTable is numpy (CPU by design): the GPU enters through the lengths")
    # the coarse grid's interpolation error, ~1% of the expectations, plus the integer rounding
    tol = 1.0 + 0.01 * float(e_c.abs().max())
    err = float((s_c - e_c).abs().max())
    ctx.check("ScoreTable (128 x 32 grid) vs the exact quadrature tie_score", err <= tol,
              err=err, tol=tol, note=f"scores {s_c.tolist()} vs {e_c.tolist()} (tokens)")
    ctx.value("sampled lengths (CPU)", str(l_c.tolist()))


# -- timing --------------------------------------------------------------------------------------
def _model(ctx):
    hidden, heads, kv, ffn, vocab = ctx.pick(tiny=(64, 4, 2, 192, 512),
                                             paper=(4096, 32, 8, 14336, 128256))
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn,
                      num_hidden_layers=2, num_attention_heads=heads, num_key_value_heads=kv,
                      max_position_embeddings=2048, tie_word_embeddings=False)
    torch.manual_seed(0)
    with ctx.device:  # built on the device: seconds at the 8B shape
        model = LlamaForCausalLM(cfg)
    return model.to(ctx.dtype).eval(), vocab


@torch.no_grad()
def _time_generate(ctx) -> None:
    p = ctx.pick(tiny=dict(batches=(2, 4), prompt=6, new=4, it=dict(warmup=1, iters=2)),
                 paper=dict(batches=(32, 128), prompt=64, new=32, it=dict(warmup=1, iters=3)))
    model, vocab = _model(ctx)
    new = p["new"]
    for b in p["batches"]:
        if not ctx.enough(ctx.pick(tiny=0.1, paper=8.0)):
            ctx.note(f"skipped batch {b}: {ctx.remaining():.0f} s left of the share")
            continue
        prompts = _prompts(b, p["prompt"], p["prompt"], vocab, seed=b)
        out = {}

        def hf(prompts=prompts, out=out):
            out["hf"] = _hf_generate(model, prompts, new)

        def core(prompts=prompts, b=b, out=out):
            out["core"] = _core(model, prompts, new, batch=b)

        row = ctx.compare(f"generate, batch {b}", "HF model.generate (greedy, left-padded)", hf,
                          core, note=f"ms per call; {b} rows x ({p['prompt']} prompt + {new} new) "
                                     f"tokens, 2-layer 8B-shaped {str(ctx.dtype)[6:]}"
                                     if ctx.is_cuda else f"ms per call; {b} rows x "
                                     f"({p['prompt']} + {new}) tokens, tiny float32", **p["it"])
        toks = b * new
        ctx.value(f"batch {b}: tokens/s core.generate / HF generate",
                  f"{toks / row.method_ms * 1e3:,.0f} / {toks / row.baseline_ms * 1e3:,.0f}")
        same = sum(a == h for a, h in zip(out["core"], out["hf"], strict=True))
        ctx.value(f"batch {b}: rows with identical tokens (core vs HF)",
                  f"{same}/{b}" + (" (bf16 random weights: near-ties expected)"
                                   if ctx.is_cuda else ""))
