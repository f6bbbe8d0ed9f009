"""Claim ``restore``: on text-agnostic reducers, RESTORE recovers accuracy lost to visual token
reduction (paper, LLaVA-1.5-7B at 64/576 tokens: DivPrune 93.8 -> 95.9 %, VisionZip 93.0 -> 94.8 %
of full accuracy).

Miniature: a real ``LlavaForConditionalGeneration`` (CLIP tower 48x48 / patch 4 -> 144 visual
tokens, 4 layers, pre-trained on per-token attribute labels; MLP projector; 3-layer Llama with
RoPE) trained once on generated grid-scene QA (:mod:`scenes`, :mod:`train`; cached), evaluated on held-out scenes at keep 16 / 32 / 48 of 144
(the 11 / 22 / 33 % of LLaVA's 64 / 128 / 192 of 576), for three builds (training seeds) of the
model. Headline: accuracy(base + RESTORE) / accuracy(base) at keep 16 for the weaker of DivPrune and
VisionZip-like, pooled over builds, with a clustered bootstrap 95 % CI (builds, then questions);
target > 1. The accuracy gate (0.7) applies per build (rule: the median build must pass). Mechanism
rows: the SmolLM2 text proxy (:mod:`icml26.restore.study.proxy`).

Options (``--opt``): ``builds`` (build seeds, default 0,1,2; tiny 0,1), ``gate`` (0.7) and
``gate_rule`` (median | all | any), ``lm`` (tiny | smollm2: the LLaVA's language model; smollm2 is
a frozen SmolLM2-135M, 2.2-3 CPU-hours per build, off by default), ``proxy_blocks`` (SmolLM2 text
proxy blocks, 16; 0 skips), ``model`` (folder of a scenes-trained tiny LLaVA, used for every
build seed), ``questions`` (count). At ``full`` scale
with ``data=VQA.jsonl`` and ``model=LLAVA_FOLDER`` (plus ``keeps=64,128,192``, ``dtype``) the
same systems run on the user's LLaVA and data instead (GPU).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from icml26.core.claims import Measure, Result, RunContext
from icml26.core.torchutil import bootstrap_ci
from icml26.restore import scenes
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
                out[name] = RestoreConfig(
                    reducer="divprune",
                    keep=keep,
                    gamma=0.5 if merge else None,
                    positions=pos,
                    calibrate=cal,
                )
    out["merge-uniform/retained/calib"] = RestoreConfig(
        reducer="divprune", keep=keep, anchors="uniform"
    )
    return out


def build_seeds(ctx: RunContext) -> list[int]:
    """Build seeds: ``--opt builds=0,1,2`` (default: tiny 0,1 (random models), small / full 0,1,2)."""
    raw = ctx.options.get("builds")
    if raw is None:
        return ctx.pick(tiny=[0, 1], small=[0, 1, 2], full=[0, 1, 2])
    seeds = [int(x) for x in str(raw).split(",") if x.strip()]
    if not seeds or any(x < 0 for x in seeds) or len(set(seeds)) != len(seeds):
        from icml26.core.errors import UserError

        raise UserError(f"--opt builds must be distinct integers >= 0, e.g. 0,1,2; got {raw!r}")
    return seeds


def _model(ctx: RunContext, seed: int):
    """The tiny LLaVA of build ``seed``: (model, N visual tokens, label, seconds spent building)."""
    from icml26.restore.train import N_IMAGE_TOKENS, build_recipe, load_tiny_llava, model_dir
    from icml26.restore.vlm import tiny_llava

    if ctx.scale == "tiny":
        m = tiny_llava(
            len(scenes.VOCAB),
            image_size=scenes.IMAGE,
            patch=4,
            vision_width=32,
            vision_layers=2,
            hidden=64,
            layers=2,
            image_token_id=scenes.IMAGE_ID,
            seed=seed,
        )
        return m, N_IMAGE_TOKENS, "random tiny LLaVA (untrained; plumbing only)", 0.0
    folder = ctx.options.get("model")
    lm = str(
        ctx.options.get("lm", "tiny")
    )  # "smollm2": a frozen SmolLM2-135M LM (2.2-3 CPU-h per build)
    t0 = time.time()
    model = load_tiny_llava(folder or model_dir(seed=seed, lm=lm))
    built = 0.0
    if model is None:
        if folder:
            from icml26.core.errors import UserError

            raise UserError(
                f"--opt model={folder}: no restore-vocab.json there (not a scenes tiny LLaVA)"
            )
        ctx.progress.log(
            f"building the tiny LLaVA of build seed {seed} once (cached under the icml26 cache)"
        )
        build_recipe(seed=seed, lm=lm, progress=ctx.progress)
        model = load_tiny_llava(model_dir(seed=seed, lm=lm))
        built = time.time() - t0
    label = (
        "tiny LLaVA: vision tower pre-trained on attribute labels, then projector + LM on scenes QA"
    )
    if not folder:
        label += f" ({model_dir(seed=seed, lm=lm).name}; precision from the CPU dtype policy)"
    return model.to(ctx.device), N_IMAGE_TOKENS, label + ("" if built else " (cached)"), built


def run_full_vqa(ctx: RunContext) -> Result:
    """``full`` scale with ``--opt model=LLAVA_FOLDER data=VQA.jsonl``: the user's LLaVA (e.g.
    llava-1.5-7b-hf on a GPU) on their GQA / POPE JSONL at keep 64 / 128 / 192."""
    from icml26.core.torchutil import parse_dtype
    from icml26.restore.vqa import eval_loaded, load_vqa_model, read_vqa_jsonl

    recs = read_vqa_jsonl(ctx.options["data"])[: int(ctx.options.get("questions", 10**9))]
    model, proc = load_vqa_model(
        ctx.options["model"], ctx.device, parse_dtype(ctx.options.get("dtype", "float16"))
    )
    keeps = [int(k) for k in ctx.options.get("keeps", "64,128,192").split(",")]
    full = eval_loaded(model, proc, recs, None)["correct"]
    rows = [{"system": "full", "keep": "all", "accuracy": float(full.mean()), "retention_%": 100.0}]
    res = {}
    for keep in ctx.progress.track(keeps, total=len(keeps), description="keeps"):
        for name in ("divprune", "divprune+restore", "visionzip", "visionzip+restore"):
            c = eval_loaded(model, proc, recs, systems(keep)[name])["correct"]
            res[(keep, name)] = c
            rows.append(
                {
                    "system": name,
                    "keep": keep,
                    "accuracy": float(c.mean()),
                    "retention_%": 100 * float(c.mean()) / max(float(full.mean()), 1e-9),
                }
            )
    k0 = keeps[0]
    flat = [
        res[(k0, n)].astype(float) for b in ("divprune", "visionzip") for n in (f"{b}+restore", b)
    ]
    value = _ratio(*flat)
    from icml26.core import power

    why = "the user-data path (full scale, --opt data=) does not compute the power checks yet"
    return Result(
        rows=rows,
        headline=Measure(
            name=f"mean retention(base+RESTORE) / mean retention(base), keep {k0}",
            value=value,
            unit="x",
            spread=bootstrap_ci(_ratio, *flat, seed=ctx.seed),
        ),
        target=TARGET,
        notes=[
            f"user model {ctx.options['model']}, data {ctx.options['data']}, {len(recs)} questions"
        ],
        power=[power.not_measured(k, why) for k in ("control", "floor", "degeneracy")],
    )


def _ratio(*cols):  # mean retention with RESTORE / mean retention without (full cancels)
    rest = np.mean([c.mean() for c in cols[0::2]])
    base = np.mean([c.mean() for c in cols[1::2]])
    return float(rest / base) if base > 0 else (1.0 if rest == 0 else float("inf"))


def _proxy(ctx: RunContext):
    """Mechanism rows: SmolLM2-135M at small / full, a tiny random Llama with SmolLM2's head_dim
    (64) and RoPE base (1e5) at tiny (plumbing). ``--opt proxy_blocks=0`` skips them."""
    from icml26.restore.study.proxy import proxy_rows

    n_blocks = int(ctx.options.get("proxy_blocks", ctx.pick(tiny=2, small=16, full=32)))
    if n_blocks <= 0:
        return [], ["the SmolLM2 text proxy was skipped (--opt proxy_blocks=0)"]
    if ctx.scale == "tiny":
        from transformers import LlamaConfig, LlamaForCausalLM

        from icml26.core.lm import byte_tokenizer

        tok = byte_tokenizer()
        cfg = LlamaConfig(
            vocab_size=len(tok),
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=64,
            rope_theta=1e5,
            max_position_embeddings=1024,
        )
        torch.manual_seed(ctx.seed)
        lm, label, keeps = (
            LlamaForCausalLM(cfg).eval(),
            "tiny random Llama (head_dim 64, base 1e5)",
            (64,),
        )
    else:
        from icml26.core.lm import load_lm

        lm, tok = load_lm(dtype=torch.float32, device=ctx.device)
        label, keeps = "SmolLM2-135M", (64, 128)
    rows, notes, _ = proxy_rows(
        lm, tok, n_blocks=n_blocks, keeps=keeps, seed=ctx.seed, label=label, progress=ctx.progress
    )
    return rows, notes


def run(ctx: RunContext) -> Result:
    from icml26.restore.figures import plot_accuracy, plot_anchors, plot_mass
    from icml26.restore.study.builds import arm_row, evaluate_build, gate_decision, ratio_ci

    if ctx.scale == "full" and "data" in ctx.options:
        return run_full_vqa(ctx)
    seeds = build_seeds(ctx)
    gate = float(ctx.options.get("gate", GATE))
    gate_rule = str(ctx.options.get("gate_rule", "median"))
    from icml26.restore.study.builds import GATE_RULES

    if gate_rule not in GATE_RULES:
        from icml26.core.errors import UserError

        raise UserError(
            f"--opt gate_rule must be one of {', '.join(GATE_RULES)}; got {gate_rule!r}"
        )
    n_q = int(ctx.options.get("questions", ctx.pick(tiny=16, small=300, full=1000)))
    keeps = ctx.pick(tiny=[16], small=[16, 32, 48], full=[16, 32, 48])
    k0 = keeps[0]
    images, qs = scenes.make_dataset(max(8, n_q // 3), seed=10_000 + ctx.seed, per_scene=4)
    rng = np.random.default_rng(ctx.seed)
    qs = [qs[i] for i in sorted(rng.choice(len(qs), size=min(n_q, len(qs)), replace=False))]
    jobs = [(k, name, cfg) for k in keeps for name, cfg in systems(k).items()]
    jobs += [(k0, "ablation:" + name, cfg) for name, cfg in ablation(k0).items()]

    def record(name):
        return name.startswith("ablation:prune/") and name.endswith(("nocalib", "retained/calib"))

    t0 = time.time()
    ev, labels, built, first_model = {}, {}, 0.0, None
    for seed in seeds:
        model, n_tok, labels[seed], b = _model(ctx, seed)
        built += b
        ev[seed] = evaluate_build(
            model, images, qs, n_tok, jobs, progress=ctx.progress, record=record
        )
        ev[seed]["majority"] = majority_answers(qs, seed=TRAIN_QA_SEED + seed)
        if first_model is None:
            first_model = model
    eval_s = time.time() - t0 - built
    fulls = [ev[s]["full"] for s in seeds]
    full_accs = [float(f.mean()) for f in fulls]

    def cols(key):
        return [ev[s]["results"][key] for s in seeds]

    rows = [
        {
            "system": f"build seed {s}",
            "keep": n_tok,
            "full accuracy": round(a, 4),
            "gate": f"{'pass' if a >= gate else 'FAIL'} ({gate})",
            **{
                f"{b} @{k0}": round(float(ev[s]["results"][(k0, b)].mean()), 4)
                for b in ("divprune", "divprune+restore", "visionzip", "visionzip+restore")
            },
            "model": labels[s],
        }
        for s, a in zip(seeds, full_accs, strict=True)
    ]
    rows.append(arm_row("full", n_tok, fulls, fulls, seed=ctx.seed))
    for keep in keeps:
        rows += [
            arm_row(name, keep, cols((keep, name)), fulls, seed=ctx.seed) for name in systems(keep)
        ]
    rows += [
        arm_row("ablation:" + name, k0, cols((k0, "ablation:" + name)), fulls, seed=ctx.seed)
        for name in ablation(k0)
    ]

    per_base = {}
    for b in BASES:
        ci = ratio_ci(cols((k0, f"{b}+restore")), cols((k0, b)), seed=ctx.seed)
        per_base[b] = ci
        per_build = [
            float(r.mean() / max(x.mean(), 1e-9))
            for r, x in zip(cols((k0, f"{b}+restore")), cols((k0, b)), strict=True)
        ]
        rows.append(
            {
                "system": f"per base: {b}+restore / {b}",
                "keep": k0,
                "accuracy ratio": round(ci.value, 4),
                "95% CI (builds, then questions)": f"[{ci.low:.4f}, {ci.high:.4f}]",
                "per build": [round(x, 3) for x in per_build],
            }
        )
    for num, den, what in CONTRASTS:
        ci = ratio_ci(cols((k0, "ablation:" + num)), cols((k0, "ablation:" + den)), seed=ctx.seed)
        rows.append(
            {
                "system": f"Table 4 contrast: {num} / {den}",
                "keep": k0,
                "accuracy ratio": round(ci.value, 4),
                "95% CI (builds, then questions)": f"[{ci.low:.4f}, {ci.high:.4f}]",
                "paper": what,
            }
        )
    worst = min(BASES, key=lambda b: per_base[b].value)
    checks, p_rows, p_notes = power_checks(ev, seeds, k0, seed=ctx.seed)
    rows += p_rows
    mass = {
        name: np.mean([ev[s]["mass"][name] for s in seeds], axis=0) for name in ev[seeds[0]]["mass"]
    }
    for name, m in mass.items():
        rows.append(
            {
                "system": f"attention mass / full: {name}",
                "keep": k0 if name != "full" else n_tok,
                "per_layer": [round(float(x), 3) for x in (m / np.maximum(mass["full"], 1e-9))],
                "over": f"mean of {len(seeds)} builds",
            }
        )
    p_rows, proxy_notes = _proxy(ctx)
    rows += p_rows
    mean_rows = [dict(r, accuracy=r["accuracy"]) for r in rows if "retention_%" in r]
    figs = [
        plot_accuracy(mean_rows, float(np.mean(full_accs)), ctx.out_dir / "restore_accuracy.png"),
        plot_mass(mass, ctx.out_dir / "restore_attention_mass.png"),
        plot_anchors(first_model, images[qs[0].scene], k0, ctx.out_dir / "restore_anchors.png"),
    ]
    notes = [
        f"builds (training seeds) {seeds}; {n_tok} visual tokens per image; {len(qs)} held-out questions "
        f"(the same for every build); keeps {keeps}; evaluation {eval_s:.0f}s"
        + (f"; building {built:.0f}s" if built else ""),
        f"model: {labels[seeds[0]]}",
        "per-build full-token accuracy "
        + ", ".join(f"seed {s}: {a:.3f}" for s, a in zip(seeds, full_accs, strict=True))
        + f"; majority-answer baseline {scenes.chance(qs):.3f}",
        f"accuracy gate {gate} applied per build, rule {gate_rule!r} (median: the median build must pass; "
        "builds below are reported and stay in every statistic)",
        f"headline: the weaker base's ratio (of DivPrune {per_base['divprune'].value:.3f} and VisionZip-like "
        f"{per_base['visionzip'].value:.3f}): {worst}; RESTORE must help every text-agnostic base. CI: "
        f"clustered bootstrap over the {len(seeds)} builds, then questions within each",
        "bases (DivPrune, VisionZip-like, ToMe) run with re-indexed positions and no calibration, as "
        "Table 4's 'pruning only' row; +restore = hybrid gamma=0.5 with distinctive anchors (ToMe: "
        "positions + calibration only), retained positions, log s + log(2 - D) calibration",
        "FastV / PDrop-like are in-LLM pruners (keys masked from layer K on, original positions); "
        "RESTORE is not applied to them, as in the paper",
        "the LLaVA's language model is the 3-layer from-scratch Llama (head_dim 32, base 1e4), where "
        "RoPE decay is weak; the paper's mechanism is measured separately on SmolLM2 (mechanism rows)",
        *proxy_notes,
        *p_notes,
    ]
    uninformative = gate_decision(full_accs, gate, gate_rule)
    if uninformative:
        notes.insert(0, "UNINFORMATIVE: " + uninformative)
    hl = per_base[worst]
    return Result(
        rows=rows,
        headline=Measure(
            name=f"accuracy(base+RESTORE) / accuracy(base), weaker of DivPrune and VisionZip-like ({worst}), "
            f"keep {k0}/{n_tok}, {len(seeds)} builds",
            value=hl.value,
            unit="x",
            spread=hl.spread,
            higher_is_better=True,
        ),
        target=TARGET,
        notes=notes,
        figures=figs,
        uninformative=uninformative,
        power=checks,
    )


BASES = ("divprune", "visionzip")
CONTRASTS = (  # the interactions Table 4 / Table 5 attribute the gain to (paper figures, HoloV @64)
    (
        "merge/retained/calib",
        "merge/retained/nocalib",
        "calibration on merge + retained: 90.1 -> 96.5",
    ),
    ("merge/retained/calib", "merge/reindexed/nocalib", "all three vs merging only: 93.5 -> 96.5"),
    (
        "merge/retained/calib",
        "merge-uniform/retained/calib",
        "distinctive vs uniform anchors (DivPrune): 94.9 -> 95.9",
    ),
    (
        "prune/retained/calib",
        "prune/reindexed/nocalib",
        "retained + calibration vs pruning only: 92.2 -> 93.1",
    ),
)
MAJORITY = "majority answer per question type"
TRAIN_QA_SEED = 1000  # build_recipe's seed + 1000: the training QA stream's scenes


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


def power_checks(ev: dict, seeds: list[int], k0: int, seed: int = 0):
    """Power checks at keep ``k0``, per reducer base (DivPrune, VisionZip-like), over all builds.

    control: full tokens against the base alone (the reduction must lose accuracy: the ratio
    accuracy(full) / accuracy(base), its build-clustered CI above 1); floor: the majority answer per
    question type (each build's training QA), which a base or a base + RESTORE must beat;
    degeneracy: questions whose answer RESTORE changes relative to its base alone (all builds)."""
    from icml26.core import power
    from icml26.core.stats import clustered_bootstrap
    from icml26.restore.study.builds import ratio_ci

    fulls = [ev[s]["full"] for s in seeds]
    maj = clustered_bootstrap(
        [ev[s]["majority"].astype(float) for s in seeds], statistic="mean", seed=seed
    )
    checks, rows, notes, compared = [], [], [], {}
    for b in BASES:
        base = [ev[s]["results"][(k0, b)] for s in seeds]
        rest = [ev[s]["results"][(k0, f"{b}+restore")] for s in seeds]
        compared[b] = float(np.mean(np.concatenate(base)))
        compared[f"{b}+restore"] = float(np.mean(np.concatenate(rest)))
        loss = ratio_ci(fulls, base, seed=seed)
        checks.append(
            power.control(
                "full",
                loss.value,
                b,
                1.0,
                spread=loss.spread,
                metric=f"accuracy(full) / accuracy(x) at keep {k0}, clustered over builds",
                name=f"positive control ({b})",
            )
        )
        changed = int(
            sum(
                (ev[s]["answers"][(k0, b)] != ev[s]["answers"][(k0, f"{b}+restore")]).sum()
                for s in seeds
            )
        )
        total = sum(len(x) for x in base)
        checks.append(
            power.degeneracy(
                (f"{b}+restore", b), changed, total, what="answers", name=f"degeneracy ({b})"
            )
        )
        rows.append(
            {
                "system": f"control: full / {b}",
                "keep": k0,
                "accuracy ratio": round(loss.value, 4),
                "95% CI (builds, then questions)": f"[{loss.low:.4f}, {loss.high:.4f}]",
                "answers changed by RESTORE": changed,
                "of": total,
            }
        )
        notes.append(
            f"{b} at keep {k0}: full / base {loss.value:.3f} [{loss.low:.3f}, {loss.high:.3f}]; "
            f"RESTORE changes {changed} of {total} answers"
        )
    checks.insert(
        len(BASES) * 2,
        power.floor(
            compared, MAJORITY, maj.value, floor_spread=maj.spread, metric=f"accuracy at keep {k0}"
        ),
    )
    rows.append(
        {
            "system": MAJORITY,
            "keep": "-",
            "accuracy": round(maj.value, 4),
            "95% CI (builds, then questions)": f"[{maj.low:.4f}, {maj.high:.4f}]",
            "source": "most frequent answer per type in 500 training-stream scenes of each build",
        }
    )
    return checks, rows, notes
