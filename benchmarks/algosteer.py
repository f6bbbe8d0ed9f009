"""Algorithm-steering pipeline costs, side by side in one process.

Run: ``.venv/bin/python benchmarks/algosteer.py [--programs 48] [--lm] [--device cuda]``
(idle machine). Measures

1. sandbox throughput: a fresh interpreter per program (``run_tests``) vs ``SandboxPool``
   zygotes forking a child per program, 1 and 2 workers (programs/s on the Fibonacci functional
   tests; reference programs, so every run does the same work). Target (issue 16): pool >= 3x.
2. classifier throughput: programs/s of ``classify`` over every task's reference programs.
   Target: >= 1,000 programs/s.
3. with ``--lm``: HF backend new tokens/s at batch 1 vs 16 (SmolLM2, bf16 on CPU; on a GPU pass
   ``--device cuda --batch 64``).

Prints markdown rows for benchmarks/RESULTS.md and saves a PNG to ``--plot``
(default results/benchmarks/algosteer.png; '' for none).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from icml26.algosteer.classify import classify  # noqa: E402
from icml26.algosteer.sandbox import Limits, SandboxPool, run_tests  # noqa: E402
from icml26.algosteer.tasks import TASKS  # noqa: E402


def programs(n: int) -> list[str]:
    fast = [c for fam, codes in TASKS["fib"].references.items() for c in codes]
    return [fast[i % len(fast)] for i in range(n)]


def bench_sandbox(n: int) -> dict[str, float]:
    codes, task, limits = programs(n), TASKS["fib"], Limits(time_s=10)
    out = {}
    t0 = time.perf_counter()
    fresh = [run_tests(c, task, limits).outcome for c in codes]
    out["fresh interpreter"] = n / (time.perf_counter() - t0)
    for workers in (1, 2):
        with SandboxPool(workers) as pool:
            pool.run(codes[0], task, limits)  # start-up is not part of the steady state
            t0 = time.perf_counter()
            pooled = [o.outcome for o in pool.map(codes, task, limits)]
            out[f"pool, {workers} worker(s)"] = n / (time.perf_counter() - t0)
        assert pooled == fresh, "pool and fresh interpreter disagree"
    return out


def bench_classifier(reps: int = 50) -> float:
    pairs = [(c, t) for t in TASKS.values() for codes in t.references.values() for c in codes]
    t0 = time.perf_counter()
    for _ in range(reps):
        for code, task in pairs:
            classify(code, task)
    return reps * len(pairs) / (time.perf_counter() - t0)


def bench_lm(device: str, batch: int, tokens: int = 64) -> dict[str, float]:
    from icml26.algosteer.backends import HFBackend
    from icml26.algosteer.cues import CUES, build_messages

    be = HFBackend(None, device=device, batch_size=batch)
    msgs = build_messages(TASKS["fib"], CUES["none"])
    be.generate([(msgs, 0)], 0.8, 8)  # warm-up (bf16 kernels)
    out = {}
    for b in (1, batch):
        be.batch_size = b
        t0 = time.perf_counter()
        gens = be.generate([(msgs, s) for s in range(b)], 0.8, tokens)
        out[f"batch {b}"] = sum(g.meta["new_tokens"] for g in gens) / (time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=48)
    ap.add_argument("--lm", action="store_true", help="also time HF generation")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--plot", default="results/benchmarks/algosteer.png")
    args = ap.parse_args()
    sb = bench_sandbox(args.programs)
    base = sb["fresh interpreter"]
    print("| sandbox | programs/s | vs fresh interpreter |\n|---|---|---|")
    for k, v in sb.items():
        print(f"| {k} | {v:.1f} | {v / base:.2f}x |")
    cls = bench_classifier()
    print(f"\nclassifier: {cls:,.0f} programs/s (target >= 1,000)")
    lm = bench_lm(args.device, args.batch) if args.lm else {}
    if lm:
        print("\n| HF backend | new tokens/s |\n|---|---|")
        for k, v in lm.items():
            print(f"| {k} | {v:.1f} |")
    if args.plot:
        from icml26.core.plots import pyplot, save_figure

        plt = pyplot()
        fig, axes = plt.subplots(1, 2 if lm else 1, figsize=(10 if lm else 5, 3.2), squeeze=False)
        ax = axes[0][0]
        ax.bar(list(sb), [v / base for v in sb.values()], color=["grey", "C0", "C1"])
        ax.axhline(3.0, ls="--", color="k", lw=1, label="target 3x")
        ax.set_ylabel("programs/s vs fresh interpreter")
        ax.set_title(f"Sandbox throughput ({args.programs} Fibonacci programs)")
        ax.tick_params(axis="x", labelsize=8)
        ax.legend()
        if lm:
            axes[0][1].bar(list(lm), list(lm.values()))
            axes[0][1].set_ylabel("new tokens/s")
            axes[0][1].set_title(f"HF backend on {args.device}")
        path = save_figure(fig, Path(args.plot))
        print(f"\nfigure: {path}")


if __name__ == "__main__":
    main()
