"""RESTORE prefill cost vs plain reduction and the full sequence, side by side in one process.

Run: ``.venv/bin/python benchmarks/restore.py [--keeps 32 64 128] [--reps 5] [--device cuda]``.
A random LLaVA-shaped model (CLIP tower 96x96 / patch 4 -> 576 visual tokens + CLS, 2 layers;
Llama text model hidden 512, 4 layers, 8 heads, head_dim 64) prefills a batch of 4 prompts
(576 image + 40 text tokens), timed as the median of ``--reps`` after a warm-up:

- full (unpatched model);
- reduced: DivPrune to ``keep`` tokens, re-indexed, no calibration (same patched path);
- reduced + RESTORE: hybrid DivPrune/distinctive anchors, retained positions, calibration;
- anchor selection alone (``distinctive_anchors`` on 576 x 1024 features);
- SDPA without mask vs SDPA with a float bias (B=32, H=32, d=128, L = 700 and 3,000) on ``--device``.

Targets (issue 14): RESTORE <= 1.10x plain reduction; keep 64 of 576 >= 3x faster than full.
Prints markdown rows for benchmarks/RESULTS.md and saves a PNG to ``--plot``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from icml26.restore import RestoreConfig, apply_restore, distinctive_anchors, remove_restore  # noqa: E402
from icml26.restore.vlm import tiny_llava  # noqa: E402


def _sync(device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, reps, device):
    fn()
    out = []
    for _ in range(reps):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


@torch.no_grad()
def prefill(keeps, reps, device, dtype):
    model = tiny_llava(256, image_size=96, patch=4, vision_width=128, vision_layers=2, hidden=512,
                       layers=4, heads=8, kv_heads=8, dtype=dtype).to(device)
    g = torch.Generator().manual_seed(0)
    ids = torch.tensor([[1] * 5 + [255] * 576 + [7] * 35] * 4, device=device)
    px = torch.randn(4, 3, 96, 96, generator=g).to(device, dtype)
    rows = [("full", 576, timed(lambda: model(input_ids=ids, pixel_values=px, logits_to_keep=1), reps, device))]
    for k in keeps:
        for name, cfg in (("reduced", RestoreConfig(reducer="divprune", keep=k, gamma=None,
                                                    positions="reindexed", calibrate=False)),
                          ("reduced+RESTORE", RestoreConfig(reducer="divprune", keep=k))):
            apply_restore(model, cfg)
            try:
                t = timed(lambda: model(input_ids=ids, pixel_values=px, logits_to_keep=1), reps, device)
            finally:
                remove_restore(model)
            rows.append((name, k, t))
    x = torch.randn(576, 1024, generator=g).to(device)
    rows.append(("anchor selection 576x1024 (k=32)", 32, timed(lambda: distinctive_anchors(x, 32), reps, device)))
    return rows


@torch.no_grad()
def sdpa(device, dtype, reps, lengths=(700, 3000), batch=32):
    f = torch.nn.functional.scaled_dot_product_attention
    rows = []
    for L in lengths:
        b = batch if str(device).startswith("cuda") else 1
        q, k, v = (torch.randn(b, 32, L, 128, device=device, dtype=dtype) for _ in range(3))
        bias = torch.randn(b, 1, L, L, device=device, dtype=dtype).tril()
        plain = timed(lambda q=q, k=k, v=v: f(q, k, v, is_causal=True), reps, device)
        biased = timed(lambda q=q, k=k, v=v, bias=bias: f(q, k, v, attn_mask=bias), reps, device)
        rows.append((L, b, plain, biased))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keeps", type=int, nargs="+", default=[32, 64, 128])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--sdpa", action="store_true", help="also time SDPA unmasked vs float bias")
    ap.add_argument("--plot", default="results/benchmarks/restore_prefill.png")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    rows = prefill(args.keeps, args.reps, args.device, dtype)
    full = rows[0][2]
    print("| system | visual tokens | prefill ms (B=4) | vs full | RESTORE / reduced |")
    print("| --- | --- | --- | --- | --- |")
    red = {k: t for n, k, t in rows if n == "reduced"}
    for n, k, t in rows:
        ratio = f"{t / red[k]:.2f}x" if n == "reduced+RESTORE" else ""
        print(f"| {n} | {k} | {1000 * t:.1f} | {full / t:.2f}x faster | {ratio} |")
    if args.sdpa:
        print("\n| L | batch | SDPA causal ms | SDPA float bias ms | ratio |\n| --- | --- | --- | --- | --- |")
        for L, b, p, bb in sdpa(args.device, dtype, args.reps):
            print(f"| {L} | {b} | {1000 * p:.1f} | {1000 * bb:.1f} | {bb / p:.2f}x |")
    if args.plot:
        from icml26.core.plots import pyplot, save_figure

        plt = pyplot()
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for name in ("reduced", "reduced+RESTORE"):
            pts = [(k, 1000 * t) for n, k, t in rows if n == name]
            ax.plot(*zip(*pts, strict=True), "o-", label=name)
        ax.axhline(1000 * full, color="k", lw=0.8, label="full (576)")
        ax.set_xlabel("visual tokens kept")
        ax.set_ylabel("prefill ms (batch 4)")
        ax.legend()
        print(save_figure(fig, args.plot))


if __name__ == "__main__":
    main()
