"""LEMS performance: stage times, and a compressed model against the dense one side by side.

1. Stage times of KFAC-SVD + LEMS on the packaged SmolLM2 (statistics, factorization, LEMS
   sensitivities, one knapsack solve, Optuna trials).
2. At 60% of linear parameters kept (KFAC + LEMS ranks): parameter count and bytes, prefill
   tokens/s (batch x seq) and greedy decode tokens/s, dense vs compressed in the same process.

3. ``--kl-only``: CPU seconds per LEMS KL score (one layer in block 15 and in block 29 perturbed,
   2 x 256 search tokens) with the scorer's references on the device, offloaded to the CPU, and
   offloaded to disk; no compression run.

Usage: ``python benchmarks/lems.py [--last-blocks N] [--n-calib 16] [--prefill 4x512]
[--decode 64] [--device cpu] [--out results/bench] [--kl-only]``. Prints markdown rows for RESULTS.md and
writes ``lems.json`` and ``lems_speed.png``. On a GPU: ``--device cuda --prefill 8x2048``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from icml26.core.lm import load_lm  # noqa: E402
from icml26.core.plots import pyplot, save_figure  # noqa: E402
from icml26.core.text import calibration_batches  # noqa: E402
from icml26.lems.export import apply_ranks_, count_linear_params  # noqa: E402
from icml26.lems.factorize import factorize  # noqa: E402
from icml26.lems.layers import block_list, target_layers  # noqa: E402
from icml26.lems.lems import kept_fraction  # noqa: E402
from icml26.lems.search import KLScorer, layer_sensitivities, lems_search, solve_lems  # noqa: E402
from icml26.lems.stats import collect_kfac_stats  # noqa: E402


def _sync(device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


@torch.no_grad()
def prefill_tps(model, ids, device, reps=3) -> float:
    model(input_ids=ids)  # warm-up (first bf16 calls compile kernels)
    _sync(device)
    t = time.perf_counter()
    for _ in range(reps):
        model(input_ids=ids)
    _sync(device)
    return reps * ids.numel() / (time.perf_counter() - t)


@torch.no_grad()
def decode_tps(model, ids, n_new, device) -> float:
    model.generate(ids, max_new_tokens=4, do_sample=False)
    _sync(device)
    t = time.perf_counter()
    model.generate(ids, max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False)
    _sync(device)
    return n_new * ids.shape[0] / (time.perf_counter() - t)


def kl_scores(device, reps: int = 3) -> list[dict]:
    """CPU seconds per KLScorer.score for each offload mode (same model, batches, perturbation)."""
    import tempfile

    from icml26.lems.layers import swapped_weights

    m32, tok = load_lm(None, dtype=torch.float32, device=device)
    model = m32.to(torch.bfloat16)
    search = calibration_batches(tok, 2, 256, batch_size=4, seed=1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="lems-kl-") as tmp:
        for mode in (None, "cpu", Path(tmp) / "refs"):
            t = time.process_time()
            scorer = KLScorer(model, search, offload=mode)
            build = time.process_time() - t
            for block in (15, 29):
                name = f"model.layers.{block}.mlp.down_proj"
                w = model.get_submodule(name).weight.detach()
                with swapped_weights(model, {name: (w.float() * 0.5).to(w.dtype)}):
                    kl = scorer.score(model, block)  # warm-up
                    t = time.process_time()
                    for _ in range(reps):
                        scorer.score(model, block)
                    cpu = (time.process_time() - t) / reps
                rows.append({"offload": "device" if mode is None else ("cpu" if mode == "cpu" else "disk"),
                             "block": block, "cpu_s_per_score": cpu, "build_cpu_s": build, "kl": kl})
    print("| offload | layer in block | CPU s per score (2×256) | build CPU s | KL |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['offload']} | {r['block']} | {r['cpu_s_per_score']:.3f} | {r['build_cpu_s']:.2f} | {r['kl']:.6f} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--last-blocks", type=int, default=0, help="compress only the last N blocks (0 = all)")
    ap.add_argument("--n-calib", type=int, default=16)
    ap.add_argument("--n-search", type=int, default=4)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--ratio", type=float, default=0.6)
    ap.add_argument("--prefill", default="4x512")
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    ap.add_argument("--kl-only", action="store_true", help="only time the KL scorer's offload modes")
    args = ap.parse_args()
    if args.kl_only:
        rows = kl_scores(args.device)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "lems_kl.json").write_text(json.dumps(rows, indent=2))
        return
    device, dtype = args.device, torch.bfloat16
    m32, tok = load_lm(None, dtype=torch.float32, device=device)
    model = copy.deepcopy(m32).to(dtype)
    nb = len(block_list(model)[1])
    layers = target_layers(model, blocks=(lambda b: b >= nb - args.last_blocks) if args.last_blocks else None)
    calib = calibration_batches(tok, args.n_calib, 256, batch_size=4, seed=0)
    search = calibration_batches(tok, args.n_search, 256, batch_size=4, seed=1)
    times = {}
    t = time.perf_counter()
    stats = collect_kfac_stats(model, calib, layers=layers)
    times["statistics"] = time.perf_counter() - t
    t = time.perf_counter()
    factors = factorize(m32, stats, "kfac", layers=layers, compute_dtype=torch.float32)
    times["factorize (SVD)"] = time.perf_counter() - t
    t = time.perf_counter()
    scorer = KLScorer(model, search)
    kls = layer_sensitivities(model, factors, layers, scorer)
    times["sensitivity"] = time.perf_counter() - t
    t = time.perf_counter()
    solve_lems(layers, factors, kls, nb, 0.0, 5.0, args.ratio, 8)
    times["knapsack (1 solve)"] = time.perf_counter() - t
    t = time.perf_counter()
    res = lems_search(model, factors, layers, kls, args.ratio, scorer=scorer, trials=args.trials)
    times[f"Optuna ({args.trials} trials)"] = time.perf_counter() - t
    names = [lay.name for lay in layers]
    comp = copy.deepcopy(model)
    apply_ranks_(comp, factors, res.ranks)
    b, s = (int(x) for x in args.prefill.split("x"))
    ids = calibration_batches(tok, b, s, batch_size=b, seed=2)[0].to(device)
    row = {"kept_fraction": kept_fraction(layers, res.ranks), "stage_s": times}
    for label, m in (("dense", model), ("compressed", comp)):
        row[label] = {
            "linear_params": count_linear_params(m, names),
            "total_params": sum(p.numel() for p in m.parameters()),
            "param_bytes": sum(p.numel() * p.element_size() for p in m.parameters()),
            "prefill_tok_s": prefill_tps(m, ids, device),
            "decode_tok_s": decode_tps(m, ids[:1, :32], args.decode, device),
        }
    d, c = row["dense"], row["compressed"]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "lems.json").write_text(json.dumps(row, indent=2))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3))
    keys = ["param_bytes", "prefill_tok_s", "decode_tok_s"]
    ax.bar(keys, [c[k] / d[k] for k in keys])
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_ylabel("compressed / dense")
    ax.set_title(f"KFAC+LEMS at {args.ratio:.0%} kept ({device}, bf16)")
    save_figure(fig, args.out / "lems_speed.png")
    print("| stage | seconds |\n|---|---|")
    for k, v in times.items():
        print(f"| {k} | {v:.1f} |")
    print("\n| what | compressed | dense | ratio | conditions |\n|---|---|---|---|---|")
    cond = f"SmolLM2-135M bf16, {len(layers)} layers, kept {row['kept_fraction']:.4f}, {device}"
    for k in ("linear_params", "total_params", "param_bytes", "prefill_tok_s", "decode_tok_s"):
        print(f"| {k} | {c[k]:.4g} | {d[k]:.4g} | {c[k] / d[k]:.3f}x | {cond}, prefill {args.prefill} |")


if __name__ == "__main__":
    main()
