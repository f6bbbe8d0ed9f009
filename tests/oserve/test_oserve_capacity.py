import numpy as np
import pytest

from icml26.core.errors import UserError
from icml26.oserve.capacity import (
    Cluster,
    ReplicaConfig,
    check_placement,
    llama2_13b,
    llama2_70b,
    min_gpus,
    place,
    rate_table,
    replica_cost,
    valid_configs,
)
from icml26.oserve.search import Scorer, best_homogeneous, exhaustive, search
from icml26.oserve.workload import TYPE_LENGTHS, make_trace, mix_weights
from icml26.sim import Engine, EngineConfig, FCFSQueue, simulate
from icml26.sim.cost import HardwareSpec, RooflineCost

H100 = HardwareSpec.h100()


def test_valid_configs_rules():
    cl = Cluster(2, 8, H100)
    cfgs = valid_configs(llama2_70b(), cl)
    assert all(64 % c.tp == 0 and c.tp <= 8 and 80 % c.pp == 0 for c in cfgs)
    assert min(c.gpus for c in cfgs) == 2  # 138 GB of weights
    assert min_gpus(llama2_70b(), cl) == 2
    with pytest.raises(UserError, match="at least 2 GPUs"):
        min_gpus(llama2_70b(), Cluster(1, 1, H100))


def test_pipeline_cost_pp1_is_roofline_and_pp_adds_latency():
    m = llama2_13b()
    base = RooflineCost(m, H100, 1, 1)
    c1 = replica_cost(m, Cluster(1, 4, H100), ReplicaConfig(1, 1))
    assert c1.forward_time([1] * 8, [500] * 8) == pytest.approx(base.forward_time([1] * 8, [500] * 8))
    c2 = replica_cost(m, Cluster(1, 4, H100), ReplicaConfig(1, 2))
    # one sequence: PP does not cut per-token latency (2 half-model stages ~ one whole model)
    assert c2.forward_time([1], [500]) >= 0.95 * base.forward_time([1], [500])
    # closed-form k decode steps = step-by-step sum
    ctx = [300, 700, 1200]
    steps = sum(c2.forward_time([1] * 3, [c + i for c in ctx]) for i in range(5))
    assert c2.decode_run_time(ctx, 5) == pytest.approx(steps, rel=1e-9)


def test_place_each_gpu_once_stage_in_node():
    cl = Cluster(2, 8, H100)
    placed = place([ReplicaConfig(4, 2), ReplicaConfig(4, 1), ReplicaConfig(2, 1), ReplicaConfig(1, 2)], cl)
    assert placed is not None
    check_placement(placed, cl, llama2_70b())
    ids = [g for r in placed for g in r.gpu_ids]
    assert len(ids) == len(set(ids)) == 16
    assert place([ReplicaConfig(8, 1)] * 3, cl) is None


def test_check_placement_errors():
    cl, m = Cluster(2, 8, H100), llama2_70b()
    with pytest.raises(UserError, match="used twice"):
        check_placement([ReplicaConfig(2, 1, (0, 1)), ReplicaConfig(2, 1, (1, 2))], cl, m)
    with pytest.raises(UserError, match="out of range"):
        check_placement([ReplicaConfig(2, 1, (15, 16))], cl, m)
    with pytest.raises(UserError, match="spans nodes"):
        check_placement([ReplicaConfig(2, 1, (7, 8))], cl, m)
    with pytest.raises(UserError, match="tp=3 does not divide Llama-2-70B's 64 attention heads"):
        check_placement([ReplicaConfig(3, 1, (0, 1, 2))], cl, m)
    with pytest.raises(UserError, match="replica 0: pp=3 does not divide Llama-2-70B's 80 layers"):
        check_placement([ReplicaConfig(1, 3, (0, 1, 2))], cl, m)
    with pytest.raises(UserError, match=r"replica 1: tp=1 pp=1 \(1 x H100.*cannot hold Llama-2-70B's 138 GB"):
        check_placement([ReplicaConfig(4, 1, (0, 1, 2, 3)), ReplicaConfig(1, 1, (4,))], cl, m)


@pytest.mark.parametrize("lay,j", [((1, 1), 1), ((1, 1), 3), ((2, 1), 2), ((1, 2), 3), ((1, 1), 0)])
def test_rate_table_matches_simulated_saturation(lay, j):
    """The planner's rate is within 15% of one replica's simulated saturation throughput."""
    cl, m = Cluster(1, 4, H100), llama2_13b()
    L = np.array([TYPE_LENGTHS[j][1:]], dtype=float)
    n = rate_table(m, cl, [ReplicaConfig(*lay)], L)[0, 0]
    w = np.eye(4)[j]
    reqs = make_trace(400, 3 * n, w, seed=1)  # 3x overload: the engine saturates
    cost = replica_cost(m, cl, ReplicaConfig(*lay))
    recs = simulate(reqs, [Engine(EngineConfig(256, kv_tokens=cost.kv_capacity_tokens()), cost, FCFSQueue())])
    f = np.sort([r.finish_s for r in recs])
    sat = (len(f) // 2) / (f[3 * len(f) // 4] - f[len(f) // 4])  # steady middle half
    assert sat == pytest.approx(n, rel=0.15)


def test_search_equals_exhaustive_on_4_gpus():
    cl, m = Cluster(1, 4, H100), llama2_13b()
    L = np.array([t[1:] for t in TYPE_LENGTHS], dtype=float)
    for seed in range(3):
        sc = Scorer(m, cl, L, mix_weights(4, 0.6, seed) * 10)
        ex = exhaustive(sc)
        s = search(sc, start=[(4, 1)], seed=seed)  # from the worst start
        assert s.score == pytest.approx(ex.score, rel=1e-6)
        assert best_homogeneous(sc).score <= ex.score + 1e-9


def test_search_finds_constructed_bottleneck():
    # only long/long traffic on 13B: one tp4 replica is KV-rich, but four tp1 hold 4 copies of weights
    cl, m = Cluster(1, 4, H100), llama2_13b()
    sc = Scorer(m, cl, np.array([[256.0, 64.0]]), np.array([50.0]))
    start = [(1, 1), (1, 1), (1, 2)]
    s = search(sc, start=start, seed=0)
    assert s.score > sc(start) * 1.01
    assert s.score == pytest.approx(exhaustive(sc).score, rel=1e-6)


def test_mix_weights_cv():
    for cv in (0.0, 0.1, 0.5, 0.7):
        w = mix_weights(4, cv, 3)
        assert w.sum() == pytest.approx(1) and w.std() / w.mean() == pytest.approx(cv, abs=1e-12)
    with pytest.raises(ValueError, match="mix cv"):
        mix_weights(4, 0.9, 0)
