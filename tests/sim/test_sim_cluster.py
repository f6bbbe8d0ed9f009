"""sim.cluster: a fleet whose deployment changes — drain and cold switching, held arrivals."""

from __future__ import annotations

import numpy as np
import pytest

from icml26.sim import Engine, EngineConfig, FCFSQueue, simulate
from icml26.sim.cluster import Deployment, simulate_cluster
from icml26.sim.cost import LinearCost
from icml26.sim.engine import LeastLoadedRouter, Router
from icml26.sim.trace import Request

COST = LinearCost(a=0.01, b_new=1e-4, c_ctx=1e-6)


def _engine(i=0):
    return Engine(EngineConfig(max_num_seqs=8, kv_tokens=20_000), COST, FCFSQueue(), index=i)


def _requests(n=200, rate=20.0, seed=0):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, n))
    return [Request(i, float(t[i]), int(rng.integers(50, 400)), int(rng.integers(10, 120)))
            for i in range(n)]


def _dep(keys, ready=None, gpus=None, router=None):
    return Deployment(list(keys), lambda i: _engine(), router or Router(), ready or {},
                      gpus or {})


def _key(recs):
    return [(r.id, round(r.first_token_s, 9), round(r.finish_s, 9)) for r in recs]


def test_one_deployment_equals_simulate():
    reqs = _requests()
    ref = simulate(reqs, [_engine(0), _engine(1)], Router())
    got, events = simulate_cluster(reqs, [(0.0, _dep(["a", "b"]))])
    assert _key(got) == _key(ref) and events == []


def test_switch_to_the_same_replicas_changes_nothing():
    reqs = _requests()
    ref, _ = simulate_cluster(reqs, [(0.0, _dep(["a", "b"]))])
    got, events = simulate_cluster(reqs, [(0.0, _dep(["a", "b"])), (3.0, _dep(["a", "b"]))])
    assert _key(got) == _key(ref)
    assert [e.kind for e in events] == ["switch"]


@pytest.mark.parametrize("mode", ["drain", "cold"])
def test_every_request_finishes_once_after_its_arrival(mode):
    reqs = _requests(300, rate=40.0)
    sched = [(0.0, _dep(["a", "b"], gpus={"a": frozenset({0}), "b": frozenset({1})})),
             (2.0, _dep(["a", "c"], ready={"c": 1.5}, gpus={"a": frozenset({0}),
                                                           "c": frozenset({1})}))]
    recs, events = simulate_cluster(reqs, sched, mode=mode)
    assert sorted(r.id for r in recs) == list(range(300))
    assert all(r.first_token_s >= r.arrival_s and r.finish_s >= r.first_token_s for r in recs)
    ready = [e for e in events if e.kind == "ready" and e.key == "c"]
    assert len(ready) == 1 and ready[0].time_s >= 2.0 + 1.5
    if mode == "drain":
        drained = [e for e in events if e.kind == "drained"]
        assert len(drained) == 1 and ready[0].time_s >= drained[0].time_s  # shares GPU 1
        # requests b was serving at the switch finished on b (started before the switch)
        on_b = [r for r in recs if r.engine == 1]
        assert on_b and all(r.first_token_s <= 2.0 + 1e-9 or r.arrival_s < 2.0 for r in on_b)
    else:
        assert any(e.kind == "aborted" for e in events)


def test_cold_reload_of_everything_holds_arrivals_until_ready():
    reqs = _requests(100, rate=20.0)
    sched = [(0.0, _dep(["a"])), (2.0, _dep(["z"], ready={"z": 50.0}))]
    recs, events = simulate_cluster(reqs, sched, mode="cold")
    assert len(recs) == 100
    late = [r for r in recs if r.arrival_s >= 2.0]
    assert late and all(r.first_token_s >= 52.0 for r in late)
    # the drained (live) switch to a disjoint replica set never stops serving
    live, _ = simulate_cluster(reqs, [(0.0, _dep(["a"], gpus={"a": frozenset({0})})),
                                      (2.0, _dep(["z"], ready={"z": 50.0},
                                                 gpus={"z": frozenset({1})}))], mode="drain")
    assert len(live) == 100
    assert np.mean([r.e2e_s for r in live]) < np.mean([r.e2e_s for r in recs])


def test_fallback_to_least_loaded_while_a_replica_comes_up():
    class Always0(Router):
        def route(self, req, engines, now):
            return 0

    reqs = _requests(100, rate=20.0)
    sched = [(0.0, _dep(["a", "b"], router=LeastLoadedRouter())),
             (1.0, _dep(["new", "b"], ready={"new": 2.0}, router=Always0()))]
    recs, _ = simulate_cluster(reqs, sched, mode="cold")
    window = [r for r in recs if 1.0 <= r.arrival_s < 3.0]
    assert window and all(r.engine == 1 for r in window)  # "new" not up: b serves them
    after = [r for r in recs if r.arrival_s >= 3.5]
    assert after and all(r.engine == 2 for r in after)  # then the router's choice


def test_bad_schedules():
    with pytest.raises(ValueError, match="increase"):
        simulate_cluster([], [(1.0, _dep(["a"])), (0.5, _dep(["a"]))])
    with pytest.raises(ValueError, match="mode"):
        simulate_cluster([], [(0.0, _dep(["a"]))], mode="hot")
    with pytest.raises(ValueError, match="unique"):
        _dep(["a", "a"])
