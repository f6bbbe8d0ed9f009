"""A vLLM-V1-like continuously batching engine, as a discrete-event simulation.

One :meth:`Engine.step` is one forward pass. Scheduling follows vLLM V1's unified scheduler:

1. Running sequences first, in admission order: a sequence that still has uncached tokens gets
   ``min(uncached, token budget)`` of them (chunked prefill), a decoding one gets 1. When the paged
   KV cache (``kv_blocks`` blocks of ``block_size`` tokens) cannot hold a sequence's new tokens,
   the running sequence with the largest :meth:`WaitingQueue.victim_key` is preempted by
   *recompute*: its KV is freed, it goes back to the waiting queue, and later re-prefills its
   prompt plus the tokens it had generated.
2. If nothing was preempted, waiting sequences are admitted in the queue's order while there is a
   free slot (``max_num_seqs``), token budget (``max_num_batched_tokens``) and KV for their first
   chunk; the head of the queue blocks the rest (no skipping).

A sequence emits its next token at the end of any step that leaves all its known tokens
(``prompt + generated``) cached; its first token sets TTFT and its last sets the finish time.
Iteration time comes from a cost model (:mod:`icml26.sim.cost`). Stretches of decode-only steps
in which nothing can change the batch are skipped in closed form (``decode_run_time``), which
keeps 10^5-request simulations to seconds.

The waiting order is a pluggable :class:`WaitingQueue` (FCFS, a static priority, or TIE's aged
score in :mod:`icml26.tie.queue`). :func:`simulate` runs one or more engines on one clock; a
:class:`Router` picks the engine for each arrival.
"""

from __future__ import annotations

import heapq
import itertools
import math
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from icml26.core.errors import UserError
from icml26.sim.trace import Request

__all__ = ["EngineConfig", "Seq", "WaitingQueue", "FCFSQueue", "PriorityQueue", "Engine", "Router",
           "LeastLoadedRouter", "RequestRecord", "simulate"]


@dataclass(frozen=True)
class EngineConfig:
    """Engine limits, vLLM names. ``kv_tokens``: KV capacity in tokens (None = unlimited).

    ``oversize``: what :meth:`Engine.add` does with a request whose prompt + output cannot fit the
    whole KV cache: ``"error"`` (default) raises a :class:`~icml26.core.errors.UserError` naming
    the request; ``"drop"`` refuses it as vLLM does (the engine keeps serving) and keeps it in
    ``Engine.rejected`` so the caller can count and report it.
    """

    max_num_seqs: int = 32
    max_num_batched_tokens: int = 8192
    kv_tokens: int | None = None
    block_size: int = 16
    skip_ahead: bool = True
    oversize: str = "error"

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1; got {self.max_num_seqs}")
        if self.max_num_batched_tokens < 1:
            raise ValueError(f"max_num_batched_tokens must be >= 1; got {self.max_num_batched_tokens}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1; got {self.block_size}")
        if self.kv_tokens is not None and self.kv_tokens < self.block_size:
            raise ValueError(f"kv_tokens must be >= block_size; got {self.kv_tokens}")
        if self.oversize not in ("error", "drop"):
            raise ValueError(f"oversize must be 'error' or 'drop'; got {self.oversize!r}")

    @classmethod
    def scaled(cls, kv_tokens: int, *, context_tokens: int = 2048, seq_cap: int = 1024,
               token_cap: int = 8192, token_floor: int = 2048, **fields) -> EngineConfig:
        """The limits an operator sets for a replica that holds ``kv_tokens`` KV tokens.

        ``max_num_seqs = clamp(kv_tokens // context_tokens, 1, seq_cap)``: as many sequences as
        the cache holds at a typical ``context_tokens`` (prompt + output), capped at vLLM's
        default for 80 GB-class GPUs (1024). ``max_num_batched_tokens = max(max_num_seqs,
        clamp(kv_tokens // 8, token_floor, token_cap))``: vLLM's server defaults are 2048
        (smaller GPUs) and 8192 (>= 70 GiB), and one step's chunk should not take more than an
        eighth of the cache. Any field (``max_num_seqs=``, ``max_num_batched_tokens=``,
        ``block_size=``, ...) given in ``fields`` overrides the rule.
        """
        if kv_tokens < 1:
            raise ValueError(f"kv_tokens must be >= 1; got {kv_tokens}")
        if context_tokens < 1:
            raise ValueError(f"context_tokens must be >= 1; got {context_tokens}")
        seqs = fields.pop("max_num_seqs", None) or min(max(kv_tokens // context_tokens, 1), seq_cap)
        budget = fields.pop("max_num_batched_tokens", None) or max(
            seqs, min(max(kv_tokens // 8, token_floor), token_cap))
        return cls(max_num_seqs=int(seqs), max_num_batched_tokens=int(budget), kv_tokens=int(kv_tokens), **fields)


class Seq:
    """The engine's state of one request (mutable). ``computed``: tokens in the KV cache."""

    __slots__ = ("req", "generated", "computed", "blocks", "first_token_s", "finish_s", "admitted_s",
                 "preemptions", "order", "enqueued_s")

    def __init__(self, req: Request):
        self.req = req
        self.generated = 0
        self.computed = 0
        self.blocks = 0
        self.first_token_s: float | None = None
        self.finish_s: float | None = None
        self.admitted_s: float | None = None
        self.preemptions = 0
        self.order = 0
        self.enqueued_s = req.arrival_s

    @property
    def known(self) -> int:
        return self.req.prompt_tokens + self.generated

    @property
    def id(self):
        return self.req.id


class WaitingQueue(ABC):
    """The waiting-queue policy. Methods get ``now`` (simulated seconds) for time-aware orders."""

    @abstractmethod
    def push(self, seq: Seq, now: float) -> None:
        """Add a newly arrived sequence."""

    def push_preempted(self, seq: Seq, now: float) -> None:
        """Re-add a preempted sequence (default: like a new one)."""
        self.push(seq, now)

    @abstractmethod
    def peek(self, now: float) -> Seq:
        """The next sequence to admit; IndexError when empty."""

    @abstractmethod
    def pop(self, now: float) -> Seq:
        """Remove and return :meth:`peek`'s sequence; IndexError when empty."""

    @abstractmethod
    def __len__(self) -> int: ...

    def victim_key(self, seq: Seq):
        """Preemption picks the running sequence with the largest key (default: last admitted)."""
        return seq.order


class FCFSQueue(WaitingQueue):
    """First come, first served; preempted sequences go back to the front (as in vLLM)."""

    def __init__(self):
        self._q: deque[Seq] = deque()

    def push(self, seq, now):
        self._q.append(seq)

    def push_preempted(self, seq, now):
        self._q.appendleft(seq)

    def peek(self, now):
        if not self._q:
            raise IndexError("peek from an empty queue")
        return self._q[0]

    def pop(self, now):
        if not self._q:
            raise IndexError("pop from an empty queue")
        return self._q.popleft()

    def __len__(self):
        return len(self._q)


class PriorityQueue(WaitingQueue):
    """A static priority: lower ``key(request)`` first, ties by arrival (vLLM ``priority``)."""

    def __init__(self, key: Callable[[Request], float]):
        self.key = key
        self._h: list = []
        self._tie = itertools.count()

    def push(self, seq, now):
        heapq.heappush(self._h, (self.key(seq.req), seq.req.arrival_s, next(self._tie), seq))

    def peek(self, now):
        if not self._h:
            raise IndexError("peek from an empty queue")
        return self._h[0][3]

    def pop(self, now):
        if not self._h:
            raise IndexError("pop from an empty queue")
        return heapq.heappop(self._h)[3]

    def __len__(self):
        return len(self._h)

    def victim_key(self, seq):
        return (self.key(seq.req), seq.req.arrival_s)


@dataclass(frozen=True)
class RequestRecord:
    """What happened to one request (seconds on the simulated clock)."""

    id: int | str
    arrival_s: float
    first_token_s: float
    finish_s: float
    prompt_tokens: int
    output_tokens: int
    preemptions: int
    engine: int
    type: str | None = None

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        return self.finish_s - self.arrival_s

    @property
    def ptla_s(self) -> float:
        """Per-token latency: end-to-end latency / output tokens (the TIE paper's PTLA)."""
        return self.e2e_s / self.output_tokens


class Engine:
    """One engine replica. ``cost``: any object with ``forward_time`` and ``decode_run_time``."""

    def __init__(self, config: EngineConfig, cost, queue: WaitingQueue, index: int = 0):
        self.config, self.cost, self.queue, self.index = config, cost, queue, index
        self.clock = 0.0
        self.running: list[Seq] = []
        self.total_blocks = (math.inf if config.kv_tokens is None else config.kv_tokens // config.block_size)
        self.used_blocks = 0
        self.records: list[RequestRecord] = []
        self.rejected: list[Request] = []  # requests refused because they cannot fit the KV cache
        self.steps = 0
        self._order = itertools.count()

    # ---- bookkeeping
    def _blocks_for(self, seq: Seq, n_new: int) -> int:
        return -(-(seq.computed + n_new) // self.config.block_size) - seq.blocks

    def _free(self, seq: Seq) -> None:
        self.used_blocks -= seq.blocks
        seq.blocks = 0
        seq.computed = 0

    def has_work(self) -> bool:
        return bool(self.running) or len(self.queue) > 0

    def add(self, req: Request, now: float) -> None:
        """A request arrives at ``now`` (the engine must not be ahead of ``now`` by more than a step).

        A request whose prompt + output tokens exceed the whole KV cache is refused
        (``EngineConfig.oversize``): a UserError naming it, or kept in :attr:`rejected`."""
        cfg = self.config
        need = -(-(req.prompt_tokens + req.output_tokens) // cfg.block_size)
        if need > self.total_blocks:
            if cfg.oversize == "drop":
                self.rejected.append(req)
                return
            raise UserError(
                f"request {req.id!r} needs {req.prompt_tokens} + {req.output_tokens} = "
                f"{req.prompt_tokens + req.output_tokens} KV tokens ({need} KV blocks of {cfg.block_size}), "
                f"more than engine {self.index}'s whole cache ({cfg.kv_tokens} tokens, {self.total_blocks} blocks); "
                f"use a layout with more KV, or EngineConfig(oversize='drop') to refuse such requests and "
                f"count them in Engine.rejected")
        if not self.has_work():
            self.clock = max(self.clock, now)
        self.queue.push(Seq(req), now)

    # ---- one step
    def step(self) -> None:
        cfg, now = self.config, self.clock
        budget = cfg.max_num_batched_tokens
        sched: dict[Seq, int] = {}
        preempted = False
        i = 0
        bs, total = cfg.block_size, self.total_blocks
        running = self.running
        while i < len(running) and budget > 0:
            seq = running[i]
            c = seq.computed
            n = seq.req.prompt_tokens + seq.generated - c  # uncached known tokens (seq.known - computed)
            if n > budget:
                n = budget
            need = -(-(c + n) // bs) - seq.blocks
            if need <= 0 or need <= total - self.used_blocks:  # fast path: fits (no preemption)
                if need > 0:
                    self.used_blocks += need
                    seq.blocks += need
                sched[seq] = n
                budget -= n
                i += 1
                continue
            while need > self.total_blocks - self.used_blocks:
                victim = max(self.running, key=self.queue.victim_key)
                vi = self.running.index(victim)
                self.running.pop(vi)
                if vi < i:
                    i -= 1
                if victim in sched:
                    budget += sched.pop(victim)
                self._free(victim)
                victim.preemptions += 1
                self.queue.push_preempted(victim, now)
                preempted = True
                if victim is seq:
                    break
                need = self._blocks_for(seq, n)
            else:
                self.used_blocks += need
                seq.blocks += need
                sched[seq] = n
                budget -= n
                i += 1
                continue
            # seq itself was preempted: running[i] is now the next sequence
        if not preempted:
            while len(self.queue) and len(self.running) < cfg.max_num_seqs and budget > 0:
                seq = self.queue.peek(now)
                n = min(seq.known - seq.computed, budget)
                need = self._blocks_for(seq, n)
                if need > self.total_blocks - self.used_blocks:
                    break
                self.queue.pop(now)
                self.used_blocks += need
                seq.blocks += need
                seq.order = next(self._order)
                if seq.admitted_s is None:
                    seq.admitted_s = now
                self.running.append(seq)
                sched[seq] = n
                budget -= n
        if not sched:
            raise RuntimeError("engine step scheduled nothing: a request cannot fit the KV cache")
        dt = self.cost.forward_time(list(sched.values()), [s.computed for s in sched])
        self.clock = now + dt
        self.steps += 1
        for seq, n in sched.items():
            seq.computed += n
            if seq.computed == seq.req.prompt_tokens + seq.generated:  # all known tokens cached
                self._emit(seq, 1)

    def _emit(self, seq: Seq, k: int) -> None:
        seq.generated += k
        if seq.first_token_s is None:
            seq.first_token_s = self.clock
        if seq.generated >= seq.req.output_tokens:
            seq.finish_s = self.clock
            self.running.remove(seq)
            self.used_blocks -= seq.blocks
            seq.blocks = 0
            r = seq.req
            self.records.append(RequestRecord(r.id, r.arrival_s, seq.first_token_s, seq.finish_s,
                                              r.prompt_tokens, r.output_tokens, seq.preemptions,
                                              self.index, r.type))

    # ---- skipping decode-only stretches
    def _skip(self, until: float) -> bool:
        """Advance ``k >= 2`` decode-only steps at once when nothing can change the batch before
        the last of them ends; returns whether it did."""
        run = self.running
        if not run or any(s.req.prompt_tokens + s.generated - s.computed != 1 for s in run):
            return False
        cfg = self.config
        if len(self.queue) and len(run) < cfg.max_num_seqs:
            head = self.queue.peek(self.clock)
            if self._blocks_for(head, min(head.known, cfg.max_num_batched_tokens)) <= self.total_blocks - self.used_blocks:
                return False  # the head could be admitted now
        if len(run) > cfg.max_num_batched_tokens:
            return False
        k = min(s.req.output_tokens - s.generated for s in run)  # steps until the first finish
        ctx = np.array([s.computed for s in run])
        if math.isfinite(self.total_blocks):
            bs = cfg.block_size
            held = np.array([s.blocks for s in run])
            free = self.total_blocks - self.used_blocks

            def fits(j):  # KV after j steps
                return int((-(-(ctx + j) // bs) - held).clip(min=0).sum()) <= free
            if not fits(k):
                lo, hi = 0, k  # largest j with fits(j)
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
                k = lo
        if math.isfinite(until):
            room = until - self.clock
            if self.cost.decode_run_time(ctx, k) > room:
                lo, hi = 1, k  # smallest j whose run reaches `until`
                while lo < hi:
                    mid = (lo + hi) // 2
                    lo, hi = (lo, mid) if self.cost.decode_run_time(ctx, mid) >= room else (mid + 1, hi)
                k = lo
        if k < 2:
            return False
        self.clock += self.cost.decode_run_time(ctx, k)
        self.steps += k
        bs = cfg.block_size
        for s in list(run):
            s.computed += k  # k tokens cached; the k-th emitted one is not (decode state)
            nb = -(-s.computed // bs) - s.blocks
            if nb > 0:
                s.blocks += nb
                self.used_blocks += nb
            self._emit(s, k)
        return True

    def run_until(self, t: float) -> None:
        """Step while the engine has work and its clock is before ``t``."""
        while self.has_work() and self.clock < t:
            if not (self.config.skip_ahead and self._skip(t)):
                self.step()


class Router:
    """Chooses the engine of each arrival. Default: round robin."""

    def __init__(self):
        self._next = 0

    def route(self, req: Request, engines: Sequence[Engine], now: float) -> int:
        i = self._next % len(engines)
        self._next += 1
        return i


class LeastLoadedRouter(Router):
    """The engine with the fewest running + waiting requests (ties: lowest index)."""

    def route(self, req, engines, now):
        return min(range(len(engines)), key=lambda i: (len(engines[i].running) + len(engines[i].queue), i))


def simulate(requests: Sequence[Request], engines: Engine | Sequence[Engine],
             router: Router | None = None, horizon_s: float = math.inf) -> list[RequestRecord]:
    """Replay ``requests`` (any order; sorted by arrival here) through ``engines`` on one clock.

    Every engine is advanced to each arrival time before the router sees the engines' state.
    Returns the records of requests that finished before ``horizon_s``, sorted by id. Requests
    refused for not fitting an engine's KV cache (``EngineConfig(oversize="drop")``) have no
    record; they are in each engine's ``rejected`` list.
    """
    engines = [engines] if isinstance(engines, Engine) else list(engines)
    if not engines:
        raise ValueError("simulate needs at least one engine")
    router = router or Router()
    for req in sorted(requests, key=lambda r: r.arrival_s):
        if req.arrival_s > horizon_s:
            break
        for e in engines:
            e.run_until(req.arrival_s)
        i = router.route(req, engines, req.arrival_s)
        if not 0 <= i < len(engines):
            raise ValueError(f"router returned engine {i}; have {len(engines)}")
        engines[i].add(req, req.arrival_s)
    for e in engines:
        e.run_until(horizon_s)
    recs = [r for e in engines for r in e.records if r.finish_s <= horizon_s]
    return sorted(recs, key=lambda r: (str(type(r.id)), r.id))
