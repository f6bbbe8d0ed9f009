"""tr_dual (QUATRO reconstruction) loss cost vs the GRPO / DAPO / GSPO / KL-penalty losses.

Run: ``.venv/bin/python benchmarks/quatro.py [--queries 32] [--group 8] [--tokens 256]
[--device cpu] [--plot PATH]``. One batch of Q*G sequences x T tokens: random per-token log-probs
with a (Q*G*T -> scalar) linear "policy head" in front so backward does real work; each method's
loss + backward is timed (median of 20 after 3 warm-ups, same process, same tensors; CPU
process time on CPU, so run it with OMP_NUM_THREADS=1). Also times
``solve_dual`` alone for 1,024 queries x G (target <= 2 ms on CPU since issue 36, dual only), and
with the earlier 30 bisection steps first, side by side. Prints markdown rows
for benchmarks/RESULTS.md and saves a bar chart to ``--plot``
(default results/benchmarks/quatro_loss_time.png; '' for none).

Targets (issue 15): tr_dual loss + backward <= 1.2x GRPO's (dual included); solve_dual for 1,024
queries <= 5 ms on CPU. GPU check: the same at 256 x 1,024 tokens (``--device cuda --queries 32
--group 8 --tokens 1024``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from icml26.quatro.dual import solve_dual
from icml26.quatro.losses import METHODS, policy_loss


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _median_time(fn, device: str, reps: int = 20, warm: int = 3) -> float:
    """Median seconds per call: process CPU time on CPU (robust to a shared, loaded machine when
    run single-threaded), wall time with synchronisation on CUDA."""
    clock = time.perf_counter if device.startswith("cuda") else time.process_time
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        _sync(device)
        t0 = clock()
        fn()
        _sync(device)
        ts.append(clock() - t0)
    return statistics.median(ts)


def bench_losses(q: int, g: int, t: int, device: str) -> dict[str, float]:
    gen = torch.Generator().manual_seed(0)
    b = q * g
    old = (-torch.rand(b, t, generator=gen) * 3).to(device)
    noise = (0.1 * torch.randn(b, t, generator=gen)).to(device)
    mask = torch.ones(b, t, device=device)
    rewards = torch.randint(0, 2, (b,), generator=gen).float().to(device)
    w = torch.zeros(b, t, device=device, requires_grad=True)

    out = {}
    for m in METHODS:

        def step(m=m):
            logp = old + noise + w
            loss, _ = policy_loss(logp, old, rewards, mask, g, m)
            loss.backward()
            w.grad = None

        out[m] = _median_time(step, device)
    return out


def bench_dual(q: int, g: int, device: str, **kw) -> float:
    adv = torch.randint(0, 2, (q, g), generator=torch.Generator().manual_seed(1)).float()
    adv = (adv - adv.mean(1, keepdim=True)).to(device)
    return _median_time(lambda: solve_dual(adv, 0.05, **kw), device)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=32)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--plot", default="results/benchmarks/quatro_loss_time.png")
    a = ap.parse_args()
    times = bench_losses(a.queries, a.group, a.tokens, a.device)
    dual_ms = 1e3 * bench_dual(1024, a.group, a.device)
    # the earlier schedule (30 bisection steps before the 8 Newton steps), same process
    dual_old_ms = 1e3 * bench_dual(1024, a.group, a.device, bisect=30)
    base = times["grpo"]
    shape = f"{a.queries}x{a.group} seqs x {a.tokens} tokens, {a.device}"
    print("| method | loss + backward (ms) | / GRPO | batch |\n|---|---|---|---|")
    for m, s in times.items():
        print(f"| {m} | {1e3 * s:.2f} | {s / base:.2f}x | {shape} |")
    print(
        f"\nsolve_dual, 1,024 queries x G={a.group}, 8 Newton steps from the moment start: "
        f"{dual_ms:.2f} ms; with 30 bisection steps first (the earlier default): "
        f"{dual_old_ms:.2f} ms ({dual_old_ms / dual_ms:.2f}x; target <= 2 ms on CPU)"
    )
    if a.plot:
        from icml26.core.plots import pyplot, save_figure

        plt = pyplot()
        fig, ax = plt.subplots(figsize=(6, 3.2))
        ax.bar(list(times), [times[m] / base for m in times])
        ax.axhline(1.2, color="k", ls="--", lw=1, label="target for tr_dual (1.2x)")
        ax.set_ylabel("loss + backward time / GRPO")
        ax.set_title(shape)
        ax.legend()
        save_figure(fig, Path(a.plot))
        print(f"plot: {a.plot}")


if __name__ == "__main__":
    main()
