"""CAT performance, side by side in one process.

1. Forward time of the fake-quantized model (W4A4) with online block-CAT transforms vs the same
   quantization without transforms (RTN): ratio, target <= 1.15 at block 64. Repeats are
   interleaved and the median is reported, so background load hits both arms alike. QuaRot
   (online dense Hadamards on o_proj/down_proj inputs, no fast Walsh-Hadamard kernel) is timed
   alongside for reference.
2. Time to compute the transforms (block 64 and full) from calibration statistics.

Usage: ``python benchmarks/cat.py [--model PATH] [--device cpu|cuda] [--batch 1 --seq 512]
[--repeats 5] [--out results/bench]``. GPU check of the issue: ``--device cuda --batch 8 --seq 2048``.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path

import torch

from icml26.cat.model import build_transforms, collect_covariances, fake_quantize
from icml26.cat.quarot import quarot_rotate_
from icml26.core.io import atomic_write_json
from icml26.core.lm import load_lm
from icml26.core.plots import pyplot, save_figure
from icml26.core.text import calibration_batches, token_blocks


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--n-calib", type=int, default=16)  # full CAT: >= 2 x 1536 tokens
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    model, tok = load_lm(args.model, dtype=dtype, device=args.device)
    groups = collect_covariances(model, calibration_batches(tok, args.n_calib, 256, seed=0))
    t0 = time.perf_counter()
    cat64 = build_transforms(model, groups, "cat", block=64)
    t_cat64 = time.perf_counter() - t0
    t0 = time.perf_counter()
    build_transforms(model, groups, "cat", block=None)
    t_catfull = time.perf_counter() - t0
    arms = {}
    for name, tr in (("rtn", {}), ("cat-b64", cat64), ("quarot", None)):
        m = copy.deepcopy(model)
        if tr is None:
            tr = quarot_rotate_(m, seed=0)
        fake_quantize(m, 4, 4, transforms=tr)
        arms[name] = m
    ids = token_blocks(tok, "test", args.seq, args.batch).to(args.device)
    times: dict[str, list[float]] = {k: [] for k in arms}
    with torch.no_grad():
        for m in arms.values():  # warm-up (first bf16 calls compile)
            m(input_ids=ids)
        for _ in range(args.repeats):
            for name, m in arms.items():
                _sync(args.device)
                t0 = time.perf_counter()
                m(input_ids=ids)
                _sync(args.device)
                times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    res = {
        "device": args.device,
        "dtype": args.dtype,
        "tokens": args.batch * args.seq,
        "forward_s": med,
        "forward_all_s": times,
        "cat_over_rtn": med["cat-b64"] / med["rtn"],
        "quarot_over_rtn": med["quarot"] / med["rtn"],
        "target_ratio": 1.15,
        "transform_compute_s": {"cat-b64": t_cat64, "cat-full": t_catfull},
        "threads": torch.get_num_threads(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out / "cat.json", res)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.bar(list(med), [v * 1e3 for v in med.values()], color=["tab:gray", "tab:blue", "tab:orange"])
    ax.set_ylabel(f"forward ms ({args.batch}x{args.seq} tokens, {args.device})")
    ax.set_title(f"W4A4 fake-quant forward: CAT-b64 / RTN = {res['cat_over_rtn']:.2f}x")
    save_figure(fig, args.out / "cat_forward.png")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
