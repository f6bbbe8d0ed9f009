"""Batched, KV-cached generation for many agent episodes at once.

``KVEngine.generate(requests)`` answers one chat request per live episode with **one batched
forward per token** over all of them. Each request names a *slot* (e.g. ``(episode, "act")``);
a slot keeps the K/V of its last prompt, so the next turn of that episode only runs the tokens
after the longest common token prefix (an agent's prompt grows by one feedback line per turn: the
system prompt, the skill text and the earlier history are not recomputed). Rows of different
cached lengths share a batch through a custom 4-D mask (left padding, and padding between a row's
cache and its new tokens) and explicit position ids, so every row sees exactly the keys and RoPE
positions it would see alone. Finished rows (EOS or ``max_new_tokens``) leave the batch.

Decoding: greedy for ``temperature == 0`` (the same argmax as transformers' ``generate``); sampling
with a per-request ``torch.Generator`` seeded by the request's seed otherwise, so a request's
sample does not depend on which other requests share its batch. (It does differ from the sample
``LocalChat.chat`` draws for the same seed: transformers draws from the global RNG.)

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


class KVEngine:
    """Batched generation with per-slot prompt K/V caches over a HF causal LM (Llama-like).

    Args:
        model, eos_ids: the model and the token ids that end a reply.
        reuse: keep and reuse slot caches across calls (``False``: every prompt is run in full).
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
        self.dtype = next(model.parameters()).dtype
        self.tokens_computed = self.tokens_cached = self.forwards = 0
        import inspect

        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_kw = "logits_to_keep" in params

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

    def _best_prefix(self, q: GenRequest) -> tuple[_Slot | None, int]:
        """The cached prompt sharing the longest token prefix with ``q`` (own slot first)."""
        best, p = None, 0
        own = self.slots.get(q.slot) if q.slot is not None else None
        for s in ([own] if own is not None else []) + [
            *self.slots.values(), *reversed(self.retired.values())
        ]:
            n = _lcp(s.ids, q.ids)
            if n > p:
                best, p = s, n
        return best, min(p, len(q.ids) - 1)

    def _forward(self, inp, pos, mask, kv):
        from transformers import DynamicCache

        cache = DynamicCache(ddp_cache_data=kv) if kv is not None else DynamicCache()
        extra = {"logits_to_keep": 1} if self._keep_kw else {}  # never (B, T, vocab) logits
        out = self.model(
            input_ids=inp, position_ids=pos, attention_mask=mask, use_cache=True,
            **{self._cache_kw: cache}, **extra,
        )
        self.forwards += 1
        new_kv = [(layer.keys, layer.values) for layer in cache.layers]  # updated in place
        logits = out.logits[:, -1]
        return (logits.float() if logits.dtype in (torch.bfloat16, torch.float16) else logits), new_kv

    def _mask(self, valid: torch.Tensor, q: int) -> torch.Tensor:
        """Additive (B, 1, q, K) mask: key j visible to query i iff valid and j <= K - q + i,
        and always its own position (so a padding query never sees an empty row)."""
        B, K = valid.shape
        j = torch.arange(K, device=valid.device)
        i = torch.arange(q, device=valid.device)[:, None] + (K - q)
        allowed = (valid[:, None, :] & (j[None, None, :] <= i[None])) | (j == i)[None]
        m = torch.zeros(B, 1, q, K, dtype=self.dtype, device=valid.device)
        return m.masked_fill(~allowed[:, None], torch.finfo(self.dtype).min)

    def _pick(self, logits: torch.Tensor, reqs, gens) -> torch.Tensor:
        out = logits.argmax(-1)
        for r, req in enumerate(reqs):
            if req.temperature > 0:
                p = torch.softmax(logits[r] / req.temperature, -1)
                out[r] = torch.multinomial(p, 1, generator=gens[r])[0]
        return out

    def generate(self, requests: Sequence[GenRequest]) -> list[GenReply]:
        """One reply per request, in order; at most ``max_batch`` rows share a forward."""
        out = []
        for i in range(0, len(requests), self.max_batch):
            out += self._generate(requests[i : i + self.max_batch])
        return out

    @torch.inference_mode()
    def _generate(self, requests: Sequence[GenRequest]) -> list[GenReply]:
        if not requests:
            return []
        for q in requests:
            if not q.ids:
                raise UserError("empty prompt")
            if q.max_new_tokens < 1:
                raise UserError(f"max_new_tokens must be >= 1, got {q.max_new_tokens}")
        n = len(requests)
        cached, deltas, kvs = [], [], []
        for q in requests:
            s, p = self._best_prefix(q) if self.reuse else (None, 0)
            cached.append(p)
            deltas.append(q.ids[p:])
            kvs.append([(k[:, :p], v[:, :p]) for k, v in s.kv] if p else None)
        C, D = max(cached), max(len(d) for d in deltas)
        self.tokens_computed += sum(len(d) for d in deltas)
        self.tokens_cached += sum(cached)
        # layout per row: [pad C-p][cache p][pad D-d][delta d]
        inp = torch.zeros(n, D, dtype=torch.long)
        pos = torch.zeros(n, D, dtype=torch.long)
        valid = torch.zeros(n, C + D, dtype=torch.bool)
        for r, (p, d) in enumerate(zip(cached, deltas, strict=True)):
            inp[r, D - len(d) :] = torch.tensor(d)
            pos[r, D - len(d) :] = torch.arange(p, p + len(d))
            valid[r, C - p : C] = True
            valid[r, C + D - len(d) :] = True
        kv = None
        if C:
            layers = len(next(k for k in kvs if k is not None))
            ref = next(k for k in kvs if k is not None)[0][0]
            kv = []
            for layer in range(layers):
                ks = torch.zeros(n, ref.shape[0], C, ref.shape[2], dtype=ref.dtype, device=ref.device)
                vs = torch.zeros_like(ks)
                for r, rk in enumerate(kvs):
                    if rk is not None:
                        ks[r, :, C - cached[r] :] = rk[layer][0]
                        vs[r, :, C - cached[r] :] = rk[layer][1]
                kv.append((ks, vs))
        dev = self.device
        inp, pos, valid = inp.to(dev), pos.to(dev), valid.to(dev)
        logits, kv = self._forward(inp, pos, self._mask(valid, D), kv)
        if self.reuse:
            for r, q in enumerate(requests):
                if q.slot is not None:
                    keep = valid[r].nonzero().squeeze(1)
                    self.slots[q.slot] = _Slot(
                        list(q.ids), [(k[r][:, keep], v[r][:, keep]) for k, v in kv]
                    )
        gens = []
        for q in requests:
            g = None
            if q.temperature > 0:
                g = torch.Generator(device="cpu")
                g.manual_seed(int(q.seed) if q.seed is not None else 0)
            gens.append(g)
        out_ids: list[list[int]] = [[] for _ in range(n)]
        lps = [0.0] * n
        live = list(range(n))  # request index of each batch row
        nxt_pos = torch.tensor([len(q.ids) for q in requests], device=dev)
        while True:
            logp = torch.log_softmax(logits, -1)
            tok = self._pick(logits.cpu(), [requests[r] for r in live], [gens[r] for r in live])
            keep_rows = []
            for b, r in enumerate(live):
                t = int(tok[b])
                lps[r] += float(logp[b, t])
                out_ids[r].append(t)
                if t not in self.eos and len(out_ids[r]) < requests[r].max_new_tokens:
                    keep_rows.append(b)
            if not keep_rows:
                break
            idx = torch.tensor(keep_rows, device=dev)
            live = [live[b] for b in keep_rows]
            kv = [(k.index_select(0, idx), v.index_select(0, idx)) for k, v in kv]
            valid = torch.cat(
                [valid.index_select(0, idx), torch.ones(len(live), 1, dtype=torch.bool, device=dev)],
                1,
            )
            inp = tok.to(dev).index_select(0, idx)[:, None]
            pos = nxt_pos[live][:, None]
            nxt_pos[live] += 1
            logits, kv = self._forward(inp, pos, self._mask(valid, 1), kv)
        return [
            GenReply(ids, lp, len(d)) for ids, lp, d in zip(out_ids, lps, deltas, strict=True)
        ]


class BatchedLocalChat(LocalChat):
    """``LocalChat`` plus ``generate_batch``: many chat requests answered by one :class:`KVEngine`.

    ``chat`` (one request, no cache) stays transformers' ``generate``, the reference path.
    """

    def __init__(self, model=None, dtype: str = "bfloat16", device: str = "cpu", reuse: bool = True):
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
