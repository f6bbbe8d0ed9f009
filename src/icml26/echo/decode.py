"""Live speculative decoding with batched tree verification and refilled slots.

``SpeculativeDecoder(target, draft, policy, k_max).generate(prompts, max_new_tokens)``: up to
``batch_size`` requests decode together; each step the policy builds one draft tree per active
request under the shared budget ``k_max``, :func:`~icml26.echo.verify.verify_batch` checks them in
one target forward, and finished requests' slots take the next prompt. Greedy only: the output is
the target's greedy continuation, token for token (up to floating-point ties).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from icml26.core.torchutil import model_device
from icml26.echo.draft import DraftContext, TreeDraftOracle
from icml26.echo.model import KV, TreeLM, append_kv
from icml26.echo.policies import Policy
from icml26.echo.verify import verify_batch

__all__ = ["SpeculativeDecoder", "StepLog", "GenerateOutput"]


@dataclass
class StepLog:
    """One verification step: request ids, their prefix lengths before the step (root position),
    tokens emitted per request, sum K_i, padded tokens, wall seconds (draft, verify)."""

    reqs: list[int]
    positions: list[int]
    accepted: list[int]
    verified: int
    padded: int
    draft_s: float
    verify_s: float


@dataclass
class GenerateOutput:
    tokens: list[list[int]]
    steps: list[StepLog] = field(default_factory=list)

    @property
    def mean_accepted(self) -> float:
        """MAT: tokens emitted per request per verification step."""
        n = sum(len(s.accepted) for s in self.steps)
        return sum(sum(s.accepted) for s in self.steps) / max(n, 1)

    @property
    def verified_per_accepted(self) -> float:
        return sum(s.verified for s in self.steps) / max(sum(sum(s.accepted) for s in self.steps), 1)


class SpeculativeDecoder:
    """Greedy speculative decoding of an HF Llama-family ``target``.

    draft : an int ``l`` (self-draft: the target's first ``l`` layers + final norm + LM head,
        reusing the target's KV of those layers) or a same-vocabulary HF causal LM.
    policy : a :class:`~icml26.echo.policies.Policy`. k_max : the batch verification budget.
    bucket : verification width bucket (tokens).
    """

    def __init__(self, target, draft, policy: Policy, k_max: int, bucket: int = 8):
        self.target = target if isinstance(target, TreeLM) else TreeLM(target)
        if isinstance(draft, int):
            if not 1 <= draft < self.target.n_layers:
                raise ValueError(f"exit_layer must be in [1, {self.target.n_layers}); got {draft}")
            self.draft, self.exit_layer = self.target, draft
        else:
            self.draft = draft if isinstance(draft, TreeLM) else TreeLM(draft)
            self.exit_layer = None
            if self.draft.vocab != self.target.vocab:
                raise ValueError(f"draft vocabulary ({self.draft.vocab}) differs from the target's "
                                 f"({self.target.vocab}); the draft must share the tokenizer")
        self.policy, self.k_max, self.bucket = policy, int(k_max), bucket

    def _draft_cache(self, slot) -> KV:
        if self.exit_layer is not None:
            return slot["cache"][: self.exit_layer]
        seq = slot["ids"]  # bring the separate draft's cache up to the prefix
        t = slot["dcache"][0][0].shape[2] if slot["dcache"] else 0
        new = torch.as_tensor(seq[t:slot["len"]], dtype=torch.int64)
        if new.numel():
            n = new.numel()
            mask = torch.cat([torch.ones(n, t, dtype=torch.bool), torch.ones(n, n, dtype=torch.bool).tril()], 1)
            _, kv = self.draft.forward(new.view(1, -1), torch.arange(t, t + n).view(1, -1), mask.unsqueeze(0),
                                       slot["dcache"])
            slot["dcache"] = append_kv(slot["dcache"], kv)
        return slot["dcache"]

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, batch_size: int = 1,
                 eos_token_id: int | Sequence[int] | None = None, temperature: float = 0.0) -> GenerateOutput:
        """prompts : token id lists. eos_token_id : one id or several (any of them stops a row). Returns the generated ids per prompt (prompt excluded) and a
        per-step log. Raises up front when a prompt + ``max_new_tokens`` exceeds the positions."""
        if temperature != 0.0:
            raise NotImplementedError("only greedy decoding (temperature=0) is implemented")
        if max_new_tokens < 1 or batch_size < 1:
            raise ValueError(f"max_new_tokens and batch_size must be >= 1; got {max_new_tokens}, {batch_size}")
        if self.k_max < batch_size:
            raise ValueError(f"k_max must be >= batch_size; got k_max={self.k_max} < B={batch_size}")
        for i, p in enumerate(prompts):
            if len(p) == 0:
                raise ValueError(f"prompt {i} is empty")
            if len(p) + max_new_tokens + 64 > self.target.max_positions:  # + tree depth headroom
                raise ValueError(f"prompt {i}: {len(p)} tokens + max_new_tokens={max_new_tokens} (+64 for the "
                                 f"tree) exceeds the model's {self.target.max_positions} positions")
        out = GenerateOutput([[] for _ in prompts])
        queue = list(range(len(prompts)))
        slots: dict[int, dict] = {}

        def admit():
            while queue and len(slots) < batch_size:
                r = queue.pop(0)
                ids = torch.as_tensor(list(prompts[r]), dtype=torch.int64)
                logits, cache = self.target.prefill(ids)
                root = int(logits[-1].argmax())
                out.tokens[r].append(root)
                slots[r] = {"cache": cache, "ids": list(prompts[r]) + [root], "len": len(ids), "dcache": None}
                if _done(out.tokens[r], max_new_tokens, eos_token_id):
                    del slots[r]

        admit()
        while slots:
            reqs = sorted(slots)
            t0 = time.perf_counter()
            ctxs = {r: DraftContext(self._draft_cache(slots[r]), slots[r]["len"], slots[r]["ids"][-1]) for r in reqs}
            oracle = TreeDraftOracle(self.draft, self.exit_layer, ctxs)
            trees = self.policy.build(oracle, reqs, [ctxs[r].root for r in reqs], self.k_max)
            t1 = time.perf_counter()
            res = verify_batch(self.target, trees, [slots[r]["cache"] for r in reqs], self.bucket)
            t2 = time.perf_counter()
            out.steps.append(StepLog(reqs, [slots[r]["len"] for r in reqs], res.accepted, res.verified,
                                     res.padded, t1 - t0, t2 - t1))
            for r, tree, path, bonus, cache in zip(reqs, trees, res.paths, res.bonus, res.caches, strict=True):
                s = slots[r]
                new = [int(tree.tokens[j]) for j in path[1:]] + [bonus]
                s["cache"], s["len"] = cache, s["len"] + len(path)
                s["ids"] += new
                out.tokens[r] += new
                if _done(out.tokens[r], max_new_tokens, eos_token_id):
                    del slots[r]
            admit()
        for r, toks in enumerate(out.tokens):
            out.tokens[r] = _truncate(toks, max_new_tokens, eos_token_id)
        return out


def _eos(eos) -> set[int]:
    if eos is None:
        return set()
    return {int(eos)} if isinstance(eos, int) else {int(x) for x in eos}


def _done(toks: list[int], n: int, eos) -> bool:
    stops = _eos(eos)
    return len(toks) >= n or any(t in stops for t in toks)


def _truncate(toks: list[int], n: int, eos) -> list[int]:
    stops = _eos(eos)
    for j, t in enumerate(toks):
        if t in stops:
            toks = toks[: j + 1]
            break
    return toks[:n]


@torch.no_grad()
def greedy_reference(model, prompt: Sequence[int], max_new_tokens: int, eos_token_id: int | None = None) -> list[int]:
    """Brute-force greedy decoding: a full HF forward of the whole sequence for every token (the
    input on the model's device)."""
    device = model_device(model)
    ids = list(prompt)
    out = []
    for _ in range(max_new_tokens):
        logits = model(torch.tensor([ids], dtype=torch.int64, device=device)).logits[0, -1]
        tok = int(logits.argmax())
        out.append(tok)
        ids.append(tok)
        if eos_token_id is not None and tok == eos_token_id:
            break
    return out

