"""OServe performance, side by side in one process.

1. Dispatch at 32 replicas x 4 types: LP (HiGHS, two stages) vs the paper's preflow-push max flow
   (networkx): wall time per solve and served rate.
2. Deployment search vs exhaustive on 16 and 32 simulated H100s (LLaMA-30B and Llama-2-70B, the
   claim's four Azure-shaped types, work mix CV 0.7, goodput rates within the claim's SLOs, 3
   seeds): wall time, deployments scored and the capacity gap (paper: 12 s vs 50 s on 16 GPUs,
   6% P99 gap).
3. Simulator speed: requests/s replayed through 4 x tp4 Llama-2-70B engines.

Usage: ``python benchmarks/oserve.py [--out results/bench]``; writes oserve.json and oserve.png.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from icml26.core.io import atomic_write_json
from icml26.core.plots import pyplot, save_figure
from icml26.oserve.capacity import Cluster, llama2_70b
from icml26.oserve.dispatch import dispatch
from icml26.oserve.replay import simulate_plan
from icml26.oserve.router import WeightedTypeRouter
from icml26.oserve.search import Scorer, exhaustive, search
from icml26.oserve.workload import TYPE_LENGTHS, make_trace, mix_weights
from icml26.sim.cost import HardwareSpec


def bench_dispatch(R=32, K=4, reps=20, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    n = rng.uniform(0.5, 30, (R, K))
    lam = rng.uniform(5, 60, K)
    out = {}
    for method in ("lp", "maxflow"):
        t = time.perf_counter()
        for _ in range(reps):
            d = dispatch(n, lam, method)
        out[method] = {"ms_per_solve": 1e3 * (time.perf_counter() - t) / reps, "served": d.served}
    return out


def bench_search(seeds=(0, 1, 2)) -> dict:
    from icml26.oserve.capacity import llama_30b, rate_table, unloaded_latency, valid_configs
    from icml26.oserve.claim import SLO_SCALE
    from icml26.oserve.workload import AZURE_TYPES, count_weights, work_per_request

    L = np.array([t[1:] for t in AZURE_TYPES], float)
    out = {}
    for model in (llama_30b(), llama2_70b()):
        for nodes in (2, 4):
            cl = Cluster(nodes, 8, HardwareSpec.h100())
            slo = SLO_SCALE * unloaded_latency(model, cl, L)
            cfgs = valid_configs(model, cl)
            work = work_per_request(rate_table(model, cl, cfgs, L, slo_s=slo), [c.gpus for c in cfgs])
            rows = []
            for seed in seeds:
                lam = count_weights(mix_weights(4, 0.7, seed), work) * 10 * nodes
                s = search(Scorer(model, cl, L, lam, slo_s=slo), seed=seed)
                e = exhaustive(Scorer(model, cl, L, lam, slo_s=slo), max_gpus=cl.n_gpus)
                rows.append({"seed": seed, "search_s": s.seconds, "search_scored": s.evaluated, "search": s.describe(),
                             "exhaustive_s": e.seconds, "exhaustive_scored": e.evaluated, "exhaustive": e.describe(),
                             "capacity_ratio": s.score / e.score})
            out[f"{model.name}, {cl.n_gpus} GPUs"] = {
                "runs": rows, "search_s": float(np.mean([r["search_s"] for r in rows])),
                "exhaustive_s": float(np.mean([r["exhaustive_s"] for r in rows])),
                "worst_capacity_ratio": float(min(r["capacity_ratio"] for r in rows))}
    return out


def bench_sim(n=3000, seed=0) -> dict:
    L = np.array([t[1:] for t in TYPE_LENGTHS], float)
    cl = Cluster(2, 8, HardwareSpec.h100())
    w = mix_weights(4, 0.5, seed)
    sc = Scorer(llama2_70b(), cl, L, w * 12)
    plan = sc.plan([(4, 1)] * 4)
    reqs = make_trace(n, 12.0, w, seed=seed)
    lab = {r.id: ["short/short", "long-in", "long-out", "long/long"].index(r.type) for r in reqs}
    t = time.perf_counter()
    simulate_plan(plan, llama2_70b(), cl, reqs, WeightedTypeRouter(plan.x, lambda r: lab[r.id]))
    s = time.perf_counter() - t
    return {"requests": n, "seconds": s, "requests_per_s": n / s}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="results/bench")
    out = Path(ap.parse_args().out)
    res = {"dispatch_32x4": bench_dispatch(), "search": bench_search(), "simulator": bench_sim()}
    atomic_write_json(out / "oserve.json", res)
    plt = pyplot()
    fig, ax = plt.subplots(1, 2, figsize=(8, 3))
    d = res["dispatch_32x4"]
    ax[0].bar(["LP (HiGHS)", "max flow (preflow-push)"], [d["lp"]["ms_per_solve"], d["maxflow"]["ms_per_solve"]])
    ax[0].set_ylabel("ms per solve (32 replicas x 4 types)")
    keys = list(res["search"])
    x = np.arange(len(keys))
    ax[1].bar(x - 0.2, [res["search"][k]["search_s"] for k in keys], 0.4, label="search")
    ax[1].bar(x + 0.2, [res["search"][k]["exhaustive_s"] for k in keys], 0.4, label="exhaustive")
    ax[1].set_xticks(x, [k.replace(", ", "\n") for k in keys], fontsize=6)
    ax[1].set_yscale("log")
    ax[1].set_ylabel("seconds")
    ax[1].legend()
    save_figure(fig, out / "oserve.png")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
