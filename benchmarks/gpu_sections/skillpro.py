"""Skill-Pro: the PPO gate's teacher-forced scoring and the batched, KV-cached rollout engine.

The GPU work of Skill-Pro is the agent model: the gate scores ``log pi(action | prompt with the
skill)`` teacher-forced (``ppo.LMScorer`` -> ``core.mcq.choice_logprobs``), and rollouts decode
many episodes' replies together (``rollout.KVEngine``, per-slot prompt K/V reuse).

Checked (tiny float32 Llama, the same weights on the device and on the CPU; prompts are real
Mastermind decision prompts with a skill injected, actions the scripted policy's moves):

- gate log-probs (nats, summed over the action's tokens): device vs CPU, and device vs an
  independent float64 reference (one unpadded full forward per pair, gathered by hand);
- the gate objective J of a candidate skill vs the old one: device vs CPU, and the accept
  decision (J > 0.001) equal;
- KVEngine greedy replies over two agent turns (turn 2 reuses each slot's turn-1 K/V): token ids
  bit-exact device vs CPU, vs the same engine without reuse, and vs a float64 naive greedy loop
  (the LM head is scaled so every argmax is well separated); turn 2 really served its prefix.

Timed (ms per call, CUDA events on a GPU) at ``paper`` shapes: a Llama-3-8B-shaped model cut to
2 layers (hidden 4096, 32 heads, 8 KV heads, FFN 14336, vocab 128256) built on the device, with
a 4-bytes-per-token stand-in tokenizer (Llama-3-like token counts, ~190 tokens per prompt):

- gate scoring of 16 (prompt, action) pairs: ``action_logprobs`` at batch 16 vs batch 1, in
  float32 as the CLI loads the scorer (the model is then cast to bf16 for the rollouts);
- one rollout round of 8 episodes x 16 new tokens: ``KVEngine.generate`` batched vs one request
  at a time (the reference path, one row per forward);
- two agent turns of 8 episodes: slot K/V reuse vs every prompt recomputed (both batched).

Memory at ``paper``: weights 1.49 G params (2 x 218 M layers + 2 x 525 M embedding/head) = 6 GB
float32 for scoring, then 3 GB bf16; scoring at batch 16 x ~190 tokens keeps float32 logits and
their log-softmax (2 x 1.6 GB); the decode caches are < 0.1 GB: < 12 GB in all.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import zlib

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from icml26.skillpro.agent import (
    GOOD_CONSISTENT,
    GOOD_FORMAT,
    ScriptedPolicy,
    SkillAgent,
    decision_messages,
)
from icml26.skillpro.env import make_env
from icml26.skillpro.evolve import gate_objective
from icml26.skillpro.ppo import LMScorer, action_logprobs, render_prompt
from icml26.skillpro.rollout import GenRequest, KVEngine
from icml26.skillpro.skill import SkillPool

# imported with the module (before any section runs): the one-off import cost, seconds on a
# CPU for transformers, stays out of this section's timed share

WEIGHT = 0.5

GATE_THRESHOLD = 0.001  # SkillProConfig.gate_threshold


class ChunkTok:
    """A stand-in tokenizer for random-weight models: one id per 4 UTF-8 bytes (crc32 modulo the
    vocabulary), about Llama-3's 4 characters per token. The last three ids are pad/bos/eos.
    Provides what ``core.mcq.choice_logprobs`` and ``ppo.render_prompt`` use."""

    chat_template = None

    def __init__(self, vocab: int):
        self.n = vocab - 3
        self.pad_token_id, self.bos_token_id, self.eos_token_id = vocab - 3, vocab - 2, vocab - 1

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict:
        b = text.encode()
        return {"input_ids": [zlib.crc32(b[i:i + 4]) % self.n for i in range(0, len(b), 4)]}


def llama(*, hidden, layers, heads, kv_heads, ffn, vocab, device, dtype, seed=0,
          max_len=4096):
    """A random-weight ``LlamaForCausalLM`` built directly on ``device`` (untied head)."""
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, max_position_embeddings=max_len,
                      tie_word_embeddings=False, pad_token_id=vocab - 3, bos_token_id=vocab - 2,
                      eos_token_id=vocab - 1)
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(cfg)
    return model.to(dtype).eval()


def decision_pairs(n: int):
    """``n`` (decision messages, action) pairs from scripted Mastermind episodes (a skill injected
    at every step: epsilon 1 draws one at random), and the trajectories they came from."""
    agent = SkillAgent(ScriptedPolicy(), SkillPool.seeded(), select="llm_topk_lcb", epsilon=1.0,
                       seed=0)
    trajs, steps, seed = [], [], 0
    while len(steps) < n:
        tr = agent.run_episode(make_env("Mastermind-v0"), seed)
        trajs.append(tr)
        steps += [s for s in tr.steps if s.skill is not None]
        seed += 1
    steps = steps[:n]
    return [(decision_messages(s.obs, s.guidance), s.action) for s in steps], trajs


def ref_logprobs(model, tok, prompts, actions) -> list[float]:
    """Independent reference: one unpadded forward per pair, log-softmax gathered by hand."""
    out = []
    with torch.inference_mode():
        for p, a in zip(prompts, actions, strict=True):
            ctx_ids, act = tok(p)["input_ids"], tok(a, add_special_tokens=False)["input_ids"]
            logits = model(input_ids=torch.tensor([ctx_ids + act])).logits[0]
            logp = torch.log_softmax(logits, -1)
            out.append(float(sum(logp[len(ctx_ids) - 1 + k, t] for k, t in enumerate(act))))
    return out


def greedy_ref(model, ids, n_new) -> list[int]:
    """Naive greedy decoding: the full sequence rerun for every token (no cache)."""
    x, out = list(ids), []
    with torch.inference_mode():
        for _ in range(n_new):
            t = int(model(input_ids=torch.tensor([x])).logits[0, -1].argmax())
            out.append(t)
            x.append(t)
    return out


def turn_prompts(tok, pairs, k: int):
    """Turn-1 and turn-2 prompt ids of ``k`` episodes: turn 2 appends a feedback line to the
    observation (the system prompt, the skill text and the earlier history are shared)."""
    one, two = [], []
    for msgs, _ in pairs[:k]:
        m2 = copy.deepcopy(msgs)
        m2[-1]["content"] = m2[-1]["content"].replace(
            "\nYour move:", "\nGuess [1 2 3 4]: 0 black, 2 white.\nYour move:")
        one.append(tok(render_prompt(tok, msgs))["input_ids"])
        two.append(tok(render_prompt(tok, m2))["input_ids"])
    return one, two


def two_turns(model, turns, n_new, reuse):
    """Both turns through one engine; returns (turn-1 replies, turn-2 replies)."""
    eng = KVEngine(model, [], reuse=reuse)
    r1 = eng.generate([GenRequest(ids, n_new, 0.0, None, ("ep", i)) for i, ids in
                       enumerate(turns[0])])
    r2 = eng.generate([GenRequest(ids, n_new, 0.0, None, ("ep", i)) for i, ids in
                       enumerate(turns[1])])
    return r1, r2


def check_tiny(ctx) -> None:
    class Recording(LMScorer):
        """The gate's scorer, keeping the log-prob arrays it returned."""

        def __init__(self, *args):
            super().__init__(*args)
            self.seen = []

        def logprobs(self, messages_list, actions):
            self.seen.append(super().logprobs(messages_list, actions))
            return self.seen[-1]

    hidden, vocab = 64, 259
    tok = ChunkTok(vocab)
    cpu_model = llama(hidden=hidden, layers=2, heads=4, kv_heads=2, ffn=128, vocab=vocab,
                      device="cpu", dtype=torch.float32, max_len=1024)
    dev_model = copy.deepcopy(cpu_model).to(ctx.device)
    pairs, trajs = decision_pairs(4)
    prompts = [render_prompt(tok, m) for m, _ in pairs]
    actions = [a for _, a in pairs]
    t_max = max(len(tok(p)["input_ids"]) for p in prompts)
    n_act = max(len(tok(a, add_special_tokens=False)["input_ids"]) for a in actions)

    lp_dev = action_logprobs(dev_model, tok, prompts, actions, batch_size=4)
    lp_cpu = action_logprobs(cpu_model, tok, prompts, actions, batch_size=4)
    lp_ref = ref_logprobs(copy.deepcopy(cpu_model).double(), tok, prompts, actions)
    # float32: per token ~eps * sqrt(reduction length) relative, on log-probs of size ~log V,
    # summed over the action's tokens; x64 headroom (a padding or position bug is > 0.1 nats)
    tol = 64 * 2**-23 * math.sqrt(max(hidden, t_max)) * math.log(vocab) * n_act
    ctx.close("gate log-probs (nats/pair), device vs CPU", lp_dev, lp_cpu, atol=tol,
              note=f"{len(pairs)} pairs, batch 4, <= {t_max} + {n_act} tokens, float32")
    ctx.close("gate log-probs, device vs float64 unpadded per-pair forward", lp_dev, lp_ref,
              atol=tol, note="independent reference: no batching, no padding")

    # without a meta-controller the first skill of an episode stays active: 8 steps under `old`
    batch = [dataclasses.replace(trajs[0], steps=trajs[0].steps[:8])]
    old = SkillPool.seeded().get(batch[0].steps[0].skill)
    cand = old.child(steps=(GOOD_CONSISTENT, GOOD_FORMAT, "Try digits not used yet"))
    baseline = 0.5  # the EMA baseline b; advantages (R - b) / T
    j_dev = gate_objective(LMScorer(dev_model, tok, 4), old, cand, batch, baseline)
    cpu_scorer = Recording(cpu_model, tok, 4)
    j_cpu = gate_objective(cpu_scorer, old, cand, batch, baseline)
    adv_max = max(abs(t.ret - baseline) / len(t.steps) for t in batch)
    used = [s for s in batch[0].steps if s.skill == old.name]
    lp_old, lp_new = cpu_scorer.seen  # gate_objective scores the old skill first
    log_rho = lp_new - lp_old
    # J = mean_t min(rho A, clip(rho, 0.8, 1.2) A) with rho = exp(lp_new - lp_old): an error d
    # in each log-prob moves J by at most max|A| * max(rho) * 2d
    j_tol = adv_max * math.exp(min(10.0, float(log_rho.max()))) * 2 * tol
    ctx.close("gate objective J, device vs CPU", j_dev, j_cpu, atol=j_tol,
              note=f"J = {j_cpu:.4g} over {len(used)} steps")
    far = abs(j_cpu - GATE_THRESHOLD) > j_tol
    ctx.check("gate decision (J > 0.001), device == CPU",
              (j_dev > GATE_THRESHOLD) == (j_cpu > GATE_THRESHOLD),
              note=("accept" if j_cpu > GATE_THRESHOLD else "reject")
              + ("" if far else "; J within tolerance of the threshold"))

    # greedy decoding: scale the head so every argmax is far above float32 noise
    with torch.no_grad():
        cpu_model.lm_head.weight.mul_(10.0)
        dev_model.lm_head.weight.mul_(10.0)
    n_new = 3
    turns = turn_prompts(tok, pairs, 2)
    d1, d2 = two_turns(dev_model, turns, n_new, reuse=True)
    c1, c2 = two_turns(cpu_model, turns, n_new, reuse=True)
    f1, f2 = two_turns(dev_model, turns, n_new, reuse=False)
    ids = lambda rs: torch.tensor([r.ids for r in rs])  # noqa: E731 - (episodes, n_new) int64
    got = torch.cat([ids(d1), ids(d2)])
    ctx.equal("KVEngine greedy ids (2 turns, slot reuse), device vs CPU", got,
              torch.cat([ids(c1), ids(c2)]))
    ctx.equal("KVEngine greedy ids, slot reuse vs no reuse (device)", got,
              torch.cat([ids(f1), ids(f2)]))
    m64 = copy.deepcopy(cpu_model).double()
    ref = torch.tensor([greedy_ref(m64, x, n_new) for x in turns[0] + turns[1]])
    ctx.equal("KVEngine greedy ids, device vs float64 naive loop (no cache)", got, ref)
    run = sum(r.computed for r in d2)
    total = sum(len(x) for x in turns[1])
    ctx.check("turn 2 served its shared prefix from the slot cache", run < total // 2,
              note=f"{run} of {total} prompt tokens run")


def time_paper(ctx) -> None:
    shape = ctx.pick(tiny=dict(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=259),
                     paper=dict(hidden=4096, layers=2, heads=32, kv_heads=8, ffn=14336,
                                vocab=128256))
    n_pairs, n_ep, n_new = ctx.pick(tiny=(3, 2, 2), paper=(16, 8, 16))
    reps = ctx.pick(tiny=dict(warmup=1, iters=1), paper=dict(warmup=1, iters=2))
    # the gate's scorer is a float32 model (cli: ``LMScorer(*load_lm(scorer, dtype=float32))``;
    # docs/skillpro.md: bf16 moves summed log-probs by more than the clip width)
    model = llama(**shape, device=ctx.device, dtype=torch.float32)
    tok = ChunkTok(shape["vocab"])
    what = f"{shape['layers']}-layer, hidden {shape['hidden']}, vocab {shape['vocab']}"
    tf32 = " (TF32 on)" if torch.backends.cuda.matmul.allow_tf32 and ctx.is_cuda else ""
    pairs, _ = decision_pairs(max(n_pairs, n_ep))
    prompts = [render_prompt(tok, m) for m, _ in pairs[:n_pairs]]
    actions = [a for _, a in pairs[:n_pairs]]
    row = ctx.compare(f"gate scoring, {n_pairs} pairs at batch {n_pairs}",
                      "the same pairs at batch 1",
                      lambda: action_logprobs(model, tok, prompts, actions, batch_size=1),
                      lambda: action_logprobs(model, tok, prompts, actions, batch_size=n_pairs),
                      **reps, note=f"ms per {n_pairs} pairs; float32{tf32} scorer; {what}")
    ctx.value("gate scoring, pairs/s batched (float32)", f"{n_pairs / row.method_ms * 1e3:.1f}")
    model.to(ctx.dtype)  # the agent model decodes in the device's dtype (bf16 on CUDA)
    what += f", {str(ctx.dtype).removeprefix('torch.')}"

    turns = turn_prompts(tok, pairs, n_ep)
    reqs = [GenRequest(x, n_new, 0.0, None, None) for x in turns[0]]
    eng = KVEngine(model, [], reuse=False)
    if not ctx.enough(3.0 if ctx.is_cuda else 0.3):
        ctx.note("rollout timings skipped: this section's share is spent")
        return
    row = ctx.compare(f"rollout round, {n_ep} episodes x {n_new} tokens, batched",
                      "one request at a time",
                      lambda: [eng.generate([q]) for q in reqs], lambda: eng.generate(reqs),
                      **reps, note=f"ms per round; greedy; {what}")
    ctx.value("rollout decode, new tokens/s batched", f"{n_ep * n_new / row.method_ms * 1e3:.0f}")
    if not ctx.enough(1.5 if ctx.is_cuda else 0.2):
        ctx.note("two-turn reuse timing skipped: this section's share is spent")
        return
    n_reply = ctx.pick(tiny=1, paper=n_new)
    ctx.compare(f"2 agent turns, {n_ep} episodes, slot K/V reuse", "every prompt recomputed",
                lambda: two_turns(model, turns, n_reply, reuse=False),
                lambda: two_turns(model, turns, n_reply, reuse=True),
                **reps, note=f"ms per 2 turns of {n_reply} new tokens, both batched; turn 2 "
                             "appends one feedback line")


def run(ctx) -> None:
    with ctx.exact():
        check_tiny(ctx)
    time_paper(ctx)
