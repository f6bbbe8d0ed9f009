"""ATLAS claim part (c): a real LM's examinees on BIG-bench multiple-choice items.

SmolLM2-135M-Instruct (or ``--opt llm_model=PATH``) answers ~400 BIG-bench items in 2 prompt
formats x {0, 3, 6, 9} layers dropped (8 configurations); temperatures 0-1.5 and seeds turn each
configuration's cached choice log-probs into 25 examinees (see :mod:`icml26.atlas.responses`).
Per seed, two whole configurations (one per format) are held out; a 2PL bank is fitted on the other
six (3PL is unstable with ~150 examinees) and the held-out examinees are tested adaptively against
random subsets of the same size. The reference is each held-out examinee's full-bank WLE. One live
CAT then asks the model itself, item by item, through ``AdaptiveTest.run``.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from icml26.atlas.calibrate import calibrate
from icml26.atlas.data import Responses
from icml26.atlas.experiment import metrics, run_cats, score_subsets
from icml26.atlas.responses import (
    FORMATS,
    choice_logprob_table,
    examinee_grid,
    layers_dropped,
    response_matrix,
)
from icml26.atlas.scoring import estimate_theta
from icml26.core.checkpoint import Memo
from icml26.core.claims import RunContext

TASKS = (
    "general_knowledge",
    "strategyqa",
    "misconceptions",
    "emoji_movie",
    "hindu_knowledge",
    "sports_understanding",
    "phrase_relatedness",
    "empirical_judgments",
    "anachronisms",
    "disambiguation_qa",
)
DROPS = (0, 3, 6, 9)
TEMPS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5)


def load_items(per_task: int, seed: int = 0):
    from icml26.core.mcq import load_bigbench

    items = []
    for t in TASKS:
        items += load_bigbench(t, max_items=per_task, seed=seed)
    return items


def llm_tables(ctx: RunContext, items, model_path=None) -> tuple[dict, float, tuple | None]:
    """Choice log-prob tables per (format, drop), memoised in the run folder (resumable).

    Returns (tables, seconds, (model, tokenizer) if it had to be loaded, else None)."""
    from icml26.core.lm import load_lm, resolve_dtype

    memo = Memo(
        ctx.out_dir / "atlas_llm_memo.json",
        config={
            "items": [it.id for it in items],
            "model": str(model_path or "smollm2"),
            "drops": DROPS,
            "formats": FORMATS,
        },
    )
    dtype = resolve_dtype(None, ctx.device)  # bf16 only where it is fast
    model = tok = None
    t0 = time.perf_counter()
    tick = ctx.progress.task("(c) LM log-probs per configuration", total=len(FORMATS) * len(DROPS))
    tables = {}
    for fmt in FORMATS:
        for d in DROPS:
            key = f"{fmt}|drop{d}"
            if key not in memo:
                if model is None:
                    model, tok = load_lm(model_path, dtype=dtype, device=ctx.device)
                memo.put(key, choice_logprob_table(model, tok, items, fmt, d))
            tables[key] = memo.get(key)
            tick()
    return tables, time.perf_counter() - t0, None if model is None else (model, tok)


def part_c(ctx: RunContext, st: dict) -> tuple[list[dict], list[str], dict]:
    items = load_items(st["llm_items_per_task"], seed=ctx.seed)
    tables, lm_s, lm = llm_tables(ctx, items, st.get("llm_model"))
    grid = examinee_grid(FORMATS, DROPS, TEMPS, st["llm_sample_seeds"])
    Y_all = response_matrix(tables, items, grid, seed=ctx.seed)
    configs = sorted({e.config for e in grid})
    by_fmt = {f: [c for c in configs if c.startswith(f + "|")] for f in FORMATS}
    per_seed, fits = [], []
    for s in range(st["seeds"]):
        held = {by_fmt[f][(s + k) % len(by_fmt[f])] for k, f in enumerate(FORMATS)}
        test = np.array([e.config in held for e in grid])
        resp = Responses.from_array(
            Y_all[~test],
            models=[e.name for e in np.array(grid)[~test]],
            items=[it.id for it in items],
            source="SmolLM2 examinees",
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            bank = calibrate(resp, model="2PL", max_iter=st["max_iter"])
        fits.append((bank.n_items, bank.fit["converged"], sorted(held)))
        cols = [[it.id for it in items].index(i) for i in bank.ids]
        Y = Y_all[test][:, cols]
        ref, _ = estimate_theta(bank, Y, "wle")
        acc = Y.mean(1)
        ok = np.isfinite(ref)
        Y, ref, acc = Y[ok], ref[ok], acc[ok]
        systems = {f"ATLAS SE {se}": run_cats(bank, Y, s, se_stop=se) for se in (0.2, 0.3)}
        k_used = systems["ATLAS SE 0.3"]["used"].sum(1)
        rng = np.random.default_rng(40_000 + s)
        used = np.zeros(Y.shape, bool)
        for m in range(len(Y)):
            used[m, rng.choice(Y.shape[1], int(k_used[m]), replace=False)] = True
        systems["random-k (matched to SE 0.3)"] = score_subsets(bank, Y, used)
        per_seed.append({n: metrics(o, ref, None, acc) for n, o in systems.items()})
        if s == 0:
            scatter = (
                ref,
                systems["ATLAS SE 0.3"]["theta"],
                systems["random-k (matched to SE 0.3)"]["theta"],
                acc,
            )
    label = (
        "SmolLM2" if not st.get("llm_model") else str(st["llm_model"]).rstrip("/").split("/")[-1]
    )
    rows = []
    for n in per_seed[0]:
        row = {"part": f"(c) {label} on BIG-bench", "system": n}
        for key in ("items", "theta_mae", "acc_mae", "max_exposure", "rank_shift"):
            v = np.array([p[n][key] for p in per_seed])
            row[key] = round(float(v.mean()), 4)
            if key == "theta_mae":
                row["theta_mae_min_max"] = [round(float(v.min()), 4), round(float(v.max()), 4)]
        rows.append(row)
    ratio = np.array(
        [
            p["ATLAS SE 0.3"]["theta_mae"] / p["random-k (matched to SE 0.3)"]["theta_mae"]
            for p in per_seed
        ]
    )
    acc_by_cfg = {
        c: float(
            Y_all[[i for i, e in enumerate(grid) if e.config == c and e.temperature == 0]].mean()
        )
        for c in configs
    }
    live = live_cat(ctx, st, items, tables, grid, Y_all, lm) if st.get("llm_live", 1) else None
    notes = [
        f"(c) {len(items)} BIG-bench items ({len(TASKS)} tasks x {st['llm_items_per_task']}), "
        f"{len(grid)} examinees = 2 formats x drops {DROPS} x T {TEMPS} x "
        f"{st['llm_sample_seeds']} sampling seeds (T=0 once); log-prob tables took {lm_s:.0f} s "
        "(cached in the run folder). Greedy accuracy per configuration: "
        + ", ".join(f"{c} {a:.3f}" for c, a in acc_by_cfg.items())
        + ".",
        f"(c) per seed two whole configurations are held out (one per format); 2PL banks kept "
        f"{[f[0] for f in fits]} items (converged {[f[1] for f in fits]}). ATLAS SE 0.3 / random-k "
        f"theta MAE = {ratio.mean():.3f} (min {ratio.min():.3f}, max {ratio.max():.3f}) over "
        f"{st['seeds']} seeds; with {len(items)} items and ~{int((~test).sum())} calibration "
        "examinees SE 0.1 is out of reach, so SE 0.2/0.3 are reported.",
    ]
    if live is not None:
        notes.append(
            f"(c) live CAT ({live['config']}, T=0, the model answers each item as the test asks): "
            f"{live['items']} items, theta {live['theta']:.3f} (SE {live['se']:.3f}) vs full-bank "
            f"WLE {live['ref']:.3f} from the cached matrix; acc_hat {live['acc_hat']:.3f} vs "
            f"accuracy {live['acc']:.3f}; {live['seconds']:.1f} s."
        )
    figure = _figure(ctx, scatter)
    return rows, notes, {"ratio": ratio, "live": live, "figure": figure}


def _figure(ctx: RunContext, scatter) -> str:
    from icml26.core.plots import pyplot, save_figure

    ref, atlas, rnd, acc = scatter
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    lim = [
        min(ref.min(), atlas.min(), rnd.min()) - 0.2,
        max(ref.max(), atlas.max(), rnd.max()) + 0.2,
    ]
    axes[0].plot(lim, lim, color="gray", lw=0.8)
    axes[0].scatter(ref, rnd, s=14, alpha=0.6, label="random-k (same k)")
    axes[0].scatter(ref, atlas, s=14, alpha=0.8, label="ATLAS SE 0.3")
    axes[0].set(
        xlabel="full-bank WLE theta",
        ylabel="estimated theta",
        title="(c) held-out SmolLM2 examinees, seed 0",
    )
    axes[0].legend()
    axes[1].scatter(acc, ref, s=14)
    axes[1].set(
        xlabel="accuracy on the bank's items",
        ylabel="full-bank WLE theta",
        title="accuracy vs ability (2PL)",
    )
    path = ctx.out_dir / "atlas_llm_theta.png"
    save_figure(fig, path)
    return str(path)


def live_cat(ctx: RunContext, st: dict, items, tables, grid, Y_all, lm=None) -> dict:
    """Fit on all examinees but the letter|drop0 configuration, then test it live.

    ``lm``: the (model, tokenizer) already loaded for the tables, if any (else loaded here)."""
    from icml26.atlas.cat import AdaptiveTest
    from icml26.core.lm import load_lm, resolve_dtype
    from icml26.core.mcq import score_mcq

    config = "letter|drop0"
    train = np.array([e.config != config for e in grid])
    resp = Responses.from_array(
        Y_all[train],
        models=[e.name for e in np.array(grid)[train]],
        items=[it.id for it in items],
        source="SmolLM2 examinees",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        bank = calibrate(resp, model="2PL", max_iter=st["max_iter"])
    by_id = {it.id: it for it in items}
    if lm is None:
        dtype = resolve_dtype(None, ctx.device)
        lm = load_lm(st.get("llm_model"), dtype=dtype, device=ctx.device)
    model, tok = lm
    t0 = time.perf_counter()
    with layers_dropped(model, 0):
        cat = AdaptiveTest(bank, se_stop=0.3, seed=ctx.seed)
        res = cat.run(
            lambda item_id: int(score_mcq(model, tok, [by_id[item_id]], method="letter").correct[0])
        )
    seconds = time.perf_counter() - t0
    full = np.array(
        [
            [
                int(np.argmax(tables[config][[it.id for it in items].index(i)]) in by_id[i].gold)
                for i in bank.ids
            ]
        ],
        dtype=float,
    )
    ref, _ = estimate_theta(bank, full, "wle")
    return {
        "config": config,
        "items": res.n_items,
        "theta": float(res.theta),
        "se": float(res.se),
        "ref": float(ref[0]),
        "acc_hat": float(res.acc_hat),
        "acc": float(full.mean()),
        "seconds": seconds,
    }
