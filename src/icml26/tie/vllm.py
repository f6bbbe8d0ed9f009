"""vLLM glue for TIE (vLLM itself is not needed to import this module).

Two routes:

- *Non-invasive* (``--scheduling-policy priority``): compute the TIE score in a router/proxy and
  send it as the request's integer ``priority`` (lower runs first; ties by arrival).
  :func:`priority_for` gives the integer, :func:`openai_payload` a chat-completions body. vLLM's
  priority is static per request, so there is no aging on this route.
- *Native* (``--scheduler-cls icml26.tie.vllm_scheduler.TIEAsyncScheduler``, or
  ``...TIEScheduler`` without async scheduling): the subclass calls :func:`install_tie_queue`,
  which swaps the scheduler's ``waiting`` queue for a :class:`TIEWaitingQueue`. That queue
  implements the methods vLLM V1's scheduler calls on ``RequestQueue`` (``add_request``,
  ``pop_request``, ``peek_request``, ``prepend_request(s)``, ``remove_request(s)``, ``__len__``,
  ``__bool__``, ``__iter__``, ``__reversed__``) over a lazily-deleted heap on (aged score,
  arrival_time), with TIE's aging and periodic rebuild. ``score_of(request)`` supplies the un-aged
  score; by default it is the request's ``priority``, which a router sets to
  :func:`priority_for` of its predictor sidecar's (mu, sigma), so the native route is the
  non-invasive one plus aging. ``ICML26_TIE_SCORE=module:function`` names another scorer (for
  example an in-process predictor reading ``request.prompt_token_ids``).

Semantics relied on by vLLM 0.33's scheduler (checked against its source; the tests encode them):
``prepend_request`` is the preemption path (a KV-pressure victim goes back first, as under FCFS);
``prepend_requests`` returns requests the scheduler popped and skipped this step (LoRA limits,
async KV loads), which re-enter by their score and original arrival, as under vLLM's priority
queue, so a skipped request neither jumps the queue nor loses its aging.
"""

from __future__ import annotations

import heapq
import importlib
import itertools
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator

from icml26.tie.score import tie_score

__all__ = ["priority_for", "openai_payload", "TIEWaitingQueue", "install_tie_queue", "score_from_env",
           "tie_scheduler_class"]


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
        score = float(self.score_of(req))
        if not (math.isfinite(score) and score >= 0):
            # aging multiplies by gamma^t < 1: a negative score would age *away* from the front
            raise ValueError(f"TIE score of request {getattr(req, 'request_id', req)!r} must be finite "
                             f"and >= 0; got {score}")
        wait = max(0.0, now - float(req.arrival_time))
        return score * self.gamma ** (wait / self.tau_s)

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
        key = self._key(request, self.clock())  # first: a refused score leaves the queue as it was
        v = next(self._ver)
        self._live[id(request)] = (v, request)
        heapq.heappush(self._heap, (key, request.arrival_time, v, request))

    def prepend_request(self, request) -> None:
        """A preempted request: it runs before every queued one (newest preemption first)."""
        self._front.insert(0, request)

    def prepend_requests(self, requests: Iterable) -> None:
        """Requests popped and skipped this step: each re-enters by its (aged) score."""
        for r in list(requests):
            self.add_request(r)

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


def score_from_env(env: dict | None = None) -> Callable[[object], float]:
    """The scorer named by ``ICML26_TIE_SCORE``: unset or ``priority`` reads ``request.priority``;
    ``module:function`` imports ``function(request) -> float``."""
    spec = (env if env is not None else os.environ).get("ICML26_TIE_SCORE", "priority").strip()
    if spec in ("", "priority"):
        return lambda r: r.priority
    mod, sep, fn = spec.partition(":")
    if not sep or not mod or not fn:
        raise ValueError(f"ICML26_TIE_SCORE={spec!r}: use 'priority' or 'module:function'")
    try:
        return getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"ICML26_TIE_SCORE={spec!r}: cannot import {fn!r} from {mod!r} ({e})") from e


def _env_float(env: dict, name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError as e:
        raise ValueError(f"{name}={raw!r} is not a number") from e


def install_tie_queue(scheduler, score_of: Callable[[object], float] | None = None,
                      env: dict | None = None, **queue_kwargs) -> TIEWaitingQueue:
    """Replace ``scheduler.waiting`` by a :class:`TIEWaitingQueue`, keeping any queued requests.

    ``score_of`` defaults to :func:`score_from_env`; ``gamma``, ``tau_s`` and ``rebuild_s`` default
    to ``ICML26_TIE_GAMMA`` / ``ICML26_TIE_TAU_S`` / ``ICML26_TIE_REBUILD_S`` or the paper's 0.9,
    30 s, 5 s. The queue of requests holding KV blocks (vLLM >= 0.33 ``kv_holding_waiting``) is
    left as it is: those requests are drained first whatever the policy.
    """
    env = env if env is not None else os.environ
    for name, var, default in (("gamma", "ICML26_TIE_GAMMA", 0.9), ("tau_s", "ICML26_TIE_TAU_S", 30.0),
                               ("rebuild_s", "ICML26_TIE_REBUILD_S", 5.0)):
        queue_kwargs.setdefault(name, _env_float(env, var, default))
    queue = TIEWaitingQueue(score_of or score_from_env(env), **queue_kwargs)
    old = getattr(scheduler, "waiting", None)
    if old is None:
        raise TypeError(f"{type(scheduler).__name__} has no 'waiting' queue to replace")
    for r in list(old):
        queue.add_request(r)
    scheduler.waiting = queue
    return queue


def tie_scheduler_class(base: type) -> type:
    """A subclass of a vLLM scheduler class whose ``waiting`` queue is TIE's (see
    :mod:`icml26.tie.vllm_scheduler` for the ready-made ones)."""

    def __init__(self, *args, **kwargs):
        base.__init__(self, *args, **kwargs)
        install_tie_queue(self)

    return type(f"TIE{base.__name__}", (base,), {"__init__": __init__, "__module__": __name__,
                                                  "__doc__": f"{base.__name__} with TIE's waiting queue."})
