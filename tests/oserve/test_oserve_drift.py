"""oserve.drift: counts become a trace faithfully; switching schedules follow the plans."""

from __future__ import annotations

import numpy as np
import pytest

from icml26.oserve.capacity import Cluster, llama2_13b
from icml26.oserve.drift import DriftSetting, _keys, _schedule, counts_to_trace
from icml26.oserve.search import Scorer, search
from icml26.sim.cost import HardwareSpec


def test_counts_to_trace_keeps_every_count_in_its_minute():
    counts = np.array([[3, 0], [1, 5], [0, 2]])
    trace = counts_to_trace(counts, 2, seed=1, t0_min=10)
    assert len(trace) == counts.sum()
    got = np.zeros_like(counts)
    for r in trace:
        m = int(r.arrival_s // 60) - 10
        got[m, int(r.type)] += 1
    np.testing.assert_array_equal(got, counts)
    assert [r.arrival_s for r in trace] == sorted(r.arrival_s for r in trace)
    assert len({r.id for r in trace}) == len(trace)


def test_setting_validation():
    with pytest.raises(ValueError, match="multiple"):
        DriftSetting(window_min=100, interval_min=15)


def test_schedule_switches_only_when_replicas_change():
    model, cluster = llama2_13b(), Cluster(1, 4, HardwareSpec.h100())
    lengths = np.array([[256, 64], [2048, 1024]], float)
    a = search(Scorer(model, cluster, lengths, np.array([2.0, 0.1])), seed=0)
    b = Scorer(model, cluster, lengths, np.array([0.1, 2.0])).plan([(1, 1)] * 4)
    sched = _schedule([a, a, b], [0.0, 60.0, 120.0], model, cluster, "cold", 50.0)
    assert [t for t, _ in sched] == [0.0, 60.0, 120.0]
    assert sched[1][1].keys == sched[0][1].keys and sched[1][1].ready_s == {}
    if _keys(a) != _keys(b):
        assert set(sched[2][1].ready_s.values()) == {50.0}
    live = _schedule([a, b], [0.0, 60.0], model, cluster, "drain", 50.0)
    if _keys(a) != _keys(b):
        assert all(v < 50.0 for v in live[1][1].ready_s.values())  # peer-to-peer beats reload
