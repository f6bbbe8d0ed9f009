"""vLLM glue for TIE (vLLM itself is not needed to import this module).

Two routes:

- *Non-invasive* (``--scheduling-policy priority``): compute the TIE score in a router/proxy and
  send it as the request's integer ``priority`` (lower runs first; ties by arrival).
  :func:`priority_for` gives the integer, :func:`openai_payload` a chat-completions body. vLLM's
  priority is static per request, so there is no aging on this route.
- *Native* (``scheduler_cls`` / a replaced waiting queue): :class:`TIEWaitingQueue` implements the
  request-queue methods of vLLM V1's ``RequestQueue`` (``add_request``, ``pop_request``,
  ``peek_request``, ``prepend_request(s)``, ``remove_request(s)``, ``__len__``, ``__bool__``,
  ``__iter__``, ``__reversed__``) over a lazily-deleted heap on (aged score, arrival_time), with
  TIE's aging and periodic rebuild. ``score_of(request)`` supplies the un-aged score (e.g. a
  sidecar predictor's :func:`~icml26.tie.score.tie_score`); requests need ``arrival_time``.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Iterable, Iterator

from icml26.tie.score import tie_score

__all__ = ["priority_for", "openai_payload", "TIEWaitingQueue"]


def priority_for(mu: float, sigma: float, queue_len: int = 0, max_num_seqs: int = 32, x_max: int = 2048,
                 alpha: float = 0.9, nu: float = 3.5) -> int:
    """The integer TIE score of one request, usable as vLLM's ``priority`` (lower first)."""
    return int(tie_score(mu, sigma, queue_len, max_num_seqs, x_max, alpha, nu))


def openai_payload(prompt: str, mu: float, sigma: float, model: str | None = None, max_tokens: int = 2048,
                   queue_len: int = 0, max_num_seqs: int = 32, **extra) -> dict:
    """A ``/v1/chat/completions`` body carrying the TIE priority (x_max = ``max_tokens``)."""
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": int(max_tokens),
            "priority": priority_for(mu, sigma, queue_len, max_num_seqs, max_tokens)}
    if model is not None:
        body["model"] = model
    return body | extra


class TIEWaitingQueue:
    """A drop-in waiting queue for vLLM V1's scheduler, ordered by TIE's aged score."""

    def __init__(self, score_of: Callable[[object], float], gamma: float = 0.9, tau_s: float = 30.0,
                 rebuild_s: float = 5.0, clock: Callable[[], float] = time.time):
        if not 0 < gamma <= 1 or tau_s <= 0 or rebuild_s <= 0:
            raise ValueError(f"need 0 < gamma <= 1, tau_s > 0, rebuild_s > 0; got {gamma}, {tau_s}, {rebuild_s}")
        self.score_of, self.gamma, self.tau_s, self.rebuild_s, self.clock = score_of, gamma, tau_s, rebuild_s, clock
        self._heap: list = []
        self._live: dict[int, tuple[int, object]] = {}
        self._front: list = []  # prepended (preempted) requests, served first, in order
        self._ver = itertools.count()
        self._last = clock()

    def _key(self, req, now):
        wait = max(0.0, now - float(req.arrival_time))
        return float(self.score_of(req)) * self.gamma ** (wait / self.tau_s)

    def _maybe_rebuild(self):
        now = self.clock()
        if now - self._last >= self.rebuild_s:
            self._heap = [(self._key(r, now), r.arrival_time, v, r) for v, r in self._live.values()]
            heapq.heapify(self._heap)
            self._last = now

    def _clean(self):
        while self._heap:
            _, _, v, r = self._heap[0]
            live = self._live.get(id(r))
            if live is not None and live[0] == v:
                return
            heapq.heappop(self._heap)

    def add_request(self, request) -> None:
        v = next(self._ver)
        self._live[id(request)] = (v, request)
        heapq.heappush(self._heap, (self._key(request, self.clock()), request.arrival_time, v, request))

    def prepend_request(self, request) -> None:
        self._front.insert(0, request)

    def prepend_requests(self, requests: Iterable) -> None:
        self._front[:0] = list(requests)

    def peek_request(self):
        if self._front:
            return self._front[0]
        self._maybe_rebuild()
        self._clean()
        if not self._heap:
            raise IndexError("peek from an empty queue")
        return self._heap[0][3]

    def pop_request(self):
        if self._front:
            return self._front.pop(0)
        req = self.peek_request()
        heapq.heappop(self._heap)
        del self._live[id(req)]
        return req

    def remove_request(self, request) -> None:
        if any(r is request for r in self._front):
            self._front = [r for r in self._front if r is not request]
        else:
            self._live.pop(id(request), None)

    def remove_requests(self, requests: Iterable) -> None:
        for r in requests:
            self.remove_request(r)

    def __len__(self) -> int:
        return len(self._front) + len(self._live)

    def __bool__(self) -> bool:
        return len(self) > 0

    def _ordered(self) -> list:
        now = self.clock()
        rest = sorted(self._live.values(), key=lambda vr: (self._key(vr[1], now), vr[1].arrival_time, vr[0]))
        return list(self._front) + [r for _, r in rest]

    def __iter__(self) -> Iterator:
        return iter(self._ordered())

    def __reversed__(self) -> Iterator:
        return reversed(self._ordered())
