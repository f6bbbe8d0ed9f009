"""TIE's waiting queue: a lazily-deleted min-heap on (aged score, arrival), fed by batched predictions.

Mechanics (following the official vLLM drop-in, see docs/tie.md):

- A new request enters at once with score ``x_max`` (it sorts last) and joins the *prediction
  queue*. A prediction batch fires when ``predict_batch`` requests are pending or the oldest has
  waited ``predict_wait_s``; its scores land ``predict_latency_s`` later (``score_fn(request,
  queue_len)`` is evaluated then, so TIE's adaptive beta sees the queue length of that moment).
- Aging against starvation: ``key = score * gamma ** (t_wait / tau_s)`` (gamma = 0.9, tau = 30 s);
  keys go stale between heap *rebuilds*, done every ``rebuild_s`` (5 s) of simulated time.
- Updates push a new heap entry with a bumped version; removal bumps the version; pop and peek
  skip stale entries (lazy deletion): O(log n) per operation.
- No preemption by score: a running request is never displaced by a better-scored arrival
  (:meth:`victim_key` only matters when the engine runs out of KV).

``gamma = 1`` disables aging; the same class with another ``score_fn`` serves SEPT, log-normal TIE
and the point-prediction baselines under an identical prediction pipeline.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

from icml26.sim.engine import Seq, WaitingQueue
from icml26.sim.trace import Request

__all__ = ["QueueConfig", "TIEQueue"]


@dataclass(frozen=True)
class QueueConfig:
    """Aging and prediction-pipeline parameters (defaults: the official code's)."""

    x_max: float = 2048
    gamma: float = 0.9
    tau_s: float = 30.0
    rebuild_s: float = 5.0
    predict_batch: int = 32
    predict_wait_s: float = 0.003
    predict_latency_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.x_max >= 1:
            raise ValueError(f"x_max must be >= 1; got {self.x_max}")
        if not 0 < self.gamma <= 1:
            raise ValueError(f"gamma must be in (0, 1]; got {self.gamma}")
        if not self.tau_s > 0:
            raise ValueError(f"tau_s must be > 0; got {self.tau_s}")
        if not self.rebuild_s > 0:
            raise ValueError(f"rebuild_s must be > 0; got {self.rebuild_s}")
        if self.predict_batch < 1:
            raise ValueError(f"predict_batch must be >= 1; got {self.predict_batch}")
        if self.predict_wait_s < 0 or self.predict_latency_s < 0:
            raise ValueError("predict_wait_s and predict_latency_s must be >= 0")


class TIEQueue(WaitingQueue):
    """``score_fn(request, queue_len) -> float`` gives a request's (un-aged) score; lower first."""

    def __init__(self, score_fn: Callable[[Request, int], float], config: QueueConfig = QueueConfig()):
        self.score_fn, self.cfg = score_fn, config
        self._heap: list = []
        self._live: dict[int, tuple[int, Seq]] = {}  # id(seq) -> (version, seq)
        self._score: dict[int, float] = {}  # id(seq) -> un-aged score (kept while running)
        self._ver = itertools.count()
        self._pending: list[tuple[float, Seq]] = []  # (enqueue time, seq) awaiting a batch
        self._inflight: list[tuple[float, list[Seq]]] = []  # (land time, batch)
        self._last_rebuild = -math.inf
        self.rebuilds = 0

    # ---- keys
    def _key(self, seq: Seq, now: float) -> float:
        s = self._score[id(seq)]
        if self.cfg.gamma == 1.0:
            return s
        return s * self.cfg.gamma ** (max(0.0, now - seq.req.arrival_s) / self.cfg.tau_s)

    def _push_entry(self, seq: Seq, now: float) -> None:
        v = next(self._ver)
        self._live[id(seq)] = (v, seq)
        heapq.heappush(self._heap, (self._key(seq, now), seq.req.arrival_s, v, seq))

    def _rebuild(self, now: float) -> None:
        self._heap = [(self._key(seq, now), seq.req.arrival_s, v, seq) for v, seq in self._live.values()]
        heapq.heapify(self._heap)
        self._last_rebuild = now
        self.rebuilds += 1

    def _advance(self, now: float) -> None:
        """Fire due prediction batches, land finished ones, rebuild if due."""
        cfg = self.cfg
        while self._pending:
            full = len(self._pending) >= cfg.predict_batch
            fire = (self._pending[cfg.predict_batch - 1][0] if full
                    else self._pending[0][0] + cfg.predict_wait_s)
            if fire > now:
                break
            batch = [s for _, s in self._pending[: cfg.predict_batch]]
            del self._pending[: cfg.predict_batch]
            self._inflight.append((fire + cfg.predict_latency_s, batch))
        if self._inflight:
            keep = []
            for land, batch in self._inflight:
                if land > now:
                    keep.append((land, batch))
                    continue
                qlen = len(self._live)
                for seq in batch:
                    self._score[id(seq)] = float(self.score_fn(seq.req, qlen))
                    if id(seq) in self._live:
                        self._push_entry(seq, now)  # the old entry becomes stale
            self._inflight = keep
        if now - self._last_rebuild >= cfg.rebuild_s:
            self._rebuild(now)

    def _clean(self) -> None:
        h = self._heap
        while h:
            _, _, v, seq = h[0]
            live = self._live.get(id(seq))
            if live is not None and live[0] == v:
                return
            heapq.heappop(h)

    # ---- WaitingQueue API
    def push(self, seq: Seq, now: float) -> None:
        self._advance(now)
        self._score[id(seq)] = float(self.cfg.x_max)
        self._push_entry(seq, now)
        self._pending.append((now, seq))

    def push_preempted(self, seq: Seq, now: float) -> None:
        self._advance(now)
        if id(seq) not in self._score:
            self._score[id(seq)] = float(self.cfg.x_max)
        self._push_entry(seq, now)

    def peek(self, now: float) -> Seq:
        self._advance(now)
        self._clean()
        if not self._heap:
            raise IndexError("peek from an empty queue")
        return self._heap[0][3]

    def pop(self, now: float) -> Seq:
        seq = self.peek(now)
        heapq.heappop(self._heap)
        del self._live[id(seq)]
        return seq

    def remove(self, seq: Seq) -> None:
        """Drop a waiting sequence (e.g. an aborted request)."""
        self._live.pop(id(seq), None)
        self._score.pop(id(seq), None)

    def __len__(self) -> int:
        return len(self._live)

    def victim_key(self, seq: Seq):
        return (self._score.get(id(seq), self.cfg.x_max), seq.req.arrival_s)
