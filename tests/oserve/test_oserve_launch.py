import json
import re
import shlex
import subprocess

import numpy as np
import pytest
from typer.testing import CliRunner

from icml26.oserve.capacity import Cluster, ReplicaConfig, llama2_13b
from icml26.oserve.claim import simulate_plan
from icml26.oserve.cli import app
from icml26.oserve.launch import RAY_FLAGS, SGLANG_FLAGS, VLLM_FLAGS, sglang_scripts, vllm_scripts
from icml26.oserve.router import InputRouter
from icml26.oserve.search import Plan
from icml26.oserve.types import WorkloadTypes
from icml26.oserve.workload import make_trace, mix_weights
from icml26.sim.cost import HardwareSpec
from icml26.sim.trace import Request, load_trace, write_trace

CONFIG = {"num_hidden_layers": 40, "hidden_size": 5120, "num_attention_heads": 40, "num_key_value_heads": 40,
          "intermediate_size": 13824, "vocab_size": 32000, "_name_or_path": "llama-2-13b"}


def _flags(line):
    return [t.split("=")[0] for t in shlex.split(line) if t.startswith("--")]


def _engines(script, what):
    """[(local GPU ids, line)] of the lines of ``script`` that start ``what``."""
    out = []
    for line in script.splitlines():
        if what in line and not line.startswith("#"):
            m = re.match(r"CUDA_VISIBLE_DEVICES=([\d,]+) ", line)
            out.append(([int(g) for g in m.group(1).split(",")] if m else [], line))
    return out


def test_plan_cli_writes_valid_commands(tmp_path):
    trace = write_trace(tmp_path / "t.csv", make_trace(300, 5.0, mix_weights(4, 0.5, 0), seed=0))
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    out = tmp_path / "plan"
    r = CliRunner().invoke(app, ["plan", "--trace", str(trace), "--model-config", str(tmp_path / "config.json"),
                                 "--nodes", "1", "--gpus-per-node", "4", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == ["launch_sglang_node0.sh", "launch_vllm_node0.sh", "plan.json",
                                                     "router.json"]
    used = []
    for ids, line in _engines((out / "launch_vllm_node0.sh").read_text(), "vllm serve"):
        assert set(_flags(line)) <= set(VLLM_FLAGS) and " llama-2-13b " in line
        used += ids
    assert sorted(used) == sorted(set(used)) and all(0 <= g < 4 for g in used)
    for _, line in _engines((out / "launch_sglang_node0.sh").read_text(), "sglang"):
        assert set(_flags(line)) <= set(SGLANG_FLAGS)
    router = json.loads((out / "router.json").read_text())
    w = np.array(router["weights"])
    np.testing.assert_allclose(w.sum(1)[np.array(router["lambda_req_s"]) > 0], 1.0, atol=1e-6)
    assert "input-only" in router["classifier"]["routing"]
    r2 = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--plan", str(out)])
    assert r2.exit_code == 0, r2.output
    assert "e2e_p99" in r2.output


def test_two_nodes_get_node_local_gpu_ids(tmp_path):
    trace = write_trace(tmp_path / "t.csv", make_trace(400, 20.0, mix_weights(4, 0.5, 0), seed=0))
    out = tmp_path / "plan"
    r = CliRunner().invoke(app, ["plan", "--trace", str(trace), "--model-config", "llama-2-13b", "--nodes", "2",
                                 "-k", "4", "-o", str(out)])
    assert r.exit_code == 0, (r.output, r.exception)
    plan = json.loads((out / "plan.json").read_text())
    want = sorted(g for rep in plan["replicas"] for g in rep["gpu_ids"])
    assert max(want) >= 8  # the plan uses node 1, whose global ids are 8..15
    for engine, what in (("vllm", "vllm serve"), ("sglang", "sglang.launch_server")):
        got = []
        for node in (0, 1):
            for ids, _ in _engines((out / f"launch_{engine}_node{node}.sh").read_text(), what):
                assert ids and all(0 <= g < 8 for g in ids)
                got += [8 * node + g for g in ids]
        assert sorted(got) == want


def test_a_replica_spanning_nodes_uses_ray_for_vllm_and_node_ranks_for_sglang():
    plan = Plan([ReplicaConfig(4, 1, (0, 1, 2, 3)), ReplicaConfig(4, 2, (4, 5, 6, 7, 8, 9, 10, 11))], 1.0,
                np.ones((2, 1)))
    v = vllm_scripts(plan, "M", gpus_per_node=8, nodes=2)
    head, worker = v[0].splitlines(), v[1].splitlines()
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve M --tensor-parallel-size 4 --pipeline-parallel-size 1" in v[0]
    assert "CUDA_VISIBLE_DEVICES=4,5,6,7 ray start --head --port=6379 --num-gpus=4" in head
    ray_worker = [ln for ln in worker if "ray start" in ln]
    assert len(ray_worker) == 1 and ray_worker[0].startswith("CUDA_VISIBLE_DEVICES=0,1,2,3 ray start --address=")
    assert set(_flags(ray_worker[0])) <= set(RAY_FLAGS)
    spanning = [ln for ln in head if "--distributed-executor-backend ray" in ln]
    assert len(spanning) == 1 and "--pipeline-parallel-size 2" in spanning[0] and "--port 8001" in spanning[0]
    assert not any("vllm serve" in ln for ln in worker)
    s = sglang_scripts(plan, "M", gpus_per_node=8, nodes=2)
    s0 = [ln for ln in s[0].splitlines() if "--nnodes" in ln]
    s1 = [ln for ln in s[1].splitlines() if "--nnodes" in ln]
    assert s0[0].startswith("CUDA_VISIBLE_DEVICES=4,5,6,7 ") and "--nnodes 2 --node-rank 0" in s0[0]
    assert s1[0].startswith("CUDA_VISIBLE_DEVICES=0,1,2,3 ") and "--nnodes 2 --node-rank 1" in s1[0]
    assert all(set(_flags(ln)) <= set(SGLANG_FLAGS) for ln in s0 + s1)
    for script in (*v.values(), *s.values()):  # valid bash
        assert subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True).returncode == 0, script


def test_input_router_never_reads_the_output_length():
    hist = make_trace(600, 5.0, [0.25] * 4, seed=0)
    types = WorkloadTypes(4, seed=0).fit(hist)
    x = np.random.default_rng(0).random((3, 4))
    reqs = make_trace(200, 5.0, [0.25] * 4, seed=1)
    shuffled = [Request(r.id, r.arrival_s, r.prompt_tokens, o.output_tokens)
                for r, o in zip(reqs, reqs[::-1], strict=True)]
    a, b = InputRouter(x, types), InputRouter(x, types)
    assert [a.route(r, None, 0) for r in reqs] == [b.route(r, None, 0) for r in shuffled]
    # replica shares follow q = s @ p: the long-run counts match the expected shares
    c = InputRouter(x, types)
    counts = np.bincount([c.route(r, None, 0) for r in reqs], minlength=3)
    share = x / x.sum(0)
    expect = sum(share @ c.probabilities(r) for r in reqs)
    np.testing.assert_allclose(counts, expect, atol=1.0)
    # with a predicted output length (e.g. TIE's) the type is the nearest centroid on (in, predicted out)
    r = Request(0, 0.0, 256, 5, meta={"pred_output_tokens": 1024})
    assert c.probabilities(r).argmax() == types.assign_predicted([256], [1024])[0] == types.assign(
        [Request(0, 0.0, 256, 1024)])[0]


def test_simulate_uses_the_plans_classifier_not_a_refit(tmp_path):
    a = make_trace(500, 4.0, [0.25] * 4, seed=0)
    b = make_trace(500, 4.0, [0.7, 0.1, 0.1, 0.1], seed=1)  # another half: another mix
    ta, tb = write_trace(tmp_path / "a.csv", a), write_trace(tmp_path / "b.csv", b)
    out = tmp_path / "plan"
    r = CliRunner().invoke(app, ["plan", "--trace", str(ta), "--model-config", "llama-2-13b", "--gpus-per-node", "4",
                                 "-k", "4", "-o", str(out)])
    assert r.exit_code == 0, (r.output, r.exception)
    r2 = CliRunner().invoke(app, ["simulate", "--trace", str(tb), "--plan", str(out)])
    assert r2.exit_code == 0, (r2.output, r2.exception)
    d = json.loads((out / "plan.json").read_text())
    types = WorkloadTypes.from_dict(d["types"])
    reqs = load_trace(tb)
    counts = re.search(r"prompt length only\): \[([\d, ]+)\]", r2.output).group(1)
    assert [int(c) for c in counts.split(",")] == np.bincount(types.assign_input(reqs), minlength=4).tolist()
    refit = WorkloadTypes(4, seed=0).fit(reqs)
    assert not np.allclose(refit.centroids_, types.centroids_, atol=0.05)  # a refit would type differently
    reps = [ReplicaConfig(x["tp"], x["pp"], tuple(x["gpu_ids"])) for x in d["replicas"]]
    x = np.array(d["x_req_s"])
    s = simulate_plan(Plan(reps, 0.0, x), llama2_13b(), Cluster(1, 4, HardwareSpec.h100()), reqs,
                      InputRouter(x, types))
    assert f"e2e_p99: {s['e2e_p99']:.3f}" in r2.output


def test_bad_plans_and_model_names(tmp_path):
    trace = write_trace(tmp_path / "t.csv", make_trace(200, 5.0, mix_weights(2, 0.3, 0), seed=0))
    out = tmp_path / "plan"
    r = CliRunner().invoke(app, ["plan", "--trace", str(trace), "--model-config", "llama-2-70b", "--nodes", "1",
                                 "-k", "2", "-o", str(out)])
    assert r.exit_code == 0, (r.output, r.exception)
    f = out / "plan.json"
    d = json.loads(f.read_text())
    d["replicas"][0] = {**d["replicas"][0], "tp": 1, "pp": 1, "gpu_ids": d["replicas"][0]["gpu_ids"][:1]}
    f.write_text(json.dumps(d))
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--plan", str(out)])
    assert r.exit_code != 0
    assert re.search(r"plan\.json: replica 0: tp=1 pp=1 .*cannot hold .*Llama-2-70b-hf's 138 GB", str(r.exception))
    del d["types"]
    f.write_text(json.dumps(d))
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--plan", str(out)])
    assert "plan.json: missing field 'types'" in str(r.exception)
    r = CliRunner().invoke(app, ["plan", "--trace", str(trace), "--model-config", "llama-99b", "-o", str(out)])
    assert r.exit_code != 0 and "llama-30b" in str(r.exception) and "neither a packaged model" in str(r.exception)


@pytest.mark.parametrize("name,layers,kv_heads", [("llama-2-70b", 80, 8), ("llama-3-8b", 32, 8), ("llama-30b", 60, 52)])
def test_packaged_model_configs(name, layers, kv_heads):
    from icml26.oserve.models import model_spec

    m = model_spec(name)
    assert (m.n_layers, m.n_kv_heads) == (layers, kv_heads)
