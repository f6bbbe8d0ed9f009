"""ECHO on CPU: the forward-time knee, packed vs per-request verification, wall-clock per policy.

Run: ``.venv/bin/python benchmarks/echo.py [--model PATH] [--dtype bf16] [--prompts 4] [--tokens 32]``
(idle machine; ``--device cuda`` on a GPU). Three measurements, side by side in one process:

1. forward seconds vs new tokens (1..128) on a 256-token cache: the verification knee of this
   device (a CPU is compute-bound almost at once; a GPU stays flat up to a few hundred tokens);
2. one packed super-tree verification of B=8 trees vs a loop of 8 single-tree verifications;
3. wall-clock tokens/s of live speculative decoding per policy vs AR at B=1 and B=4 (self-draft),
   with the outputs checked token for token against AR.

Prints markdown rows for benchmarks/RESULTS.md; saves a PNG to ``--plot``
(default results/benchmarks/echo_cpu.png; '' for none).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from icml26.core.lm import load_lm  # noqa: E402
from icml26.core.torchutil import parse_dtype  # noqa: E402
from icml26.echo.claim import cpu_knee  # noqa: E402
from icml26.echo.cost import fit_knee  # noqa: E402
from icml26.echo.decode import SpeculativeDecoder  # noqa: E402
from icml26.echo.experiment import chat_ids  # noqa: E402
from icml26.echo.model import TreeLM  # noqa: E402
from icml26.echo.policies import AR, DenseDynamic, Echo, StaticTree  # noqa: E402
from icml26.echo.prompts import echo_prompts  # noqa: E402
from icml26.echo.tree import DraftTree  # noqa: E402
from icml26.echo.verify import verify_batch  # noqa: E402


def packed_vs_loop(lm: TreeLM, b: int = 8, reps: int = 3) -> tuple[float, float]:
    g = torch.Generator().manual_seed(0)
    caches, trees = [], []
    for i in range(b):
        ids = torch.randint(0, lm.vocab, (96 + 16 * i,), generator=g)
        caches.append(lm.prefill(ids)[1])
        paths = {}
        for j in range(8):  # a 2-wide, 4-deep tree (8 draft nodes)
            paths[(j % 2 + 1,) + tuple(range(10, 10 + j // 2))] = -float(j)
        trees.append(DraftTree.from_paths(5, {p[:k]: -0.1 * k for p in paths for k in range(1, len(p) + 1)}))
    verify_batch(lm, trees, caches)
    t_packed, t_loop = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        verify_batch(lm, trees, caches)
        t1 = time.perf_counter()
        for tr, c in zip(trees, caches, strict=True):
            verify_batch(lm, [tr], [c])
        t2 = time.perf_counter()
        t_packed.append(t1 - t0)
        t_loop.append(t2 - t1)
    return float(np.median(t_packed)), float(np.median(t_loop))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--exit-layer", type=int, default=None)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--plot", default="results/benchmarks/echo_cpu.png")
    a = ap.parse_args()
    model, tok = load_lm(a.model, dtype=parse_dtype(a.dtype), device=a.device)
    lm = TreeLM(model)
    ell = a.exit_layer or lm.n_layers - 1
    widths, secs = cpu_knee(lm, (1, 2, 4, 8, 16, 32, 64, 128))
    knee = fit_knee(widths, secs)
    print("| new tokens | forward ms |\n|---|---|")
    for w, s in zip(widths, secs, strict=True):
        print(f"| {w} | {1e3 * s:.1f} |")
    print(f"knee fit: T_ar={1e3 * knee.t_ar:.1f} ms, K_max={knee.k_max:.1f}, gamma={knee.gamma:.4f}\n")
    tp, tl = packed_vs_loop(lm)
    print(f"| verification of 8 trees x 9 tokens | packed {1e3 * tp:.0f} ms | per-request loop {1e3 * tl:.0f} ms "
          f"| loop / packed {tl / tp:.2f}x |\n")
    ids = [chat_ids(tok, t) for _, t in echo_prompts(a.prompts, seed=3)]
    pols = [AR(), StaticTree(), StaticTree(depth=5, topk=4, total=8, name="StaticTree-SGLang"),
            DenseDynamic(tau=0.3, topk=4), Echo(topk=4)]
    print("| policy | B | tokens/s (wall) | vs AR | MAT | verified/accepted | identical to AR |\n|---|---|---|---|---|---|---|")
    res = {}
    for b in (1, 4):
        ref = None
        for pol in pols:
            dec = SpeculativeDecoder(lm, ell, pol, k_max=max(b, 16 * b), bucket=1 if isinstance(pol, AR) else 8)
            t0 = time.perf_counter()
            out = dec.generate(ids, a.tokens, batch_size=b, eos_token_id=tok.eos_token_id)
            wall = time.perf_counter() - t0
            tps = sum(map(len, out.tokens)) / wall
            ref = out.tokens if ref is None else ref
            res[pol.name, b] = tps
            print(f"| {pol.name} | {b} | {tps:.1f} | {tps / res['AR', b]:.2f}x | {out.mean_accepted:.2f} | "
                  f"{out.verified_per_accepted:.2f} | {sum(x == y for x, y in zip(out.tokens, ref, strict=True))}/{len(ids)} |")
    if a.plot:
        from icml26.core.plots import pyplot, save_figure

        plt = pyplot()
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
        axes[0].plot(widths, 1e3 * np.array(secs), "o-", label="measured")
        axes[0].plot(widths, 1e3 * knee.time(widths), "--", label=f"knee fit K_max={knee.k_max:.0f}")
        axes[0].set_xscale("log", base=2)
        axes[0].set_xlabel("new tokens in one forward")
        axes[0].set_ylabel("ms")
        axes[0].legend()
        names = [p.name for p in pols]
        x = np.arange(len(names))
        for j, b in enumerate((1, 4)):
            axes[1].bar(x + 0.4 * j, [res[n, b] / res["AR", b] for n in names], 0.4, label=f"B={b}")
        axes[1].set_xticks(x + 0.2, names, rotation=20, fontsize=7)
        axes[1].axhline(1, color="k", lw=0.8)
        axes[1].set_ylabel("wall-clock tokens/s vs AR (CPU)")
        axes[1].legend()
        Path(a.plot).parent.mkdir(parents=True, exist_ok=True)
        save_figure(fig, Path(a.plot))
        print(f"\nfigure: {a.plot}")


if __name__ == "__main__":
    main()
