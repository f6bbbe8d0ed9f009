"""Batched, KV-cached generation for many agent episodes at once.

``KVEngine.generate(requests)`` answers one chat request per live episode with **one batched
forward per token** over all of them, through :func:`icml26.core.generate.generate`. Each request
names a *slot* (e.g. ``(episode, "act")``); a slot keeps the K/V of its last prompt, so the next
turn of that episode only runs the tokens after the longest common token prefix (an agent's prompt
grows by one feedback line per turn: the system prompt, the skill text and the earlier history are
not recomputed). The slot policy is :class:`_SlotPrompts`, a :class:`~icml26.core.generate.PromptCache`
the engine consults per prompt. Finished rows (EOS or ``max_new_tokens``) leave the batch.

Decoding: greedy for ``temperature == 0`` (the same argmax as transformers' ``generate``); sampling
with a per-request ``torch.Generator`` seeded by the request's seed otherwise (``torch.multinomial``
on the request's ``softmax(logits / T)``), so a request's sample does not depend on which other
requests share its batch.

``run_episodes`` drives several :meth:`SkillAgent.episode` coroutines together (any mix of agents,
pools and envs: all conditions of an experiment in one batch); requests to a model with a
``generate_batch`` method (:class:`BatchedLocalChat`) are batched, others are answered one by one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from icml26.core.chat import LocalChat, _cut_at_stop, check_messages
from icml26.core.errors import UserError
from icml26.core.generate import PromptCache, generate

__all__ = ["GenRequest", "GenReply", "KVEngine", "BatchedLocalChat", "run_episodes"]


@dataclass
class GenRequest:
    ids: list[int]
    max_new_tokens: int = 24
    temperature: float = 0.0
    seed: int | None = None
    slot: Hashable | None = None


@dataclass
class GenReply:
    ids: list[int]
    logprob: float  # sum of log p(token) at temperature 1 (the gate's teacher-forced quantity)
    computed: int  # prompt tokens that were run (not served from the slot's cache)


@dataclass
class _Slot:
    ids: list[int]
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer (heads, len, dim)


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class _SlotPrompts(PromptCache):
    """The engine's prompt cache for one call: request ``i`` reuses the cached prompt sharing the
    longest token prefix with it (its own slot first on ties, then live slots, then retired
    ones), and its prompt's K/V becomes its slot's."""

    def __init__(self, engine: KVEngine, requests: Sequence[GenRequest]):
        super().__init__()
        self.engine, self.requests = engine, requests

    def match(self, i, ids):
        eng, q = self.engine, self.requests[i]
        best, p = None, 0
        own = eng.slots.get(q.slot) if q.slot is not None else None
        for s in ([own] if own is not None else []) + [
            *eng.slots.values(), *reversed(eng.retired.values())
        ]:
            n = _lcp(s.ids, ids)
            if n > p:
                best, p = s, n
        p = min(p, len(ids) - 1)
        return (best.kv, p) if p > 0 else (None, 0)

    def store(self, i, ids, kv):
        slot = self.requests[i].slot
        if slot is not None:
            self.engine.slots[slot] = _Slot(list(ids), kv)


class KVEngine:
    """Batched generation with per-slot prompt K/V caches over a HF causal LM.

    Args:
        model, eos_ids: the model and the token ids that end a reply.
        reuse: keep and reuse slot caches across calls (``False``: every prompt is run in full).
        keep_retired: retired slots kept as shared prefixes (LRU).
        max_batch: rows decoded together.
    """

    def __init__(
        self,
        model,
        eos_ids: Sequence[int],
        *,
        reuse: bool = True,
        keep_retired: int = 32,
        max_batch: int = 40,
    ):
        self.model, self.eos, self.reuse = model, set(int(e) for e in eos_ids), reuse
        self.slots: dict[Hashable, _Slot] = {}
        self.retired: OrderedDict[int, _Slot] = OrderedDict()  # prefixes of finished episodes
        self.keep_retired, self._n_retired, self.max_batch = keep_retired, 0, max_batch
        self.device = next(model.parameters()).device
        self.tokens_computed = self.tokens_cached = self.forwards = 0

    def drop(self, pred) -> None:
        """Retire slots whose key satisfies ``pred`` (e.g. those of finished episodes): they are
        no longer any request's own slot, but their prompts stay available as shared prefixes
        (the system prompt, skill text and rules that the next episodes start with) in an LRU of
        ``keep_retired`` entries."""
        for k in [k for k in self.slots if pred(k)]:
            self.retired[self._n_retired] = self.slots.pop(k)
            self._n_retired += 1
        while len(self.retired) > self.keep_retired:
            self.retired.popitem(last=False)

    def generate(self, requests: Sequence[GenRequest]) -> list[GenReply]:
        """One reply per request, in order; at most ``max_batch`` rows share a forward."""
        if not requests:
            return []
        for q in requests:
            if not q.ids:
                raise UserError("empty prompt")
            if q.max_new_tokens < 1:
                raise UserError(f"max_new_tokens must be >= 1, got {q.max_new_tokens}")
        gens = [torch.Generator(device="cpu").manual_seed(int(q.seed) if q.seed is not None else 0)
                if q.temperature > 0 else None for q in requests]

        def pick(logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
            logits = logits.float().cpu()
            out = logits.argmax(-1)
            for r, i in enumerate(rows):
                if gens[i] is not None:
                    p = torch.softmax(logits[r] / requests[i].temperature, -1)
                    out[r] = torch.multinomial(p, 1, generator=gens[i])[0]
            return out

        def count(rows) -> None:
            self.forwards += 1

        out = generate(
            self.model, None, [list(q.ids) for q in requests],
            max_new_tokens=[int(q.max_new_tokens) for q in requests], logprobs=True,
            eos_token_ids=self.eos, batch_size=self.max_batch, sampler=pick,
            prefix=_SlotPrompts(self, requests) if self.reuse else None, before_forward=count,
        )
        self.tokens_computed += sum(g.computed for g in out)
        self.tokens_cached += sum(g.prompt_tokens - g.computed for g in out)
        return [GenReply(g.token_ids, float(sum(g.logprobs)), g.computed) for g in out]


class BatchedLocalChat(LocalChat):
    """``LocalChat`` plus ``generate_batch``: many chat requests answered by one :class:`KVEngine`.

    ``chat`` (one request, no cache) is ``LocalChat.chat``, the reference path.
    """

    def __init__(self, model=None, dtype=None, device: str = "cpu", reuse: bool = True):
        super().__init__(model, dtype=dtype, device=device)
        gc = getattr(self.model, "generation_config", None)
        eos = getattr(gc, "eos_token_id", None) if gc is not None else None
        if eos is None:
            eos = self.tokenizer.eos_token_id
        eos_ids = list(eos) if isinstance(eos, (list, tuple)) else [eos]
        self.engine = KVEngine(self.model, eos_ids, reuse=reuse)
        self.last_logprobs: list[float] = []

    def ids(self, messages) -> list[int]:
        return self.prompt_ids(check_messages(messages))[0].tolist()

    def generate_batch(self, items) -> list[str]:
        """``items``: ``(messages, dict(max_new_tokens, temperature, seed, stop), slot)``."""
        reqs = [
            GenRequest(
                self.ids(m), int(kw.get("max_new_tokens", 256)), float(kw.get("temperature", 0.0)),
                kw.get("seed"), slot,
            )
            for m, kw, slot in items
        ]
        for q in reqs:
            if q.temperature < 0:
                raise UserError(f"temperature must be >= 0, got {q.temperature}")
        replies = self.engine.generate(reqs)
        self.last_logprobs = [r.logprob for r in replies]
        return [
            _cut_at_stop(
                self.tokenizer.decode([t for t in r.ids if t not in self.engine.eos],
                                      skip_special_tokens=True),
                kw.get("stop"),
            )
            for r, (_, kw, _) in zip(replies, items, strict=True)
        ]


def run_episodes(jobs, *, batch: bool = True, max_live: int = 40):
    """Play episodes together. ``jobs``: ``(agent, env, seed)`` with one env object per job.

    Each round, every live episode issues one chat request; requests to the same model with a
    ``generate_batch`` method go out as one batch (``batch=False``: one by one through ``chat``,
    the reference path). At most ``max_live`` episodes are live (their caches bound memory); a
    finished one is replaced by the next job. Returns the trajectories in job order.
    """
    gens, pending, results = {}, {}, [None] * len(jobs)
    queue = list(range(len(jobs)))
    engines, models = set(), {}

    def start():
        while queue and len(pending) < max_live:
            j = queue.pop(0)
            agent, env, seed = jobs[j]
            gens[j] = agent.episode(env, seed)
            pending[j] = next(gens[j])

    start()
    while pending:
        groups: dict[int, list[int]] = {}
        for j, req in pending.items():
            models[id(req.model)] = req.model
            groups.setdefault(id(req.model), []).append(j)
        replies = {}
        for mid, js in groups.items():
            model = models[mid]
            if batch and hasattr(model, "generate_batch"):
                engines.add(mid)
                texts = model.generate_batch(
                    [(pending[j].messages, pending[j].kwargs, (id(jobs[j][1]), j, pending[j].stream))
                     for j in js]
                )
                replies.update(zip(js, texts, strict=True))
            else:
                for j in js:
                    replies[j] = model.chat(pending[j].messages, **pending[j].kwargs)
        for j, text in replies.items():
            try:
                pending[j] = gens[j].send(text)
            except StopIteration as stop:
                results[j] = stop.value
                del pending[j], gens[j]
                for mid in engines:
                    eng = getattr(models.get(mid), "engine", None)
                    if eng is not None:
                        eng.drop(lambda k, j=j: isinstance(k, tuple) and k[1] == j)
        start()
    return results
