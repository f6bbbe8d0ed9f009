"""TIE's vLLM waiting queue against the request-queue contract vLLM 0.33's scheduler relies on.

vLLM is not installable here (it pulls a CUDA torch), so the contract is written down from its
scheduler's call sites (``vllm/v1/core/sched/scheduler.py``): ``add_request`` for arrivals,
``peek_request``/``pop_request`` in the admission loop, ``prepend_request`` for a KV-pressure
preemption, ``prepend_requests(deque)`` for requests popped and skipped in a step (the deque is
built with ``appendleft``), ``remove_requests`` for aborts, ``len``/``bool``/iteration.
"""

from __future__ import annotations

import math
import time
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.tie.vllm import TIEWaitingQueue, install_tie_queue, score_from_env, tie_scheduler_class


class _Req:
    def __init__(self, rid, arrival, priority):
        self.request_id, self.arrival_time, self.priority = rid, arrival, priority

    def __repr__(self):
        return f"R{self.request_id}"


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class _Reference:
    """Brute force: preempted requests first (newest first), then queued ones by (aged score,
    arrival, insertion)."""

    def __init__(self, gamma, tau):
        self.gamma, self.tau, self.front, self.live, self.n = gamma, tau, [], {}, 0

    def add(self, r):
        self.n += 1
        self.live[id(r)] = (self.n, r)

    def order(self, now):
        def key(vr):
            v, r = vr
            return (r.priority * self.gamma ** (max(0.0, now - r.arrival_time) / self.tau), r.arrival_time, v)
        return list(self.front) + [r for _, r in sorted(self.live.values(), key=key)]

    def pop(self, now):
        r = self.order(now)[0]
        if self.front and self.front[0] is r:
            self.front.pop(0)
        else:
            del self.live[id(r)]
        return r

    def remove(self, r):
        if any(x is r for x in self.front):
            self.front = [x for x in self.front if x is not r]
        else:
            self.live.pop(id(r), None)


_ops = st.lists(st.tuples(st.sampled_from(["add", "add", "pop", "skip", "preempt", "remove", "tick"]),
                          st.integers(0, 40), st.integers(0, 5)), min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(_ops, st.sampled_from([1.0, 0.9, 0.5]))
def test_queue_matches_brute_force_under_the_scheduler_call_pattern(ops, gamma):
    clock, tau = _Clock(), 3.0
    q = TIEWaitingQueue(lambda r: r.priority, gamma=gamma, tau_s=tau, rebuild_s=1e-9, clock=clock)
    ref, popped, rid = _Reference(gamma, tau), [], 0
    for op, a, b in ops:
        clock.t += 0.25  # every call sees a later clock, so every peek rebuilds the aged keys
        if op == "add":
            r = _Req(rid, clock.t - 0.1 * b, a)
            rid += 1
            q.add_request(r)
            ref.add(r)
        elif op == "pop" and ref.order(clock.t):
            want = ref.pop(clock.t)
            assert q.peek_request() is want
            assert q.pop_request() is want
            popped.append(want)
        elif op == "skip" and ref.order(clock.t):
            # one admission step that pops k requests and skips them all (vLLM: appendleft into a
            # deque, then waiting.prepend_requests(deque)); skipped requests keep their place
            before = ref.order(clock.t)
            skipped: deque = deque()
            for _ in range(min(1 + b, len(before))):
                skipped.appendleft(q.pop_request())
            for r in skipped:
                ref.remove(r)
                ref.add(r)
            q.prepend_requests(skipped)
            assert [x.request_id for x in q] == [x.request_id for x in ref.order(clock.t)]
        elif op == "preempt" and popped:
            r = popped.pop(a % len(popped))
            q.prepend_request(r)
            ref.front.insert(0, r)
            assert q.peek_request() is r
        elif op == "remove" and ref.order(clock.t):
            cur = ref.order(clock.t)
            gone = [cur[a % len(cur)]] + ([cur[b % len(cur)]] if b % 2 else [])
            q.remove_requests(gone)
            for r in gone:
                ref.remove(r)
        elif op == "tick":
            clock.t += a  # long waits: aging reorders the queue
        want = ref.order(clock.t)
        assert len(q) == len(want) and bool(q) == bool(want)
        assert [x.request_id for x in q] == [x.request_id for x in want]
        assert [x.request_id for x in reversed(q)] == [x.request_id for x in reversed(want)]
    while ref.order(clock.t):
        assert q.pop_request() is ref.pop(clock.t)
    with pytest.raises(IndexError):
        q.peek_request()
    with pytest.raises(IndexError):
        q.pop_request()


def test_aging_order_follows_the_closed_form_crossover():
    # key = score * gamma^(wait / tau). An old request (score 100, arrival 0) against a newer one
    # (score 50, arrival t): old first iff 100 gamma^(now/tau) < 50 gamma^((now - t)/tau), i.e. iff
    # t > w = tau ln 2 / ln(1/gamma) = 197.4 s, at every later time `now`.
    w = 30 * math.log(2) / math.log(1 / 0.9)
    for t, first in ((w - 1.0, "new"), (w + 1.0, "old")):
        clock = _Clock()
        q = TIEWaitingQueue(lambda r: r.priority, clock=clock, rebuild_s=1e-9)
        q.add_request(_Req("old", 0.0, 100))
        clock.t = t
        q.add_request(_Req("new", t, 50))
        for now in (t, t + 5.0, t + 500.0):
            clock.t = now
            assert q.peek_request().request_id == first, (t, now)


def test_bad_scores_are_refused_with_the_request_named():
    q = TIEWaitingQueue(lambda r: r.priority, clock=lambda: 0.0)
    with pytest.raises(ValueError, match="'neg'.*>= 0"):
        q.add_request(_Req("neg", 0.0, -3))
    with pytest.raises(ValueError, match="'nan'"):
        q.add_request(_Req("nan", 0.0, float("nan")))
    assert len(q) == 0


class _FakeFCFS(deque):
    def add_request(self, r):
        self.append(r)


class _FakeScheduler:
    """The part of vLLM's ``Scheduler.__init__`` that matters: it builds ``self.waiting``."""

    def __init__(self, vllm_config, kv_cache_config=None, **kwargs):
        self.vllm_config, self.kwargs = vllm_config, kwargs
        self.waiting = _FakeFCFS()
        self.waiting.add_request(_Req("early", time.time(), 900))  # vLLM stamps time.time()


def test_scheduler_subclass_installs_the_queue_and_keeps_queued_requests(monkeypatch):
    monkeypatch.setenv("ICML26_TIE_GAMMA", "0.5")
    cls = tie_scheduler_class(_FakeScheduler)
    assert issubclass(cls, _FakeScheduler) and cls.__name__ == "TIE_FakeScheduler"
    s = cls("cfg", None, block_size=16)
    assert s.vllm_config == "cfg" and s.kwargs == {"block_size": 16}
    assert isinstance(s.waiting, TIEWaitingQueue) and s.waiting.gamma == 0.5
    s.waiting.add_request(_Req("short", time.time(), 10))
    assert [r.request_id for r in s.waiting] == ["short", "early"]


def test_install_refuses_a_scheduler_without_a_waiting_queue():
    with pytest.raises(TypeError, match="no 'waiting' queue"):
        install_tie_queue(object())
    with pytest.raises(ValueError, match="ICML26_TIE_TAU_S='soon'"):
        install_tie_queue(_FakeScheduler("cfg"), env={"ICML26_TIE_TAU_S": "soon"})


def test_score_from_env():
    r = _Req("x", 0.0, 7)
    assert score_from_env({})(r) == 7 and score_from_env({"ICML26_TIE_SCORE": "priority"})(r) == 7
    assert score_from_env({"ICML26_TIE_SCORE": "math:sqrt"}) is math.sqrt
    with pytest.raises(ValueError, match="module:function"):
        score_from_env({"ICML26_TIE_SCORE": "nocolon"})
    with pytest.raises(ValueError, match="cannot import 'nope' from 'math'"):
        score_from_env({"ICML26_TIE_SCORE": "math:nope"})


def test_real_vllm_scheduler_classes_when_vllm_is_installed():
    sched = pytest.importorskip("vllm.v1.core.sched.scheduler", reason="vLLM not installed (CUDA-only wheel)")
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    from icml26.tie.vllm_scheduler import TIEAsyncScheduler, TIEScheduler

    assert issubclass(TIEScheduler, sched.Scheduler) and issubclass(TIEAsyncScheduler, AsyncScheduler)
    assert TIEScheduler.__init__ is not sched.Scheduler.__init__
