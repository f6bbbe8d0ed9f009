"""Benchmarks for icml26.sim and TIE, side by side with a baseline in the same process.

1. Simulator: 10^5 requests through the engine with closed-form decode skipping vs step by step
   (the step-by-step run uses 2*10^4 requests and is scaled per request).
2. Score: TIE's quadrature (batched, and one request at a time) vs the official 10k-sample Monte
   Carlo; rank agreement (Spearman) of the two on the same requests.
3. Queue: TIEQueue (lazy-deletion heap) vs re-sorting a list at every admission, 10^4 waiting.

Usage: ``python benchmarks/tie.py [--out DIR] [--quick]``; writes tie.json and tie.png.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from scipy import stats

from icml26.core.plots import pyplot, save_figure
from icml26.sim import (
    Engine,
    EngineConfig,
    FCFSQueue,
    HardwareSpec,
    ModelSpec,
    Request,
    RooflineCost,
    simulate,
)
from icml26.sim.engine import Seq
from icml26.sim.trace import synthetic_trace
from icml26.tie.queue import QueueConfig, TIEQueue
from icml26.tie.score import ScoreTable, tie_score, tie_score_mc


def bench_sim(n_fast: int, n_slow: int) -> dict:
    cost = RooflineCost(ModelSpec.llama3_8b(), HardwareSpec.h100())
    out = {}
    for skip, n in ((True, n_fast), (False, n_slow)):
        tr = synthetic_trace(n, rate=8.0, seed=0)
        eng = Engine(EngineConfig(kv_tokens=cost.kv_capacity_tokens(), skip_ahead=skip), cost, FCFSQueue())
        t = time.perf_counter()
        recs = simulate(tr, eng)
        dt = time.perf_counter() - t
        out["skip" if skip else "step"] = {"requests": len(recs), "seconds": dt, "us_per_request": dt / n * 1e6}
    out["speedup"] = out["step"]["us_per_request"] / out["skip"]["us_per_request"]
    return out


def bench_score(n: int, n_mc: int) -> dict:
    rng = np.random.default_rng(0)
    mu, sg = rng.normal(5.0, 1.0, n), rng.uniform(0.3, 1.5, n)
    t = time.perf_counter()
    exact = tie_score(mu, sg, 64)
    batch_us = (time.perf_counter() - t) / n * 1e6
    t = time.perf_counter()
    for i in range(n_mc):
        tie_score(mu[i], sg[i], 64)
    single_us = (time.perf_counter() - t) / n_mc * 1e6
    t = time.perf_counter()
    mc = np.array([tie_score_mc(mu[i], sg[i], 64, rng=rng) for i in range(n_mc)])
    mc_us = (time.perf_counter() - t) / n_mc * 1e6
    rho = float(stats.spearmanr(exact[:n_mc], mc).statistic)
    t = time.perf_counter()
    table = ScoreTable()
    table_build_s = time.perf_counter() - t
    t = time.perf_counter()
    fast = table(mu, sg, 64)
    table_us = (time.perf_counter() - t) / n * 1e6
    return {"quadrature_batched_us": batch_us, "quadrature_single_us": single_us, "mc10k_us": mc_us,
            "speedup_batched": mc_us / batch_us, "speedup_single": mc_us / single_us, "spearman_vs_mc": rho,
            "table_batched_us": table_us, "table_build_s": table_build_s,
            "speedup_table": mc_us / table_us, "table_equal_share": float(np.mean(fast == exact)),
            "table_spearman_vs_exact": float(stats.spearmanr(fast, exact).statistic)}


def bench_queue(n_wait: int, n_ops: int) -> dict:
    rng = np.random.default_rng(0)
    scores = rng.integers(1, 2048, n_wait + n_ops)
    seqs = [Seq(Request(i, 0.0, 1, 1, meta={"s": int(scores[i])})) for i in range(n_wait + n_ops)]
    cfg = QueueConfig(gamma=1.0, predict_batch=1, predict_wait_s=0.0)
    q = TIEQueue(lambda r, k: r.meta["s"], cfg)
    for s in seqs[:n_wait]:
        q.push(s, 0.0)
    t = time.perf_counter()
    for j in range(n_ops):
        q.pop(0.0)
        q.push(seqs[n_wait + j], 0.0)
    heap_us = (time.perf_counter() - t) / n_ops * 1e6
    lst = list(seqs[:n_wait])
    t = time.perf_counter()
    for j in range(n_ops):
        lst.sort(key=lambda s: (s.req.meta["s"], s.req.arrival_s))
        lst.pop(0)
        lst.append(seqs[n_wait + j])
    sort_us = (time.perf_counter() - t) / n_ops * 1e6
    return {"waiting": n_wait, "heap_us_per_op": heap_us, "resort_us_per_op": sort_us, "speedup": sort_us / heap_us}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="benchmarks/out/tie")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (for a smoke run)")
    a = ap.parse_args()
    out = Path(a.out)
    res = {"sim": bench_sim(*((5000, 2000) if a.quick else (100_000, 20_000))),
           "score": bench_score(*((2000, 100) if a.quick else (20_000, 500))),
           "queue": bench_queue(*((2000, 500) if a.quick else (10_000, 2000)))}
    out.mkdir(parents=True, exist_ok=True)
    (out / "tie.json").write_text(json.dumps(res, indent=2))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    labels = ["sim: skip vs step", "score: quad (batch) vs MC10k", "score: quad (single) vs MC10k",
              "queue: heap vs re-sort"]
    vals = [res["sim"]["speedup"], res["score"]["speedup_batched"], res["score"]["speedup_single"],
            res["queue"]["speedup"]]
    ax.barh(labels, vals)
    ax.set_xscale("log")
    ax.set_xlabel("speed-up (x), same process")
    for i, v in enumerate(vals):
        ax.text(v, i, f" {v:.1f}x", va="center")
    save_figure(fig, out / "tie.png")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
