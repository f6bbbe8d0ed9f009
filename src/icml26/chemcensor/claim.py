"""The claim ``chemcensor``: plausibility levels separate sound from unsound retrosynthesis
proposals that exact-match Top-1 scores alike.

Data are generated (:mod:`icml26.chemcensor.data`): our forward templates on RDKit's bundled
molecules give reactions with exact atom maps; most go into the precedent DB, held-out targets get
candidates (a) gold, (b) valid alternative, (c) corrupted, (d) implausible (random non-template
cut, plus templates applied to reactants carrying an excluded FG). Systems: exact-match Top-1,
ChemCensor with template maps, ChemCensor with RXNMapper (when its worker is installed), and
RDKit validity + element balance. Headline: AUROC of the ChemCensor (template maps) level for
{a, b} vs {c, d}, mean over data seeds, spread = widest 95% bootstrap interval over targets.

Candidate class (e): SmolLM2 few-shot proposals (``llm_targets`` targets x ``llm_n`` samples,
nearest-product examples from the DB), unlabelled, so outside the AUROC; scored with the
RXNMapper system (they carry no atom maps) and reported as a level histogram, exact@K and
plausibility@K. The rdchiral template round trip is a diagnostic system (rdchiral installed).

Options: ``rxnmapper`` (0/1; default 1 at small/full when the worker is installed, 0 at tiny),
``seeds`` (number of data seeds; tiny 1, small 2), ``llm`` (a chat spec for
:func:`icml26.core.chat.get_chat`, e.g. ``local`` = SmolLM2 or ``http://HOST/v1#MODEL``; ``0``
= none; default ``local`` at small/full, ``0`` at tiny), ``llm_targets`` (50), ``llm_n`` (5),
``llm_shots`` (3), ``llm_temperature`` (0.7), ``rdchiral`` (0/1; default 1 when installed).
"""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
from scipy.stats import spearmanr

from icml26.chemcensor.data import candidates, generate, molecule_pool
from icml26.chemcensor.db import ReactionDB
from icml26.chemcensor.evaluate import auroc, canonical_set
from icml26.chemcensor.reaction import ProcessingError, parse_side, split_reaction
from icml26.chemcensor.scorer import ChemCensor
from icml26.chemcensor.templates import TEMPLATES
from icml26.core.claims import Measure, Result, RunContext
from icml26.core.plots import pyplot, save_figure

TARGET = 0.90
RANDOM = "random score (uniform)"
METHOD = "ChemCensor (template maps)"
AC = "AUROC gold (a) vs corrupted (c)"
CLASSES = ("a", "b", "c", "d")
ORDER = {"a": 3, "b": 2, "d": 1, "c": 0}
TINY_TEMPLATES = (
    "amide_from_acid",
    "amide_from_acyl_chloride",
    "suzuki",
    "n_alkylation",
    "reductive_amination",
)
HELD_OUT_FAMILY = "sonogashira"


def valid_balanced(rxn: str) -> int:
    """Baseline: 1 when every molecule sanitises and each product element count is covered by the reactants."""
    try:
        reac, _, prod = split_reaction(rxn)
        r, p = parse_side(reac, "reactants"), parse_side(prod, "product")
    except ProcessingError:
        return 0
    rc = Counter(a.GetSymbol() for a in r.GetAtoms())
    pc = Counter(a.GetSymbol() for a in p.GetAtoms())
    return int(all(rc[e] >= n for e, n in pc.items()))


def _rxnmapper_ok() -> bool:
    from icml26.chemcensor.mapper import rxnmapper_site

    return (rxnmapper_site() / "rxnmapper").is_dir()


def _rdchiral_ok() -> bool:
    try:
        import rdchiral.main  # noqa: F401
    except ImportError:
        return False
    return True


def _llm_candidates(ctx: RunContext, spec: str, targets, db_rx, seed: int) -> list[dict]:
    """(e): few-shot proposals of the chat model ``spec`` for the first targets."""
    from icml26.chemcensor.propose import nearest_examples, propose
    from icml26.core.chat import get_chat

    n_t = int(ctx.options.get("llm_targets", 50))
    n = int(ctx.options.get("llm_n", 5))
    shots = int(ctx.options.get("llm_shots", 3))
    temp = float(ctx.options.get("llm_temperature", 0.7))
    chosen = targets[:n_t]
    corpus = [(g.product, ".".join(g.reactants)) for g in db_rx]
    examples = nearest_examples([g.product for g in chosen], corpus, k=shots, seed=seed)
    chat = get_chat(spec)
    props = propose(
        chat,
        [g.product for g in chosen],
        examples,
        n=n,
        temperature=temp,
        seed=seed,
        progress=ctx.progress,
    )
    out = []
    for ti, (g, ps) in enumerate(zip(chosen, props, strict=True)):
        for rank, p in enumerate(ps):
            out.append({"target": ti, "rank": rank, "gold": ".".join(g.reactants), **p})
    return out


def _one_seed(
    ctx: RunContext,
    seed: int,
    use_mapper: bool,
    mols,
    llm: str | None = None,
    use_rdchiral: bool = False,
) -> dict:
    n_db = ctx.pick(tiny=300, small=8000, full=20000)
    n_targets = ctx.pick(tiny=30, small=300, full=1000)
    n_forbidden = ctx.pick(tiny=10, small=100, full=300)
    templates = [t for t in TEMPLATES if ctx.scale != "tiny" or t.name in TINY_TEMPLATES]
    in_db = [t for t in templates if t.family != HELD_OUT_FAMILY or ctx.scale == "tiny"]
    held_t = [t for t in templates if t.family == HELD_OUT_FAMILY and ctx.scale != "tiny"]
    rng = random.Random(seed)
    rxns = generate(mols, n_db + n_targets, in_db, seed=seed, progress=ctx.progress)
    rng.shuffle(rxns)
    targets, db_rx = rxns[:n_targets], rxns[n_targets:]
    forbidden = generate(mols, n_forbidden, in_db, seed=seed, forbidden=True)
    held = generate(mols, ctx.pick(tiny=0, small=30, full=100), held_t, seed=seed) if held_t else []
    db = ReactionDB.build([r.mapped for r in db_rx], progress=ctx.progress)
    items = []  # (target index, class, mapped rxn, gold reactant set)
    kinds = ("valence", "unbalanced", "invalid")
    for ti, g in enumerate(ctx.progress.track(targets, len(targets), "building candidates")):
        cands = candidates(g, rng, in_db, corrupt_kind=kinds[ti % 3])
        for cls in CLASSES:
            if cands[cls] is not None:
                items.append((ti, cls, cands[cls], ".".join(g.reactants)))
    for fi, g in enumerate(forbidden):
        items.append((len(targets) + fi, "d", g.mapped, None))
    rxn_list = [it[2] for it in items]
    scores: dict[str, list[float]] = {}
    gold_sets = [canonical_set(it[3]) if it[3] else None for it in items]
    scores["exact-match Top-1"] = [
        float(g is not None and canonical_set(r.split(">")[0]) == g)
        for r, g in zip(rxn_list, gold_sets, strict=True)
    ]
    tmpl = ChemCensor(db, mapper="given")
    lv_t = tmpl.score_many(rxn_list, progress=ctx.progress)
    scores["ChemCensor (template maps)"] = [float(x.value) for x in lv_t]
    agreement = None
    if use_mapper:
        rxm = ChemCensor(db, mapper="rxnmapper")
        lv_m = rxm.score_many(rxn_list, progress=ctx.progress)
        scores["ChemCensor (RXNMapper)"] = [float(x.value) for x in lv_m]
        gold_idx = [i for i, it in enumerate(items) if it[1] == "a"]
        keys_t = [tmpl.process_many([rxn_list[i]]) for i in gold_idx]
        from icml26.chemcensor.mapper import strip_maps

        keys_m = list(rxm.process_many([strip_maps(rxn_list[i]) for i in gold_idx]))
        same = 0
        for kt, km in zip(keys_t, keys_m, strict=True):
            kt = next(iter(kt))
            same += (
                isinstance(kt, tuple)
                and isinstance(km, tuple)
                and bool(kt[1])
                and bool(km[1])
                and kt[1][0].key == km[1][0].key
            )
        agreement = same / max(1, len(gold_idx))
        rxm._worker.close()
    scores["RDKit validity + balance"] = [float(valid_balanced(r)) for r in rxn_list]
    # the floor's other half: a score that knows nothing (its own generator, so the candidates'
    # random choices are unchanged)
    scores[RANDOM] = [float(x) for x in np.random.default_rng(seed + 7_919).random(len(rxn_list))]
    if use_rdchiral:
        from icml26.chemcensor.roundtrip import roundtrip_mapped

        scores["rdchiral template round trip"] = [
            float(bool(roundtrip_mapped(r).ok))
            for r in ctx.progress.track(rxn_list, len(rxn_list), "rdchiral round trips")
        ]
    llm_items = _llm_candidates(ctx, llm, targets, db_rx, seed) if llm else []
    if llm_items:
        from icml26.chemcensor.roundtrip import roundtrip

        e_rxns = [it["rxn_smiles"] for it in llm_items]
        gsets = [canonical_set(it["gold"]) for it in llm_items]
        for it, r, gs in zip(llm_items, e_rxns, gsets, strict=True):
            it["exact"] = int(canonical_set(it["reactants"]) == gs) if it["reactants"] else 0
            it["valid_balanced"] = valid_balanced(r)
        if use_mapper:
            rxm = ChemCensor(db, mapper="rxnmapper")
            for it, item in zip(llm_items, rxm.process_many(e_rxns), strict=True):
                lv = rxm._level_of(item)
                it["level"], it["stage"] = lv.value, lv.stage
                if use_rdchiral and isinstance(item, tuple):
                    it["rdchiral"] = int(bool(roundtrip(item[0]).ok))
            rxm._worker.close()
    held_levels = [lv.value for lv in tmpl.score_many([g.mapped for g in held])] if held else []
    return {
        "items": items,
        "scores": scores,
        "levels": lv_t,
        "agreement": agreement,
        "held": held_levels,
        "n_db": len(db),
        "db_failures": dict(db.build_failures),
        "n_targets": len(targets),
        "llm": llm_items,
    }


def _auroc_ci(items, s, seed, n_boot=1000, pos_classes=("a", "b"), neg_classes=("c", "d")):
    """AUROC of score ``s`` for ``pos_classes`` vs ``neg_classes`` (items of other classes are
    left out), with a 95% bootstrap interval that resamples targets (a target's candidates
    together)."""
    keep = [i for i, it in enumerate(items) if it[1] in pos_classes + neg_classes]
    items = [items[i] for i in keep]
    groups: dict[int, list[int]] = {}
    for i, it in enumerate(items):
        groups.setdefault(it[0], []).append(i)
    keys = list(groups)
    s = np.asarray(s)[keep]
    pos = np.array([it[1] in pos_classes for it in items])
    value = auroc(s[pos], s[~pos])
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        idx = np.concatenate([groups[keys[j]] for j in rng.integers(0, len(keys), len(keys))])
        boots.append(auroc(s[idx][pos[idx]], s[idx][~pos[idx]]))
    lo, hi = np.nanpercentile(boots, [2.5, 97.5])
    return value, float(lo), float(hi)


def run(ctx: RunContext) -> Result:
    n_seeds = int(ctx.options.get("seeds", ctx.pick(tiny=1, small=2, full=3)))
    want_mapper = ctx.options.get("rxnmapper", "0" if ctx.scale == "tiny" else "1") == "1"
    use_mapper = want_mapper and _rxnmapper_ok()
    llm_spec = ctx.options.get("llm", ctx.pick(tiny="0", small="local", full="local"))
    use_llm = llm_spec not in ("0", "", "none")
    want_rdchiral = ctx.options.get("rdchiral", "1") == "1"
    use_rdchiral = want_rdchiral and _rdchiral_ok()
    mols = molecule_pool(limit=ctx.pick(tiny=1200, small=None, full=None), seed=ctx.seed)
    runs = [
        _one_seed(
            ctx,
            ctx.seed + k,
            use_mapper and k == 0,
            mols,
            llm=llm_spec if use_llm and k == 0 else None,
            use_rdchiral=use_rdchiral,
        )
        for k in range(n_seeds)
    ]
    rows = []
    head_vals, head_lo, head_hi = [], [], []
    ac_stats: dict[str, tuple[float, tuple[float, float]]] = {}
    head_stats: dict[str, tuple[float, tuple[float, float]]] = {}
    for name in runs[0]["scores"]:
        vals, los, his = [], [], []
        for k, r in enumerate(runs):
            if name not in r["scores"]:
                continue
            v, lo, hi = _auroc_ci(r["items"], r["scores"][name], ctx.seed + k)
            vals.append(v), los.append(lo), his.append(hi)
        r0 = runs[0]
        s = np.asarray(r0["scores"][name])
        cls = np.array([it[1] for it in r0["items"]])
        rho = spearmanr(s, [ORDER[c] for c in cls]).statistic
        row = {
            "system": name,
            "AUROC {a,b} vs {c,d}": round(float(np.mean(vals)), 3),
            "95% CI (widest over seeds)": f"[{min(los):.3f}, {max(his):.3f}]",
            "AUROC per seed": ", ".join(f"{v:.3f}" for v in vals),
        }
        ac = [
            _auroc_ci(
                r["items"], r["scores"][name], ctx.seed + k, pos_classes=("a",), neg_classes=("c",)
            )
            for k, r in enumerate(runs)
            if name in r["scores"]
        ]
        ac_stats[name] = (
            float(np.mean([x[0] for x in ac])),
            (min(x[1] for x in ac), max(x[2] for x in ac)),
        )
        head_stats[name] = (float(np.mean(vals)), (min(los), max(his)))
        row = {
            **row,
            AC: round(ac_stats[name][0], 3),
            f"{AC} 95% CI": f"[{ac_stats[name][1][0]:.3f}, {ac_stats[name][1][1]:.3f}]",
            "Spearman vs a>b>d>c": round(float(rho), 3),
        }
        for c in CLASSES:
            row[f"mean score ({c})"] = (
                round(float(s[cls == c].mean()), 2) if (cls == c).any() else None
            )
        row["share of (b) scored >= 1"] = (
            round(float((s[cls == "b"] >= 1).mean()), 3) if (cls == "b").any() else None
        )
        rows.append(row)
        if name == "ChemCensor (template maps)":
            head_vals, head_lo, head_hi = vals, los, his
    checks = _power_checks(runs, ac_stats, head_stats)
    r0 = runs[0]
    cls = [it[1] for it in r0["items"]]
    for c in CLASSES:
        hist = Counter(lv.value for lv, k in zip(r0["levels"], cls, strict=True) if k == c)
        rows.append(
            {"system": f"level histogram ({c})", **{str(v): hist.get(v, 0) for v in range(-1, 6)}}
        )
    stages = Counter(lv.stage for lv in r0["levels"] if lv.value == -1)
    rows.append({"system": "failures by stage (template maps)", **dict(stages)})
    if r0["held"]:
        rows.append(
            {
                "system": f"held-out family '{HELD_OUT_FAMILY}' golds",
                "n": len(r0["held"]),
                "mean level": round(float(np.mean(r0["held"])), 2),
                "share >= 1": round(float(np.mean(np.array(r0["held"]) >= 1)), 3),
            }
        )
    if r0["agreement"] is not None:
        rows.append(
            {
                "system": "RXNMapper vs template RC1 agreement (golds)",
                "share": round(r0["agreement"], 3),
            }
        )
    e = r0["llm"]
    if e:
        rows.extend(_llm_rows(e))
    figures = _figures(ctx, r0)
    notes = [
        "Reactions are generated, not USPTO: our forward RDKit templates applied to RDKit's bundled molecules "
        "(NCI first_5K, FreeWilson ChEMBL, ZINC sample) with common building blocks; atom maps are exact.",
        f"DB: {r0['n_db']} reactions (seed 0), {r0['n_targets']} held-out targets per seed; {n_seeds} data seed(s).",
        "(d) = a random non-template bond cut of the target, plus templates applied to reactants with an excluded FG "
        "(their own targets, class d only). (b) exists only where a reagent conversion gives another precedented route.",
        "Exact match gives 1 to (a) only, so its AUROC is 0.5 + 0.5*share(a among positives) (0.75 with as many a as b).",
        "FG library: our 77 SMARTS, not the official hundreds; environment = reactants and product outside the centre.",
    ]
    if e:
        n_t = len({it["target"] for it in e})
        notes.append(
            f"(e) {n_t} targets x {len(e) // max(1, n_t)} proposals of {llm_spec!r} "
            "(SmolLM2-135M-Instruct for 'local'), few-shot with the DB's most similar products; "
            "unlabelled, so outside the AUROC; levels from the RXNMapper system (proposals carry no maps)."
        )
        if not use_mapper:
            notes.append(
                "(e) levels not computed: RXNMapper worker not installed (run `make setup`)."
            )
    if want_rdchiral and not use_rdchiral:
        notes.append(
            "rdchiral system skipped: rdchiral not installed (pip install rdchiral==1.1.0)."
        )
    elif use_rdchiral:
        notes.append(
            "rdchiral template round trip (rdchiral 1.1.0): 1 when the retro-template extracted from the "
            "template-mapped candidate regenerates its reactants from the product; a mapping-consistency "
            "diagnostic, not a plausibility test (a random cut round-trips too)."
        )
    if want_mapper and not use_mapper:
        notes.append("RXNMapper system skipped: worker not installed (run `make setup`).")
    elif use_mapper:
        notes.append(
            "ChemCensor (RXNMapper) scores RXNMapper-mapped candidates against the template-mapped DB (seed 0 only)."
        )
    if ctx.scale == "tiny":
        notes.append("tiny: 5 templates, 1,200 molecules, 30 targets; no held-out family.")
    return Result(
        rows=rows,
        headline=Measure(
            "AUROC of ChemCensor level, {a,b} vs {c,d}",
            float(np.mean(head_vals)),
            "",
            spread=(min(head_lo), max(head_hi)),
            higher_is_better=True,
        ),
        target=TARGET,
        notes=notes,
        figures=figures,
        power=checks,
    )


def _power_checks(runs, ac_stats, head_stats) -> list:
    """Positive control, floor and degeneracy (see the claims index).

    Control: ChemCensor's level must separate gold (a) from corrupted (c) candidates beyond the
    random score (AUROC of a vs c, target-bootstrap intervals). Floor: the better of the random
    score and RDKit validity + balance on the headline AUROC; ChemCensor or exact match must lie
    above its interval. Degeneracy: candidates on which ChemCensor's decision (level >= 1)
    differs from exact match's (over every data seed)."""
    from icml26.core import power

    checks = [
        power.control(
            METHOD,
            ac_stats[METHOD][0],
            RANDOM,
            ac_stats[RANDOM][0],
            spread=ac_stats[METHOD][1],
            null_spread=ac_stats[RANDOM][1],
            metric=AC,
        )
    ]
    trivial = [n for n in (RANDOM, "RDKit validity + balance") if n in head_stats]
    fl = max(trivial, key=lambda n: head_stats[n][0])
    compared = [
        n for n in (METHOD, "ChemCensor (RXNMapper)", "exact-match Top-1") if n in head_stats
    ]
    checks.append(
        power.floor(
            {n: head_stats[n][0] for n in compared},
            fl,
            head_stats[fl][0],
            spreads={n: head_stats[n][1] for n in compared},
            floor_spread=head_stats[fl][1],
            metric="AUROC {a,b} vs {c,d}",
        )
    )
    differ = total = 0
    for r in runs:
        lv = np.asarray(r["scores"][METHOD]) >= 1
        ex = np.asarray(r["scores"]["exact-match Top-1"]) >= 1
        differ += int((lv != ex).sum())
        total += len(lv)
    checks.append(
        power.degeneracy(
            (METHOD, "exact-match Top-1"),
            differ,
            total,
            what="candidates judged differently (ChemCensor level >= 1 vs exact match)",
        )
    )
    return checks


def _llm_rows(e: list[dict]) -> list[dict]:
    """Rows for the (e) LLM proposals: one summary row, exact@K / plausibility@K, a histogram."""
    from icml26.chemcensor.evaluate import evaluate_topk

    rows = []
    row = {
        "system": "(e) LLM proposals",
        "targets": len({it["target"] for it in e}),
        "proposals": len(e),
        "RDKit valid + balanced": round(float(np.mean([it["valid_balanced"] for it in e])), 3),
        "exact = gold": round(float(np.mean([it["exact"] for it in e])), 3),
    }
    scored = [it for it in e if "level" in it]
    if scored:
        lv = np.array([it["level"] for it in scored])
        row["mean level"] = round(float(lv.mean()), 2)
        row["share level >= 1"] = round(float((lv >= 1).mean()), 3)
    if any("rdchiral" in it for it in e):
        row["rdchiral round trip"] = round(float(np.mean([it.get("rdchiral", 0) for it in e])), 3)
    rows.append(row)
    if scored:
        preds: dict[str, list[str]] = {}
        gold: dict[str, str] = {}
        levels: dict[str, list[int]] = {}
        for it in sorted(e, key=lambda x: (x["target"], x["rank"])):
            t = str(it["target"])
            preds.setdefault(t, []).append(it["reactants"])
            gold[t] = it["gold"]
            levels.setdefault(t, []).append(it.get("level", -1))
        ks = sorted({1, len(next(iter(preds.values())))})
        topk = evaluate_topk(preds, gold, ks=ks, levels=levels)
        rows.append(
            {
                "system": "(e) exact@K vs plausibility@K (level >= 1)",
                **{k: round(v, 3) for k, v in topk.items()},
            }
        )
        hist = Counter(it["level"] for it in scored)
        rows.append(
            {
                "system": "level histogram (e) (RXNMapper)",
                **{str(v): hist.get(v, 0) for v in range(-1, 6)},
            }
        )
        stages = Counter(it["stage"] for it in scored if it["level"] == -1)
        rows.append({"system": "(e) failures by stage (RXNMapper)", **dict(stages)})
    return rows


def _figures(ctx: RunContext, r0: dict):
    plt = pyplot()
    cls = np.array([it[1] for it in r0["items"]])
    lv = np.array([x.value for x in r0["levels"]])
    e_lv = np.array([it["level"] for it in r0.get("llm", []) if "level" in it])
    panels = list(CLASSES) + (["e"] if len(e_lv) else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(3 * len(panels), 3), sharey=False)
    names = {
        "a": "(a) gold",
        "b": "(b) valid alternative",
        "c": "(c) corrupted",
        "d": "(d) implausible",
        "e": "(e) LLM few-shot (RXNMapper)",
    }
    for ax, c in zip(axes, panels, strict=True):
        vals = e_lv if c == "e" else lv[cls == c]
        ax.bar(range(-1, 6), [(vals == v).sum() for v in range(-1, 6)])
        ax.set_title(names[c], fontsize=9)
        ax.set_xlabel("ChemCensor level")
    axes[0].set_ylabel("candidates")
    fig.tight_layout()
    paths = [save_figure(fig, ctx.out_dir / "level_histograms.png")]
    fig, ax = plt.subplots(figsize=(4.5, 4))
    pos = np.isin(cls, ["a", "b"])
    for name, s in r0["scores"].items():
        s = np.asarray(s)
        th = np.unique(s)[::-1]
        tpr = [0.0] + [float((s[pos] >= t).mean()) for t in th]
        fpr = [0.0] + [float((s[~pos] >= t).mean()) for t in th]
        ax.plot(fpr, tpr, marker=".", label=f"{name} ({auroc(s[pos], s[~pos]):.2f})")
    ax.plot([0, 1], [0, 1], "k:", lw=0.8)
    ax.set_xlabel("false positive rate ({c,d})")
    ax.set_ylabel("true positive rate ({a,b})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(save_figure(fig, ctx.out_dir / "roc.png"))
    # plausibility@K vs exact@K over a random ranking of each target's candidates
    by_t: dict[int, list[int]] = {}
    for i, it in enumerate(r0["items"]):
        by_t.setdefault(it[0], []).append(i)
    rng = random.Random(ctx.seed)
    ks = [1, 2, 3, 4]
    ex = {k: 0 for k in ks}
    pl = {k: 0 for k in ks}
    for idx in by_t.values():
        idx = idx[:]
        rng.shuffle(idx)
        for k in ks:
            ex[k] += any(cls[i] == "a" for i in idx[:k])
            pl[k] += any(lv[i] >= 1 for i in idx[:k])
    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    ax.plot(ks, [ex[k] / len(by_t) for k in ks], marker="o", label="exact@K")
    ax.plot(ks, [pl[k] / len(by_t) for k in ks], marker="s", label="plausibility@K (level >= 1)")
    ax.set_xlabel("K (random ranking of the candidates)")
    ax.set_ylabel("share of targets")
    ax.legend()
    fig.tight_layout()
    paths.append(save_figure(fig, ctx.out_dir / "plausibility_at_k.png"))
    return paths
