"""Scoring, table, headline and figures of the ``cyberpal`` claim (see :mod:`.claim`)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from icml26.core import power
from icml26.core.claims import Measure, Result
from icml26.core.plots import pyplot, save_figure
from icml26.core.stats import budgets, clustered_bootstrap, item_bootstrap
from icml26.core.torchutil import bootstrap_ci
from icml26.cyberpal.evaluate import parse_cwe, score_cwe
from icml26.cyberpal.verify import CHECKS

ARM_NAMES = {"A": "(A) plain SFT", "B": "(B) template-grounded CoT SFT",
             "C": "(C) LM-written CoT SFT, verified",
             "Atok": "(A) plain SFT, token-matched to B"}
NN = "MiniLM nearest definition (no training)"
LENGTH_BINS = ((0, 6), (7, 14), (15, 10_000))


#: an arm is "at the floor" on OOD when it gets fewer than this many CVEs right (summed per-CVE
#: correctness, averaged over seeds) ...
FLOOR_MIN_CORRECT = 5.0
#: ... or its accuracy is under this multiple of uniform chance over the label set
FLOOR_CHANCE_MULT = 2.0


def floor_reason(b, a, n_labels: int, *, min_correct: float = FLOOR_MIN_CORRECT,
                 chance_mult: float = FLOOR_CHANCE_MULT) -> str | None:
    """Why the B / A ratio cannot test the claim, or None. ``b``, ``a``: per-CVE OOD correctness
    (means over seeds). When *both* arms are at the floor (under ``min_correct`` right, or
    under ``chance_mult`` x 1/n_labels accuracy), the +0.5-smoothed ratio of two near-zero counts
    (1 vs 0 right reads as 3x) says nothing about grounded reasoning."""
    b, a = np.asarray(b, dtype=float), np.asarray(a, dtype=float)
    n = len(b)
    floor = max(min_correct / max(n, 1), chance_mult / max(n_labels, 1))
    acc = {"B": float(b.mean()) if n else 0.0, "A": float(a.mean()) if n else 0.0}
    if all(v < floor for v in acc.values()):
        return (f"both arms at the floor on OOD: B {b.sum():g}/{n}, A {a.sum():g}/{n} right "
                f"(accuracy {acc['B']:.3f} / {acc['A']:.3f} < floor {floor:.3f} = max("
                f"{min_correct:g} CVEs, {chance_mult:g} x chance 1/{n_labels})); the smoothed "
                "ratio of two near-zero counts does not measure the effect of grounded CoT")
    return None


def _ratio(b, a):
    return float((b.sum() + 0.5) / (a.sum() + 0.5))


def _fmt(vals) -> str:
    vals = [v for v in vals if v == v]
    if not vals:
        return "n/a"
    m = float(np.mean(vals))
    return f"{m:.3f}" if len(vals) == 1 else f"{m:.3f} [{min(vals):.3f}, {max(vals):.3f}]"


def build_result(ctx, *, S, label, cwe, fmt, splits, golds, results, base0, base3, nn, arms,
                 b_report, c_report, c_share, arm_c, decon, n_b, data_s, lm_s, total_s,
                 target, train_answers=(), epochs=None, tok_ratio=None) -> Result:
    seeds = S["seeds"]
    lengths = {k: np.array([len(p.description.split()) for p in getattr(
        splits, "id_test" if k == "id" else "ood_test")]) for k in ("id", "ood")}

    def scores(texts, k, with_fmt):
        return score_cwe([parse_cwe(t) for t in texts], golds[k], cwe, texts,
                         fmt if with_fmt else None)

    per_cve = {}  # system -> split -> (seeds, n) correctness
    rows = []

    def add_row(name, runs, with_fmt, extra):
        sc = {k: [scores(r["texts"][k], k, with_fmt) for r in runs] for k in ("id", "ood")}
        per_cve[name] = {k: np.array([s.any_gold for s in v], dtype=float) for k, v in sc.items()}
        both = np.concatenate([per_cve[name]["id"].mean(0), per_cve[name]["ood"].mean(0)])
        lens = np.concatenate([lengths["id"], lengths["ood"]])
        by_len = " / ".join(
            f"{both[(lens >= lo) & (lens <= hi)].mean():.2f}" if ((lens >= lo) & (lens <= hi)).any()
            else "n/a" for lo, hi in LENGTH_BINS)
        row = {"system": name}
        for k in ("id", "ood"):
            summ = [s.summary() for s in sc[k]]
            row[f"{k.upper()} any-gold"] = _fmt([x["any_gold"] for x in summ])
            row[f"{k.upper()} strict"] = _fmt([x["strict"] for x in summ])
            row[f"{k.upper()} hierarchy"] = _fmt([x["hierarchy"] for x in summ])
        row["compliance (OOD)"] = _fmt([s.summary()["compliance"] for s in sc["ood"]])
        row["by length <=6 / 7-14 / >14 words"] = by_len
        row.update(extra)
        rows.append(row)

    rank_gold = golds["ood"][: S["n_rank"]]
    per_rank = {}  # system -> (seeds, n_rank) top-1 correctness of the rank mode

    def rank_correct(preds):
        return np.array([p in g for p, g in zip(preds, rank_gold, strict=False)], dtype=float)

    def rank_acc(r):
        preds = r.get("rank", {}).get("pred", [])
        return float(rank_correct(preds).mean()) if preds else float("nan")

    mcq0 = base0.get("mcq", {})
    base_name = f"base {label}, zero-shot"
    add_row(base_name, [base0], False,
            {"rank OOD": _fmt([rank_acc(base0)]), "MCQ hard": _fmt([mcq0.get("hard", np.nan)]),
             "MCQ easy": _fmt([mcq0.get("easy", np.nan)]), "tokens trained": 0})
    if base0.get("rank", {}).get("pred"):
        per_rank[base_name] = rank_correct(base0["rank"]["pred"])[None]
    add_row(f"base {label}, 3-shot", [base3], False, {"tokens trained": 0})
    nn_runs = {"texts": {k: [f"CWE-{v[0]}" for v in nn[k]] for k in nn}}
    # MiniLM's nearest definition is itself a ranking of the labels: its top-1 is its rank mode
    per_rank[NN] = rank_correct([v[0] for v in nn["ood"][: S["n_rank"]]])[None]
    add_row(NN, [nn_runs], False, {"rank OOD": _fmt([float(per_rank[NN].mean())]),
                                   "tokens trained": 0})
    const, const_name, hind, hind_name = constant_labels(train_answers, golds["ood"])
    for lab, name in ((const, const_name), (hind, hind_name)):
        if lab is not None:
            texts = {k: [f"CWE-{lab}: {cwe[lab].name}"] * len(golds[k]) for k in ("id", "ood")}
            per_rank[name] = rank_correct([lab] * len(rank_gold))[None]
            add_row(name, [{"texts": texts}], False, {
                "rank OOD": _fmt([float(per_rank[name].mean())]), "tokens trained": 0})
    for arm in arms:
        runs = [results[(arm, s)] for s in seeds]
        first = runs[0]
        per_rank[ARM_NAMES[arm]] = np.stack([rank_correct(r["rank"]["pred"]) for r in runs])
        gen_runs = [r for r in runs if r.get("texts") is not None]  # >= 1: gen_seeds >= 1
        add_row(ARM_NAMES[arm], gen_runs, arm not in ("A", "Atok"), {
            "rank OOD": _fmt([rank_acc(r) for r in runs]),
            "MCQ hard": _fmt([first.get("mcq", {}).get("hard", np.nan)]),
            "MCQ easy": _fmt([first.get("mcq", {}).get("easy", np.nan)]),
            "tokens trained": int(np.mean([r["tokens_trained"] for r in runs])),
            "train s / seed": round(float(np.mean([r["train_s"] for r in runs])), 1),
            "SFT tokens/s": round(float(np.mean([r["tok_per_s"] for r in runs])), 1)})

    rank_head = S.get("headline", "gen") == "rank"
    # the headline's per-(seed, CVE) correctness: rank mode on every seed, or the generated answer
    head = {n: per_rank[n] for n in per_rank} if rank_head else {
        n: v["ood"] for n, v in per_cve.items()}
    a_ood = head[ARM_NAMES["A"]].mean(0)
    b_ood = head[ARM_NAMES["B"]].mean(0)
    value = _ratio(b_ood, a_ood)
    cve_only = bootstrap_ci(_ratio, b_ood, a_ood, seed=ctx.seed)
    ci = seed_cve_ci(head[ARM_NAMES["B"]], head[ARM_NAMES["A"]], ctx.seed)
    spread = ci.spread
    metric = "OOD rank-mode top-1 accuracy" if rank_head else "OOD any-gold accuracy"
    checks = power_checks(head, results, arms, seeds, const_name, ctx.seed, metric=metric,
                          mode="rank" if rank_head else "gen")
    tokens = {ARM_NAMES[a]: float(np.mean([results[(a, s)]["tokens_trained"] for s in seeds]))
              for a in arms}
    budget = budgets(tokens, unit="assistant tokens trained (mean over seeds)")
    b_id = per_cve[ARM_NAMES["B"]]["id"].mean(0)
    a_id = per_cve[ARM_NAMES["A"]]["id"].mean(0)

    b_first = results[("B", seeds[0])]
    figs = [_fig_acc(ctx, per_cve)]
    if b_first.get("texts") is not None:
        figs.append(_fig_confusion(ctx, b_first, golds, cwe))
    figs.append(_fig_rejections(ctx, b_report, c_report))
    if rank_head:
        figs.append(_fig_rank(ctx, per_rank, [ARM_NAMES[a] for a in arms]))
    bd, cd = b_report.to_dict(), c_report.to_dict()
    notes = [
        f"Data: CWE {cwe.version} observed examples (cwe2 3.0.0); {S['n_cwes']} most frequent "
        f"CWEs; {len(splits.train)} train CVEs (years <= 2012; {n_b} used after cap "
        f"{S['train_cap']}, verification, dedup and decontamination {decon}), ID test "
        f"{len(splits.id_test)} CVEs, OOD test {len(splits.ood_test)} CVEs (years >= 2017).",
        "CWE ids in descriptions are masked ('[CWE]'); splits are by CVE id, a CVE never in two.",
        f"Headline: {metric} B / A"
        + (f" (log-prob ranking of the {S['n_cwes']} candidate labels 'CWE-<id>: <name>' after "
           f"each arm's own system prompt, top-1 in the CVE's gold set, first {len(rank_gold)} OOD "
           "CVEs; independent of the answer format)" if rank_head else "")
        + f", per-CVE correctness averaged over seeds {seeds}, (sum_B + 0.5) / (sum_A + 0.5); "
        f"95% CI resampling seeds, then CVEs within them (clustered bootstrap, {ci.n_clusters} "
        f"seed(s)); the CVE-only bootstrap of the seed means gives [{cve_only[0]:.3f}, "
        f"{cve_only[1]:.3f}]. Generated-answer ratios (seeds with generations): OOD any-gold "
        f"{_ratio(per_cve[ARM_NAMES['B']]['ood'].mean(0), per_cve[ARM_NAMES['A']]['ood'].mean(0)):.3f}, "
        f"ID {_ratio(b_id, a_id):.3f}.",
        f"Power checks: floor = {const_name} (the most frequent answer of the training "
        f"records); control = MiniLM nearest definition against it; degeneracy = OOD predictions "
        f"that differ between A and B. Best single label on the OOD test in hindsight: "
        f"{hind_name} (a reference row, not the floor: it is chosen on the test set).",
        "Budgets: " + ", ".join(f"{k} {v:,.0f}" for k, v in tokens.items())
        + f" assistant tokens (B / A {tokens[ARM_NAMES['B']] / max(1, tokens[ARM_NAMES['A']]):.2f}"
        + "x; records, epochs and lr are shared, not tokens). "
        + (f"The token-matched plain arm trains A's records {epochs['Atok']} epoch(s) "
           f"(B / A tokens per epoch {tok_ratio:.2f})." if "Atok" in arms else
           "No token-matched plain arm in this run (--opt token_matched=1 adds it: A's records "
           f"for round({S['epochs']} x {tok_ratio or 0:.2f}) epochs)."),
        f"Cells 'm [lo, hi]' are means with min/max over seeds; rank mode on every seed, "
        f"generation rows on the first {S.get('gen_seeds', len(seeds))} seed(s), MCQ on the first.",
        f"Strict = accuracy on CVEs with exactly one CWE; hierarchy gives 0.5 for a view-1000 "
        f"parent/child. Rank OOD: log-prob ranking of the {S['n_cwes']} labels on the first "
        f"{S['n_rank']} OOD CVEs. MCQ: {S['n_mcq']} catalogue items per difficulty (half CWE, "
        f"half ATT&CK), log-prob scoring.",
        f"B traces are template-generated from retrieved catalogue facts (not LLM-written): "
        f"verification kept {bd['kept']}/{bd['kept'] + bd['dropped']}.",
        f"C: the base model wrote {cd['kept'] + cd['dropped']} traces from the same facts; "
        f"{c_share:.0%} passed the verifier ({'trained' if arm_c else 'arm dropped: under 30%'}); "
        f"failures by check: { {k: v for k, v in cd['by_check'].items() if v} }.",
        f"SFT: {'LoRA (r 16, alpha 32, merged)' if S.get('lora') else 'full fine-tune'}, fp32 weights (bf16 autocast only where the CPU has native bf16), AdamW lr {S['lr']}, "
        f"{S['epochs']} epoch(s), batch {S['batch']}; loss on assistant tokens only.",
        f"Times: data {data_s:.0f} s, LM writer {lm_s:.0f} s, total {total_s:.0f} s.",
        f"The paper trains 4B-20B models on ~400k examples and reports no numbers; this run "
        f"uses {label}, a direction check only.",
    ]
    if ctx.scale == "small":
        notes.append(
            f"small keeps the issue's label set and test sets ({S['n_cwes']} CWEs, "
            f"{len(splits.id_test)} ID / {len(splits.ood_test)} OOD CVEs) but cuts training and "
            f"the secondary rows to fit a shared 2-core CPU: "
            f"{min(S['train_cap'], len(splits.train))} of the {len(splits.train)} training CVEs "
            f"before verification/dedup/decontamination, {S['epochs']} epoch(s), seeds {seeds}, rank on "
            f"{S['n_rank']} OOD CVEs, {S['n_mcq']} MCQ items per difficulty (issue: all training "
            f"CVEs, MCQ 400). --opt train_cap=100000 --opt seeds=0,1 --opt n_mcq=200 "
            f"--opt n_rank=150 runs the issue's size.")
    uninformative = floor_reason(
        b_ood, a_ood, len(splits.labels),
        min_correct=float(ctx.options.get("floor_correct", FLOOR_MIN_CORRECT)),
        chance_mult=float(ctx.options.get("floor_chance", FLOOR_CHANCE_MULT)))
    if uninformative:
        notes.insert(0, "UNINFORMATIVE: " + uninformative)
    name = ("OOD CVE->CWE rank-mode top-1 accuracy, B / A" if rank_head
            else "OOD CVE->CWE any-gold accuracy, B / A")
    return Result(rows=rows, headline=Measure(name, value, "x", spread, higher_is_better=True),
                  target=target, notes=notes, figures=figs, uninformative=uninformative,
                  power=checks, budgets=budget)


def constant_labels(train_answers, ood_golds) -> tuple:
    """(label, row name) of the floor, the most frequent training answer (ties: lowest id), and of
    the best single label on the OOD test in hindsight (ties: the more frequent in training)."""
    if not len(train_answers):
        return None, None, None, None
    freq = Counter(int(a) for a in train_answers)
    const = min(freq, key=lambda c: (-freq[c], c))
    hits = Counter(c for g in ood_golds for c in set(g))
    hind = min(hits, key=lambda c: (-hits[c], -freq.get(c, 0), c)) if hits else None
    return (const, f"constant CWE-{const} (most frequent training answer, {freq[const]} records)",
            hind, None if hind is None else
            f"constant CWE-{hind} (best single label on the OOD test, hindsight)")


def seed_cve_ci(b, a, seed: int):
    """95% CI of the headline ratio, resampling seeds (clusters), then CVEs within each. ``b``,
    ``a``: (seeds, CVEs) correctness. Each item gets 0.5 / n_CVEs, so that every replicate is
    (sum_B / seeds + 0.5) / (sum_A / seeds + 0.5), the headline's smoothed ratio, exactly."""
    b, a = np.asarray(b, dtype=float), np.asarray(a, dtype=float)
    eps = 0.5 / b.shape[1]
    return clustered_bootstrap(list(b + eps), list(a + eps), statistic="ratio", seed=seed)


def power_checks(correct, results, arms, seeds, const_name, seed, *,
                 metric: str = "OOD any-gold accuracy", mode: str = "gen") -> list:
    """Floor, control and degeneracy on the headline's metric (see the claims index).
    ``correct``: system -> (seeds, CVEs) correctness of that metric; ``mode`` ``rank`` compares
    the rank mode's top-1 labels for degeneracy, ``gen`` the CWEs parsed from the answers."""
    def acc(name):
        v = np.asarray(correct[name], dtype=float)
        return float(v.mean()), item_bootstrap(v.mean(0), statistic="mean", seed=seed).spread

    if const_name is None:
        return [power.not_measured("floor", "no training answers"),
                power.not_measured("control", "no training answers"),
                _degeneracy(results, seeds, mode)]
    c_val, c_ci = acc(const_name)
    trained = {ARM_NAMES[a]: acc(ARM_NAMES[a]) for a in arms}
    nn_val, nn_ci = acc(NN)
    ranges = {n: np.asarray(correct[n], dtype=float).mean(1).tolist() for n in trained}
    return [
        power.floor({k: v[0] for k, v in trained.items()}, const_name, c_val,
                    spreads={k: (min(r), max(r)) for k, r in ranges.items()},
                    floor_spread=c_ci, metric=metric),
        power.control(NN, nn_val, const_name, c_val, spread=nn_ci, null_spread=c_ci,
                      metric=metric),
        _degeneracy(results, seeds, mode),
    ]


def _degeneracy(results, seeds, mode: str = "gen"):
    differ = total = 0
    for s in seeds:
        if mode == "rank":
            pa, pb = results[("A", s)]["rank"]["pred"], results[("B", s)]["rank"]["pred"]
        else:
            pa = [parse_cwe(t) for t in results[("A", s)]["texts"]["ood"]]
            pb = [parse_cwe(t) for t in results[("B", s)]["texts"]["ood"]]
        differ += sum(x != y for x, y in zip(pa, pb, strict=True))
        total += len(pa)
    what = ("OOD rank-mode top-1 labels" if mode == "rank"
            else "OOD predictions (CWE parsed from the answer")
    return power.degeneracy((ARM_NAMES["A"], ARM_NAMES["B"]), differ, total,
                            what=f"{what}, {len(seeds)} seed(s)" + ("" if mode == "rank" else ")"))


def _fig_rank(ctx, per_rank, arms):
    """Rank-mode OOD top-1 accuracy per system; trained arms show every seed as a dot."""
    plt = pyplot()
    names = list(per_rank)
    fig, ax = plt.subplots(figsize=(8, 3.8))
    x = np.arange(len(names))
    means = [float(np.asarray(per_rank[n]).mean()) for n in names]
    ax.bar(x, means, 0.6, color=["C1" if n in arms else "C0" for n in names])
    for i, n in enumerate(names):
        per_seed = np.asarray(per_rank[n]).mean(1)
        if len(per_seed) > 1:
            ax.plot([i] * len(per_seed), per_seed, "k.", ms=4)
    ax.set_xticks(x, [n.replace(", ", "\n", 1)[:40] for n in names], fontsize=7, rotation=15)
    ax.set_ylabel("rank-mode top-1 accuracy (OOD)")
    ax.set_title("CVE -> CWE rank mode per system (dots: seeds)")
    return save_figure(fig, ctx.out_dir / "rank.png")


def _fig_acc(ctx, per_cve):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.8))
    names = list(per_cve)
    x = np.arange(len(names))
    for j, k in enumerate(("id", "ood")):
        means, lo, hi = [], [], []
        for n in names:
            v = per_cve[n][k].mean(0)
            m = float(v.mean())
            ci = bootstrap_ci(lambda a: float(a.mean()), v, seed=0, n_boot=500) if len(v) else (m, m)
            means.append(m)
            lo.append(m - ci[0])
            hi.append(ci[1] - m)
        ax.bar(x + (j - 0.5) * 0.38, means, 0.38, yerr=[lo, hi], capsize=3,
               label=f"{k.upper()} test")
    ax.set_xticks(x, [n.replace(", ", "\n", 1)[:40] for n in names], fontsize=7, rotation=15)
    ax.set_ylabel("any-gold accuracy (95% CI)")
    ax.set_title("CVE -> CWE accuracy per arm")
    ax.legend()
    return save_figure(fig, ctx.out_dir / "accuracy.png")


def _fig_confusion(ctx, res, golds, cwe):
    plt = pyplot()
    gold = [g[0] for k in ("id", "ood") for g in golds[k]]
    pred = [parse_cwe(t) for k in ("id", "ood") for t in res["texts"][k]]
    top = [c for c, _ in Counter(gold).most_common(10)]
    idx = {c: i for i, c in enumerate(top)}
    mat = np.zeros((len(top), len(top) + 1))
    for g, p in zip(gold, pred, strict=True):
        if g in idx:
            mat[idx[g], idx.get(p, len(top))] += 1
    fig, ax = plt.subplots(figsize=(6, 5))
    ax.imshow(mat, cmap="Blues")
    ax.set_xticks(range(len(top) + 1), [f"{c}" for c in top] + ["other"], rotation=90, fontsize=7)
    ax.set_yticks(range(len(top)), [f"CWE-{c}" for c in top], fontsize=7)
    ax.set_xlabel("predicted CWE")
    ax.set_ylabel("gold CWE (first listed)")
    ax.set_title("(B) first seed: top-10 gold CWEs, ID + OOD")
    return save_figure(fig, ctx.out_dir / "confusion.png")


def _fig_rejections(ctx, b_report, c_report):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3))
    x = np.arange(len(CHECKS))
    for j, (name, rep) in enumerate((("template writer (B)", b_report), ("LM writer (C)", c_report))):
        d = rep.to_dict()
        tot = max(1, d["kept"] + d["dropped"])
        ax.bar(x + (j - 0.5) * 0.4, [d["by_check"][c] / tot for c in CHECKS], 0.4, label=name)
    ax.set_xticks(x, CHECKS, rotation=30, fontsize=8)
    ax.set_ylabel("share of traces failing")
    ax.set_title("Verifier rejections by check")
    ax.legend()
    return save_figure(fig, ctx.out_dir / "rejections.png")
