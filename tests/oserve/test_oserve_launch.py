import json
import shlex

import numpy as np
from typer.testing import CliRunner

from icml26.oserve.cli import app
from icml26.oserve.launch import SGLANG_FLAGS, VLLM_FLAGS
from icml26.oserve.workload import make_trace, mix_weights
from icml26.sim.trace import write_trace

CONFIG = {"num_hidden_layers": 40, "hidden_size": 5120, "num_attention_heads": 40, "num_key_value_heads": 40,
          "intermediate_size": 13824, "vocab_size": 32000, "_name_or_path": "llama-2-13b"}


def _flags(line):
    return [t for t in shlex.split(line) if t.startswith("--")]


def test_plan_cli_writes_valid_commands(tmp_path):
    trace = write_trace(tmp_path / "t.csv", make_trace(300, 5.0, mix_weights(4, 0.5, 0), seed=0))
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    out = tmp_path / "plan"
    r = CliRunner().invoke(app, ["plan", "--trace", str(trace), "--model-config", str(tmp_path / "config.json"),
                                 "--nodes", "1", "--gpus-per-node", "4", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == ["launch_sglang.sh", "launch_vllm.sh", "plan.json", "router.json"]
    used = []
    for line in (out / "launch_vllm.sh").read_text().splitlines():
        if "vllm serve" in line:
            assert set(_flags(line)) <= set(VLLM_FLAGS)
            used += [int(g) for g in line.split()[0].split("=")[1].split(",")]
    assert sorted(used) == sorted(set(used)) and all(0 <= g < 4 for g in used)
    for line in (out / "launch_sglang.sh").read_text().splitlines():
        if "sglang" in line:
            assert set(_flags(line)) <= set(SGLANG_FLAGS)
    router = json.loads((out / "router.json").read_text())
    w = np.array(router["weights"])
    np.testing.assert_allclose(w.sum(1)[np.array(router["lambda_req_s"]) > 0], 1.0, atol=1e-6)
    r2 = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--plan", str(out), "--model-config",
                                  str(tmp_path / "config.json"), "--nodes", "1", "--gpus-per-node", "4"])
    assert r2.exit_code == 0, r2.output
    assert "e2e_p99" in r2.output
