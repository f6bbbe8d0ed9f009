"""Claim ``lems``: LEMS's rank allocation beats simpler non-uniform allocators at equal parameters.

Every arm compresses the same target layers of the same model to the same budget (fraction of
linear weight parameters kept) and is scored by perplexity on the same Wikipedia test windows.
Allocators on KFAC-SVD with the official left factor L_G (the paper's code), all on LEMS's option
set (dense, or a multiple-of-8 rank with r / r_eq in [lo, 0.95)) and budget: uniform (the
paper's row; it has no dense option), SVD-LLM v2's energy rule, an ATP-like depth ramp (beta
searched on the search set), LEMS's knapsack with unit KLs and no depth bias, LEMS without its
Optuna search (trials = 0: alpha 0, gamma 5), and LEMS. Decomposition arms with uniform ranks:
plain SVD, SVD-LLM, ASVD, FWSVD, KFAC with G = I (A shrunk by 0.1 as in KFAC: the G-whitening's
share), KFAC with L_G and with L_G^T (the exact K-FAC error, the library default); KFAC (L_G^T) +
LEMS and SVD-LLM + LEMS. Each row names its left factor.

Headline: ppl(KFAC + LEMS) / ppl(best non-uniform arm) at 60% kept (official left factor), the
best being the non-uniform arm with the lowest pooled test perplexity (picked on the test set,
which favours the baselines), with a 95% paired bootstrap CI clustered over calibration seeds,
then test windows. Target: < 0.90. Uniform ranks stay as the paper's row.

Power checks: the positive control is a *random* per-layer allocation of the same factors on the
same options and budget (the knapsack with a random importance per layer): the best non-uniform
arm must beat it beyond its paired CI, or this setup cannot tell an informed allocation from an
uninformed one. The floor is an add-one unigram model of the train split, scored on the same test
positions. Degeneracy: LEMS's ranks must differ from the best non-uniform arm's in at least one
layer.

Options (``--opt key=value``): ``model`` (HF folder or .gguf; default packaged SmolLM2),
``dtype`` (model dtype for statistics, search and evaluation; default the dtype policy, bf16 only
where native; factorization always uses float32 weights), ``n_calib``, ``n_search``, ``seq_len``,
``eval_tokens``, ``eval_len``, ``trials``, ``n_startup_trials`` (TPE start-up trials; default
Optuna's 10, as in the paper), ``ratios`` (comma list), ``last_blocks`` (compress only the last N
blocks; 0 = all), ``seeds`` (calibration seeds, one unit each; default 1 tiny, 3 small/full),
``drop`` (comma list of arm groups to leave out, see :data:`DROP`).

Resumable: every finished arm is kept in a :class:`~icml26.core.checkpoint.Memo`
(``OUT/.../seedN/memo.json``), so a rerun with the same ``--out`` and settings skips it;
statistics and per-layer KLs are cached under ``$XDG_CACHE_HOME/icml26/lems``.
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
from icml26.core.checkpoint import Memo
from icml26.core.claims import Measure, Result, RunContext
from icml26.core.errors import UserError
from icml26.core.io import atomic_write_json
from icml26.core.lm import cache_root, load_lm, resolve_dtype
from icml26.core.plots import pyplot, save_figure
from icml26.core.sanity import unigram_window_nll
from icml26.core.stats import clustered_bootstrap
from icml26.core.text import calibration_batches, perplexity, token_ids
from icml26.core.torchutil import bootstrap_ci, check_device
from icml26.lems.allocators import atp_ranks, energy_ranks, unit_kl_ranks
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
MEMO_VERSION = 2
LEFT_NAME = {"official": "L_G", "transpose": "L_G^T", "identity": "I (G = I)"}
# (label, decomposition, left factor, allocator); the headline decomposition's arms come first so
# that a cut run has them. Left factor only matters for kfac ("-" in the rows otherwise).
ARMS = [
    ("KFAC-SVD (L_G), uniform", "kfac", "official", "uniform"),
    ("KFAC-SVD (L_G), LEMS", "kfac", "official", "lems"),
    ("KFAC-SVD (L_G), LEMS, 0 trials", "kfac", "official", "lems0"),
    ("KFAC-SVD (L_G), knapsack, unit KLs", "kfac", "official", "unit_kl"),
    ("KFAC-SVD (L_G), energy (SVD-LLM v2)", "kfac", "official", "energy"),
    ("KFAC-SVD (L_G), ATP-like ramp", "kfac", "official", "atp"),
    # the positive control, at the headline budget only
    ("KFAC-SVD (L_G), random ranks", "kfac", "official", "random"),
    ("KFAC-SVD (G = I), uniform", "kfac", "identity", "uniform"),
    ("SVD-LLM, uniform", "svd_llm", "official", "uniform"),
    ("ASVD, uniform", "asvd", "official", "uniform"),
    ("FWSVD, uniform", "fwsvd", "official", "uniform"),
    ("SVD, uniform", "svd", "official", "uniform"),
    ("KFAC-SVD (L_G^T), uniform", "kfac", "transpose", "uniform"),
    ("KFAC-SVD (L_G^T), LEMS", "kfac", "transpose", "lems"),
    ("SVD-LLM, LEMS", "svd_llm", "official", "lems"),
]
NON_UNIFORM = ("energy", "atp", "unit_kl", "lems0")  # the headline's comparison set
#: ``--opt drop`` groups -> the arms they remove (the headline's arms cannot be dropped)
DROP = {
    "svd": ["SVD, uniform"],
    "svd_llm": ["SVD-LLM, uniform", "SVD-LLM, LEMS"],
    "svd_llm_lems": ["SVD-LLM, LEMS"],
    "asvd": ["ASVD, uniform"],
    "fwsvd": ["FWSVD, uniform"],
    "identity": ["KFAC-SVD (G = I), uniform"],
    "transpose": ["KFAC-SVD (L_G^T), uniform", "KFAC-SVD (L_G^T), LEMS"],
    "transpose_lems": ["KFAC-SVD (L_G^T), LEMS"],
}
UNIGRAM = "unigram, add-one (train split)"
LEMS, UNIFORM, RANDOM = "KFAC-SVD (L_G), LEMS", "KFAC-SVD (L_G), uniform", "KFAC-SVD (L_G), random ranks"
BASELINES = [a[0] for a in ARMS if a[1:3] == ("kfac", "official") and a[3] in NON_UNIFORM]
HEADLINE_NAME = f"ppl(KFAC+LEMS) / ppl(best non-uniform allocator) at {HEADLINE_RATIO:.0%} kept"


def _key(label: str, ratio: float) -> str:
    return f"{label} @ {ratio}"


HEADLINE_LEMS, HEADLINE_UNIFORM, HEADLINE_RANDOM = (_key(x, HEADLINE_RATIO) for x in (LEMS, UNIFORM, RANDOM))


def _settings(ctx: RunContext) -> dict:
    o = ctx.options
    d = {
        "n_calib": ctx.pick(4, 64, 256), "n_search": ctx.pick(2, 8, 32),
        "seq_len": ctx.pick(64, 256, 2048), "eval_tokens": ctx.pick(256, 16384, 262144),
        "eval_len": ctx.pick(64, 512, 2048), "trials": ctx.pick(2, 10, 10),
        "n_startup_trials": None,
        "ratios": ctx.pick("0.6", "0.8,0.6", "0.9,0.8,0.7,0.6"), "last_blocks": ctx.pick(2, 0, 0),
        "seeds": ctx.pick(1, 3, 3),
    }
    for key in d:
        if key in o:
            d[key] = o[key] if key == "ratios" else int(o[key])
    for key in ("n_calib", "n_search", "seq_len", "eval_tokens", "eval_len"):
        if d[key] < 1:
            raise UserError(f"--opt {key} must be >= 1; got {d[key]}")
    if d["trials"] < 0 or (d["n_startup_trials"] is not None and d["n_startup_trials"] < 0):
        raise UserError(f"--opt trials and n_startup_trials must be >= 0; got {d['trials']}, "
                        f"{d['n_startup_trials']}")
    try:
        ratios = {float(x) for x in str(d["ratios"]).split(",") if x.strip()}
    except ValueError as exc:
        raise UserError(f"--opt ratios must be a comma list of numbers; got {d['ratios']!r}") from exc
    bad = [r for r in ratios if not 0 < r < 1]
    if bad:
        raise UserError(f"--opt ratios: each kept fraction must be in (0, 1); got {bad[0]}")
    d["ratios"] = sorted(ratios | {HEADLINE_RATIO}, key=lambda r: (r != HEADLINE_RATIO, -r))
    drop = sorted({x.strip() for x in str(o.get("drop", "")).split(",") if x.strip()})
    bad = [x for x in drop if x not in DROP]
    if bad:
        raise UserError(f"--opt drop: {', '.join(bad)} cannot be dropped (choose among "
                        f"{', '.join(DROP)}; the KFAC (L_G) allocator arms make the headline)")
    d["drop"] = drop
    return d


def _arms(s: dict) -> list[tuple]:
    gone = {label for g in s["drop"] for label in DROP[g]}
    return [a for a in ARMS if a[0] not in gone]


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


class _Lazy:
    """A value computed on first use (statistics, the KL scorer: skipped when the memo has every
    arm that needs them)."""

    def __init__(self, fn):
        self.fn, self.done, self.value = fn, False, None

    def __call__(self):
        if not self.done:
            self.value, self.done = self.fn(), True
        return self.value


def run_unit(ctx: RunContext) -> Result:
    """Every arm for one calibration seed. Besides its Result it writes ``windows.json`` (per-window
    test NLLs of every arm, chosen ranks, Optuna trials, stage times) for :func:`combine`."""
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
    names = [lay.name for lay in layers]
    test_ids = token_ids(tok, "test", max_tokens=s["eval_tokens"])
    cache = cache_root() / "lems" / f"{label.replace('/', '_')}-{ctx.scale}-{ctx.seed}-{last}"
    memo_cfg = {"version": MEMO_VERSION, "label": label, "dtype": str(dtype), "seed": ctx.seed,
                **{k: s[k] for k in ("n_calib", "n_search", "seq_len", "eval_tokens", "eval_len",
                                     "trials", "n_startup_trials", "last_blocks")}}
    memo = Memo(ctx.out_dir / "memo.json", config=memo_cfg)
    times: dict[str, float] = dict(memo.get("times", {}))

    def timed(key, fn, *a, **k):
        t0 = time.perf_counter()
        out = fn(*a, **k)
        times[key] = times.get(key, 0.0) + time.perf_counter() - t0
        return out

    def ppl_of(m):
        return timed("perplexity", perplexity, m, tok, ids=test_ids, seq_len=s["eval_len"],
                     max_tokens=None, progress=prog)

    def calib():
        return calibration_batches(tok, s["n_calib"], s["seq_len"], batch_size=4, seed=ctx.seed)

    def search():
        return calibration_batches(tok, s["n_search"], s["seq_len"], batch_size=4,
                                   seed=ctx.seed + 1000)

    stats = _Lazy(lambda: timed("statistics", collect_kfac_stats, model, calib(), layers=layers,
                                cache=cache / "stats.safetensors", progress=prog))
    scorer = _Lazy(lambda: timed("search set", KLScorer, model, search()))

    if "dense" not in memo:
        d = ppl_of(model)
        memo.put("dense", {"ppl": d.ppl, "window_nll": list(d.window_nll),
                           "n_tok": list(d.window_tokens)})
        memo.put("times", times)
    dense = memo.get("dense")
    dense_params = count_linear_params(model, names)
    rows = [{"system": "dense", "left factor": "-", "target": 1.0, "kept": 1.0,
             "linear params": dense_params, "perplexity": round(dense["ppl"], 3)}]
    windows = {"dense": np.array(dense["window_nll"])}
    n_tok = np.array(dense["n_tok"])
    trials_log: list[dict] = []
    atp_log: list[dict] = []
    chosen: dict[str, dict] = {}  # arm label -> ranks, at the headline budget
    arms = _arms(s)
    by_decomp: dict[tuple[str, str], list] = {}
    for arm in arms:
        by_decomp.setdefault((arm[1], arm[2]), []).append(arm)
    done: dict[str, dict] = {}
    for (method, left), group in by_decomp.items():
        todo = [(a, r) for r in s["ratios"] for a in group
                if not (a[3] == "random" and r != HEADLINE_RATIO) and _key(a[0], r) not in memo]
        if todo:
            factors = timed("factorize", factorize, model32, None if method == "svd" else stats(),
                            method, left_factor=left, layers=layers, compute_dtype=torch.float32,
                            progress=prog)
            factors = {n: _to(f, device) for n, f in factors.items()}
            kls = None
            if any(a[3] in ("lems", "lems0") for a, _ in todo):
                kls = timed("sensitivity", layer_sensitivities, model, factors, layers, scorer(),
                            cache=cache / f"kl-{method}-{left}.json", tag=f"{method}:{left}",
                            progress=prog)
            for (arm_label, _, _, alloc), ratio in todo:
                t0 = time.perf_counter()
                info, extra = {}, {}
                if alloc == "uniform":
                    ranks = uniform_ranks(layers, ratio)
                elif alloc == "random":
                    ranks = random_ranks(layers, ratio, seed=ctx.seed)
                elif alloc == "energy":
                    ranks = energy_ranks(layers, factors, ratio)
                elif alloc == "unit_kl":
                    ranks = unit_kl_ranks(layers, factors, n_blocks, ratio)
                elif alloc == "atp":
                    ranks, ramps = timed("ATP ramps", atp_ranks, model, layers, factors, ratio,
                                         scorer(), progress=prog)
                    best = min(ramps, key=lambda x: x["kl"])
                    info = {"ATP beta": round(best["beta"], 3)}
                    extra["atp"] = [dict(x, arm=arm_label, ratio=ratio) for x in ramps]
                else:  # lems, lems0
                    res = timed("LEMS search", lems_search, model, factors, layers, kls, ratio,
                                scorer=scorer(), trials=s["trials"] if alloc == "lems" else 0,
                                n_startup_trials=s["n_startup_trials"], seed=42, progress=prog)
                    ranks = res.ranks
                    info = {"alpha": round(res.alpha, 3), "gamma": round(res.gamma, 3)}
                    if alloc == "lems":
                        extra["trials"] = [dict(t, arm=arm_label, ratio=ratio) for t in res.trials]
                m = copy.deepcopy(model)
                apply_ranks_(m, factors, ranks)
                res_ppl = ppl_of(m)
                row = {"system": arm_label, "left factor": LEFT_NAME[left] if method == "kfac" else "-",
                       "target": ratio, "kept": round(kept_fraction(layers, ranks), 4),
                       "linear params": count_linear_params(m, names),
                       "dense layers": sum(r is None for r in ranks.values()),
                       "perplexity": round(res_ppl.ppl, 3),
                       "vs dense": round(res_ppl.ppl / dense["ppl"], 3), **info}
                del m
                memo.put(_key(arm_label, ratio), {
                    "row": row, "window_nll": list(res_ppl.window_nll), "ranks": ranks,
                    "seconds": time.perf_counter() - t0, **extra})
                memo.put("times", times)
            del factors
    for arm_label, *_rest in arms:
        for ratio in s["ratios"]:
            k = _key(arm_label, ratio)
            if k not in memo:
                continue
            done[k] = u = memo.get(k)
            rows.append(dict(u["row"]))
            windows[k] = np.array(u["window_nll"])
            trials_log += u.get("trials", [])
            atp_log += u.get("atp", [])
            if ratio == HEADLINE_RATIO:
                chosen[arm_label] = u["ranks"]
    heat = ranks_summary(layers, chosen[LEMS])
    best_key = _best(windows, n_tok)
    value = _ratio(windows[HEADLINE_LEMS], windows[best_key], n_tok)
    spread = bootstrap_ci(_ratio, windows[HEADLINE_LEMS], windows[best_key], n_tok, seed=ctx.seed)
    # the floor: an add-one unigram of the train split on the same test positions
    train_ids = token_ids(tok, "train")
    vocab = max(len(tok), int(test_ids.max()) + 1, int(train_ids.max()) + 1)
    uni_nll, uni_n = unigram_window_nll(train_ids, test_ids, vocab, s["eval_len"])
    if not np.array_equal(uni_n, n_tok):
        raise RuntimeError("the unigram and the models must score the same test positions")
    windows[UNIGRAM] = uni_nll
    for row in rows:
        row["seed"] = ctx.seed
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    meta = {"label": label, "layers": len(layers), "blocks": n_blocks, "last": last,
            "dtype": str(dtype).removeprefix("torch."), "settings": {**s, "ratios": s["ratios"]},
            "seed": ctx.seed, "times": times, "wall": time.perf_counter() - t_start,
            "resumed arms": memo.resumed, "memo": str(memo.path)}
    side = ctx.out_dir / "windows.json"
    atomic_write_json(side, {
        "meta": meta, "rows": rows, "n_tok": n_tok.tolist(), "chosen": chosen, "names": names,
        "windows": {k: v.tolist() for k, v in windows.items()}, "trials": trials_log,
        "atp": atp_log,
        "heat": {"grid": np.nan_to_num(heat[0], nan=-1).tolist(), "blocks": heat[1], "kinds": heat[2]},
    })
    return Result(rows=rows, headline=Measure(
        HEADLINE_NAME, value, "x", spread, higher_is_better=False), target=TARGET,
        notes=[f"seed {ctx.seed}: {value:.3f} [{spread[0]:.3f}, {spread[1]:.3f}] vs {best_key}"],
        figures=[side])


def _best(windows: dict, n_tok: np.ndarray) -> str:
    """The key of the non-uniform baseline with the lowest pooled test NLL at the headline budget
    (``windows[key]``: (windows,) or (windows, seeds) NLL sums)."""
    keys = [_key(b, HEADLINE_RATIO) for b in BASELINES if _key(b, HEADLINE_RATIO) in windows]
    if not keys:
        raise RuntimeError("no non-uniform baseline arm was run")
    return min(keys, key=lambda k: float(np.asarray(windows[k], dtype=np.float64).sum(0).mean()))


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


def power_checks(stack: dict[str, np.ndarray], n_tok: np.ndarray, best: str, differing: int,
                 total: int, seed: int) -> list:
    """The claim's power checks from the pooled per-window NLLs (``stack[key]``: (windows, seeds)).

    control: the best non-uniform arm (key ``best``) against the random allocation on the same
    options and budget; the paired CI (:func:`paired_ci`) of their perplexity ratio must lie
    below 1. floor: the unigram's perplexity (window-bootstrap CI) against LEMS and the best arm.
    degeneracy: layers whose LEMS rank differs from the best arm's."""
    best_label = best.rsplit(" @ ", 1)[0]
    rnd, bst, lems = stack[HEADLINE_RANDOM], stack[best], stack[HEADLINE_LEMS]
    ratio = _ratio(bst, rnd, n_tok)
    ci = paired_ci(bst, rnd, n_tok, seed)
    control = power.control(
        best_label, ratio, RANDOM, 1.0, paired=ci, paired_null=1.0, higher_is_better=False,
        metric=f"ppl / ppl(random allocation) at {HEADLINE_RATIO:.0%} kept",
        name="best non-uniform allocator vs a random allocation")

    def ppl(x):  # geometric mean over seeds of exp(NLL / tokens)
        x = np.asarray(x, dtype=np.float64).reshape(len(n_tok), -1)
        return float(np.exp(x.sum(0).mean() / np.sum(n_tok)))

    uni_w = stack[UNIGRAM][:, 0]
    uni_ci = bootstrap_ci(lambda u, n: float(np.exp(u.sum() / n.sum())), uni_w, n_tok, seed=seed)
    floor = power.floor({LEMS: ppl(lems), best_label: ppl(bst)}, UNIGRAM, ppl(uni_w),
                        floor_spread=uni_ci, higher_is_better=False,
                        metric=f"test perplexity at {HEADLINE_RATIO:.0%} kept")
    degen = power.degeneracy((LEMS, best_label), differing, total, what="layer ranks")
    return [control, floor, degen]


def combine(ctx: RunContext, results: list[Result]) -> Result:
    """Pool the seeds: per arm the geometric-mean perplexity over seeds (with the seeds' min/max);
    the best non-uniform arm is picked on the pooled test NLL; headline = geometric mean of the
    seeds' ratios against it; spread = :func:`paired_ci` (clustered over seeds, then windows)."""
    sides = []
    for r in results:
        path = next(Path(f) for f in r.figures if Path(f).name == "windows.json")
        sides.append(json.loads(Path(path).read_text()))
    sides.sort(key=lambda d: d["meta"]["seed"])
    seeds = [d["meta"]["seed"] for d in sides]
    n_tok = np.array(sides[0]["n_tok"])
    if any(d["n_tok"] != sides[0]["n_tok"] for d in sides):
        raise RuntimeError("lems units were evaluated on different test windows")
    if any(set(d["windows"]) != set(sides[0]["windows"]) for d in sides):
        raise RuntimeError("lems units produced different arms")
    stack = {k: np.stack([np.array(d["windows"][k]) for d in sides], axis=1) for k in sides[0]["windows"]}
    best = _best(stack, n_tok)
    best_label = best.rsplit(" @ ", 1)[0]
    per_seed = [_ratio(stack[HEADLINE_LEMS][:, i], stack[best][:, i], n_tok) for i in range(len(seeds))]
    value = _ratio(stack[HEADLINE_LEMS], stack[best], n_tok)
    spread = paired_ci(stack[HEADLINE_LEMS], stack[best], n_tok, ctx.seed)
    vs_uniform = _ratio(stack[HEADLINE_LEMS], stack[HEADLINE_UNIFORM], n_tok)
    vs_uniform_ci = paired_ci(stack[HEADLINE_LEMS], stack[HEADLINE_UNIFORM], n_tok, ctx.seed)
    differing = sum(d["chosen"][LEMS].get(n) != d["chosen"][best_label].get(n)
                    for d in sides for n in d["names"])
    total = sum(len(d["names"]) for d in sides)
    checks = power_checks(stack, n_tok, best, differing, total, ctx.seed)

    rows = []
    dense_ppl = None
    for i, row in enumerate(sides[0]["rows"]):
        same = [d["rows"][i] for d in sides]
        if any((x["system"], x["target"]) != (row["system"], row["target"]) for x in same):
            raise RuntimeError("lems units produced different arms")
        ppls = np.array([x["perplexity"] for x in same])
        ppl = float(np.exp(np.log(ppls).mean()))
        out = {"system": row["system"], "left factor": row.get("left factor", "-"),
               "target": row["target"], "kept": min(x["kept"] for x in same),
               "linear params": max(x["linear params"] for x in same),
               "perplexity": round(ppl, 3)}
        if "dense layers" in row:
            out["dense layers"] = ", ".join(str(x["dense layers"]) for x in same)
        if len(same) > 1:
            out["ppl min"], out["ppl max"] = round(float(ppls.min()), 3), round(float(ppls.max()), 3)
        if dense_ppl is None:
            dense_ppl = ppl
        else:
            out["vs dense"] = round(ppl / dense_ppl, 3)
        if "alpha" in row:
            out["LEMS alpha, gamma"] = "; ".join(f"{x['alpha']:.2f}, {x['gamma']:.2f}" for x in same)
        if "ATP beta" in row:
            out["ATP beta"] = "; ".join(f"{x['ATP beta']:.2f}" for x in same)
        rows.append(out)

    uni = stack[UNIGRAM][:, 0]
    rows.append({"system": UNIGRAM, "left factor": "-", "target": None, "kept": None,
                 "linear params": 0,
                 "perplexity": round(float(np.exp(uni.sum() / n_tok.sum())), 3),
                 "vs dense": round(float(np.exp(uni.sum() / n_tok.sum())) / dense_ppl, 3)})
    heats = [d["heat"] for d in sides if d["heat"] is not None]
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
    dropped = st.get("drop") or []
    notes = [
        f"Best non-uniform arm (lowest pooled test perplexity among {', '.join(BASELINES)}): "
        f"{best_label}. LEMS vs uniform ranks (the paper's row): {vs_uniform:.3f} "
        f"[{vs_uniform_ci[0]:.3f}, {vs_uniform_ci[1]:.3f}].",
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
        f"Optuna TPE {st['trials']} trials (seed 42, "
        + (f"{st['n_startup_trials']} start-up trials" if st.get("n_startup_trials") is not None
           else "Optuna's 10 random start-up trials, as in the paper")
        + "), ranks multiples of 8, HiGHS MILP instead of Gurobi. Every non-uniform arm uses the "
        "same options (dense, or r / r_eq in [lo, 0.95)) and knapsack budget; energy = SVD-LLM v2's "
        "1/log(loss) rule per layer kind (log of e * loss / min loss, scale-free), ATP-like = "
        "per-block linear ramp with beta (11 values) picked by the search-set KL; both projected "
        "onto the options by least squares in kept fraction.",
        f"{seed_word}: perplexity = geometric mean over seeds (ppl min/max = the seeds' range). "
        "Headline per seed: " + ", ".join(f"{x:.3f}" for x in per_seed) + ". Spread: 95% paired "
        "bootstrap clustered over calibration seeds, then test windows, joined with the bootstrap "
        "over windows shared by all seeds; the best baseline is picked on the same test windows "
        "(which can only favour it)"
        + ("." if len(seeds) > 1 else "; with one seed the calibration-seed variance is absent "
           "from it (--opt seeds=3 samples it)."),
        f"Power checks: control = the best non-uniform arm against a random allocation ({RANDOM}: "
        "the same options and knapsack with a LogNormal(0, 1) importance per layer, drawn per "
        "seed) at the headline budget; floor = an add-one unigram of the whole train split on the "
        "same test positions; degeneracy = layers whose LEMS rank differs from the best arm's "
        "(summed over seeds).",
        "Stage times summed over seeds (s): " + ", ".join(f"{k} {v:.0f}" for k, v in times.items())
        + "; wall per seed (s): " + ", ".join(f"{d['meta']['wall']:.0f}" for d in sides)
        + (f"; arms resumed from the memo: {', '.join(str(d['meta']['resumed arms']) for d in sides)}"
           if any(d["meta"].get("resumed arms") for d in sides) else "") + ".",
    ]
    if dropped:
        notes.append("Arms left out (--opt drop): " + ", ".join(
            sorted({a for g in dropped for a in DROP[g]})) + ".")
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
