"""Claim ``lems``: KFAC-SVD + LEMS beats uniform ranks and older whitening at equal parameters.

Every arm compresses the same target layers of the same model to the same budget (fraction of
linear weight parameters kept) and is scored by perplexity on the same Wikipedia test windows:
dense; plain SVD, SVD-LLM, ASVD, FWSVD with uniform ranks; KFAC-SVD uniform and KFAC-SVD + LEMS
with each left factor ("official" L_G, "transpose" L_G^T); SVD-LLM + LEMS. Headline:
ppl(KFAC + LEMS) / ppl(KFAC uniform) at 60% kept (official left factor), with a 95% paired
bootstrap CI over test windows. Target: < 0.90.

Options (``--opt key=value``): ``model`` (HF folder or .gguf; default packaged SmolLM2),
``dtype`` (model dtype for statistics, search and evaluation; default bf16; factorization always
uses float32 weights), ``n_calib``, ``n_search``, ``seq_len``, ``eval_tokens``, ``trials``,
``ratios`` (comma list), ``last_blocks`` (compress only the last N blocks; 0 = all).
"""

from __future__ import annotations

import copy
import math
import time

import numpy as np
import torch

from icml26.core.claims import Measure, Result, RunContext
from icml26.core.lm import cache_root, load_lm
from icml26.core.plots import pyplot, save_figure
from icml26.core.text import calibration_batches, perplexity, token_ids
from icml26.core.torchutil import bootstrap_ci, check_device, parse_dtype
from icml26.lems.export import apply_ranks_, count_linear_params
from icml26.lems.factorize import factorize
from icml26.lems.layers import block_list, target_layers
from icml26.lems.lems import kept_fraction, uniform_ranks
from icml26.lems.search import KLScorer, layer_sensitivities, lems_search, ranks_summary
from icml26.lems.stats import collect_kfac_stats

TARGET = 0.90
HEADLINE_RATIO = 0.6
# (label, decomposition, left factor, allocator)
ARMS = [
    ("SVD, uniform", "svd", "official", "uniform"),
    ("SVD-LLM, uniform", "svd_llm", "official", "uniform"),
    ("ASVD, uniform", "asvd", "official", "uniform"),
    ("FWSVD, uniform", "fwsvd", "official", "uniform"),
    ("KFAC-SVD (L_G), uniform", "kfac", "official", "uniform"),
    ("KFAC-SVD (L_G), LEMS", "kfac", "official", "lems"),
    ("KFAC-SVD (L_G^T), uniform", "kfac", "transpose", "uniform"),
    ("KFAC-SVD (L_G^T), LEMS", "kfac", "transpose", "lems"),
    ("SVD-LLM, LEMS", "svd_llm", "official", "lems"),
]


def _settings(ctx: RunContext) -> dict:
    o = ctx.options
    d = {
        "n_calib": ctx.pick(4, 64, 256), "n_search": ctx.pick(2, 8, 32),
        "seq_len": ctx.pick(64, 256, 2048), "eval_tokens": ctx.pick(1024, 16384, 262144),
        "eval_len": ctx.pick(256, 512, 2048), "trials": ctx.pick(2, 10, 10),
        "ratios": ctx.pick("0.6", "0.8,0.6", "0.9,0.8,0.7,0.6"), "last_blocks": ctx.pick(2, 0, 0),
    }
    for key in d:
        if key in o:
            d[key] = o[key] if key == "ratios" else int(o[key])
    d["ratios"] = sorted({float(x) for x in str(d["ratios"]).split(",")} | {HEADLINE_RATIO},
                         reverse=True)
    return d


def run(ctx: RunContext) -> Result:
    device = check_device(ctx.device)
    dtype = parse_dtype(ctx.options.get("dtype", "bf16"))
    s = _settings(ctx)
    prog = ctx.progress
    model_name = ctx.options.get("model")
    label = model_name or "SmolLM2-135M-Instruct"
    model32, tok = load_lm(model_name, dtype=torch.float32, device=device)
    model = copy.deepcopy(model32).to(dtype) if dtype != torch.float32 else model32
    n_blocks = len(block_list(model)[1])
    last = s["last_blocks"]
    layers = target_layers(model, blocks=(lambda b: b >= n_blocks - last) if last else None)

    calib = calibration_batches(tok, s["n_calib"], s["seq_len"], batch_size=4, seed=ctx.seed)
    search = calibration_batches(tok, s["n_search"], s["seq_len"], batch_size=4, seed=ctx.seed + 1000)
    test_ids = token_ids(tok, "test", max_tokens=s["eval_tokens"])
    cache = cache_root() / "lems" / f"{label.replace('/', '_')}-{ctx.scale}-{ctx.seed}-{last}"
    times: dict[str, float] = {}

    def timed(key, fn, *a, **k):
        t0 = time.perf_counter()
        out = fn(*a, **k)
        times[key] = times.get(key, 0.0) + time.perf_counter() - t0
        return out

    def ppl_of(m):
        return timed("perplexity", perplexity, m, tok, ids=test_ids, seq_len=s["eval_len"],
                     max_tokens=None, progress=prog)

    dense = ppl_of(model)
    stats = timed("statistics", collect_kfac_stats, model, calib, layers=layers,
                  cache=cache / "stats.safetensors", progress=prog)
    scorer = timed("search set", KLScorer, model, search)
    names = [lay.name for lay in layers]
    dense_params = count_linear_params(model, names)
    rows = [{"system": "dense", "target": 1.0, "kept": 1.0, "linear params": dense_params,
             "perplexity": round(dense.ppl, 3)}]
    windows = {"dense": np.array(dense.window_nll)}
    n_tok = np.array(dense.window_tokens)
    trials_log, heat = [], None
    by_decomp: dict[tuple[str, str], list] = {}
    for arm in ARMS:
        by_decomp.setdefault((arm[1], arm[2]), []).append(arm)
    for (method, left), arms in by_decomp.items():
        factors = timed("factorize", factorize, model32, stats, method, left_factor=left,
                        layers=layers, compute_dtype=torch.float32, progress=prog)
        factors = {n: _to(f, device) for n, f in factors.items()}
        kls = None
        if any(a[3] == "lems" for a in arms):
            kls = timed("sensitivity", layer_sensitivities, model, factors, layers, scorer,
                        cache=cache / f"kl-{method}-{left}.json", tag=f"{method}:{left}", progress=prog)
        for ratio in s["ratios"]:
            for arm_label, _, _, alloc in arms:
                info = {}
                if alloc == "uniform":
                    ranks = uniform_ranks(layers, ratio)
                else:
                    res = timed("LEMS search", lems_search, model, factors, layers, kls, ratio,
                                scorer=scorer, trials=s["trials"], seed=42, progress=prog)
                    ranks = res.ranks
                    info = {"alpha": round(res.alpha, 3), "gamma": round(res.gamma, 3)}
                    trials_log += [dict(t, arm=arm_label, ratio=ratio) for t in res.trials]
                    if method == "kfac" and left == "official" and ratio == HEADLINE_RATIO:
                        heat = ranks_summary(layers, ranks)
                m = copy.deepcopy(model)
                apply_ranks_(m, factors, ranks)
                res_ppl = ppl_of(m)
                key = f"{arm_label} @ {ratio}"
                windows[key] = np.array(res_ppl.window_nll)
                rows.append({"system": arm_label, "target": ratio,
                             "kept": round(kept_fraction(layers, ranks), 4),
                             "linear params": count_linear_params(m, names),
                             "perplexity": round(res_ppl.ppl, 3),
                             "vs dense": round(res_ppl.ppl / dense.ppl, 3), **info})
                del m
        del factors

    def ratio_fn(a, b, n):
        return float(np.exp((a.sum() - b.sum()) / n.sum()))

    lems_w = windows[f"KFAC-SVD (L_G), LEMS @ {HEADLINE_RATIO}"]
    unif_w = windows[f"KFAC-SVD (L_G), uniform @ {HEADLINE_RATIO}"]
    value = ratio_fn(lems_w, unif_w, n_tok)
    spread = bootstrap_ci(ratio_fn, lems_w, unif_w, n_tok, seed=ctx.seed)
    figures = _figures(ctx, rows, heat, trials_log, label)
    notes = [
        f"{label}: its weights went through Q4_1 quantization (the packaged GGUF, dequantized), "
        "which puts a noise floor under every singular spectrum.",
        f"{len(layers)} target linears (embeddings, norms and the tied head excluded)"
        + (f", last {last} of {n_blocks} blocks only" if last else "") + ".",
        f"Calibration {s['n_calib']} x {s['seq_len']} tokens and search set {s['n_search']} x "
        f"{s['seq_len']} from the Wikipedia train split (paper: 256 x 2048 and 32 x 2048 of "
        "WikiText-2); perplexity on "
        f"{int(n_tok.sum())} Wikipedia test tokens in {s['eval_len']}-token windows, so numbers "
        "are not comparable with the paper's WikiText-2 perplexities.",
        f"Statistics, search and evaluation in {str(dtype).removeprefix('torch.')}; factorization "
        "in float32 from the float32 weights. LEMS: KL at T=0.6 skipping 1/8 of positions, "
        f"Optuna TPE {s['trials']} trials (seed 42), ranks multiples of 8, HiGHS MILP instead of Gurobi.",
        "Spread: 95% paired bootstrap over test windows (one calibration seed).",
        "Stage times (s): " + ", ".join(f"{k} {v:.0f}" for k, v in times.items()) + ".",
    ]
    return Result(rows=rows, headline=Measure(
        f"ppl(KFAC+LEMS) / ppl(KFAC uniform) at {HEADLINE_RATIO:.0%} kept", value, "x", spread,
        higher_is_better=False), target=TARGET, notes=notes, figures=figures)


def _to(f, device):
    f.left, f.right = f.left.to(device), f.right.to(device)
    return f


def _figures(ctx, rows, heat, trials_log, label):
    plt = pyplot()
    out = []
    fig, ax = plt.subplots(figsize=(7, 4.2))
    dense = rows[0]["perplexity"]
    targets = sorted({r["target"] for r in rows[1:]})
    if len(targets) == 1:  # one budget: a bar per arm
        arms = [a[0] for a in ARMS]
        vals = [next(r["perplexity"] for r in rows if r["system"] == a) for a in arms]
        ax.barh(arms, vals, color=["C1" if "LEMS" in a else "C0" for a in arms])
        ax.axvline(dense, color="k", lw=0.8, label="dense")
        ax.set_xscale("log")
        ax.set_xlabel(f"test perplexity at {targets[0]:.0%} of linear parameters kept (log)")
        ax.tick_params(axis="y", labelsize=7)
        ax.xaxis.set_minor_formatter(plt.NullFormatter())
    else:
        for arm in ARMS:
            pts = sorted((r["target"], r["perplexity"]) for r in rows if r["system"] == arm[0])
            ax.plot(*zip(*pts, strict=True), marker="o", label=arm[0],
                    linestyle="-" if arm[3] == "lems" else "--")
        ax.axhline(dense, color="k", lw=0.8, label="dense")
        ax.set_yscale("log")
        ax.set_xlabel("fraction of linear parameters kept (target; achieved within 0.5%)")
        ax.set_ylabel("test perplexity (log)")
    ax.set_title(f"{label}: perplexity at equal parameter budgets")
    ax.legend(fontsize=7)
    out.append(save_figure(fig, ctx.out_dir / "ppl_vs_ratio.png"))
    if heat is not None:
        grid, blocks, kinds = heat
        fig, ax = plt.subplots(figsize=(5, max(2.5, 0.18 * len(blocks) + 1)))
        im = ax.imshow(grid, aspect="auto", cmap="viridis", vmin=0, vmax=1)
        ax.set_xticks(range(len(kinds)), kinds, rotation=45, ha="right", fontsize=7)
        ax.set_yticks(range(len(blocks)), blocks, fontsize=6)
        ax.set_ylabel("block")
        ax.set_title(f"KFAC+LEMS kept fraction per layer at {HEADLINE_RATIO:.0%}")
        fig.colorbar(im, ax=ax)
        out.append(save_figure(fig, ctx.out_dir / "lems_ratios.png"))
    measured = [t for t in trials_log if t.get("kl") is not None and math.isfinite(t["kl"])]
    if measured:
        fig, ax = plt.subplots(figsize=(5.5, 4))
        for arm in sorted({t["arm"] for t in measured}):
            pts = [(t["surrogate"], t["kl"]) for t in measured if t["arm"] == arm]
            ax.scatter(*zip(*pts, strict=True), s=14, label=arm)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_minor_formatter(plt.NullFormatter())
        ax.yaxis.set_minor_formatter(plt.NullFormatter())
        ax.set_xlabel("additive surrogate sum_l KL_l shape_l(r_l)")
        ax.set_ylabel("measured KL on the search set")
        ax.set_title("LEMS: surrogate vs measured KL (Optuna trials)")
        ax.legend(fontsize=7)
        out.append(save_figure(fig, ctx.out_dir / "surrogate_vs_kl.png"))
    return out
