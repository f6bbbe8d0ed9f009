import numpy as np
import pytest

from icml26.sim import (
    Engine,
    EngineConfig,
    FCFSQueue,
    HardwareSpec,
    LinearCost,
    ModelSpec,
    PriorityQueue,
    Request,
    RooflineCost,
    simulate,
    summarize,
    synthetic_trace,
)
from icml26.sim.engine import LeastLoadedRouter
from icml26.sim.metrics import over_seeds, time_to_finish


@pytest.mark.parametrize("skip", [True, False])
def test_hand_computed_three_request_timeline(skip):
    # every step costs exactly 1 s
    cost = LinearCost(a=1.0, b_new=0.0)
    reqs = [Request("A", 0.0, 4, 3), Request("B", 0.0, 2, 1), Request("C", 0.5, 1, 2)]
    eng = Engine(EngineConfig(max_num_seqs=2, skip_ahead=skip), cost, FCFSQueue())
    recs = {r.id: r for r in simulate(reqs, eng)}
    assert (recs["B"].first_token_s, recs["B"].finish_s) == (1.0, 1.0)
    assert (recs["A"].first_token_s, recs["A"].finish_s) == (1.0, 3.0)
    assert (recs["C"].first_token_s, recs["C"].finish_s) == (2.0, 3.0)
    assert recs["C"].ptla_s == pytest.approx(2.5 / 2)
    assert recs["C"].ttft_s == pytest.approx(1.5)
    assert eng.steps == 3


def test_ptla_definition_and_summary():
    cost = LinearCost(a=0.5, b_new=0.0)
    recs = simulate([Request(0, 0.0, 3, 4)], Engine(EngineConfig(), cost, FCFSQueue()))
    (r,) = recs
    assert r.finish_s == pytest.approx(4 * 0.5)  # prefill step + 3 decode steps
    s = summarize(recs)
    assert s["ptla_mean"] == pytest.approx(r.e2e_s / 4)
    assert s["tpot_mean"] == pytest.approx(0.5)
    assert time_to_finish(recs, 1) == pytest.approx(2.0)


def test_chunked_prefill_budget():
    cost = LinearCost(a=1.0, b_new=0.0)
    eng = Engine(EngineConfig(max_num_batched_tokens=4), cost, FCFSQueue())
    (r,) = simulate([Request(0, 0.0, 10, 1)], eng)
    assert r.first_token_s == 3.0  # 4 + 4 + 2 tokens of prefill


def _trace(n=300, seed=0):
    return synthetic_trace(n, rate=40.0, seed=seed)


def test_skip_ahead_matches_step_by_step_with_preemption():
    cost = RooflineCost(ModelSpec.llama3_8b(), HardwareSpec.h100())
    cfg = dict(max_num_seqs=16, kv_tokens=8192, max_num_batched_tokens=2048)
    out = []
    for skip in (True, False):
        eng = Engine(EngineConfig(skip_ahead=skip, **cfg), cost, FCFSQueue())
        out.append([(r.id, r.first_token_s, r.finish_s, r.preemptions) for r in simulate(_trace(), eng)])
        assert eng.used_blocks == 0 and not eng.running
    assert len(out[0]) == 300
    a, b = np.array([x[1:] for x in out[0]]), np.array([x[1:] for x in out[1]])
    np.testing.assert_allclose(a, b, rtol=1e-9)
    assert a[:, 2].sum() > 0  # KV pressure made preemptions happen


def test_kv_never_oversubscribed_and_conserved():
    cost = LinearCost(a=0.01, b_new=1e-5)
    eng = Engine(EngineConfig(max_num_seqs=32, kv_tokens=4096, block_size=16, skip_ahead=False), cost,
                 PriorityQueue(lambda r: r.output_tokens))
    reqs = [r for r in sorted(_trace(200, seed=3), key=lambda r: r.arrival_s)
            if r.prompt_tokens + r.output_tokens <= 4000]
    for r in reqs:
        eng.run_until(r.arrival_s)
        assert 0 <= eng.used_blocks <= eng.total_blocks
        assert eng.used_blocks == sum(s.blocks for s in eng.running)
        eng.add(r, r.arrival_s)
    eng.run_until(float("inf"))
    assert eng.used_blocks == 0 and len(eng.records) == len(reqs) > 150
    assert sum(r.preemptions for r in eng.records) > 0
    assert sum(r.output_tokens for r in eng.records) == sum(r.output_tokens for r in reqs)


def test_request_too_big_for_kv_is_rejected():
    eng = Engine(EngineConfig(kv_tokens=64), LinearCost(1.0, 0.0), FCFSQueue())
    with pytest.raises(ValueError, match="KV blocks"):
        eng.add(Request(0, 0.0, 60, 10), 0.0)


def test_router_spreads_over_engines():
    cost = LinearCost(a=0.01, b_new=0.0)
    engines = [Engine(EngineConfig(), cost, FCFSQueue(), index=i) for i in range(3)]
    recs = simulate(_trace(90), engines, LeastLoadedRouter())
    counts = np.bincount([r.engine for r in recs], minlength=3)
    assert counts.sum() == 90 and counts.min() > 10


def test_config_validation():
    with pytest.raises(ValueError, match="max_num_seqs"):
        EngineConfig(max_num_seqs=0)


def test_over_seeds_ci_contains_mean():
    s = over_seeds([1.0, 2.0, 3.0])
    assert s["ci_lo"] < 2.0 < s["ci_hi"] and s["min"] == 1.0 and s["max"] == 3.0
