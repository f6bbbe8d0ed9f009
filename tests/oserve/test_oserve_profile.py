"""oserve.capacity.Profile: measured iteration times replace the roofline in rates, search and CLI."""
import csv
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from icml26.core.errors import UserError
from icml26.oserve.capacity import (
    Cluster,
    Profile,
    ReplicaConfig,
    llama2_13b,
    rate_table,
    replica_cost,
    replica_engine_config,
    valid_configs,
)
from icml26.oserve.cli import app
from icml26.oserve.search import Scorer, best_homogeneous, exhaustive, search
from icml26.oserve.workload import make_trace, mix_weights
from icml26.sim.cost import HardwareSpec, LinearCost
from icml26.sim.replica import ReplicaCost
from icml26.sim.trace import write_trace

# tp=1 computes cheaply per GPU but reads context slowly; tp=2 reads context 20x faster
C1 = LinearCost(a=0.008, b_new=6e-5, c_ctx=4e-8)
C2 = LinearCost(a=0.004, b_new=5e-5, c_ctx=2e-9)
TYPES = np.array([[2000.0, 50.0], [100.0, 800.0]])  # long-in/short-out, short-in/long-out


def _rows(tp, cost, seed, n=12):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        b = int(rng.integers(1, 256))
        new = int(rng.integers(b, 4096))
        ctx = int(rng.integers(0, 200_000))
        t = cost.forward_time([new - b + 1] + [1] * (b - 1), [ctx] + [0] * (b - 1))
        out.append({"tp": tp, "pp": 1, "new_tokens": new, "num_seqs": b, "context_tokens": ctx, "time_s": t})
    return out


def _profile():
    return Profile.from_rows(_rows(1, C1, 0) + _rows(2, C2, 1))


def test_profile_recovers_each_layouts_coefficients():
    p = _profile()
    assert sorted(p.costs) == [(1, 1), (2, 1)]
    for lay, true in (((1, 1), C1), ((2, 1), C2)):
        got = p.costs[lay]
        np.testing.assert_allclose([got.a, got.b_new, got.c_ctx], [true.a, true.b_new, true.c_ctx], rtol=1e-6)
        assert got.b_seq < 1e-12


def test_rate_table_uses_the_measured_cost():
    """A type whose KV-bound batch admits m = b/O < 1 prompt per step: a fraction m of the steps
    carries one whole prompt, so t = m * t(decode + prompt) + (1 - m) * t(decode) and n = m / t."""
    cl = Cluster(1, 4, HardwareSpec.h100())
    p = _profile()
    n = rate_table(llama2_13b(), cl, [ReplicaConfig(1, 1)], TYPES[:1], profile=p)[0, 0]
    i_len, o_len = TYPES[0]
    cost = replica_cost(llama2_13b(), cl, ReplicaConfig(1, 1), profile=p)
    ec = replica_engine_config(cost)  # the layout's scaled limits, as the engines run
    kv = ReplicaCost(llama2_13b(), cl.gpu, 1, 1).kv_capacity_tokens() * 0.85
    assert cost.kv_capacity_tokens() == ReplicaCost(llama2_13b(), cl.gpu, 1, 1).kv_capacity_tokens()
    b = min(ec.max_num_seqs, kv / (i_len + o_len / 2), ec.max_num_batched_tokens / (1 + i_len / o_len))
    m = b / o_len
    assert m < 1
    bi, ctx = round(b), int(i_len + o_len / 2)
    c = p.costs[(1, 1)]
    t_dec = c.a + (c.b_new + c.b_seq) * bi + c.c_ctx * bi * (ctx + 1)
    t_pre = t_dec + c.b_new * i_len + c.b_seq + c.c_ctx * i_len
    assert n == pytest.approx(m / (m * t_pre + (1 - m) * t_dec), rel=1e-9)


def test_measured_profile_makes_a_heterogeneous_plan_win():
    """Per GPU, tp=1 serves the long-input type better and tp=2 the long-output type: the search
    finds the mixed deployment exhaustive search finds, and it beats every uniform one."""
    cl = Cluster(1, 4, HardwareSpec.h100())
    sc = Scorer(llama2_13b(), cl, TYPES, np.array([1.0, 1.0]), profile=_profile())
    assert {c.layout for c in valid_configs(llama2_13b(), cl, profile=sc.profile)} == {(1, 1), (2, 1)}
    homo, ours, ex = best_homogeneous(sc), search(sc, seed=0), exhaustive(sc)
    assert {r.layout for r in ex.replicas} == {(1, 1), (2, 1)}
    assert ours.describe() == ex.describe()
    assert ours.score > homo.score * 1.03
    assert all(r.layout in sc.profile.costs for p in (homo, ours) for r in p.replicas)


def test_bad_profiles_name_the_problem(tmp_path):
    with pytest.raises(UserError, match="not found"):
        Profile.from_csv(tmp_path / "missing.csv")
    f = tmp_path / "p.csv"
    f.write_text("tensor_parallel,pp,new_tokens,num_seqs,context_tokens,time_s\n1,1,10,1,0,0.01\n")
    with pytest.raises(UserError, match=r"p.csv row 2: missing column\(s\) \['tp'\]"):
        Profile.from_csv(f)
    f.write_text("tp,pp,new_tokens,num_seqs,context_tokens,time_s\n1,1,10,1,0,0.01\nx,1,10,1,0,0.01\n")
    with pytest.raises(UserError, match=r"p.csv row 3: need integer columns tp, pp"):
        Profile.from_csv(f)
    f.write_text("tp,pp,new_tokens,num_seqs,context_tokens,time_s\n1,1,10,1,0,0.01\n1,1,10,1,0,-0.5\n")
    with pytest.raises(UserError, match=r"p.csv row 3, column 'time_s': expected a number > 0"):
        Profile.from_csv(f)
    f.write_text("tp,pp,new_tokens,num_seqs,context_tokens,time_s\n1,1,ten,1,0,0.01\n")
    with pytest.raises(UserError, match=r"p.csv row 2, column 'new_tokens'"):
        Profile.from_csv(f)
    rows = _rows(1, C1, 0, n=3)
    with pytest.raises(UserError, match=r"p.csv, layout tp=1 pp=1 \(row\(s\) 2, 3, 4\): .*at least 4 rows"):
        Profile.from_rows(rows, "p.csv")
    p = Profile.from_rows(_rows(2, C2, 1), "p.csv")
    cl = Cluster(1, 4, HardwareSpec.h100())
    with pytest.raises(UserError, match=r"layout tp=1 pp=1 was not profiled \(profiled: tp=2 pp=1\)"):
        rate_table(llama2_13b(), cl, [ReplicaConfig(1, 1)], TYPES, profile=p)
    odd = Profile.from_rows([{**r, "tp": 3} for r in _rows(3, C2, 1)], "odd.csv")  # 3 does not divide 40 heads
    with pytest.raises(UserError, match=r"odd.csv: none of the profiled layouts \(tp=3 pp=1\) is valid"):
        best_homogeneous(Scorer(llama2_13b(), cl, TYPES, np.array([1.0, 1.0]), profile=odd))


def test_plan_cli_with_profile(tmp_path):
    trace = write_trace(tmp_path / "t.csv", make_trace(300, 5.0, mix_weights(2, 0.3, 0), seed=0))
    cfg = {"num_hidden_layers": 40, "hidden_size": 5120, "num_attention_heads": 40, "num_key_value_heads": 40,
           "intermediate_size": 13824, "vocab_size": 32000, "_name_or_path": "llama-2-13b"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    prof = tmp_path / "profile.csv"
    with prof.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["tp", "pp", "new_tokens", "num_seqs", "context_tokens", "time_s"])
        w.writeheader()
        w.writerows(_rows(1, C1, 0) + _rows(2, C2, 1))
    out = tmp_path / "plan"
    args = ["--trace", str(trace), "--model-config", str(tmp_path / "config.json"), "--nodes", "1",
            "--gpus-per-node", "4", "--k", "2", "--profile", str(prof)]
    r = CliRunner().invoke(app, ["plan", *args, "-o", str(out)])
    assert r.exit_code == 0, r.output
    plan = json.loads((out / "plan.json").read_text())
    assert plan["cost_model"] == f"profile {prof}"
    assert {(d["tp"], d["pp"]) for d in plan["replicas"]} <= {(1, 1), (2, 1)}
    r2 = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--profile", str(prof), "--plan", str(out)])
    assert r2.exit_code == 0, r2.output
    assert "e2e_p99" in r2.output
