"""Claim ``quatro``: under staleness and a high learning rate the per-query trust-region-dual
loss (``tr_dual``, our reconstruction of QUATRO) keeps reward and entropy where clipped
GRPO-style losses degrade; measured as held-out pass@1 at (mu=8, LR x10).

A byte-level ``tiny_llama`` is SFT-warmed (cached) on generated arithmetic (``add2``, ``chain3``)
to ~30% sampled exact match, then each arm (tr_dual with centred advantages, tr_dual with
std-scaled advantages, GRPO, DAPO, GSPO, KL penalty) runs the same rollout budget and seeds in
each (mu, LR multiplier) setting.

Fair LRs (issue 36): at ``small``/``full`` every arm's own LR is tuned first, on-policy at
(mu, LR x) = (1, 1), seed ``ctx.seed``, with the bracketing tuner (``core.stats.bracket``: the same
5-point x2 start grid around ``base_lr``, 2 points per extension, at most 2 extensions, for every
arm), on the mean *training* reward of the last quarter of rollout batches (never the held-out
prompts); each stress setting then multiplies that arm's tuned LR. ``tiny`` (and ``--opt
tune=0``) uses ``base_lr`` for every arm. Headline (declared before any run): held-out pass@1 of
``tr_dual (std A)`` — tr_dual with the baselines' std-scaled advantages, so both sides take steps
of the same scale — / the best baseline's at the harshest setting, min/max of the seed-paired
ratios; the centred tr_dual is a row.

Power checks: control = the stress itself (GRPO at the harshest setting against on-policy GRPO,
mu=1 at LR x1, i.e. its tuned LR at small/full: the stress must degrade the clipped loss beyond
the seed spread; measured where the run has the (1, 1) setting and >= 2 seeds); floor = the base
(SFT-warmed) policy's held-out pass@1 before RL, min/max over seeds (some arm at the harshest
setting must end above it).

Options: ``delta`` (0.05), ``base_lr`` (1e-4, the centre of the tuning grid), ``steps`` /
``seeds`` (override the scale's), ``tune`` (1 at small/full, 0 at tiny), ``jobs`` (processes, one
seed each; default 1; the tuning runs in the driver, resumable from its memo).
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import replace

import numpy as np
import torch

from icml26.core.checkpoint import Memo, source_fingerprint
from icml26.core.claims import Measure, Result, RunContext
from icml26.core.lm import cache_root, tiny_llama
from icml26.core.plots import pyplot, save_figure
from icml26.quatro.loop import RLConfig, RLLoop, sft_warmup
from icml26.quatro.losses import loss_config

HEADLINE_ARM = "tr_dual (std A)"  # tr_dual with GRPO's std-scaled advantages: matched step scale
ARMS = ("tr_dual", HEADLINE_ARM, "grpo", "dapo", "gspo", "kl_penalty")
BASELINES = ("grpo", "dapo", "gspo", "kl_penalty")
ARM_OVERRIDES = {HEADLINE_ARM: {"scale_adv": True}}
TUNE_GRID = (0.25, 0.5, 1.0, 2.0, 4.0)  # x base_lr: the start grid of every arm
TUNE_EXTEND, TUNE_CAP = 2, 2
TARGET = 1.0


def _lr_key(arm: str) -> str:
    """The tuned arm whose LR an arm uses (the δ=0.01 ablation uses centred tr_dual's)."""
    return arm if arm in ARMS else arm.split(" ")[0]


def tune_objective(summary: dict) -> float:
    """Mean training reward over the last quarter of rollout batches (the tuner's score)."""
    rew = summary["reward"]
    k = max(1, len(rew) // 4)
    return float(np.mean(rew[-k:]))


def warm_policy(hidden=64, layers=2, sft_steps=600, seed=0, progress=None):
    """SFT-warmed tiny_llama, cached as safetensors + JSON under the icml26 cache."""
    from safetensors.torch import load_file, save_file

    key = dict(hidden=hidden, layers=layers, sft_steps=sft_steps, seed=seed, v=1)
    tag = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    folder = cache_root() / "quatro"
    path, meta = folder / f"sft-{tag}.safetensors", folder / f"sft-{tag}.json"
    model, tok = tiny_llama(hidden=hidden, layers=layers, heads=4, max_len=64, seed=seed)
    if path.exists() and meta.exists():
        model.load_state_dict(load_file(str(path)), strict=False)
        model.tie_weights()
        return model.eval(), tok, json.loads(meta.read_text())
    summary = sft_warmup(model, tok, steps=sft_steps, seed=seed, progress=progress)
    folder.mkdir(parents=True, exist_ok=True)
    from icml26.core.io import atomic_write_json

    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    tmp = path.with_suffix(".tmp")
    save_file(state, str(tmp))
    tmp.replace(path)
    atomic_write_json(meta, summary)
    return model.eval(), tok, summary


def _summarise(hist):
    train = [h for h in hist if "reward" in h]
    rew = np.array([h["reward"] for h in train])
    ent = np.array([h["entropy"] for h in train])
    smooth = np.convolve(rew, np.ones(3) / 3, mode="valid") if len(rew) >= 3 else rew
    e0, e1 = ent[0], ent[-3:].mean()
    collapse = bool(e1 < 0.1 * e0 or smooth[-1] < 0.5 * smooth.max())
    last = hist[-1]
    return {
        "pass@1": last["eval_pass@1"],
        "pass@8": last["eval_pass@8"],
        "unique": last["eval_unique_correct"],
        "ent_ratio": float(e1 / max(e0, 1e-12)),
        "collapse": collapse,
        "kl_share": float(np.mean([h["kl_within_2delta"] for h in train])),
        "clip": float(np.mean([h["clip_frac"] for h in train])),
        "reward": rew.tolist(),
        "entropy": ent.tolist(),
        "pass@1_0": hist[0]["eval_pass@1"],
    }


def _run_seed(seed, spec, progress=None):
    """Every (setting, arm) for one seed: ({(arm, setting): summary}, tr_dual query stats, SFT info)."""
    base, tok, info = warm_policy(spec["hidden"], spec["layers"], spec["sft_steps"], seed, progress)
    # the tuning seed's on-policy runs at the tuned LR are tuning runs already: reuse them
    tune_seed = spec["tuning"].get("protocol", {}).get("seed")
    tuned = _tune_memo(spec, seed) if spec["tune"] and seed == tune_seed else None
    out, qstats = {}, []
    for mu, lr_x in spec["settings"]:
        for arm, over in spec["arms"]:
            if arm not in ARMS and (mu, lr_x) != spec["harsh"]:
                continue  # the δ=0.01 ablation runs at the harshest setting only
            lr = spec["lrs"].get(_lr_key(arm), spec["base_lr"]) * lr_x
            done = tuned.get(f"{arm}/{lr:.6g}") if tuned is not None and mu == 1 else None
            if done is not None:
                progress.log(f"seed {seed} mu=1 lr x{lr_x} ({lr:.3g}) {arm}: the tuning run")
                out[(arm, (mu, lr_x))] = done
                continue
            progress.log(f"seed {seed} mu={mu} lr x{lr_x} ({lr:.3g}) {arm}")
            loop = _loop(base, tok, spec, arm, over, mu, lr, seed)
            out[(arm, (mu, lr_x))] = _summarise(loop.run(progress=progress))
            if arm == HEADLINE_ARM and (mu, lr_x) == spec["harsh"]:
                qstats.extend(loop.query_stats)
    return out, qstats, info


def _loop(base, tok, spec, arm, over, mu, lr, seed) -> RLLoop:
    method = arm.split(" ")[0]
    lc = loss_config(
        method, **{**({"delta": spec["delta"]} if method == "tr_dual" else {}), **over}
    )
    cfg = RLConfig(
        steps=spec["steps"],
        prompts=spec["prompts"],
        group_size=8,
        mu=mu,
        lr=lr,
        eval_prompts=spec["n_eval"],
        eval_samples=spec["k_eval"],
        seed=seed,
    )
    torch.manual_seed(seed)
    return RLLoop(copy.deepcopy(base), tok, cfg, lc)


def _tune_memo(spec: dict, seed: int) -> Memo:
    """The memo of the tuning runs on ``seed`` (keyed by the spec and the code)."""
    key = {k: spec[k] for k in ("hidden", "layers", "sft_steps", "steps", "prompts", "n_eval",
                                "k_eval", "base_lr", "delta")}
    key.update(seed=seed, grid=TUNE_GRID, code=source_fingerprint("icml26.quatro"), v=1)
    tag = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return Memo(cache_root() / "quatro" / f"tune-{tag}.json", config=key)


def tune_lrs(ctx: RunContext, spec: dict | None = None) -> dict:
    """Every arm's LR, bracketed on-policy at (1, 1) on seed ``ctx.seed`` (see the module doc).

    Returns ``{"lrs": {arm: lr}, "tuning": {arm: TuneResult dict, "protocol": ...}}``; resumable:
    each (arm, LR) run is memoised under the icml26 cache, keyed by the spec and the code."""
    from icml26.core.stats import bracket

    spec = spec or _spec(ctx)
    if not spec["tune"]:
        return {"lrs": {}, "tuning": {}}
    memo = _tune_memo(spec, ctx.seed)
    base, tok, _ = warm_policy(spec["hidden"], spec["layers"], spec["sft_steps"], ctx.seed,
                               ctx.progress)
    out, lrs = {}, {}
    for arm in ARMS:
        over = ARM_OVERRIDES.get(arm, {})

        def objective(lr, arm=arm, over=over):
            def fit():
                ctx.progress.log(f"tuning {arm}: lr {lr:.3g} (mu=1, seed {ctx.seed})")
                loop = _loop(base, tok, spec, arm, over, 1, lr, ctx.seed)
                return _summarise(loop.run(progress=ctx.progress))

            return tune_objective(memo.compute(f"{arm}/{lr:.6g}", fit))

        tr = bracket(objective, [spec["base_lr"] * g for g in TUNE_GRID], minimize=False,
                     extend_by=TUNE_EXTEND, cap=TUNE_CAP)
        lrs[arm] = tr.best
        out[arm] = {**tr.to_dict(), "param": "lr", "history": tr.history}
    out["protocol"] = {"start_grid": [spec["base_lr"] * g for g in TUNE_GRID],
                       "extend_by": TUNE_EXTEND, "cap": TUNE_CAP, "spacing": "x2 (log)",
                       "seed": ctx.seed, "setting": "mu=1, LR x1",
                       "objective": "mean training reward, last quarter of rollout batches"}
    return {"lrs": lrs, "tuning": out}


def _spec(ctx: RunContext) -> dict:
    o = ctx.options
    settings = ctx.pick(
        tiny=[(8, 10)], small=[(1, 1), (4, 4), (8, 10)], full=[(1, 1), (4, 4), (8, 10)]
    )
    return dict(
        hidden=64,
        layers=2,
        sft_steps=ctx.pick(tiny=200, small=600, full=600),
        settings=settings,
        harsh=settings[-1],
        arms=[(a, ARM_OVERRIDES.get(a, {})) for a in ARMS]
        + ([("tr_dual δ=0.01", {"delta": 0.01})] if ctx.scale != "tiny" else []),
        n_seeds=int(o.get("seeds", ctx.pick(tiny=1, small=3, full=5))),
        steps=int(o.get("steps", ctx.pick(tiny=5, small=40, full=100))),
        prompts=ctx.pick(tiny=16, small=32, full=32),
        n_eval=ctx.pick(tiny=32, small=64, full=256),
        k_eval=ctx.pick(tiny=8, small=16, full=16),
        base_lr=float(o.get("base_lr", 1e-4)),
        delta=float(o.get("delta", 0.05)),
        tune=str(o.get("tune", ctx.pick(tiny="0", small="1", full="1"))) == "1",
        lrs={k: float(v) for k, v in json.loads(o.get("tuned_lrs", "{}")).items()},
        # what tune_lrs recorded, set by units() ({} when LRs were given by hand)
        tuning=json.loads(o.get("tuning", "{}")),
    )


def units(ctx: RunContext) -> list[RunContext]:
    """One unit per seed (seeds ctx.seed, ctx.seed+1, ...), each with its own out_dir; the LR
    tuning (:func:`tune_lrs`) runs here first and travels to every unit in its options."""
    spec = _spec(ctx)
    n = spec["n_seeds"]
    opts = dict(ctx.options)
    if spec["tune"] and "tuned_lrs" not in opts:
        t = tune_lrs(ctx, spec)
        opts["tuned_lrs"] = json.dumps(t["lrs"], sort_keys=True)
        opts["tuning"] = json.dumps(t["tuning"], sort_keys=True)
    return [
        replace(
            ctx,
            seed=ctx.seed + i,
            out_dir=ctx.out_dir / f"seed{ctx.seed + i}",
            options={**opts, "seeds": "1"},
        )
        for i in range(n)
    ]


def run_unit(ctx: RunContext) -> Result:
    """Every (setting, arm) for ``ctx.seed``; per-run summaries travel in ``rows``."""
    spec = _spec(ctx)
    out, qstats, info = _run_seed(ctx.seed, spec, ctx.progress)
    rows = [
        {"kind": "run", "arm": arm, "mu": st[0], "lr_x": st[1], **summ}
        for (arm, st), summ in out.items()
    ]
    rows += [{"kind": "query", **q} for q in qstats] + [{"kind": "sft", **info}]
    rows.append({"kind": "lrs", "lrs": {a: spec["lrs"].get(_lr_key(a), spec["base_lr"])
                                        for a, _ in spec["arms"]},
                 "tuning": spec["tuning"]})
    return Result(rows=rows, headline=Measure("unit", 0.0), target=0.0)


def _unit_in_process(ctx: RunContext) -> Result:
    from icml26.core.claims import Progress, set_threads

    set_threads(1)
    return run_unit(replace(ctx, progress=Progress()))


def run(ctx: RunContext) -> Result:
    us = units(ctx)
    jobs = max(1, min(int(ctx.options.get("jobs", 1)), len(us)))
    if jobs > 1:  # seeds are independent: one spawned single-threaded process each
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        ctx.progress.log(f"running {len(us)} seeds in {jobs} processes")
        with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as ex:
            results = list(ex.map(_unit_in_process, [replace(u, progress=None) for u in us]))
    else:
        results = [run_unit(u) for u in us]
    return combine(ctx, results)


def combine(ctx: RunContext, results: list[Result]) -> Result:
    spec = _spec(ctx)
    settings, harsh, delta = spec["settings"], spec["harsh"], spec["delta"]
    n_eval, k_eval, steps, prompts = spec["n_eval"], spec["k_eval"], spec["steps"], spec["prompts"]
    hidden, layers, base_lr = spec["hidden"], spec["layers"], spec["base_lr"]
    eps = 0.5 / (n_eval * k_eval)  # half a success: keeps a ratio finite if a baseline hits 0
    res: dict = {}  # (arm, setting) -> list of per-seed summaries
    qstats, sft_info, lrs, tuning = [], [], {}, {}
    for r in results:
        for row in r.rows:
            row = dict(row)
            kind = row.pop("kind")
            if kind == "run":
                key = (row.pop("arm"), (int(row.pop("mu")), int(row.pop("lr_x"))))
                res.setdefault(key, []).append(row)
            elif kind == "query":
                qstats.append(row)
            elif kind == "lrs":
                lrs, tuning = row["lrs"], row["tuning"]
            else:
                sft_info.append(row)
    seeds = list(range(len(results)))

    def mean(arm, st, key):
        return float(np.mean([r[key] for r in res[(arm, st)]]))

    best = max(BASELINES, key=lambda a: mean(a, harsh, "pass@1"))
    ratios = [
        (t["pass@1"] + eps) / (b["pass@1"] + eps)
        for t, b in zip(res[(HEADLINE_ARM, harsh)], res[(best, harsh)], strict=True)
    ]
    value = (mean(HEADLINE_ARM, harsh, "pass@1") + eps) / (mean(best, harsh, "pass@1") + eps)
    spread = (float(min(ratios)), float(max(ratios))) if len(ratios) > 1 else None

    rows = []
    for (arm, st), rs in res.items():
        p1 = [r["pass@1"] for r in rs]
        rows.append(
            {
                "system": _system(arm, st),
                "arm": arm,
                "mu": st[0],
                "lr_x": st[1],
                "lr": float(f"{lrs.get(arm, base_lr) * st[1]:.4g}"),
                "pass@1 start": round(mean(arm, st, "pass@1_0"), 4),
                "pass@1": round(float(np.mean(p1)), 4),
                "pass@1 min/max": f"{min(p1):.3f}/{max(p1):.3f}",
                "pass@8": round(mean(arm, st, "pass@8"), 4),
                "unique correct": round(mean(arm, st, "unique"), 1),
                "entropy final/initial": round(mean(arm, st, "ent_ratio"), 3),
                "collapses": f"{sum(r['collapse'] for r in rs)}/{len(rs)}",
                "KL<=2δ share": round(mean(arm, st, "kl_share"), 3),
                "clip frac": round(mean(arm, st, "clip"), 4),
            }
        )
    base = [float(r["pass@1_0"]) for r in res[("tr_dual", harsh)]]  # the same policy per seed
    rows.append(
        {
            "system": BASE_SYSTEM,
            "arm": "base policy",
            "pass@1 start": round(float(np.mean(base)), 4),
            "pass@1": round(float(np.mean(base)), 4),
            "pass@1 min/max": f"{min(base):.3f}/{max(base):.3f}",
        }
    )
    checks = power_checks(res, harsh, base)
    tuned = bool(tuning)
    edge = [a for a, t in tuning.items() if a != "protocol" and not t.get("interior", True)]
    if tuned:
        tune_note = (
            "LR tuning (issue 36): every arm bracketed on-policy at (mu, LR x)=(1, 1), seed "
            f"{tuning['protocol']['seed']}, on the mean training reward of the last quarter of "
            f"rollout batches (core.stats.bracket, start grid {TUNE_GRID} x base LR, "
            f"+{TUNE_EXTEND} points per extension, at most {TUNE_CAP}); tuned LRs "
            + ", ".join(f"{a} {lrs[a]:.3g}" for a in ARMS if a in lrs)
            + "; each stress setting multiplies the arm's own tuned LR. "
            + (f"At the grid's edge after the cap: {', '.join(edge)}." if edge
               else "Every arm's best LR is interior.")
        )
    else:
        tune_note = (f"No LR tuning at this scale (tune=0): every arm uses the base LR {base_lr:g} "
                     "times the setting's multiplier.")
    figs = _figures(ctx, res, settings, qstats, delta)
    sft_acc = np.mean([i["sft_val_exact"] for i in sft_info])
    notes = [
        "RECONSTRUCTION: the paper's method section could not be read (only abstract and summaries); "
        "the loss is our tr_dual reconstruction (per-query KL(pi||pi_old) <= delta, dual by "
        "damped Newton on the exponential-tilting dual, k3 stabilizer), not verified as QUATRO.",
        f"Policy: byte tiny_llama d={hidden}, {layers} layers (the issue asked d=128, 4 layers for "
        "small; too slow on 2 shared cores), SFT-warmed to "
        f"{sft_acc:.0%} sampled exact match on generated add2/chain3 (not reasoning-gym).",
        f"{len(seeds)} seed(s), {steps} rollout batches of {prompts} prompts x G=8, T=1.0, answers "
        f"<= 4 tokens; Adam, grad-clip 1.0; delta={delta} fixed beforehand.",
        f"Held-out: {n_eval} test-split prompts x {k_eval} samples; pass@k unbiased; unique correct = "
        "held-out prompts solved by >= 1 sample.",
        f"Headline at (mu, LR x)={harsh}: {HEADLINE_ARM} (tr_dual with GRPO's std-scaled "
        "advantages, declared before the run so both sides take steps of one scale; the centred "
        f"tr_dual is a row) / the best baseline by mean pass@1 = {best}; ratios use +{eps:.1e} "
        "(half a success) on both sides; spread = min/max of seed-paired ratios.",
        tune_note,
        "Collapse = final entropy < 10% of initial or final smoothed reward < 50% of its peak.",
        "Power checks: control = GRPO at the harshest setting vs on-policy GRPO (mu=1, LR x1), "
        "pass@1 min/max over seeds (needs the (1, 1) setting and >= 2 seeds); floor = the base "
        "policy's held-out pass@1 before RL (the step-0 evaluation, the same policy for every "
        "arm of a seed), min/max over seeds, against every arm at the harshest setting.",
        "This claim runs the plain-PyTorch RLLoop; the TRL trainer (TrDualGRPOTrainer, trl 1.16) has its own SmolLM2 + LoRA comparison in docs/quatro.md.",
    ]
    return Result(
        rows=rows,
        headline=Measure(
            f"held-out pass@1, {HEADLINE_ARM} / best baseline at mu={harsh[0]}, LR x{harsh[1]}",
            float(value),
            "x",
            spread,
            higher_is_better=True,
        ),
        target=TARGET,
        notes=notes,
        figures=figs,
        power=checks,
        tuning=tuning or None,
    )


BASE_SYSTEM = "base policy (SFT-warmed, before RL)"
ON_POLICY = (1, 1)


def _system(arm, st) -> str:
    return f"{arm} (mu={st[0]}, LR x{st[1]})"


def _range(xs):
    return (float(min(xs)), float(max(xs))) if len(xs) > 1 else None


def power_checks(res: dict, harsh: tuple, base: list[float]) -> list:
    """Control: stressed GRPO vs on-policy GRPO at LR x1 (pass@1, min/max over seeds; needs
    the (1, 1) setting and >= 2 seeds). Floor: the base policy's held-out pass@1 before RL
    (min/max over seeds) against every arm at the harshest setting."""
    from icml26.core import power

    stressed, onpol = res.get(("grpo", harsh)), res.get(("grpo", ON_POLICY))
    if onpol is None or harsh == ON_POLICY:
        ctl = power.not_measured(
            "control",
            f"this scale runs only the setting mu={harsh[0]}, LR x{harsh[1]}: no on-policy GRPO "
            "at LR x1 to compare the stressed GRPO with (small and full run mu=1, LR x1)",
        )
    elif len(stressed) < 2:
        ctl = power.not_measured(
            "control", "one seed: no seed spread to separate on-policy from stressed GRPO"
        )
    else:
        a = [r["pass@1"] for r in onpol]
        b = [r["pass@1"] for r in stressed]
        ctl = power.control(
            _system("grpo", ON_POLICY),
            float(np.mean(a)),
            _system("grpo", harsh),
            float(np.mean(b)),
            spread=_range(a),
            null_spread=_range(b),
            metric="held-out pass@1 (min/max over seeds)",
        )
    arms = {
        _system(a, harsh): float(np.mean([r["pass@1"] for r in res[(a, harsh)]]))
        for a in ARMS
        if (a, harsh) in res
    }
    spreads = {
        _system(a, harsh): _range([r["pass@1"] for r in res[(a, harsh)]])
        for a in ARMS
        if (a, harsh) in res
    }
    flo = power.floor(
        arms,
        BASE_SYSTEM,
        float(np.mean(base)),
        spreads=spreads,
        floor_spread=_range(base),
        metric="held-out pass@1",
    )
    return [ctl, flo]


def _figures(ctx, res, settings, qstats, delta):
    plt = pyplot()
    figs = []
    fig, axes = plt.subplots(2, len(settings), figsize=(4.2 * len(settings), 6), squeeze=False)
    for j, st in enumerate(settings):
        for arm in ARMS:
            if (arm, st) not in res:
                continue
            for i, key in enumerate(("reward", "entropy")):
                y = np.mean([r[key] for r in res[(arm, st)]], axis=0)
                axes[i, j].plot(np.arange(1, len(y) + 1), y, label=arm)
        axes[0, j].set_title(f"mu={st[0]}, LR x{st[1]}")
        axes[1, j].set_xlabel("rollout batch")
    axes[0, 0].set_ylabel("train reward (mean over seeds)")
    axes[1, 0].set_ylabel("token entropy (nats)")
    axes[0, 0].legend(fontsize=7)
    figs.append(save_figure(fig, ctx.out_dir / "reward_entropy.png"))
    if qstats:
        kl = np.concatenate([q["kl"] for q in qstats])
        lam = np.concatenate([q["lam"] for q in qstats])
        spread = np.concatenate([q["spread"] for q in qstats])
        fig, ax = plt.subplots(1, 2, figsize=(9, 3.5))
        ax[0].hist(np.clip(kl, -0.1, 10 * delta), bins=40)
        ax[0].axvline(delta, color="k", ls="--", label=f"δ={delta}")
        ax[0].set_xlabel("per-query KL̂(π‖π_old) after the last inner step (nats)")
        ax[0].legend()
        ax[1].scatter(spread, lam, s=6, alpha=0.5)
        ax[1].set_xlabel("reward std within the group")
        ax[1].set_ylabel("λ_x")
        fig.suptitle("tr_dual at the harshest setting, last 10 rollout batches")
        figs.append(save_figure(fig, ctx.out_dir / "per_query_kl_lambda.png"))
    return figs
