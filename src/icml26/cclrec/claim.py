"""Claim ``cclrec``: consensus-weighted CL beats tuned graph and LLM-alignment baselines, and
its consensus weights beat equal weights.

MovieLens-100K (the ``recbole`` wheel's atomic files), per-user chronological 80/10/10 split,
MiniLM item semantics (title/year/genres) and user profiles (``.user`` fields + top training
genres, or cached SmolLM2 profiles). Every system trains up to the same number of passes with the
same early-stopping rule on validation NDCG@20 (``patience``), on the same seeds; each tuned
system's one hyper-parameter goes through the bracketing tuner (:func:`icml26.core.stats.bracket`)
at those same passes on the first seed. Test metrics are full ranking with train and validation
items masked.

Two targets, both needed (an intersection-union test: the headline is the smaller ratio, its
interval the smaller ends): NDCG@20 of CCLRec over the best baseline, and over ``CCLRec w±=1``
(the same model with equal weights: the paper's claim about consensus weighting). Spreads are
clustered bootstraps, seeds then test users (:func:`icml26.core.stats.clustered_bootstrap`).

Every (system, hyper-parameter value, seed) fit is one entry of a :class:`icml26.core.checkpoint.Memo`
in the unit's folder, so an interrupted run resumes where it stopped.

Options (``--opt key=value``): ``passes`` (max passes), ``patience``, ``seeds`` (count),
``systems`` (comma list of names from :data:`SYSTEMS`, or ``all``/``default``/``ablations``),
``tune`` (0 = the fixed values in :data:`SYSTEMS`), ``inter``/``item``/``user`` (other RecBole
files), ``profiles``, ``device``.
"""

from __future__ import annotations

import dataclasses
import re
import time

import numpy as np

from icml26.cclrec import figures
from icml26.cclrec.baselines import SGL, LightGCN, MostPop, RLMRecCon, SimGCL
from icml26.cclrec.model import CCLRec
from icml26.cclrec.semantics import hash_encoder
from icml26.cclrec.study.checks import (
    EQUAL,
    both_targets,
    ci_text,
    clusters,
    power_checks,
    ratio_ci,
)
from icml26.cclrec.study.inputs import TINY_USERS, permuted_inputs, prepare
from icml26.core.claims import Measure, Result, RunContext

TARGET = 1.0
NO_CL = "CCLRec cl_weight=0"
BASELINES = ("LightGCN", "SGL", "SimGCL", "RLMRec-Con", "SGL paper λ", "SimGCL paper λ")
# name -> (class, fixed kwargs). The tuned value (TUNE) overrides its key; see docs/cclrec.md.
SYSTEMS: dict[str, tuple[type, dict]] = {
    "MostPop": (MostPop, {}),
    "LightGCN": (LightGCN, {"lr": 5e-3, "batch_size": 256, "reg": 1e-4}),
    # SGL / SimGCL: the contrastive weights dense MovieLens needs (RecBole-GNN's ML-1M pick for
    # SGL; 0.01 for SimGCL); the papers' weights (tuned on sparse data) are the "paper λ" systems
    "SGL": (SGL, {"lr": 5e-3, "batch_size": 256, "reg": 1e-4, "ssl_weight": 0.005, "ssl_tau": 0.5}),
    "SimGCL": (SimGCL, {"lr": 5e-3, "batch_size": 256, "reg": 1e-4, "cl_weight": 0.01}),
    "SGL paper λ": (SGL, {"lr": 5e-3, "batch_size": 256, "reg": 1e-4}),
    "SimGCL paper λ": (SimGCL, {"lr": 5e-3, "batch_size": 256, "reg": 1e-4}),
    "RLMRec-Con": (RLMRecCon, {"lr": 5e-3, "batch_size": 256, "reg": 1e-4}),
    "CCLRec": (CCLRec, {"lr": 1e-3, "batch_size": 256}),
    "CCLRec w±=1": (CCLRec, {"lr": 1e-3, "batch_size": 256, "w_pos": 1.0, "w_neg": 1.0}),
    "CCLRec cl_weight=0": (CCLRec, {"lr": 1e-3, "batch_size": 256, "cl_weight": 0.0}),
    "CCLRec permuted semantics": (CCLRec, {"lr": 1e-3, "batch_size": 256}),
    "CCLRec structural positives": (
        CCLRec,
        {"lr": 1e-3, "batch_size": 256, "positives": "structural"},
    ),
    "CCLRec semantic positives": (CCLRec, {"lr": 1e-3, "batch_size": 256, "positives": "semantic"}),
    "CCLRec sym norm": (CCLRec, {"lr": 1e-3, "batch_size": 256, "norm": "sym"}),
    "CCLRec CL on ID": (CCLRec, {"lr": 1e-3, "batch_size": 256, "cl_space": "id"}),
    "CCLRec CL on semantics": (CCLRec, {"lr": 1e-3, "batch_size": 256, "cl_space": "semantic"}),
    "CCLRec pool consensus": (CCLRec, {"lr": 1e-3, "batch_size": 256, "consensus": "pool"}),
}
DEFAULT_SYSTEMS = (
    "MostPop",
    "LightGCN",
    "SGL",
    "SimGCL",
    "RLMRec-Con",
    "CCLRec",
    "CCLRec w±=1",
    "CCLRec cl_weight=0",
)
ABLATIONS = (
    "CCLRec permuted semantics",
    "CCLRec structural positives",
    "CCLRec semantic positives",
    "CCLRec sym norm",
    "CCLRec CL on ID",
    "CCLRec CL on semantics",
)
# tiny keeps both targets' arms and the no-CL control, so every row and check is computed in CI
TINY_SYSTEMS = ("MostPop", "LightGCN", "CCLRec", "CCLRec w±=1", "CCLRec cl_weight=0")
# The one hyper-parameter the bracketing tuner searches per system: (name, start grid, 3 points
# evenly spaced in log). Every tuned system gets the same start size, extension size and cap.
# CCLRec variants (w±=1, cl_weight=0, ablations) search CCLRec's grid in their own unit, so the
# equal-weight arm is as well tuned as CCLRec. "paper λ" systems stay at the papers' values.
TUNE: dict[str, tuple[str, tuple[float, float, float]]] = {
    "LightGCN": ("lr", (1e-3, 3e-3, 9e-3)),
    "SGL": ("ssl_weight", (1e-3, 5e-3, 2.5e-2)),
    "SimGCL": ("cl_weight", (2e-3, 1e-2, 5e-2)),
    "RLMRec-Con": ("kd_weight", (1e-3, 1e-2, 1e-1)),
    "CCLRec": ("lr", (1e-3 / 3, 1e-3, 3e-3)),
}
EXTEND_BY = 1  # grid points added per extension, at the edge holding the best


def fit_system(
    name,
    sp_,
    sem,
    attrs,
    prof,
    passes,
    seed,
    device,
    patience=20,
    progress=None,
    permuted=None,
    overrides=None,
):
    """Fit system ``name`` on ``sp_.train`` with early stopping on ``sp_.val``.

    Returns ``(model, wall seconds, CPU seconds of this process)``."""
    cls, kw = SYSTEMS[name]
    kw = dict(kw, **(overrides or {})) if cls is not MostPop else {}
    model = cls(max_passes=passes, patience=patience, seed=seed, device=device, **kw)
    extras = {}
    s_in, a_in, p_in = permuted if permuted is not None else (sem, attrs, prof)
    if cls is CCLRec:
        extras = {"user_profiles": p_in, "attributes": a_in}
    elif cls is RLMRecCon:
        extras = {"user_semantics": p_in}
    t0, c0 = time.perf_counter(), time.process_time()
    model.fit(sp_.train, s_in if cls is not MostPop else None, sp_.val, progress=progress, **extras)
    return model, time.perf_counter() - t0, time.process_time() - c0


def tune_spec(name: str) -> tuple[str, tuple[float, ...]] | None:
    """The tuned hyper-parameter and start grid of a system (CCLRec variants use CCLRec's)."""
    if name.endswith("paper λ") or name == "MostPop":
        return None
    return TUNE.get("CCLRec" if name.startswith("CCLRec") else name)


def _settings(ctx: RunContext) -> dict:
    passes = int(ctx.options.get("passes", ctx.pick(tiny=2, small=50, full=200)))
    patience = int(ctx.options.get("patience", ctx.pick(tiny=1, small=5, full=20)))
    sys_opt = ctx.options.get("systems", "default")
    default = TINY_SYSTEMS if ctx.scale == "tiny" else DEFAULT_SYSTEMS
    names = (
        list(SYSTEMS)
        if sys_opt == "all"
        else list(default)
        if sys_opt == "default"
        else ["MostPop", "LightGCN", "CCLRec", *ABLATIONS]
        if sys_opt == "ablations"
        else [s.strip() for s in sys_opt.split(",")]
    )
    for n in names:
        if n not in SYSTEMS:
            raise ValueError(f"unknown system {n!r}; choose from {list(SYSTEMS)}")
    present = [b for b in BASELINES if b in names]
    if "CCLRec" not in names or not present:
        raise ValueError(
            "the headline needs CCLRec and at least one of "
            + ", ".join(BASELINES)
            + f"; got systems {names}"
        )
    return {
        "passes": passes,
        "patience": patience,
        "tune": str(ctx.options.get("tune", "1")) == "1",
        # extensions of the tuner's grid: tiny (CI) tries the 3 start points only
        "cap": ctx.pick(tiny=0, small=3, full=3),
        "seeds": [ctx.seed + k for k in range(int(ctx.options.get("seeds", ctx.pick(2, 3, 5))))],
        "names": names,
        "present": present,
        "method": "CCLRec",
        # tiny (CI): 16-d embeddings, batches of 256; small/full: the 64-d defaults
        "overrides": {"dim": 16, "batch_size": 256} if ctx.scale == "tiny" else {},
    }


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name.replace("±", "pm")).strip("-").lower()


def units(ctx: RunContext) -> list[RunContext]:
    """One unit per system (its tuning fits and seeds), so ``--jobs N`` runs N at once. A unit's
    folder is named after its system, so its memo is found again when the list changes."""
    return [
        dataclasses.replace(
            ctx,
            out_dir=ctx.out_dir / f"unit-{_slug(n)}",
            options={**ctx.options, "unit_system": n},
        )
        for n in _settings(ctx)["names"]
    ]


def _measure(model, sp_, secs, cpu, first_seed: bool) -> dict:
    """One fit's record (JSON-able): test metrics, per-user test NDCG@20, stopping, cost."""
    m = model.evaluate(sp_.test, exclude=[sp_.train, sp_.val], ks=(10, 20, 50), per_user=True)
    hist = model.history_
    best_pass = max(hist, key=lambda h: h[1])[0] if hist else 0
    out = {k: float(m[k]) for k in m if "@" in k}
    out.update(
        users=[int(u) for u in m["users"]],
        per_user_ndcg20=[round(float(x), 6) for x in m["per_user"]["ndcg@20"]],
        best_val=float(model.best_val_) if model.passes_ else None,  # MostPop: not trained
        passes=int(model.passes_),
        best_pass=int(best_pass),
        stopped_early=bool(0 < model.passes_ < model.max_passes),
        seconds=float(secs),
        cpu_s=float(cpu),
        s_per_pass=float(model.seconds_per_pass_) if model.passes_ else 0.0,
        rates=model.consensus_rates() if isinstance(model, CCLRec) else {},
        curve=[[int(p), float(v)] for p, v, _ in hist],
    )
    if first_seed:
        out["pop_hits"] = figures.hits_by_popularity(model, sp_).tolist()
    return out


def run_unit(ctx: RunContext) -> Result:
    """Tune one system with the bracketing tuner (first seed, full passes) and fit it on every
    seed; every fit is memoised. One row: per-seed records and the tuning record."""
    from icml26.core.checkpoint import Memo, source_fingerprint
    from icml26.core.stats import bracket

    st = _settings(ctx)
    name = ctx.options["unit_system"]
    device = ctx.options.get("device", ctx.device)
    data, sp_, sem, attrs, prof, table, info = prepare(ctx)
    if ctx.scale != "full":  # attribute branches add <= 0.5% of a score's norm; see the docs
        attrs = {}
    if ctx.scale == "tiny":
        enc_users = hash_encoder(64)
    else:
        from icml26.core.embed import embed as enc_users
    memo = Memo(
        ctx.out_dir / "memo.json",
        config={
            "system": name,
            "scale": ctx.scale,
            "passes": st["passes"],
            "patience": st["patience"],
            "overrides": st["overrides"],
            "options": {k: str(v) for k, v in ctx.options.items() if k not in ("seeds", "systems")},
            "data": [data.n_users, data.n_items, len(data), info["semantics"]],
            "code": source_fingerprint("icml26.cclrec"),
        },
    )
    spec = tune_spec(name) if st["tune"] else None
    param = spec[0] if spec else None

    def fit(value, seed) -> dict:
        key = f"{param}={value!r}/seed={seed}" if param else f"seed={seed}"

        def work():
            perm = (
                permuted_inputs(sp_, sem, attrs, table, enc_users, seed)
                if "permuted" in name
                else None
            )
            over = {**st["overrides"], **({param: value} if param else {})}
            model, secs, cpu = fit_system(
                name, sp_, sem, attrs, prof, st["passes"], seed, device,
                patience=st["patience"], permuted=perm, overrides=over,
            )  # fmt: skip
            ctx.progress.log(f"{name} {key}: val NDCG@20 {model.best_val_:.4f}, {cpu:.0f} CPU-s")
            return _measure(model, sp_, secs, cpu, seed == st["seeds"][0])

        return memo.compute(key, work)

    tuning, pick = None, None
    if spec:
        tr = bracket(
            lambda v: fit(v, st["seeds"][0])["best_val"],
            spec[1],
            minimize=False,
            extend_by=EXTEND_BY,
            cap=st["cap"],
        )
        pick = tr.best
        tuning = {
            **tr.to_dict(),
            "param": param,
            "history": tr.history,
            "note": tr.note(name, param),
        }
    per_seed = [fit(pick, s) for s in ctx.progress.track(st["seeds"], len(st["seeds"]), name)]
    row = {
        "system": name,
        "per_seed": per_seed,
        "tuning": tuning,
        "pick": {param: pick} if param else {},
        "info": info,
        "n": [data.n_users, data.n_items, len(data)],
        "resumed": memo.resumed,
    }
    return Result(rows=[row], headline=Measure("unit", 0.0), target=TARGET, notes=[])


def combine(ctx: RunContext, results: list[Result]) -> Result:
    from icml26.core.stats import clustered_bootstrap

    st = _settings(ctx)
    names, present, method, seeds = st["names"], st["present"], st["method"], st["seeds"]
    by = {r.rows[0]["system"]: r.rows[0] for r in results}
    res = {n: by[n]["per_seed"] for n in names}
    info = by[names[0]]["info"]
    n_users, n_items, n_inter = by[names[0]]["n"]
    mean20 = {n: float(np.mean([x["ndcg@20"] for x in res[n]])) for n in names}
    best = max(present, key=lambda b: mean20[b])  # the strongest baseline on test: conservative
    t_base = ratio_ci(res, method, best, ctx.seed)
    t_equal = ratio_ci(res, method, EQUAL, ctx.seed) if EQUAL in names else None
    rows = []
    for n in names:
        ci = clustered_bootstrap(clusters(res[n]), statistic="mean", seed=ctx.seed)
        r = {"system": n}
        for key in ("recall@10", "ndcg@10", "recall@20", "ndcg@20", "recall@50", "ndcg@50"):
            r[key] = round(float(np.mean([x[key] for x in res[n]])), 4)
        r["ndcg@20 CI"] = f"[{ci.low:.4f}, {ci.high:.4f}]"
        r["ndcg@20 low"], r["ndcg@20 high"] = round(ci.low, 4), round(ci.high, 4)
        r["passes"] = "/".join(str(x["passes"]) for x in res[n])
        r["best pass"] = "/".join(str(x["best_pass"]) for x in res[n])
        r["stopped early"] = f"{sum(x['stopped_early'] for x in res[n])}/{len(seeds)}"
        r["CPU-s/fit"] = round(float(np.mean([x["cpu_s"] for x in res[n]])), 1)
        rates = res[n][0]["rates"]
        if rates:
            for k in ("pos_consensus", "neg_consensus", "struct_neg_pass", "sem_neg_pass"):
                r[k] = round(float(np.mean([x["rates"][k] for x in res[n]])), 3)
        tun = by[n]["tuning"]
        if tun:
            r["tuned"] = f"{tun['param']}={tun['best']:.3g}"
            r["interior"] = bool(tun["interior"])
        if n == method:
            r[f"vs {best}"] = ci_text(t_base)
            if t_equal is not None:
                r[f"vs {EQUAL}"] = ci_text(t_equal)
        rows.append(r)
    if t_equal is not None:
        value, spread = both_targets(
            (t_base.value, t_base.low, t_base.high), (t_equal.value, t_equal.low, t_equal.high)
        )
        headline_name = f"NDCG@20 CCLRec / max(best baseline, {EQUAL})"
    else:
        value, spread = t_base.value, t_base.spread
        headline_name = "NDCG@20 CCLRec / best baseline"
    n_fits = sum(
        len(res[n]) + (len(by[n]["tuning"]["grid"]) - 1 if by[n]["tuning"] else 0) for n in names
    )
    cpu_total = sum(
        sum(x["cpu_s"] for x in res[n]) for n in names
    )  # the seed fits only; tuning fits are in the per-unit memos
    tiny_note = f"; tiny: {TINY_USERS} random users" if ctx.scale == "tiny" else ""
    notes = [
        f"ML-100K from recbole 1.2.1 ({n_users} users, {n_items} items, {n_inter} "
        f"interactions{tiny_note}), per-user "
        "chronological 80/10/10; full ranking, train and validation items masked.",
        f"{len(seeds)} seeds; every system up to {st['passes']} passes (one pass = as many BPR "
        f"triplets as training interactions), stopped after {st['patience']} passes without a "
        "gain in validation NDCG@20, best pass restored; the same rule for every system.",
        "Tuning: "
        + (
            f"each tuned system's one hyper-parameter (TUNE in claim.py) by the bracketing tuner "
            f"on seed {seeds[0]} at the same passes and stopping rule, 3 start points, "
            f"{EXTEND_BY} more at the best edge up to {st['cap']} times; the best fit is the "
            f"seed-{seeds[0]} run. {n_fits} fits in all."
            if st["tune"]
            else "none (--opt tune=0): the fixed values of SYSTEMS."
        ),
        "Semantics: "
        + (
            "hashing bag-of-words encoder (tiny)"
            if ctx.scale == "tiny"
            else "all-MiniLM-L6-v2 of title/year/genres; user profiles from .user + genres"
        )
        + f" ({info['semantics']}"
        + (
            f"; SmolLM2 item profiles name one of the item's .item genres for "
            f"{info['genre_agreement']:.0%} of items"
            if info.get("genre_agreement") is not None
            else ""
        )
        + "); the paper embeds LLM-written attributes and profiles.",
        f"Target 1: CCLRec / best baseline ({best}, the highest mean test NDCG@20 of "
        + ", ".join(present)
        + f") = {ci_text(t_base)}. "
        + (
            f"Target 2 (consensus weighting): CCLRec / {EQUAL} = {ci_text(t_equal)}. "
            "Headline = the smaller ratio with the smaller ends of the two intervals (both must "
            "hold). "
            if t_equal is not None
            else f"Target 2 not measured ({EQUAL} not run). "
        )
        + "Intervals: 95% clustered bootstrap, seeds then test users.",
        "The paper publishes no numbers (abstract + code only); this tests the direction only.",
        f"CPU time of the seed fits: {cpu_total / 60:.1f} CPU-min.",
    ]
    if NO_CL in names:
        t_cl = ratio_ci(res, method, NO_CL, ctx.seed)
        notes.append(
            f"Contrastive loss: CCLRec / {NO_CL} (BPR + the LLMRec-style encoder only) = "
            f"{ci_text(t_cl)}."
        )
    for n in names:
        tun = by[n]["tuning"]
        if tun:
            grid = ", ".join(
                f"{g:.3g}: {s:.4f}" for g, s in zip(tun["grid"], tun["scores"], strict=True)
            )
            notes.append(
                f"Tuned {n} {tun['param']} (validation NDCG@20): {grid}; picked {tun['best']:.3g}"
                + ("" if tun["interior"] else " — at the grid's edge")
                + "."
            )
            if tun.get("note"):
                notes.append(tun["note"])
    if "CCLRec permuted semantics" in names:
        notes.append(
            f"Permuted item semantics: NDCG@20 {mean20['CCLRec permuted semantics']:.4f} vs "
            f"{mean20['CCLRec']:.4f} with real semantics."
        )
    if "MostPop" in names:
        weak = [n for n in present if mean20[n] <= mean20["MostPop"]]
        if weak:
            notes.append("At or below MostPop: " + ", ".join(weak) + ".")
    sem_pass = res[method][0]["rates"].get("sem_neg_pass", 1.0)
    if sem_pass < 0.01:
        notes.append(
            "Almost no item passes the semantic-negative test (cos < 0.3) with this embedder, "
            "so semantic negatives are random fallbacks (trap 5)."
        )
    figs = figures.all_figures(
        ctx.out_dir,
        names,
        res,
        {n: res[n][0]["curve"] for n in names},
        {n: res[n][0].get("pop_hits") for n in names},
        method,
        present,
    )
    tuning = {n: by[n]["tuning"] for n in names if by[n]["tuning"]}
    return Result(
        rows=rows,
        headline=Measure(headline_name, float(value), "x", tuple(spread), higher_is_better=True),
        target=TARGET,
        notes=notes,
        figures=figs,
        power=power_checks(res, present, method, seed=ctx.seed),
        tuning=tuning or None,
    )


def run(ctx: RunContext) -> Result:
    return combine(ctx, [run_unit(u) for u in units(ctx)])
