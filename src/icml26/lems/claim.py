"""Claim ``lems``: KFAC-SVD + LEMS beats uniform ranks and older whitening at equal parameters.

Every arm compresses the same target layers of the same model to the same budget (fraction of
linear weight parameters kept) and is scored by perplexity on the same Wikipedia test windows:
dense; plain SVD, SVD-LLM, ASVD, FWSVD with uniform ranks; KFAC-SVD uniform and KFAC-SVD + LEMS
with each left factor ("official" L_G, "transpose" L_G^T); SVD-LLM + LEMS. Headline:
ppl(KFAC + LEMS) / ppl(KFAC uniform) at 60% kept (official left factor), with a 95% paired
bootstrap CI clustered over calibration seeds, then test windows. Target: < 0.90.

Power checks: the positive control is a *random* per-layer rank allocation of the same KFAC
factors at the same budget (the same knapsack, with a random importance per layer): it must move
perplexity away from uniform ranks (either way) beyond its paired CI, or per-layer allocation
cannot matter in this setup. The floor is an add-one unigram model of the train split, scored on
the same test positions. Degeneracy: LEMS's ranks must differ from the uniform ranks in at least
one layer.

Options (``--opt key=value``): ``model`` (HF folder or .gguf; default packaged SmolLM2),
``dtype`` (model dtype for statistics, search and evaluation; default the dtype policy, bf16 only where native; factorization always
uses float32 weights), ``n_calib``, ``n_search``, ``seq_len``, ``eval_tokens``, ``trials``,
``ratios`` (comma list), ``last_blocks`` (compress only the last N blocks; 0 = all), ``seeds``
(calibration seeds, one unit each; default 1 tiny, 3 small/full), ``drop`` (comma list of baseline
decompositions to leave out: svd, svd_llm, asvd, fwsvd -- the issue lets ASVD and FWSVD go when
they do not fit).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from icml26.core import power
from icml26.core.claims import Measure, Result, RunContext
from icml26.core.errors import UserError
from icml26.core.io import atomic_write_json
from icml26.core.lm import cache_root, load_lm, resolve_dtype
from icml26.core.plots import pyplot, save_figure
from icml26.core.sanity import unigram_window_nll
from icml26.core.stats import clustered_bootstrap
from icml26.core.text import calibration_batches, perplexity, token_ids
from icml26.core.torchutil import bootstrap_ci, check_device
from icml26.lems.export import apply_ranks_, count_linear_params
from icml26.lems.factorize import factorize
from icml26.lems.layers import TargetLayer, block_list, target_layers
from icml26.lems.lems import (
    LayerOptions,
    candidate_ranks,
    kept_fraction,
    solve_knapsack,
    uniform_ranks,
)
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
    # the positive control, at the headline budget only
    ("KFAC-SVD (L_G), random ranks", "kfac", "official", "random"),
]
UNIGRAM = "unigram, add-one (train split)"


def _settings(ctx: RunContext) -> dict:
    o = ctx.options
    d = {
        "n_calib": ctx.pick(4, 64, 256), "n_search": ctx.pick(2, 8, 32),
        "seq_len": ctx.pick(64, 256, 2048), "eval_tokens": ctx.pick(256, 16384, 262144),
        "eval_len": ctx.pick(64, 512, 2048), "trials": ctx.pick(2, 10, 10),
        "ratios": ctx.pick("0.6", "0.8,0.6", "0.9,0.8,0.7,0.6"), "last_blocks": ctx.pick(2, 0, 0),
        "seeds": ctx.pick(1, 3, 3),
    }
    for key in d:
        if key in o:
            d[key] = o[key] if key == "ratios" else int(o[key])
    d["ratios"] = sorted({float(x) for x in str(d["ratios"]).split(",")} | {HEADLINE_RATIO},
                         reverse=True)
    drop = sorted({x.strip() for x in str(o.get("drop", "")).split(",") if x.strip()})
    bad = [x for x in drop if x not in ("svd", "svd_llm", "asvd", "fwsvd")]
    if bad:
        raise UserError(f"--opt drop: {', '.join(bad)} cannot be dropped (choose among svd, "
                        "svd_llm, asvd, fwsvd; the KFAC arms make the headline)")
    d["drop"] = drop
    return d


def units(ctx: RunContext) -> list[RunContext]:
    """One unit per calibration seed (``seed``, ``seed + 1``, ...): calibration and search batches
    are drawn with that seed; the test windows are the same for every unit."""
    n = _settings(ctx)["seeds"]
    if n < 1:
        raise UserError(f"--opt seeds must be >= 1; got {n}")
    return [dataclasses.replace(ctx, seed=ctx.seed + i, out_dir=ctx.out_dir / f"seed{ctx.seed + i}")
            for i in range(n)]


def run(ctx: RunContext) -> Result:
    return combine(ctx, [run_unit(u) for u in units(ctx)])


def run_unit(ctx: RunContext) -> Result:
    """Every arm for one calibration seed. Besides its Result it writes ``windows.json`` (per-window
    test NLLs of every arm, chosen ranks summary, Optuna trials, stage times) for :func:`combine`."""
    t_start = time.perf_counter()
    device = check_device(ctx.device)
    dtype = resolve_dtype(ctx.options.get("dtype"), device)  # default: the dtype policy
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
    chosen: dict[str, dict] = {}  # allocator -> ranks of the headline decomposition and budget
    by_decomp: dict[tuple[str, str], list] = {}
    for arm in (a for a in ARMS if a[1] not in s["drop"]):
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
                if alloc == "random" and ratio != HEADLINE_RATIO:
                    continue
                if alloc == "uniform":
                    ranks = uniform_ranks(layers, ratio)
                elif alloc == "random":
                    ranks = random_ranks(layers, ratio, seed=ctx.seed)
                else:
                    res = timed("LEMS search", lems_search, model, factors, layers, kls, ratio,
                                scorer=scorer, trials=s["trials"], seed=42, progress=prog)
                    ranks = res.ranks
                    info = {"alpha": round(res.alpha, 3), "gamma": round(res.gamma, 3)}
                    trials_log += [dict(t, arm=arm_label, ratio=ratio) for t in res.trials]
                    if method == "kfac" and left == "official" and ratio == HEADLINE_RATIO:
                        heat = ranks_summary(layers, ranks)
                if method == "kfac" and left == "official" and ratio == HEADLINE_RATIO:
                    chosen[alloc] = ranks
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

    lems_w = windows[HEADLINE_LEMS]
    unif_w = windows[HEADLINE_UNIFORM]
    value = _ratio(lems_w, unif_w, n_tok)
    spread = bootstrap_ci(_ratio, lems_w, unif_w, n_tok, seed=ctx.seed)
    # the floor: an add-one unigram of the train split on the same test positions
    train_ids = token_ids(tok, "train")
    vocab = max(len(tok), int(test_ids.max()) + 1, int(train_ids.max()) + 1)
    uni_nll, uni_n = unigram_window_nll(train_ids, test_ids, vocab, s["eval_len"])
    if not np.array_equal(uni_n, n_tok):
        raise RuntimeError("the unigram and the models must score the same test positions")
    windows[UNIGRAM] = uni_nll
    differing = sum(chosen["lems"].get(n) != chosen["uniform"].get(n) for n in names)
    for row in rows:
        row["seed"] = ctx.seed
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    meta = {"label": label, "layers": len(layers), "blocks": n_blocks, "last": last,
            "dtype": str(dtype).removeprefix("torch."), "settings": {**s, "ratios": s["ratios"]},
            "seed": ctx.seed, "times": times, "wall": time.perf_counter() - t_start,
            "ranks differing": {"differing": int(differing), "total": len(names)}}
    side = ctx.out_dir / "windows.json"
    atomic_write_json(side, {
        "meta": meta, "rows": rows, "n_tok": n_tok.tolist(),
        "windows": {k: v.tolist() for k, v in windows.items()}, "trials": trials_log,
        "heat": None if heat is None else {"grid": np.nan_to_num(heat[0], nan=-1).tolist(),
                                           "blocks": heat[1], "kinds": heat[2]},
    })
    return Result(rows=rows, headline=Measure(
        HEADLINE_NAME, value, "x", spread, higher_is_better=False), target=TARGET,
        notes=[f"seed {ctx.seed}: {value:.3f} [{spread[0]:.3f}, {spread[1]:.3f}]"], figures=[side])


HEADLINE_NAME = f"ppl(KFAC+LEMS) / ppl(KFAC uniform) at {HEADLINE_RATIO:.0%} kept"
HEADLINE_LEMS = f"KFAC-SVD (L_G), LEMS @ {HEADLINE_RATIO}"
HEADLINE_UNIFORM = f"KFAC-SVD (L_G), uniform @ {HEADLINE_RATIO}"
LEMS, UNIFORM, RANDOM = "KFAC-SVD (L_G), LEMS", "KFAC-SVD (L_G), uniform", "KFAC-SVD (L_G), random ranks"
HEADLINE_RANDOM = f"{RANDOM} @ {HEADLINE_RATIO}"


def _ratio(a, b, n):
    """exp(mean over seeds of (NLL_a - NLL_b) per token): the perplexity ratio, geometric mean
    over seeds. ``a``, ``b``: (windows,) or (windows, seeds) window NLL sums; ``n``: (windows,)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    diff = (a.sum(0) - b.sum(0)) / np.asarray(n, dtype=np.float64).sum()
    return float(np.exp(np.mean(diff)))


def random_ranks(layers: list[TargetLayer], target: float, *, seed: int, multiple: int = 8,
                 sigma: float = 1.0) -> dict[str, int | None]:
    """A random allocation at the budget ``target`` (the positive control): LEMS's options (dense,
    or a multiple-of-8 rank with r / r_eq in [lo, 0.95)) and knapsack, but each layer's error is
    ``w_l * params_l * (1 - c)^2`` (c = kept fraction of the option) with a random importance
    ``w_l ~ LogNormal(0, sigma)`` instead of a measured one. Kept fractions then spread over the
    options as widely as LEMS's do, with no information about the layers."""
    rng = np.random.default_rng(seed)
    weights = rng.lognormal(0.0, sigma, len(layers))
    opts = []
    for lay, w in zip(layers, weights, strict=True):
        ranks = candidate_ranks(lay, target, multiple=multiple)
        cost = ranks * (lay.n_in + lay.n_out)
        kept = cost / lay.params
        opts.append(LayerOptions(
            ranks=np.concatenate([[-1], ranks]),
            cost=np.concatenate([[lay.params], cost]).astype(np.float64),
            error=np.concatenate([[0.0], w * lay.params * (1.0 - kept) ** 2])))
    picks = solve_knapsack(opts, target * sum(lay.params for lay in layers))
    return {lay.name: (None if o.ranks[p] < 0 else int(o.ranks[p]))
            for lay, o, p in zip(layers, opts, picks, strict=True)}


def paired_ci(a: np.ndarray, b: np.ndarray, n_tok: np.ndarray, seed: int) -> tuple[float, float]:
    """95% CI of the perplexity ratio ``_ratio(a, b, n_tok)`` (a, b: (windows, seeds) window NLL
    sums): the clustered bootstrap over seeds, then windows within each drawn seed, of the
    per-window NLL difference (scaled so that its mean is the per-token log ratio), joined with the
    bootstrap over windows resampled jointly for all seeds (the test windows are shared by the
    seeds, which a nested resampling alone would treat as independent)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim == 1:
        a, b = a[:, None], b[:, None]
    d = (a - b) / float(np.mean(n_tok))
    cl = clustered_bootstrap([d[:, i] for i in range(d.shape[1])], statistic="mean", seed=seed)
    lo, hi = bootstrap_ci(_ratio, a, b, n_tok, seed=seed)
    return min(math.exp(cl.low), lo), max(math.exp(cl.high), hi)


def power_checks(stack: dict[str, np.ndarray], n_tok: np.ndarray, differing: int, total: int,
                 seed: int) -> list:
    """The claim's power checks from the pooled per-window NLLs (``stack[key]``: (windows, seeds)).

    control: the random allocation against uniform ranks at the headline budget; the ratio of
    their perplexities must lie on one side of 1 (either: a random allocation may also beat
    uniform), CI from :func:`paired_ci`. floor: the unigram's perplexity (window-bootstrap CI)
    against LEMS and uniform. degeneracy: layers whose LEMS rank differs from the uniform rank."""
    rnd, uni, lems = stack[HEADLINE_RANDOM], stack[HEADLINE_UNIFORM], stack[HEADLINE_LEMS]
    ratio = _ratio(rnd, uni, n_tok)
    ci = paired_ci(rnd, uni, n_tok, seed)
    control = power.control(
        RANDOM, ratio, UNIFORM, 1.0, spread=ci, higher_is_better=ratio > 1,
        metric=f"ppl / ppl(uniform) at {HEADLINE_RATIO:.0%} kept (moved either way)",
        name="random rank allocation vs uniform")

    def ppl(x):  # geometric mean over seeds of exp(NLL / tokens)
        x = np.asarray(x, dtype=np.float64).reshape(len(n_tok), -1)
        return float(np.exp(x.sum(0).mean() / np.sum(n_tok)))

    uni_w = stack[UNIGRAM][:, 0]
    uni_ci = bootstrap_ci(lambda u, n: float(np.exp(u.sum() / n.sum())), uni_w, n_tok, seed=seed)
    floor = power.floor({LEMS: ppl(lems), UNIFORM: ppl(uni)}, UNIGRAM, ppl(uni_w),
                        floor_spread=uni_ci, higher_is_better=False,
                        metric=f"test perplexity at {HEADLINE_RATIO:.0%} kept")
    degen = power.degeneracy((LEMS, UNIFORM), differing, total, what="layer ranks")
    return [control, floor, degen]


def combine(ctx: RunContext, results: list[Result]) -> Result:
    """Pool the seeds: per arm the geometric-mean perplexity over seeds (with the seeds' min/max);
    headline = geometric mean of the seeds' ratios; spread = :func:`paired_ci` (clustered over
    seeds, then test windows)."""
    sides = []
    for r in results:
        path = next(Path(f) for f in r.figures if Path(f).name == "windows.json")
        sides.append(json.loads(Path(path).read_text()))
    sides.sort(key=lambda d: d["meta"]["seed"])
    seeds = [d["meta"]["seed"] for d in sides]
    n_tok = np.array(sides[0]["n_tok"])
    if any(d["n_tok"] != sides[0]["n_tok"] for d in sides):
        raise RuntimeError("lems units were evaluated on different test windows")
    stack = {k: np.stack([np.array(d["windows"][k]) for d in sides], axis=1) for k in sides[0]["windows"]}
    per_seed = [_ratio(stack[HEADLINE_LEMS][:, i], stack[HEADLINE_UNIFORM][:, i], n_tok)
                for i in range(len(seeds))]
    value = _ratio(stack[HEADLINE_LEMS], stack[HEADLINE_UNIFORM], n_tok)
    spread = paired_ci(stack[HEADLINE_LEMS], stack[HEADLINE_UNIFORM], n_tok, ctx.seed)
    if all(UNIGRAM in d["windows"] and "ranks differing" in d["meta"] for d in sides):
        diff = [d["meta"]["ranks differing"] for d in sides]
        checks = power_checks(stack, n_tok, sum(x["differing"] for x in diff),
                              sum(x["total"] for x in diff), ctx.seed)
    else:  # units written before the power checks existed
        checks = [power.not_measured(k, "the units carry no random-allocation arm, unigram or "
                                     "rank comparison (written by an older version)")
                  for k in ("control", "floor", "degeneracy")]

    rows = []
    dense_ppl = None
    for i, row in enumerate(sides[0]["rows"]):
        same = [d["rows"][i] for d in sides]
        if any((x["system"], x["target"]) != (row["system"], row["target"]) for x in same):
            raise RuntimeError("lems units produced different arms")
        ppls = np.array([x["perplexity"] for x in same])
        ppl = float(np.exp(np.log(ppls).mean()))
        out = {"system": row["system"], "target": row["target"],
               "kept": min(x["kept"] for x in same),
               "linear params": max(x["linear params"] for x in same),
               "perplexity": round(ppl, 3)}
        if len(same) > 1:
            out["ppl min"], out["ppl max"] = round(float(ppls.min()), 3), round(float(ppls.max()), 3)
        if dense_ppl is None:
            dense_ppl = ppl
        else:
            out["vs dense"] = round(ppl / dense_ppl, 3)
        if "alpha" in row:
            out["LEMS alpha, gamma"] = "; ".join(f"{x['alpha']:.2f}, {x['gamma']:.2f}" for x in same)
        rows.append(out)

    if UNIGRAM in stack:
        uni = stack[UNIGRAM][:, 0]
        rows.append({"system": UNIGRAM, "target": None, "kept": None, "linear params": 0,
                     "perplexity": round(float(np.exp(uni.sum() / n_tok.sum())), 3),
                     "vs dense": round(float(np.exp(uni.sum() / n_tok.sum())) / dense_ppl, 3)})
    heats = [d["heat"] for d in sides if d["heat"] is not None]
    heat = None
    if heats:
        grid = np.mean([np.where(np.array(h["grid"]) < 0, np.nan, np.array(h["grid"])) for h in heats], 0)
        heat = (grid, heats[0]["blocks"], heats[0]["kinds"])
    trials = [dict(t, arm=f"{t['arm']}, seed {d['meta']['seed']}" if len(sides) > 1 else t["arm"])
              for d in sides for t in d["trials"]]
    m, st = sides[0]["meta"], sides[0]["meta"]["settings"]
    label, last = m["label"], m["last"]
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    figures = _figures(ctx, [r for r in rows if r["system"] != UNIGRAM], heat, trials, label)
    times: dict[str, float] = {}
    for d in sides:
        for k, v in d["meta"]["times"].items():
            times[k] = times.get(k, 0.0) + v
    seed_word = (f"{len(seeds)} calibration seeds ({', '.join(map(str, seeds))})" if len(seeds) > 1
                 else f"one calibration seed ({seeds[0]})")
    notes = [
        f"{label}: its weights went through Q4_1 quantization (the packaged GGUF, dequantized), "
        "which puts a noise floor under every singular spectrum.",
        f"{m['layers']} target linears (embeddings, norms and the tied head excluded)"
        + (f", last {last} of {m['blocks']} blocks only" if last else "") + ".",
        f"Calibration {st['n_calib']} x {st['seq_len']} tokens and search set {st['n_search']} x "
        f"{st['seq_len']} from the Wikipedia train split (paper: 256 x 2048 and 32 x 2048 of "
        "WikiText-2), drawn per seed; perplexity on the same "
        f"{int(n_tok.sum())} Wikipedia test tokens ({len(n_tok)} windows of {st['eval_len']}) for "
        "every arm and seed, so numbers are not comparable with the paper's WikiText-2 perplexities.",
        f"Statistics, search and evaluation in {m['dtype']}; factorization "
        "in float32 from the float32 weights. LEMS: KL at T=0.6 skipping 1/8 of positions, "
        f"Optuna TPE {st['trials']} trials (seed 42), ranks multiples of 8, HiGHS MILP instead of Gurobi.",
        f"{seed_word}: perplexity = geometric mean over seeds (ppl min/max = the seeds' range). "
        "Headline per seed: " + ", ".join(f"{x:.3f}" for x in per_seed) + ". Spread: 95% paired "
        "bootstrap clustered over calibration seeds, then test windows, joined with the bootstrap "
        "over windows shared by all seeds"
        + ("." if len(seeds) > 1 else "; with one seed the calibration-seed variance is absent "
           "from it (--opt seeds=3 samples it)."),
        f"Power checks: control = a random allocation ({RANDOM}: LEMS's options and knapsack with "
        "a LogNormal(0, 1) importance per layer, drawn per seed) at the headline budget against "
        "uniform ranks; floor = an add-one unigram of the whole train split on the same test "
        "positions; degeneracy = layers whose LEMS rank differs from the uniform rank (summed over "
        "seeds).",
        "Stage times summed over seeds (s): " + ", ".join(f"{k} {v:.0f}" for k, v in times.items())
        + "; wall per seed (s): " + ", ".join(f"{d['meta']['wall']:.0f}" for d in sides) + ".",
    ]
    return Result(rows=rows, headline=Measure(HEADLINE_NAME, value, "x", spread,
                                              higher_is_better=False),
                  target=TARGET, notes=notes, figures=figures, power=checks)


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
        arms = [a[0] for a in ARMS if any(r["system"] == a[0] for r in rows)]
        vals = [next(r["perplexity"] for r in rows if r["system"] == a) for a in arms]
        ax.barh(arms, vals, color=["C1" if "LEMS" in a else "C0" for a in arms])
        ax.axvline(dense, color="k", lw=0.8, label="dense")
        ax.set_xscale("log")
        ax.set_xlabel(f"test perplexity at {targets[0]:.0%} of linear parameters kept (log)")
        ax.tick_params(axis="y", labelsize=7)
        ax.xaxis.set_minor_formatter(plt.NullFormatter())
    else:
        present = [a for a in ARMS if any(r["system"] == a[0] for r in rows)]
        # an arm 100x worse than the median arm (plain SVD on Q4_1 weights) would flatten the
        # others: it is named in the legend with its range instead of drawn
        med = float(np.median([r["perplexity"] for r in rows[1:]]))
        off = [a for a in present
               if min(r["perplexity"] for r in rows if r["system"] == a[0]) > 100 * med]
        for arm in off:
            vals = [r["perplexity"] for r in rows if r["system"] == arm[0]]
            ax.plot([], [], " ", label=f"{arm[0]}: off scale ({min(vals):.3g}-{max(vals):.3g})")
        for arm in (a for a in present if a not in off):
            pts = sorted((r["target"], r["perplexity"], r.get("ppl min", r["perplexity"]),
                          r.get("ppl max", r["perplexity"])) for r in rows if r["system"] == arm[0])
            x, y, lo, hi = (np.array(v) for v in zip(*pts, strict=True))
            ax.errorbar(x, y, yerr=[y - lo, hi - y], marker="o", capsize=2, label=arm[0],
                        linestyle="-" if arm[3] == "lems" else "--")
        ax.axhline(dense, color="k", lw=0.8, label="dense")
        ax.set_yscale("log")
        ax.set_xlabel("fraction of linear parameters kept (target; achieved within 0.5%)")
        ax.set_ylabel("test perplexity (log; bars: range over seeds)")
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
