import numpy as np
import pytest

from icml26.core.errors import UserError
from icml26.oserve.capacity import (
    Cluster,
    ReplicaConfig,
    check_placement,
    llama2_13b,
    llama2_70b,
    llama_30b,
    min_gpus,
    place,
    rate_table,
    replica_cost,
    replica_engine_config,
    unloaded_latency,
    valid_configs,
)
from icml26.oserve.search import Scorer, best_homogeneous, exhaustive, search
from icml26.oserve.workload import TYPE_LENGTHS, make_trace, mix_weights
from icml26.sim import Engine, FCFSQueue, simulate
from icml26.sim.cost import HardwareSpec
from icml26.sim.replica import ReplicaCost

H100 = HardwareSpec.h100()


def test_valid_configs_rules():
    cl = Cluster(2, 8, H100)
    cfgs = valid_configs(llama2_70b(), cl)
    assert all(64 % c.tp == 0 and c.tp <= 8 and 80 % c.pp == 0 for c in cfgs)
    assert min(c.gpus for c in cfgs) == 2  # 138 GB of weights
    assert min_gpus(llama2_70b(), cl) == 2
    with pytest.raises(UserError, match="at least 2 GPUs"):
        min_gpus(llama2_70b(), Cluster(1, 1, H100))


def test_replica_cost_is_the_sims_layout_model_and_pp_adds_latency():
    m, cl = llama2_13b(), Cluster(1, 4, H100)
    c1 = replica_cost(m, cl, ReplicaConfig(1, 1))
    assert isinstance(c1, ReplicaCost)
    assert c1.forward_time([1] * 8, [500] * 8) == pytest.approx(ReplicaCost(m, H100).forward_time([1] * 8, [500] * 8))
    c2 = replica_cost(m, cl, ReplicaConfig(1, 2))
    # one sequence: PP does not cut per-token latency (2 half-model stages >= one whole model)
    assert c2.forward_time([1], [500]) >= c1.forward_time([1], [500])
    # engine limits scale with KV capacity: the pp2 replica holds more and may batch more
    e1, e2 = replica_engine_config(c1), replica_engine_config(c2)
    assert e2.kv_tokens > e1.kv_tokens and e2.max_num_seqs >= e1.max_num_seqs
    assert replica_engine_config(c1, max_num_seqs=7).max_num_seqs == 7


def test_valid_configs_power_of_two_within_a_node():
    cl = Cluster(2, 8, H100)
    lays = {c.layout for c in valid_configs(llama_30b(), cl)}
    assert (1, 1) in lays and (4, 2) in lays  # 30B MHA: 1 to 8 GPUs
    assert all(t * p in (1, 2, 4, 8) for t, p in lays)
    assert (1, 3) in {c.layout for c in valid_configs(llama_30b(), cl, pow2=False)}
    assert max(c.gpus for c in valid_configs(llama2_70b(), cl, max_gpus=16)) == 16


def test_slo_caps_the_rate_and_zero_when_unreachable():
    cl, m = Cluster(1, 4, H100), llama2_13b()
    L = np.array([[256.0, 1024.0]])
    free = rate_table(m, cl, [ReplicaConfig(4, 1)], L)[0, 0]
    base = unloaded_latency(m, cl, L)
    capped = rate_table(m, cl, [ReplicaConfig(4, 1)], L, slo_s=1.5 * base)[0, 0]
    assert 0 < capped < free
    assert rate_table(m, cl, [ReplicaConfig(4, 1)], L, slo_s=0.5 * base)[0, 0] == 0.0


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
    recs = simulate(reqs, [Engine(replica_engine_config(cost), cost, FCFSQueue())])
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
