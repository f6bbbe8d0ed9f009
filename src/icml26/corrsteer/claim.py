"""Claim ``corrsteer``: correlation-selected, validated SAE features raise multiple-choice accuracy.

Stage A (cached, timed apart): TopK SAEs on SmolLM2-135M-Instruct residuals (Wikipedia train
split), evaluated on the validation split. Stage B: BIG-bench multiple-choice tasks (the MMLU
stand-in) with one-token letter answers; tasks fixed *before* any steering by their unsteered
accuracy on a probe (in (chance + 5 pp, 70%)); per split seed, train items feed the correlations,
validation items gate CorrSteer-P and pick the CAA strength, test items score every system.

Headline: test accuracy change of CorrSteer-P over unsteered (pp), paired bootstrap 95% CI over
(item, seed) pairs; target +1.0 pp.

Options (``--opt key=value``): ``model`` (HF folder / .gguf), ``dtype`` (bf16), ``layers``
("8,15,22"), ``sae_dir`` (folder with ``L<layer>/`` SAELens folders to use instead of training,
e.g. GemmaScope at ``full``), ``tasks`` (comma-separated BIG-bench tasks, skips the probe).
"""

from __future__ import annotations

import numpy as np

from icml26.core.claims import Measure, Result, RunContext
from icml26.core.errors import UserError
from icml26.core.io import atomic_write_json
from icml26.core.lm import load_lm
from icml26.core.torchutil import bootstrap_ci, check_device, parse_dtype
from icml26.corrsteer.experiment import Splits, run_seed, unsteered_pass
from icml26.corrsteer.sae import load_sae
from icml26.corrsteer.stage import sae_stage
from icml26.corrsteer.train import TrainConfig, blocks

TARGET = 1.0
CANDIDATE_TASKS = (  # English knowledge/reasoning tasks with 3-5 options and short prompts
    "elementary_math_qa/question_only", "unit_conversion/unit_identification",
    "logical_deduction/three_objects", "physics", "social_iqa", "movie_recommendation",
    "ruin_names", "disambiguation_qa", "hindu_knowledge",
)
TINY_TASKS = ("goal_step_wikihow/step_inference", "social_iqa")


def _settings(ctx: RunContext, n_layers: int) -> dict:
    layers = ctx.options.get("layers")
    return ctx.pick(
        tiny=dict(layers=[3], train=TrainConfig(d_sae=256, k=16, epochs=2, batch_size=256, lr=1e-3),
                  n_train=10_000, n_eval=2_000, splits=Splits(48, 16, 32), seeds=[0], n_random=2,
                  probe=0, max_tasks=2),
        small=dict(layers=[8, 15, 22], train=TrainConfig(d_sae=4096, k=32, epochs=3, batch_size=512, lr=5e-4),
                   n_train=50_000, n_eval=10_000, splits=Splits(500, 150, 300), seeds=[0, 1, 2],
                   n_random=5, probe=20, max_tasks=6),
        full=dict(layers=list(range(n_layers)), train=TrainConfig(d_sae=16384, k=64, epochs=1),
                  n_train=2_000_000, n_eval=100_000, splits=Splits(4000, 500, 2000), seeds=[0, 1, 2],
                  n_random=5, probe=100, max_tasks=12),
    ) | ({"layers": [int(x) for x in layers.split(",")]} if layers else {})


def choose_tasks(model, tok, n_probe: int, max_tasks: int, need: int, seed: int, progress=None):
    """Tasks whose unsteered probe accuracy lies in (chance + 5 pp, 70%), with enough items;
    falls back to the best margins over chance when fewer than two qualify (noted)."""
    from icml26.core.mcq import bigbench_task_sizes, load_bigbench

    sizes = bigbench_task_sizes()
    probe = []
    for task in CANDIDATE_TASKS:
        if sizes.get(task, 0) < max(need // max_tasks, n_probe):
            continue
        items = load_bigbench(task, max_items=n_probe, seed=10_000 + seed)
        data = unsteered_pass(model, tok, items, [], progress)
        chance = float(np.mean([len(i.gold) / len(i.choices) for i in items]))
        probe.append({"task": task, "acc": float(data.correct.mean()), "chance": chance,
                      "n_items": sizes[task]})
    ok = [p for p in probe if p["chance"] + 0.05 < p["acc"] < 0.70]
    ok.sort(key=lambda p: -(p["acc"] - p["chance"]))
    fallback = len(ok) < 2
    if fallback:
        ok = sorted(probe, key=lambda p: -(p["acc"] - p["chance"]))[:2]
    return [p["task"] for p in ok[:max_tasks]], probe, fallback


def _pool(tasks, n: int, seed: int):
    """``n`` items spread as evenly as the tasks' sizes allow, shuffled (seeded)."""
    from icml26.core.mcq import bigbench_task_sizes, load_bigbench

    all_sizes = bigbench_task_sizes()
    sizes = {t: all_sizes[t] for t in tasks}
    if sum(sizes.values()) < n:
        raise UserError(f"tasks {list(tasks)} hold {sum(sizes.values())} items; {n} are needed")
    quota, left = dict.fromkeys(tasks, 0), n
    while left:
        open_ = [t for t in tasks if quota[t] < sizes[t]]
        share = max(1, left // len(open_))
        for t in open_:
            take = min(share, sizes[t] - quota[t], left)
            quota[t] += take
            left -= take
    items = []
    for t in tasks:
        items += load_bigbench(t, max_items=quota[t], seed=seed)
    rng = np.random.default_rng(seed)
    return [items[i] for i in rng.permutation(len(items))]


def run(ctx: RunContext) -> Result:
    device = check_device(ctx.device)
    dtype = parse_dtype(ctx.options.get("dtype", "bf16"))
    model_name = ctx.options.get("model")
    model, tok = load_lm(model_name, dtype=dtype, device=device)
    S = _settings(ctx, len(blocks(model)))
    layers = S["layers"]
    if ctx.options.get("sae_dir"):
        from pathlib import Path
        saes = {L: load_sae(Path(ctx.options["sae_dir"]) / f"L{L}", device=device) for L in layers}
        sae_metrics, sae_seconds = {L: {} for L in layers}, 0.0
    else:
        saes, sae_metrics, sae_seconds = sae_stage(
            model, tok, layers, S["train"], n_train=S["n_train"], n_eval=S["n_eval"],
            model_id=str(model_name or "smollm2"), progress=ctx.progress, ce_blocks=ctx.pick(4, 8, 64))
    saes = {L: s.to(device) for L, s in saes.items()}
    for L, s in saes.items():
        if s.d_in != model.config.hidden_size:
            raise UserError(f"SAE for layer {L} has d_in={s.d_in}; the model's hidden size is "
                            f"{model.config.hidden_size}")
    sp = S["splits"]
    need = sp.n_train + sp.n_val + sp.n_test
    probe, fallback = [], False
    if ctx.options.get("tasks"):
        tasks = ctx.options["tasks"].split(",")
    elif S["probe"]:
        from icml26.core.checkpoint import Memo

        memo = Memo(ctx.out_dir / "memo.json", config={"model": str(model_name), "probe": S["probe"],
                                                        "tasks": CANDIDATE_TASKS, "seed": ctx.seed})
        tasks, probe, fallback = memo.compute("tasks", lambda: choose_tasks(
            model, tok, S["probe"], S["max_tasks"], need, ctx.seed, ctx.progress))
    else:
        tasks = list(TINY_TASKS)
    items = _pool(tasks, need, ctx.seed)
    data = unsteered_pass(model, tok, items, layers, ctx.progress, keep_cache=True)
    runs = [run_seed(model, data, saes, sp, ctx.seed + s, n_random=S["n_random"], progress=ctx.progress)
            for s in S["seeds"]]
    return _result(ctx, runs, tasks, probe, fallback, sae_metrics, sae_seconds, data, S)


def _result(ctx, runs, tasks, probe, fallback, sae_metrics, sae_seconds, data, S) -> Result:
    from icml26.corrsteer.figures import claim_figure

    names = runs[0]["names"]
    diffs = {n: np.concatenate([r["test"][k].astype(float) - r["test"][0] for r in runs])
             for k, n in enumerate(names)}
    rows = []
    for k, n in enumerate(names):
        per_seed = [100 * float(r["test"][k].mean() - r["test"][0].mean()) for r in runs]
        ci = bootstrap_ci(lambda d: 100 * float(d.mean()), diffs[n], seed=ctx.seed) if k else (0.0, 0.0)
        better = int(sum((r["test"][k] > r["test"][0]).sum() for r in runs))
        worse = int(sum((r["test"][k] < r["test"][0]).sum() for r in runs))
        rows.append({
            "system": n,
            "test acc %": round(100 * float(np.mean([r["test"][k].mean() for r in runs])), 2),
            "Δacc pp": round(float(np.mean(per_seed)), 2),
            "Δ min/max over seeds": f"{min(per_seed):+.2f} / {max(per_seed):+.2f}",
            "Δ 95% CI": f"[{ci[0]:+.2f}, {ci[1]:+.2f}]",
            "SER": None if better + worse == 0 else round(worse / (better + worse), 3),
            "features": "; ".join(
                "|".join(f"L{f['layer']}#{f['index']}({f['r']:+.2f})" for f in r["features"][n]) or "—"
                for r in runs),
        })
    head = diffs["CorrSteer-P"]
    ci = bootstrap_ci(lambda d: 100 * float(d.mean()), head, seed=ctx.seed)
    kept = [len(r["features"]["CorrSteer-P"]) for r in runs]
    figs = [claim_figure(ctx.out_dir / "corrsteer.png", runs, rows, sae_metrics)]
    atomic_write_json(ctx.out_dir / "details.json", {
        "tasks": tasks, "probe": probe, "sae_metrics": sae_metrics, "sae_stage_seconds": sae_seconds,
        "runs": [{k: v for k, v in r.items() if k not in ("test", "test_idx")} for r in runs]})
    notes = [
        f"Model: {ctx.options.get('model') or 'SmolLM2-135M-Instruct (packaged, Q4_1 GGUF dequantized)'}; "
        f"SAEs at layers {S['layers']}, {S['train'].d_sae} latents, TopK k={S['train'].k}, "
        f"{S['n_train']:,} Wikipedia train tokens x {S['train'].epochs} epochs.",
        "SAE stage (cached): " + "; ".join(
            f"L{L}: EV {m.get('explained_variance', float('nan')):.3f}, L0 {m.get('l0', float('nan')):.1f}, "
            f"dead {m.get('dead_fraction', float('nan')):.3f}, loss recovered {m.get('loss_recovered', float('nan')):.3f}"
            for L, m in sae_metrics.items()) + f" ({sae_seconds:.0f} s this run; 0 = cached).",
        "Gates from the issue (EV >= 0.8, dead <= 5%, loss recovered >= 0.85): " + ", ".join(
            f"L{L} {'pass' if m.get('explained_variance', 0) >= 0.8 and m.get('dead_fraction', 1) <= 0.05 and m.get('loss_recovered', 0) >= 0.85 else 'FAIL'}"
            for L, m in sae_metrics.items()),
        f"MMLU stand-in: BIG-bench tasks {tasks}; letter answers (' A'..), argmax restricted to the "
        f"item's letters; splits {S['splits'].n_train}/{S['splits'].n_val}/{S['splits'].n_test} per seed, "
        f"split seeds {[r['seed'] for r in runs]}.",
        ("Task probe (unsteered only): " + ", ".join(f"{p['task']} {p['acc']:.2f} (chance {p['chance']:.2f})" for p in probe)
         if probe else "Tasks fixed in advance (no probe at this scale)."),
        *(["No task met the base-accuracy window; the two with the largest margin over chance were used."] if fallback else []),
        f"CorrSteer-P kept {kept} features (per seed) out of {len(S['layers'])} layers.",
        f"CAA strength picked on validation: {[r['caa_strength'] for r in runs]}.",
        "Spread: paired bootstrap 95% CI over (item, seed) pairs; SER = #worse/(#better+#worse) vs unsteered.",
        "Not run (time): BBQ, HarmBench refusal; the paper's SFT baseline.",
    ]
    return Result(rows=rows, headline=Measure("CorrSteer-P Δaccuracy vs unsteered", 100 * float(head.mean()),
                                              "pp", ci, higher_is_better=True),
                  target=TARGET, notes=notes, figures=figs)
