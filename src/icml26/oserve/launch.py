"""Turn a :class:`~icml26.oserve.search.Plan` into commands people can run, one script per node.

A plan's GPU ids are *global* (node ``n`` holds ``n * G .. n * G + G - 1`` for ``G`` GPUs per
node); a host's ``CUDA_VISIBLE_DEVICES`` takes *its own* ids ``0 .. G - 1``. So
:func:`vllm_scripts` / :func:`sglang_scripts` return ``{node: script}``: node ``n``'s script starts
the replicas (or the parts of replicas) whose GPUs sit on node ``n``, with node-local ids.

- A replica inside one node: ``CUDA_VISIBLE_DEVICES=local ids`` then the engine with its TP/PP
  degree, batch limit, memory fraction and port.
- A replica whose pipeline stages span nodes (each stage is inside one node, see
  :func:`~icml26.oserve.capacity.place`):
  - vLLM: the multi-node path vLLM documents, a Ray cluster. Every node that holds such GPUs
    adds exactly those GPUs to one Ray cluster (``CUDA_VISIBLE_DEVICES=... ray start ...
    --num-gpus=n``; the head is the lowest such node, its address in ``$OSERVE_RAY_HEAD``) and the
    head starts those replicas with ``--distributed-executor-backend ray``. Ray's placement
    group, not the plan, then picks which of the pooled GPUs each such replica gets.
  - SGLang: its own multi-node flags, one command per node with that node's local ids
    (``--nnodes``, ``--node-rank``, ``--dist-init-addr $OSERVE_NODE<head>_ADDR:port``).

``router_config``: the input-only type classifier (:meth:`WorkloadTypes.to_dict`), weights
``x[k, j] / lam_j`` per type, each replica's node and port, and a least-load fallback.
``write_plan_dir`` writes everything to a temp folder and renames it into place. A live engine
cannot change TP: a switch starts new engines and loads weights peer-to-peer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from icml26.core.io import atomic_dir

__all__ = ["VLLM_FLAGS", "SGLANG_FLAGS", "RAY_FLAGS", "node_layout", "vllm_scripts", "sglang_scripts",
           "router_config", "write_plan_dir"]

#: flags these generators emit (checked against vLLM 0.11 / SGLang 0.5 / Ray 2.x CLI docs)
VLLM_FLAGS = ("--tensor-parallel-size", "--pipeline-parallel-size", "--max-num-seqs",
              "--gpu-memory-utilization", "--port", "--distributed-executor-backend")
SGLANG_FLAGS = ("--model-path", "--tp-size", "--pp-size", "--max-running-requests", "--mem-fraction-static", "--port",
                "--nnodes", "--node-rank", "--dist-init-addr")
RAY_FLAGS = ("--head", "--port", "--address", "--num-gpus", "--block")
RAY_PORT = 6379
#: SGLang's torch.distributed rendezvous port for multi-node replica i is DIST_PORT + i
DIST_PORT = 20000


def node_layout(replica, gpus_per_node: int) -> list[tuple[int, list[int]]]:
    """``[(node, node-local GPU ids), ...]`` of a placed replica, nodes in stage order."""
    if not replica.gpu_ids:
        raise ValueError(f"replica {replica} has no gpu_ids: place it first")
    out: list[tuple[int, list[int]]] = []
    for g in replica.gpu_ids:
        node, local = divmod(int(g), gpus_per_node)
        if out and out[-1][0] == node:
            out[-1][1].append(local)
        elif any(n == node for n, _ in out):
            raise ValueError(f"replica {replica}: GPUs {list(replica.gpu_ids)} leave node {node} and come back")
        else:
            out.append((node, [local]))
    return out


def _ids(ids) -> str:
    return "CUDA_VISIBLE_DEVICES=" + ",".join(str(g) for g in ids)


def _header(node: int, nodes: int, engine: str) -> list[str]:
    return ["#!/usr/bin/env bash",
            f"# OServe plan, {engine}: run this on node {node} of {nodes} (GPU ids below are node {node}'s own, "
            "0-based)", "set -euo pipefail"]


def vllm_scripts(plan, model: str, gpus_per_node: int, nodes: int | None = None, max_num_seqs: int = 256,
                 mem_util: float = 0.9, base_port: int = 8000) -> dict[int, str]:
    """``{node: bash script}`` starting the plan's vLLM engines with node-local GPU ids."""
    parts = [node_layout(r, gpus_per_node) for r in plan.replicas]
    nodes = nodes or 1 + max(n for p in parts for n, _ in p)
    lines = {n: _header(n, nodes, "vLLM") for n in range(nodes)}
    ray_gpus: dict[int, list[int]] = {}
    spanning = []
    for i, (r, p) in enumerate(zip(plan.replicas, parts, strict=True)):
        cmd = (f"vllm serve {model} --tensor-parallel-size {r.tp} --pipeline-parallel-size {r.pp} "
               f"--max-num-seqs {max_num_seqs} --gpu-memory-utilization {mem_util} --port {base_port + i}")
        if len(p) == 1:
            lines[p[0][0]].append(f"{_ids(p[0][1])} {cmd} &")
        else:
            spanning.append((i, cmd, p))
            for n, ids in p:
                ray_gpus.setdefault(n, []).extend(ids)
    if spanning:
        head = min(ray_gpus)
        for n, ids in sorted(ray_gpus.items()):
            where = (f"--head --port={RAY_PORT}" if n == head
                     else f"--address=${{OSERVE_RAY_HEAD:?set OSERVE_RAY_HEAD to the address of node {head}}}:{RAY_PORT}")
            lines[n].append(f"# replicas {', '.join(str(i) for i, _, _ in spanning)} span nodes: this node adds "
                            f"GPUs {ids} to one Ray cluster (head: node {head})")
            lines[n].append(f"{_ids(ids)} ray start {where} --num-gpus={len(ids)}" + (" --block &" if n != head else ""))
        for i, cmd, p in spanning:
            lines[head].append(f"# replica {i}: stages on nodes {[n for n, _ in p]}; Ray picks its GPUs from the pool")
            lines[head].append(f"{cmd} --distributed-executor-backend ray &")
    return {n: "\n".join(ls + ["wait", ""]) for n, ls in lines.items()}


def sglang_scripts(plan, model: str, gpus_per_node: int, nodes: int | None = None, max_num_seqs: int = 256,
                   mem_util: float = 0.9, base_port: int = 8000) -> dict[int, str]:
    """``{node: bash script}`` starting the plan's SGLang servers with node-local GPU ids."""
    parts = [node_layout(r, gpus_per_node) for r in plan.replicas]
    nodes = nodes or 1 + max(n for p in parts for n, _ in p)
    lines = {n: _header(n, nodes, "SGLang") for n in range(nodes)}
    for i, (r, p) in enumerate(zip(plan.replicas, parts, strict=True)):
        cmd = (f"python -m sglang.launch_server --model-path {model} --tp-size {r.tp} --pp-size {r.pp} "
               f"--max-running-requests {max_num_seqs} --mem-fraction-static {mem_util} --port {base_port + i}")
        if len(p) == 1:
            lines[p[0][0]].append(f"{_ids(p[0][1])} {cmd} &")
            continue
        head = p[0][0]
        addr = f"${{OSERVE_NODE{head}_ADDR:?set OSERVE_NODE{head}_ADDR to the address of node {head}}}:{DIST_PORT + i}"
        for rank, (n, ids) in enumerate(p):
            lines[n].append(f"# replica {i} spans nodes {[m for m, _ in p]}: this node is rank {rank}")
            lines[n].append(f"{_ids(ids)} {cmd} --nnodes {len(p)} --node-rank {rank} --dist-init-addr {addr} &")
    return {n: "\n".join(ls + ["wait", ""]) for n, ls in lines.items()}


def router_config(plan, types, lam, gpus_per_node: int | None = None, base_port: int = 8000,
                  fallback_error: float = 0.3) -> dict:
    """Weights per type (rows sum to 1 where the type is served), replicas and the classifier.

    The classifier is :meth:`WorkloadTypes.to_dict`: at routing time only the prompt length is
    known, so a request's type probabilities come from the per-type Gaussians over log prompt
    tokens (``input_*``), or from the nearest centroid on (log prompt, log *predicted* output)
    when a length predictor (e.g. TIE's) supplies one (:class:`~icml26.oserve.router.InputRouter`).
    """
    lam = np.asarray(lam, float)
    w = np.where(lam[None] > 0, plan.x / np.maximum(lam[None], 1e-12), 0.0)
    reps = []
    for i, r in enumerate(plan.replicas):
        node = node_layout(r, gpus_per_node)[0][0] if (gpus_per_node and r.gpu_ids) else 0
        reps.append({"url": f"http://node{node}:{base_port + i}", "node": node, "port": base_port + i,
                     "tp": r.tp, "pp": r.pp, "gpus": list(r.gpu_ids)})
    return {
        "replicas": reps,
        "classifier": {**types.to_dict(),
                       "routing": "input-only: P(type | log prompt_tokens) from the input_* Gaussians and "
                                  "prior; with a predicted output length, the nearest centroid on (log "
                                  "prompt_tokens, log predicted output_tokens), standardised by mean/std"},
        "lambda_req_s": lam.tolist(),
        "weights": w.T.tolist(),  # [type][replica]
        "fallback": {"policy": "least_load", "when_relative_prediction_error_above": fallback_error},
    }


def write_plan_dir(out: str | os.PathLike, plan, types, lam, model: str, meta: dict | None = None,
                   gpus_per_node: int = 8, nodes: int | None = None) -> Path:
    """plan.json, launch_vllm_node<n>.sh and launch_sglang_node<n>.sh per node, and router.json,
    never half-written. ``plan.json`` holds the classifier too (``types``), so a replay uses the
    plan's types, not types refitted on the replay trace."""
    out = Path(out)
    with atomic_dir(out) as tmp:
        (tmp / "plan.json").write_text(json.dumps({
            "replicas": [{"tp": r.tp, "pp": r.pp, "gpu_ids": list(r.gpu_ids)} for r in plan.replicas],
            "capacity_scale": plan.score, "x_req_s": plan.x.tolist(), "search_seconds": plan.seconds,
            "gpus_per_node": gpus_per_node, "types": types.to_dict(), **(meta or {})}, indent=1))
        for engine, make in (("vllm", vllm_scripts), ("sglang", sglang_scripts)):
            for n, text in make(plan, model, gpus_per_node, nodes).items():
                f = tmp / f"launch_{engine}_node{n}.sh"
                f.write_text(text)
                f.chmod(0o755)
        (tmp / "router.json").write_text(json.dumps(router_config(plan, types, lam, gpus_per_node), indent=1))
    return out
