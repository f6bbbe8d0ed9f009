"""Turn a :class:`~icml26.oserve.search.Plan` into commands people can run.

``to_vllm`` / ``to_sglang``: one line per replica, ``CUDA_VISIBLE_DEVICES=ids`` then the engine with
its TP/PP degree, batch limit, memory fraction and port. ``router_config``: the type classifier
(standardised log-length centroids) and weights ``x[k, j] / lam_j`` per type, with least-load
fallback. ``write_plan_dir`` writes all four files to a temp folder and renames it into place.
A live engine cannot change TP: a switch starts new engines and loads weights peer-to-peer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from icml26.core.io import atomic_dir

__all__ = ["VLLM_FLAGS", "SGLANG_FLAGS", "to_vllm", "to_sglang", "router_config", "write_plan_dir"]

#: flags these generators emit (checked against vLLM 0.11 / SGLang 0.5 CLI docs)
VLLM_FLAGS = ("--tensor-parallel-size", "--pipeline-parallel-size", "--max-num-seqs",
              "--gpu-memory-utilization", "--port")
SGLANG_FLAGS = ("--model-path", "--tp-size", "--pp-size", "--max-running-requests", "--mem-fraction-static", "--port")


def _env(r) -> str:
    return "CUDA_VISIBLE_DEVICES=" + ",".join(str(g) for g in r.gpu_ids)


def to_vllm(plan, model: str, max_num_seqs: int = 256, mem_util: float = 0.9, base_port: int = 8000) -> str:
    lines = ["#!/usr/bin/env bash", "set -euo pipefail"]
    for i, r in enumerate(plan.replicas):
        lines.append(f"{_env(r)} vllm serve {model} --tensor-parallel-size {r.tp} --pipeline-parallel-size {r.pp} "
                     f"--max-num-seqs {max_num_seqs} --gpu-memory-utilization {mem_util} --port {base_port + i} &")
    return "\n".join(lines + ["wait", ""])


def to_sglang(plan, model: str, max_num_seqs: int = 256, mem_util: float = 0.9, base_port: int = 8000) -> str:
    lines = ["#!/usr/bin/env bash", "set -euo pipefail"]
    for i, r in enumerate(plan.replicas):
        lines.append(f"{_env(r)} python -m sglang.launch_server --model-path {model} --tp-size {r.tp} "
                     f"--pp-size {r.pp} --max-running-requests {max_num_seqs} --mem-fraction-static {mem_util} "
                     f"--port {base_port + i} &")
    return "\n".join(lines + ["wait", ""])


def router_config(plan, types, lam, base_port: int = 8000, fallback_error: float = 0.3) -> dict:
    """Weights per type (rows sum to 1 where the type is served) and the classifier."""
    lam = np.asarray(lam, float)
    w = np.where(lam[None] > 0, plan.x / np.maximum(lam[None], 1e-12), 0.0)
    return {
        "replicas": [{"url": f"http://localhost:{base_port + i}", "tp": r.tp, "pp": r.pp, "gpus": list(r.gpu_ids)}
                     for i, r in enumerate(plan.replicas)],
        "classifier": {"features": ["log prompt_tokens", "log output_tokens"], "mean": types.mean_.tolist(),
                       "std": types.std_.tolist(), "centroids": types.centroids_.tolist()},
        "lambda_req_s": lam.tolist(),
        "weights": w.T.tolist(),  # [type][replica]
        "fallback": {"policy": "least_load", "when_relative_prediction_error_above": fallback_error},
    }


def write_plan_dir(out: str | os.PathLike, plan, types, lam, model: str, meta: dict | None = None) -> Path:
    """plan.json, launch_vllm.sh, launch_sglang.sh and router.json, never half-written."""
    out = Path(out)
    with atomic_dir(out) as tmp:
        (tmp / "plan.json").write_text(json.dumps({
            "replicas": [{"tp": r.tp, "pp": r.pp, "gpu_ids": list(r.gpu_ids)} for r in plan.replicas],
            "capacity_scale": plan.score, "x_req_s": plan.x.tolist(), "search_seconds": plan.seconds,
            **(meta or {})}, indent=1))
        for name, text in (("launch_vllm.sh", to_vllm(plan, model)), ("launch_sglang.sh", to_sglang(plan, model))):
            (tmp / name).write_text(text)
            (tmp / name).chmod(0o755)
        (tmp / "router.json").write_text(json.dumps(router_config(plan, types, lam), indent=1))
    return out
