"""Claim ``restore``: on text-agnostic reducers, RESTORE recovers accuracy lost to visual token
reduction (paper, LLaVA-1.5-7B at 64/576 tokens: DivPrune 93.8 -> 95.9 %, VisionZip 93.0 -> 94.8 %
of full accuracy).

Miniature: a real ``LlavaForConditionalGeneration`` (CLIP tower 48x48 / patch 4 -> 144 visual
tokens, 4 layers, pre-trained on per-token attribute labels; MLP projector; 3-layer Llama with
RoPE) trained once on generated grid-scene QA (:mod:`scenes`, :mod:`train`; cached), evaluated on held-out scenes at keep 16 / 32 / 48 of 144
(the 11 / 22 / 33 % of LLaVA's 64 / 128 / 192 of 576). Headline: mean retention (% of full) of
base + RESTORE over mean retention of the base, DivPrune and VisionZip-like, at keep 16, with a
paired bootstrap 95 % CI over questions; target > 1.

Options (``--opt``): ``model`` (folder of a scenes-trained tiny LLaVA; default: the cached build),
``questions`` (count). At ``full`` scale
with ``data=VQA.jsonl`` and ``model=LLAVA_FOLDER`` (plus ``keeps=64,128,192``, ``dtype``) the
same systems run on the user's LLaVA and data instead (GPU).
"""

from __future__ import annotations

import time

import numpy as np

from icml26.core.claims import Measure, Result, RunContext
from icml26.core.torchutil import bootstrap_ci
from icml26.restore import scenes
from icml26.restore.evaluate import run_system
from icml26.restore.patch import RestoreConfig

TARGET = 1.0
GATE = 0.7


def systems(keep: int) -> dict[str, RestoreConfig]:
    """Per-keep systems: each text-agnostic base with / without RESTORE, and the in-LLM pruners.
    Bases run as in their papers: re-indexed positions, no calibration (Table 4's 'pruning only')."""
    base = dict(keep=keep, positions="reindexed", calibrate=False)
    return {
        "divprune": RestoreConfig(reducer="divprune", gamma=None, **base),
        "divprune+restore": RestoreConfig(reducer="divprune", keep=keep),
        "visionzip": RestoreConfig(reducer="visionzip", gamma=None, **base),
        "visionzip+restore": RestoreConfig(reducer="visionzip", keep=keep),
        "tome": RestoreConfig(reducer="tome", gamma=None, **base),
        "tome+restore": RestoreConfig(reducer="tome", gamma=None, keep=keep),
        "fastv": RestoreConfig(reducer="fastv", calibrate=False, keep=keep),
        "pdrop": RestoreConfig(reducer="pdrop", calibrate=False, keep=keep),
    }


def ablation(keep: int) -> dict[str, RestoreConfig]:
    """Table 4's eight configurations on DivPrune, plus uniform anchors (all three on)."""
    out = {}
    for merge in (False, True):
        for pos in ("reindexed", "retained"):
            for cal in (False, True):
                name = f"{'merge' if merge else 'prune'}/{pos}/{'calib' if cal else 'nocalib'}"
                out[name] = RestoreConfig(reducer="divprune", keep=keep, gamma=0.5 if merge else None,
                                          positions=pos, calibrate=cal)
    out["merge-uniform/retained/calib"] = RestoreConfig(reducer="divprune", keep=keep, anchors="uniform")
    return out


def _model(ctx: RunContext):
    from icml26.restore.train import N_IMAGE_TOKENS, build_recipe, load_tiny_llava, model_dir
    from icml26.restore.vlm import tiny_llava

    if ctx.scale == "tiny":
        m = tiny_llava(len(scenes.VOCAB), image_size=scenes.IMAGE, patch=4, vision_width=32, vision_layers=2,
                       hidden=64, layers=2, image_token_id=scenes.IMAGE_ID, seed=ctx.seed)
        return m, N_IMAGE_TOKENS, "random tiny LLaVA (untrained; plumbing only)", 0.0
    folder = ctx.options.get("model")
    t0 = time.time()
    model = load_tiny_llava(folder)
    built = 0.0
    if model is None:
        if folder:
            from icml26.core.errors import UserError

            raise UserError(f"--opt model={folder}: no restore-vocab.json there (not a scenes tiny LLaVA)")
        ctx.progress.log("building the tiny LLaVA once (cached under the icml26 cache)")
        build_recipe(model_dir(), progress=ctx.progress)
        model = load_tiny_llava()
        built = time.time() - t0
    label = "tiny LLaVA: vision tower pre-trained on attribute labels, then projector + LM on scenes QA"
    if not folder:
        label += f" (trained in {model_dir().name.rsplit('-', 1)[-1]}; the CPU dtype policy's choice)"
    return model.to(ctx.device), N_IMAGE_TOKENS, label + ("" if built else " (cached)"), built


def run_full_vqa(ctx: RunContext) -> Result:
    """``full`` scale with ``--opt model=LLAVA_FOLDER data=VQA.jsonl``: the user's LLaVA (e.g.
    llava-1.5-7b-hf on a GPU) on their GQA / POPE JSONL at keep 64 / 128 / 192."""
    from icml26.core.torchutil import parse_dtype
    from icml26.restore.vqa import eval_loaded, load_vqa_model, read_vqa_jsonl

    recs = read_vqa_jsonl(ctx.options["data"])[: int(ctx.options.get("questions", 10**9))]
    model, proc = load_vqa_model(ctx.options["model"], ctx.device, parse_dtype(ctx.options.get("dtype", "float16")))
    keeps = [int(k) for k in ctx.options.get("keeps", "64,128,192").split(",")]
    full = eval_loaded(model, proc, recs, None)["correct"]
    rows = [{"system": "full", "keep": "all", "accuracy": float(full.mean()), "retention_%": 100.0}]
    res = {}
    for keep in ctx.progress.track(keeps, total=len(keeps), description="keeps"):
        for name in ("divprune", "divprune+restore", "visionzip", "visionzip+restore"):
            c = eval_loaded(model, proc, recs, systems(keep)[name])["correct"]
            res[(keep, name)] = c
            rows.append({"system": name, "keep": keep, "accuracy": float(c.mean()),
                         "retention_%": 100 * float(c.mean()) / max(float(full.mean()), 1e-9)})
    k0 = keeps[0]
    flat = [res[(k0, n)].astype(float) for b in ("divprune", "visionzip") for n in (f"{b}+restore", b)]
    value = _ratio(*flat)
    from icml26.core import power

    why = "the user-data path (full scale, --opt data=) does not compute the power checks yet"
    return Result(rows=rows, headline=Measure(
        name=f"mean retention(base+RESTORE) / mean retention(base), keep {k0}", value=value, unit="x",
        spread=bootstrap_ci(_ratio, *flat, seed=ctx.seed)), target=TARGET,
        notes=[f"user model {ctx.options['model']}, data {ctx.options['data']}, {len(recs)} questions"],
        power=[power.not_measured(k, why) for k in ("control", "floor", "degeneracy")])


def _ratio(*cols):  # mean retention with RESTORE / mean retention without (full cancels)
    rest = np.mean([c.mean() for c in cols[0::2]])
    base = np.mean([c.mean() for c in cols[1::2]])
    return float(rest / base) if base > 0 else (1.0 if rest == 0 else float("inf"))


def run(ctx: RunContext) -> Result:
    from icml26.restore.figures import plot_accuracy, plot_anchors, plot_mass

    if ctx.scale == "full" and "data" in ctx.options:
        return run_full_vqa(ctx)
    model, n_tok, label, built_s = _model(ctx)
    n_q = int(ctx.options.get("questions", ctx.pick(tiny=16, small=300, full=1000)))
    keeps = ctx.pick(tiny=[16], small=[16, 32, 48], full=[16, 32, 48])
    images, qs = scenes.make_dataset(max(8, n_q // 3), seed=10_000 + ctx.seed, per_scene=4)
    rng = np.random.default_rng(ctx.seed)
    qs = [qs[i] for i in sorted(rng.choice(len(qs), size=min(n_q, len(qs)), replace=False))]
    bs = 32
    t0 = time.time()
    full, full_mass = run_system(model, None, images, qs, n_tok, batch_size=bs, record=True)
    acc_full = float(full.mean())
    results, rows, mass = {}, [], {"full": full_mass}
    jobs = [(k, name, cfg) for k in keeps for name, cfg in systems(k).items()]
    jobs += [(keeps[0], "ablation:" + name, cfg) for name, cfg in ablation(keeps[0]).items()]
    answers = {}
    for keep, name, cfg in ctx.progress.track(jobs, total=len(jobs), description="systems"):
        key = (keep, name)
        record = name.startswith("ablation:prune/") and name.endswith(("nocalib", "retained/calib"))
        answers[key] = np.zeros(len(qs), dtype=np.int64)
        correct, m = run_system(model, cfg, images, qs, n_tok, batch_size=bs, record=record,
                                answers=answers[key])
        results[key] = correct
        if m is not None:
            mass[name.removeprefix("ablation:")] = m
        rows.append({"system": name, "keep": keep, "of": n_tok, "accuracy": float(correct.mean()),
                     "retention_%": 100 * float(correct.mean()) / max(acc_full, 1e-9)})
    rows.insert(0, {"system": "full", "keep": n_tok, "of": n_tok, "accuracy": acc_full, "retention_%": 100.0})
    k0 = keeps[0]
    pairs = [(results[(k0, f"{b}+restore")], results[(k0, b)]) for b in ("divprune", "visionzip")]

    stat = _ratio
    flat = [c.astype(float) for p in pairs for c in p]
    value = stat(*flat)
    lo, hi = bootstrap_ci(stat, *flat, seed=ctx.seed)
    majority = majority_answers(qs, seed=TRAIN_QA_SEED)
    checks, p_rows, p_notes = power_checks(full, results, answers, majority, k0, seed=ctx.seed)
    rows += p_rows
    for name, m in mass.items():
        rows.append({"system": f"attention mass / full: {name}", "keep": k0 if name != "full" else n_tok,
                     "per_layer": [round(float(x), 3) for x in (m / np.maximum(full_mass, 1e-9))]})
    figs = [plot_accuracy(rows, acc_full, ctx.out_dir / "restore_accuracy.png"),
            plot_mass(mass, ctx.out_dir / "restore_attention_mass.png")]
    figs.append(plot_anchors(model, images[qs[0].scene], k0, ctx.out_dir / "restore_anchors.png"))
    chance = scenes.chance(qs)
    notes = [
        f"model: {label}; {n_tok} visual tokens per image; {len(qs)} held-out questions; "
        f"keeps {keeps}; eval {time.time() - t0:.0f}s" + (f"; built in {built_s:.0f}s" if built_s else ""),
        f"full-token accuracy {acc_full:.3f}; majority-answer baseline {chance:.3f}",
        "full-token accuracy by question type: " + ", ".join(
            f"{k} {np.mean([c for q, c in zip(qs, full, strict=True) if q.kind == k]):.3f} "
            f"(n={sum(q.kind == k for q in qs)})" for k in scenes.ANSWER_SETS if any(q.kind == k for q in qs)),
        "bases (DivPrune, VisionZip-like, ToMe) run with re-indexed positions and no calibration, as "
        "Table 4's 'pruning only' row; +restore = hybrid gamma=0.5 with distinctive anchors (ToMe: "
        "positions + calibration only), retained positions, log s + log(2 - D) calibration",
        "FastV / PDrop-like are in-LLM pruners (keys masked from layer K on, original positions); "
        "RESTORE is not applied to them, as in the paper",
        "not done: the SmolLM2 text proxy (fact block) of the notes",
        f"headline CI: paired bootstrap over the {len(qs)} questions of ONE model build (one training "
        "seed): the build-level variance is absent; each base's own ratio and CI are rows "
        "('per base: ...').",
        *p_notes,
    ]
    uninformative = None
    if acc_full < GATE:
        uninformative = (f"full-token accuracy {acc_full:.3f} < gate {GATE}: the model has not "
                         "learned the task well enough for reduction effects to mean much")
        notes.insert(0, "UNINFORMATIVE: " + uninformative)
    return Result(rows=rows, headline=Measure(
        name=f"mean retention(base+RESTORE) / mean retention(base), DivPrune & VisionZip-like, keep {k0}/{n_tok}",
        value=value, unit="x", spread=(lo, hi), higher_is_better=True),
        target=TARGET, notes=notes, figures=figs, uninformative=uninformative, power=checks)


BASES = ("divprune", "visionzip")
MAJORITY = "majority answer per question type"
TRAIN_QA_SEED = 1000  # build_recipe's default seed (0) + 1000: the training QA stream's scenes


def majority_answers(qs, n_scenes: int = 500, seed: int = TRAIN_QA_SEED) -> np.ndarray:
    """Correct array of the floor: always answer each question type's most frequent answer in the
    training QA (the first ``n_scenes`` scenes of the build's dense training stream)."""
    from collections import Counter

    _, train = scenes.make_dataset(n_scenes, seed=seed, dense=True)
    by: dict[str, Counter] = {}
    for q in train:
        by.setdefault(q.kind, Counter())[q.answer] += 1
    top = {k: c.most_common(1)[0][0] for k, c in by.items()}
    return np.array([top.get(q.kind) == q.answer for q in qs])


def power_checks(full, results, answers, majority, k0: int, seed: int = 0):
    """Power checks at keep ``k0``, per reducer base (DivPrune, VisionZip-like).

    control: full tokens against the base alone (the reduction must lose accuracy: the paired
    ratio accuracy(full) / accuracy(base) over questions, its CI above 1); floor: the majority answer per question type (training QA), which a base or a
    base + RESTORE must beat; degeneracy: questions whose answer RESTORE changes relative to its
    base alone. Per-base ratio rows carry each base's own CI (questions of one build)."""
    from icml26.core import power
    from icml26.core.stats import item_bootstrap

    def acc(c):
        ci = item_bootstrap(np.asarray(c, float), seed=seed, statistic="mean")
        return ci.value, ci.spread

    m_v, m_s = acc(majority)
    checks, rows, notes = [], [], []
    compared = {}
    for b in BASES:
        base, rest = results[(k0, b)], results[(k0, f"{b}+restore")]
        compared[b], compared[f"{b}+restore"] = float(np.mean(base)), float(np.mean(rest))
        loss = item_bootstrap(np.asarray(full, float), base.astype(float), statistic="ratio", seed=seed)
        checks.append(power.control("full", loss.value, b, 1.0, spread=loss.spread,
                                    metric=f"accuracy(full) / accuracy(x) at keep {k0}, paired over questions",
                                    name=f"positive control ({b})"))
        changed = int((answers[(k0, b)] != answers[(k0, f"{b}+restore")]).sum())
        checks.append(power.degeneracy((f"{b}+restore", b), changed, len(base), what="answers",
                                       name=f"degeneracy ({b})"))
        r = item_bootstrap(rest.astype(float), base.astype(float), statistic="ratio", seed=seed)
        rows.append({"system": f"per base: {b}+restore / {b}", "keep": k0, "accuracy ratio": round(r.value, 4),
                     "95% CI (questions, one build)": f"[{r.low:.4f}, {r.high:.4f}]",
                     "answers changed": changed, "of": len(base),
                     "full / base (control)": f"{loss.value:.4f} [{loss.low:.4f}, {loss.high:.4f}]"})
        notes.append(f"{b} at keep {k0}: +RESTORE / base accuracy {r.value:.3f} [{r.low:.3f}, {r.high:.3f}] "
                     f"(questions of one build); {changed} of {len(base)} answers changed")
    checks.insert(len(BASES) * 2, power.floor(compared, MAJORITY, m_v, floor_spread=m_s,
                                              metric=f"accuracy at keep {k0}"))
    rows.append({"system": MAJORITY, "keep": "-", "accuracy": round(m_v, 4),
                 "95% CI (questions)": f"[{m_s[0]:.4f}, {m_s[1]:.4f}]",
                 "source": "most frequent answer per type in 500 training-stream scenes"})
    return checks, rows, notes
