"""CorrSteer costs side by side in one process (idle machine; ``--device cuda`` on a GPU).

Run: ``.venv/bin/python benchmarks/corrsteer.py [--n 48] [--d-sae 4096] [--device cpu]``

1. Correlation pass: a 1-token answer forward over ``--n`` (32) letter prompts with the SAE-encoding
   capture hooks at 3 layers and the accumulators, vs the bare forward (target <= 1.3x).
2. Accumulator vs storing activations and ``numpy.corrcoef``: max |r| difference and memory ratio
   (bytes kept) for ``n`` samples of ``d_sae`` features.
3. Steered scoring of 11 systems on the prompt-prefix KV cache vs one full forward per system:
   speed-up, and max |logit difference| in float32 (target 1e-5).
4. SAE training throughput (tokens/s, TopK, ``--d-sae`` latents, d_in 576).
Prints markdown rows for benchmarks/RESULTS.md and saves a PNG to ``--plot``.
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
from icml26.core.mcq import MCQItem  # noqa: E402
from icml26.corrsteer.correlate import CorrelationAccumulator  # noqa: E402
from icml26.corrsteer.mcqsteer import (  # noqa: E402
    encode_items,
    full_forward_logits,
    letter_token_ids,
    score_item,
)
from icml26.corrsteer.sae import SAE  # noqa: E402
from icml26.corrsteer.train import TrainConfig, train_sae  # noqa: E402


def _items(n: int) -> list[MCQItem]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        a, b = rng.integers(10, 99, 2)
        ch = [str(a + b + d) for d in rng.permutation([0, 1, -1, 10])]
        out.append(MCQItem(f"q{i}", "sum", f"What is {a} + {b}? Think about the digits carefully.",
                           tuple(ch), ch.index(str(a + b))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--d-sae", type=int, default=4096)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--plot", default="results/benchmarks/corrsteer.png")
    args = ap.parse_args()
    rows = []
    model, tok = load_lm(None, dtype=torch.bfloat16, device=args.device)
    layers = [8, 15, 22]
    saes = {L: SAE(576, args.d_sae, "topk", 32, seed=L).to(args.device).to(torch.bfloat16) for L in layers}
    items = _items(args.n)
    ids = encode_items(tok, items)
    letters = letter_token_ids(tok, 4)
    for i in ids[:3]:  # warm up (bf16 kernels)
        score_item(model, i, letters)

    def corr_pass(with_sae: bool) -> float:
        t = time.perf_counter()
        accs = {L: CorrelationAccumulator(args.d_sae) for L in layers}
        for k, i in enumerate(ids):
            logits, got = score_item(model, i, letters, capture=layers if with_sae else ())
            if with_sae:
                y = np.array([float(int(logits[0].argmax()) == items[k].answer)])
                for L in layers:
                    accs[L].update(saes[L].encode(got[L][None].to(args.device)).float().cpu(), y)
        return time.perf_counter() - t

    bare, full = corr_pass(False), corr_pass(True)
    rows.append(("correlation pass with SAE encode + accumulators vs bare forward",
                 f"{full:.2f} s vs {bare:.2f} s", f"{full / bare:.2f}x"))
    rng = np.random.default_rng(0)
    x = rng.exponential(size=(2000, args.d_sae)) * (rng.random((2000, args.d_sae)) < 0.01)
    y = (rng.random(2000) < 0.4).astype(float)
    acc = CorrelationAccumulator(args.d_sae)
    for c in range(0, 2000, 100):
        acc.update(x[c:c + 100], y[c:c + 100])
    live = x.std(0) > 0
    ref = np.corrcoef(np.c_[x[:, live], y].T)[-1, :-1]
    err = float(np.abs(acc.corr()[live] - ref).max())
    mem_acc = sum(v.nbytes for v in acc.state().values())
    rows.append(("accumulator vs stored activations + np.corrcoef (2,000 samples)",
                 f"max abs Δr {err:.1e}", f"{x.nbytes / mem_acc:.0f}x less memory"))
    model32, _ = load_lm(None, dtype=torch.float32, device=args.device)
    deltas = {L: torch.randn(11, 576, dtype=torch.float64) for L in layers}
    t = time.perf_counter()
    fast = [score_item(model32, i, letters, deltas, n_rows=11)[0] for i in ids[:8]]
    t_fast = time.perf_counter() - t
    t = time.perf_counter()
    slow = [torch.cat([full_forward_logits(model32, i, letters, {L: v[b] for L, v in deltas.items()})
                       for b in range(11)]) for i in ids[:8]]
    t_slow = time.perf_counter() - t
    diff = max(float((a - b).abs().max()) for a, b in zip(fast, slow, strict=True))
    rows.append(("11 steered systems on the prefix KV cache vs 11 full forwards (fp32, 8 items)",
                 f"{t_fast:.2f} s vs {t_slow:.2f} s, max abs Δlogit {diff:.1e}", f"{t_slow / t_fast:.1f}x"))
    xs = torch.randn(20_000, 576) * 3
    _, st = train_sae(xs, TrainConfig(d_sae=args.d_sae, k=32, batch_size=512, epochs=1))
    rows.append((f"SAE training, TopK {args.d_sae} latents, batch 512", f"{st['tokens_per_s']:.0f} tokens/s", ""))
    print("| measurement | value | ratio |\n| --- | --- | --- |")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if args.plot:
        from icml26.core.plots import pyplot, save_figure

        plt = pyplot()
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.barh(["corr pass\n(SAE / bare)", "steered scoring\n(full / KV cache)"], [full / bare, t_slow / t_fast])
        ax.axvline(1, color="k", lw=0.8)
        ax.set_xlabel("time ratio")
        save_figure(fig, Path(args.plot))
        print(f"saved {args.plot}")


if __name__ == "__main__":
    main()
