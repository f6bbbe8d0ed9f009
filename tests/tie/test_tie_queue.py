import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.sim import Engine, EngineConfig, LinearCost, Request, simulate
from icml26.sim.engine import Seq
from icml26.tie.queue import QueueConfig, TIEQueue
from icml26.tie.vllm import TIEWaitingQueue, openai_payload, priority_for

INSTANT = dict(predict_batch=1, predict_wait_s=0.0, predict_latency_s=0.0)


def _seq(i, t, score):
    return Seq(Request(i, t, 1, 1, meta={"score": score}))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 50), st.floats(0, 100)), min_size=1, max_size=40),
       st.lists(st.integers(0, 39), max_size=10))
def test_heap_matches_sorted_list(items, removals):
    q = TIEQueue(lambda r, n: r.meta["score"], QueueConfig(gamma=1.0, **INSTANT))
    seqs = [_seq(i, t, s) for i, (s, t) in enumerate(items)]
    for s in seqs:
        q.push(s, 200.0)
    gone = {i for i in removals if i < len(seqs)}
    for i in gone:
        q.remove(seqs[i])
    expected = sorted((s for s in seqs if s.req.id not in gone), key=lambda s: (s.req.meta["score"], s.req.arrival_s))
    out = [q.pop(200.0) for _ in range(len(q))]
    assert [s.req.id for s in out] == [s.req.id for s in expected]
    with pytest.raises(IndexError):
        q.pop(200.0)


def test_aging_prevents_starvation():
    q = TIEQueue(lambda r, n: r.meta["score"], QueueConfig(**INSTANT))
    old = _seq("old", 0.0, 1000)
    q.push(old, 0.0)
    q.push(_seq("new", 300.0, 100), 300.0)
    assert q.peek(300.0).req.id == "new"  # 1000 * 0.9**10 = 349 > 100
    assert q.pop(300.0).req.id == "new"
    # a fresh arrival at t = 700 s with score 100: the old one has aged to 1000 * 0.9**(700/30) = 86
    q.push(_seq("fresh", 700.0, 100), 700.0)
    assert q.peek(700.0).req.id == "old"
    # without aging the old request would starve behind every shorter newcomer
    q2 = TIEQueue(lambda r, n: r.meta["score"], QueueConfig(gamma=1.0, **INSTANT))
    q2.push(_seq("old", 0.0, 1000), 0.0)
    q2.push(_seq("fresh", 700.0, 100), 700.0)
    assert q2.peek(700.0).req.id == "fresh"


def test_rebuild_period_keeps_keys_stale_in_between():
    q = TIEQueue(lambda r, n: r.meta["score"], QueueConfig(rebuild_s=1000.0, **INSTANT))
    q.push(_seq("old", 0.0, 1000), 0.0)
    q.push(_seq("new", 1.0, 100), 1.0)
    assert q.peek(700.0).req.id == "new"  # no rebuild yet: the old key is still its t=0 value
    assert q.rebuilds == 1


def test_new_requests_wait_at_xmax_until_prediction_lands():
    cfg = QueueConfig(x_max=2048, predict_batch=4, predict_wait_s=0.01, predict_latency_s=0.5, gamma=1.0)
    q = TIEQueue(lambda r, n: r.meta["score"], cfg)
    q.push(_seq("a", 0.0, 3000), 0.0)  # predicted long, but scored x_max meanwhile
    q.push(_seq("b", 0.1, 5), 0.1)
    assert q.peek(0.2).req.id == "a"  # both at x_max: arrival order
    assert q.peek(0.7).req.id == "b"  # b's batch fired at 0.11 and landed at 0.61
    assert q.victim_key(q.peek(0.7)) == (5.0, 0.1)


def test_score_sees_queue_length_at_landing():
    seen = []
    q = TIEQueue(lambda r, n: seen.append(n) or 1.0, QueueConfig(predict_batch=3, predict_wait_s=1.0))
    for i in range(3):
        q.push(_seq(i, 0.0, 1), 0.0)
    len(q), q.peek(0.0)
    assert seen == [3, 3, 3]


def test_queue_config_validation():
    with pytest.raises(ValueError, match="gamma"):
        QueueConfig(gamma=0.0)
    with pytest.raises(ValueError, match="x_max"):
        QueueConfig(x_max=0)


def test_engine_with_tie_queue_serves_short_first():
    cost = LinearCost(a=1.0, b_new=0.0)
    reqs = [Request(0, 0.0, 1, 5, meta={"score": 0})] + [
        Request(i, 0.1, 1, 20 - i, meta={"score": 20 - i}) for i in range(1, 4)]
    eng = Engine(EngineConfig(max_num_seqs=1), cost,
                 TIEQueue(lambda r, n: r.meta["score"], QueueConfig(**INSTANT)))
    recs = simulate(reqs, eng)
    order = [r.id for r in sorted(recs, key=lambda r: r.finish_s)]
    assert order == [0, 3, 2, 1]


class _VReq:
    def __init__(self, rid, t, priority=0):
        self.request_id, self.arrival_time, self.priority = rid, t, priority


def test_vllm_adapter_queue_and_payload():
    assert priority_for(4.0, 0.5) < priority_for(6.0, 0.5)
    body = openai_payload("hi", mu=4.0, sigma=0.5, model="m", max_tokens=64)
    assert body["priority"] == priority_for(4.0, 0.5, x_max=64) and body["max_tokens"] == 64
    q = TIEWaitingQueue(score_of=lambda r: r.priority, clock=lambda: 0.0)
    a, b, c = _VReq("a", 0.0, 50), _VReq("b", 1.0, 5), _VReq("c", 2.0, 7)
    for r in (a, b, c):
        q.add_request(r)
    assert len(q) == 3 and q.peek_request() is b
    q.remove_request(b)
    assert q.pop_request() is c and bool(q)
    q.prepend_request(b)
    assert [r.request_id for r in q] == ["b", "a"]
    assert q.pop_request() is b and q.pop_request() is a and not q
    with pytest.raises(IndexError):
        q.pop_request()
    assert math.isfinite(priority_for(100.0, 3.0))


def test_cli_simulate_on_azure_and_burstgpt(tmp_path):
    from typer.testing import CliRunner

    from icml26.sim import synthetic_trace, write_trace
    from icml26.tie.cli import app

    tr = synthetic_trace(120, rate=30, seed=0)
    for schema in ("azure", "burstgpt"):
        p = write_trace(tmp_path / f"{schema}.csv", tr, schema=schema)
        res = CliRunner().invoke(app, ["simulate", "--trace", str(p), "--policy", "tie", "--limit", "100"])
        assert res.exit_code == 0, res.output
        assert "100 requests" in res.output and "ptla_mean" in res.output
    res = CliRunner().invoke(app, ["simulate", "--trace", str(p), "--policy", "nope"])
    assert res.exit_code != 0 and "unknown policy" in str(res.exception)
