"""Benchmarks for icml26.sim and TIE, side by side with a baseline in the same process.

1. Simulator: 10^5 requests through the engine with closed-form decode skipping vs step by step
   (the step-by-step run uses 2*10^4 requests and is scaled per request).
2. Score: TIE's quadrature (batched, and one request at a time) vs the official 10k-sample Monte
   Carlo; rank agreement (Spearman) of the two on the same requests.
3. Queue: TIEQueue (lazy-deletion heap) vs re-sorting a list at every admission, 10^4 waiting.
4. Length sampler (``--sampler``, SmolLM2-135M-Instruct bf16, 1 thread): the preallocated-KV
   engine with inverse-CDF draws vs the earlier code (concatenating KV, ``torch.multinomial``) on
   the same prompts, batch, cap and seed; tokens/s of wall and of process CPU time (the CPU figure
   is the one that survives a loaded machine). Default size 12 prompts x 8 samples, batch 32, cap
   384, so the batch refills several times (a steady state, not one batch draining).

Usage: ``python benchmarks/tie.py [--out DIR] [--quick] [--sampler]``; writes tie.json and tie.png
(``--sampler`` writes tie_sampler.json only).
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
    ReplicaCost,
    Request,
    simulate,
)
from icml26.sim.engine import Seq
from icml26.sim.trace import synthetic_trace
from icml26.tie.queue import QueueConfig, TIEQueue
from icml26.tie.score import ScoreTable, tie_score, tie_score_mc


def bench_sim(n_fast: int, n_slow: int) -> dict:
    cost = ReplicaCost(ModelSpec.llama3_8b(), HardwareSpec.h100())  # the sim's layout model (docs/sim.md)
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


def bench_sampler(n_prompts: int, n_samples: int, batch: int, cap: int) -> dict:
    import torch

    from icml26.core.lm import load_lm
    from icml26.tie.lengthstudy import StudyConfig, study_prompts
    from icml26.tie.sampling import SampleConfig, sample_lengths

    model, tok = load_lm(None, dtype=torch.bfloat16, device="cpu")
    prompts = [p for _, p in study_prompts(StudyConfig())[:n_prompts]]
    out = {"model": "SmolLM2-135M-Instruct bf16", "threads": torch.get_num_threads(), "prompts": n_prompts,
           "samples": n_samples, "batch": batch, "cap": cap}
    # after: preallocated KV + inverse-CDF draws; before: the earlier code (concatenated KV, multinomial)
    for engine, draw in (("static", "cdf"), ("concat", "multinomial")):
        t0, c0 = time.perf_counter(), time.process_time()
        res = sample_lengths(model, tok, prompts,
                             SampleConfig(n_samples, cap, 1.0, batch, seed=0, engine=engine, draw=draw))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        toks = sum(sum(r["lengths"]) for r in res.values())
        out[engine] = {"tokens": toks, "wall_s": wall, "cpu_s": cpu, "tok_per_s_wall": toks / wall,
                       "tok_per_s_cpu": toks / cpu, "draw": draw,
                       "capped": sum(sum(r["censored"]) for r in res.values()),
                       "mean_length": toks / (n_prompts * n_samples)}
        print(engine, out[engine], flush=True)
    out["speedup_cpu"] = out["static"]["tok_per_s_cpu"] / out["concat"]["tok_per_s_cpu"]
    out["speedup_wall"] = out["static"]["tok_per_s_wall"] / out["concat"]["tok_per_s_wall"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="benchmarks/out/tie")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (for a smoke run)")
    ap.add_argument("--sampler", action="store_true", help="only the length-sampler benchmark (SmolLM2)")
    ap.add_argument("--sampler-size", default="12,8,32,384", help="prompts,samples,batch,cap")
    a = ap.parse_args()
    out = Path(a.out)
    if a.sampler:
        res = bench_sampler(*(int(x) for x in a.sampler_size.split(",")))
        out.mkdir(parents=True, exist_ok=True)
        (out / "tie_sampler.json").write_text(json.dumps(res, indent=2))
        print(json.dumps(res, indent=2))
        return
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
