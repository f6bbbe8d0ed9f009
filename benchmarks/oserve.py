"""OServe performance, side by side in one process.

1. Dispatch at 32 replicas x 4 types: LP (HiGHS, two stages) vs the paper's preflow-push max flow
   (networkx): wall time per solve and served rate.
2. Deployment search vs exhaustive on 8 and 16 simulated H100s (Llama-2-70B, 4 types, mix CV
   0.7): wall time, deployments scored and capacity ratio (paper: 12 s vs 50 s on 16 GPUs).
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
from icml26.oserve.claim import simulate_plan
from icml26.oserve.dispatch import dispatch
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


def bench_search(seed=0) -> dict:
    L = np.array([t[1:] for t in TYPE_LENGTHS], float)
    out = {}
    for nodes in (1, 2):
        cl = Cluster(nodes, 8, HardwareSpec.h100())
        lam = mix_weights(4, 0.7, seed) * 5 * nodes
        s = search(Scorer(llama2_70b(), cl, L, lam), seed=seed)
        e = exhaustive(Scorer(llama2_70b(), cl, L, lam))
        out[f"{cl.n_gpus} GPUs"] = {"search_s": s.seconds, "search_scored": s.evaluated, "search": s.describe(),
                                    "exhaustive_s": e.seconds, "exhaustive_scored": e.evaluated,
                                    "exhaustive": e.describe(), "capacity_ratio": s.score / e.score}
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
    ax[1].set_xticks(x, keys)
    ax[1].set_ylabel("seconds")
    ax[1].legend()
    save_figure(fig, out / "oserve.png")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
