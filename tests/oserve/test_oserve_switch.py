from collections import defaultdict
from fractions import Fraction

import pytest

from icml26.oserve.capacity import Cluster, ReplicaConfig, llama2_70b, place
from icml26.oserve.switch import plan_switch
from icml26.sim.cost import HardwareSpec

CL = Cluster(2, 8, HardwareSpec.h100(), nvlink_GBps=400, net_GBps=50)
M = llama2_70b()


def test_every_target_shard_covered_once():
    src = place([ReplicaConfig(4, 1)] * 4, CL)
    dst = place([ReplicaConfig(8, 1), ReplicaConfig(2, 2), ReplicaConfig(2, 1), ReplicaConfig(1, 2)], CL)
    plan = plan_switch(src, dst, M, CL)
    area = defaultdict(Fraction)
    for t in plan.transfers:
        area[t.dst] += (t.layer_hi - t.layer_lo) * (t.col_hi - t.col_lo)
    own = {}  # the shard each GPU holds before the switch
    for r in src:
        for s in range(r.pp):
            for t in range(r.tp):
                own[r.gpu_ids[s * r.tp + t]] = (Fraction(s * M.n_layers, r.pp), Fraction((s + 1) * M.n_layers, r.pp),
                                                Fraction(t, r.tp), Fraction(t + 1, r.tp))
    for i in plan.changed_replicas:
        r = dst[i]
        for s in range(r.pp):
            for t in range(r.tp):
                g = r.gpu_ids[s * r.tp + t]
                l0, l1 = Fraction(s * M.n_layers, r.pp), Fraction((s + 1) * M.n_layers, r.pp)
                c0, c1 = Fraction(t, r.tp), Fraction(t + 1, r.tp)
                a0, a1, b0, b1 = own[g]
                held = max(min(l1, a1) - max(l0, a0), 0) * max(min(c1, b1) - max(c0, b0), 0)
                assert area[g] + held == (l1 - l0) * (c1 - c0)  # covered exactly once
    total = sum(t.nbytes for t in plan.transfers)
    assert total <= M.n_params * M.dtype_bytes * len(plan.changed_replicas)
    assert plan.seconds > 0


def test_prefers_intra_node_and_unchanged_is_free():
    src = place([ReplicaConfig(4, 1)] * 4, CL)
    assert plan_switch(src, src, M, CL).seconds == 0.0
    # merge the two tp4 replicas of node 0 into one tp8: every piece is on node 0 -> NVLink only
    dst = [ReplicaConfig(8, 1, tuple(range(8)))] + [r for r in src if r.gpu_ids[0] >= 8]
    plan = plan_switch(src, dst, M, CL)
    assert plan.changed_replicas == [0]
    assert plan.transfers and all(t.intra_node for t in plan.transfers)
    # tp8 GPU g needs columns [g/8, (g+1)/8); GPUs 0 and 7 already hold theirs, the 6 others fetch 1/8
    assert sum(t.nbytes for t in plan.transfers) == pytest.approx(M.n_params * M.dtype_bytes * 6 / 8, rel=1e-9)
    assert plan.seconds < 50.0
    assert plan_switch([], dst, M, CL, cold_reload_s=50.0).seconds == 50.0


def test_unplaced_rejected():
    with pytest.raises(ValueError, match="not placed"):
        plan_switch([ReplicaConfig(4, 1)], [ReplicaConfig(4, 1)], M, CL)
