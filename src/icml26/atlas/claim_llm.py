"""ATLAS claim part (c), the headline: real LMs' examinees on real benchmark items, one whole
model family held out per seed (the paper's leaderboard setting in miniature).

Items: a fixed seeded pool of ``llm_items`` (small: 400) multiple-choice items spread over ARC-Easy,
ARC-Challenge, SciQ, OpenBookQA, CommonsenseQA, Social IQa, PIQA, HellaSwag, WinoGrande and two
MMLU subjects (:mod:`icml26.core.evalsets`). Examinees: every installed zoo model
(SmolLM2-135M, Gemma-3-270M, Qwen2.5-Coder-0.5B/1.5B; families smollm2 / gemma / qwen) x prompt
format (``logprob``: summed choice log-prob; ``letter``: next-token log-prob of the letter) x
dtype (``llm_dtypes``) x layers dropped (small: 0 and 1/4 of the stack, spread over its middle;
full: also 1/6 and 1/3). Small uses SmolLM2, Gemma and Qwen-0.5B (``llm_models`` to change;
full adds Qwen-1.5B). Each
such configuration costs one table of choice log-probs, computed once per item pool and scoring
code and memoised under ``$XDG_CACHE_HOME/icml26/atlas/`` (:class:`icml26.core.checkpoint.Memo`:
an interrupted run resumes, a second run reuses them); temperatures and
sampling seeds then draw graded examinees from the table for free
(:mod:`icml26.atlas.responses`).

Per seed s, the family ``families[s % F]`` is held out whole; the bank (2PL: a few hundred
examinees) is fitted on a cluster bootstrap of the other families' configurations (so the
spread carries bank-refit variance), and each held-out examinee is tested adaptively (SE 0.3,
30-item floor, the paper's MFI + randomesque 5 + EAP) against random items of the same number
(random-k), both against its full-bank WLE. Headline: theta MAE ATLAS / random-k, pooled over
seeds, 95% CI from the clustered bootstrap (seeds = bank refits, then examinees).

At ``tiny`` the zoo is replaced by three randomly initialised 6-layer Llamas (byte tokenizer, two
"families"): the plumbing and the verdict run in CI in seconds; their answers are near chance,
so tiny's numbers mean nothing about LMs.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np

from icml26.atlas.calibrate import calibrate
from icml26.atlas.data import Responses
from icml26.atlas.experiment import metrics, run_cats, score_subsets
from icml26.atlas.responses import FORMATS, sample_answers
from icml26.atlas.scoring import estimate_theta
from icml26.core.checkpoint import Memo
from icml26.core.claims import RunContext
from icml26.core.errors import UserError
from icml26.core.stats import clustered_bootstrap

TASKS = (
    "arc_easy",
    "arc_challenge",
    "sciq",
    "openbookqa",
    "commonsense_qa",
    "social_iqa",
    "piqa",
    "hellaswag",
    "winogrande",
    "mmlu/high_school_biology",
    "mmlu/miscellaneous",
)
# zoo name -> family (a family is held out whole); small uses SMALL_MODELS (the 1.5B model costs
# ~3x the 0.5B one per item on a CPU), full all four
SMALL_MODELS = ("smollm2-135m-instruct", "gemma-3-270m", "qwen2.5-coder-0.5b-instruct")
ZOO_FAMILIES = {
    "smollm2-135m-instruct": "smollm2",
    "gemma-3-270m": "gemma",
    "qwen2.5-coder-0.5b-instruct": "qwen",
    "qwen2.5-coder-1.5b-instruct": "qwen",
}
# tiny: random Llamas, (hidden, layers, seed); two families
TINY_MODELS = {"tiny-a": ("a", 64, 6, 1), "tiny-b": ("b", 96, 6, 2), "tiny-b2": ("b", 64, 6, 3)}
DROP_FRACTIONS = (0.0, 1 / 4, 1 / 6, 1 / 3)  # small uses the first two, full all four
TEMPS = (0.0, 0.3, 0.6, 1.0, 1.5, 2.0, 3.0)
HEADLINE = "ATLAS SE 0.3"
RANDOM_K = "random-k (matched to SE 0.3)"
CONTROL = "random-4k (4x matched, positive control)"
FLOOR = "calibration mean theta 0 (floor)"


@dataclass(frozen=True)
class Config:
    """One cached table: a model in one format, dtype and share of layers dropped."""

    family: str
    model: str
    fmt: str
    dtype: str
    cut: int  # index into DROP_FRACTIONS

    @property
    def key(self) -> str:
        return f"{self.model}|{self.dtype}|{self.fmt}|cut{self.cut}"


def installed_zoo(names) -> dict[str, str]:
    """The zoo models named that are installed here -> family."""
    from icml26.core.lm import zoo_status

    unknown = [m for m in names if m not in ZOO_FAMILIES]
    if unknown:
        raise UserError(
            f"--opt llm_models: unknown model(s) {', '.join(unknown)}; choose among "
            f"{', '.join(ZOO_FAMILIES)}"
        )
    return {m: ZOO_FAMILIES[m] for m in names if zoo_status(m)["installed"]}


def configs(models: dict[str, str], dtypes, cuts=range(len(DROP_FRACTIONS))) -> list[Config]:
    return [
        Config(fam, m, fmt, dt, c)
        for m, fam in models.items()
        for fmt in FORMATS
        for dt in dtypes
        for c in cuts
    ]


def _load(model: str, dtype: str, device: str):
    if model in TINY_MODELS:
        from icml26.core.lm import tiny_llama

        _, hidden, layers, seed = TINY_MODELS[model]
        return tiny_llama(hidden=hidden, layers=layers, heads=4, seed=seed, max_len=4096)
    from icml26.core.lm import load_lm

    return load_lm(model, dtype=dtype, device=device)


def llm_tables(ctx: RunContext, items, cfgs: list[Config]) -> tuple[dict, float, dict]:
    """Choice log-prob tables per configuration, memoised in the run folder (resumable).

    Returns (tables by key, seconds spent computing, layers dropped per key)."""
    import hashlib

    from icml26.atlas.responses import choice_logprob_table
    from icml26.core.checkpoint import source_fingerprint
    from icml26.core.lm import cache_root

    ids = [it.id for it in items]
    config = {
        "items": ids,
        "drop_fractions": list(DROP_FRACTIONS),
        "code": source_fingerprint("icml26.core.mcq", "icml26.atlas.responses"),
    }
    if ctx.scale == "tiny":  # random models: nothing worth keeping beyond the run
        path = ctx.out_dir / "atlas_llm_memo.json"
    else:  # computed once per item pool and scoring code, shared by every run (and resumable)
        digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]
        path = cache_root() / "atlas" / f"llm_tables_{digest}.json"
    memo = Memo(path, config=config)
    tick = ctx.progress.task("(c) choice log-probs per configuration", total=len(cfgs))
    tables, drops, seconds = {}, {}, 0.0
    by_model: dict[tuple[str, str], list[Config]] = {}
    for c in cfgs:
        by_model.setdefault((c.model, c.dtype), []).append(c)
    for (model, dtype), group in by_model.items():
        lm = None
        for c in group:
            if c.key not in memo:
                t0 = time.perf_counter()
                if lm is None:
                    lm = _load(model, dtype, ctx.device)
                n_layers = len(lm[0].model.layers)
                n_drop = int(round(DROP_FRACTIONS[c.cut] * n_layers))
                table = choice_logprob_table(lm[0], lm[1], items, c.fmt, n_drop)
                memo.put(c.key, {"table": table, "n_drop": n_drop, "n_layers": n_layers})
                seconds += time.perf_counter() - t0
            hit = memo.get(c.key)
            tables[c.key], drops[c.key] = hit["table"], (hit["n_drop"], hit["n_layers"])
            tick()
        del lm
    return tables, seconds, drops


@dataclass(frozen=True)
class Examinee:
    config: Config
    temperature: float
    seed: int

    @property
    def name(self) -> str:
        return f"{self.config.key}|T{self.temperature:g}|s{self.seed}"


def examinees(cfgs: list[Config], temps, sample_seeds: int) -> list[Examinee]:
    """T = 0 once per configuration, every T > 0 with ``sample_seeds`` draws."""
    return [
        Examinee(c, float(t), s)
        for c in cfgs
        for t in temps
        for s in (range(1) if t == 0 else range(sample_seeds))
    ]


def answer_matrix(tables, items, exs: list[Examinee], seed: int) -> np.ndarray:
    """(E, N) 0/1: each examinee's answers drawn from its configuration's table."""
    rows = []
    for k, e in enumerate(exs):
        rng = np.random.default_rng([seed, k])
        rows.append(sample_answers(tables[e.config.key], items, e.temperature, rng))
    return np.array(rows, dtype=float)


def _settings(ctx: RunContext, st: dict) -> dict:
    o = ctx.options
    tiny = ctx.scale == "tiny"
    c = {
        "items": int(o.get("llm_items", 48 if tiny else 400)),
        "seeds": int(o.get("llm_seeds", 2 if tiny else 6)),
        "sample_seeds": int(o.get("llm_sample_seeds", 2 if tiny else 4)),
        "dtypes": str(o.get("llm_dtypes", "float32" if tiny else "auto")).split(","),
        "models": str(
            o.get("llm_models", ",".join(ctx.pick(tiny=(), small=SMALL_MODELS, full=ZOO_FAMILIES)))
        ).split(","),
        "cuts": range(ctx.pick(tiny=2, small=2, full=len(DROP_FRACTIONS))),
        "temps": TEMPS[:5] if tiny else TEMPS,
        "max_iter": st["max_iter"],
        "tiny": tiny,
    }
    if c["items"] < 30:
        raise UserError(f"--opt llm_items must be >= 30 (the CAT's item floor); got {c['items']}")
    return c


def _resolve_dtypes(names, device) -> list[str]:
    from icml26.core.lm import resolve_dtype

    out = []
    for n in names:
        dt = resolve_dtype(None if n == "auto" else n, device)
        out.append(str(dt).replace("torch.", ""))
    return list(dict.fromkeys(out))


def part_c(ctx: RunContext, st: dict) -> dict:
    """Run part (c); returns rows, notes, per-seed errors, the headline CI and the figure."""
    cs = _settings(ctx, st)
    if cs["tiny"]:
        models = {m: v[0] for m, v in TINY_MODELS.items()}
        items = _tiny_items(cs["items"])
    else:
        from icml26.core import evalsets

        models = installed_zoo(cs["models"])
        if len(set(models.values())) < 2:
            raise UserError(
                "ATLAS part (c) holds out a whole model family and needs the zoo: install it "
                "with `make models` (`icml26 models install --all`); installed: "
                + (", ".join(models) or "none")
            )
        items = evalsets.load_pool(TASKS, cs["items"], seed=0)
    dtypes = _resolve_dtypes(cs["dtypes"], ctx.device)
    cfgs = configs(models, dtypes, cs["cuts"])
    tables, lm_s, drops = llm_tables(ctx, items, cfgs)
    exs = examinees(cfgs, cs["temps"], cs["sample_seeds"])
    families = sorted({c.family for c in cfgs})
    item_ids = [it.id for it in items]
    per_seed, errs, fits, scatter = [], [], [], None
    for s in range(cs["seeds"]):
        held = families[s % len(families)]
        Y_all = answer_matrix(tables, items, exs, seed=ctx.seed * 1000 + s)
        test = np.array([e.config.family == held for e in exs])
        cal_cfgs = sorted({e.config.key for e in exs if e.config.family != held})
        rng = np.random.default_rng([ctx.seed, 50_000 + s])
        draw = rng.choice(len(cal_cfgs), len(cal_cfgs), replace=True)  # bank refit variance
        rows_idx, names = [], []
        for rep, k in enumerate(draw):
            for i, e in enumerate(exs):
                if e.config.key == cal_cfgs[k]:
                    rows_idx.append(i)
                    names.append(f"{e.name}#{rep}")
        resp = Responses.from_array(
            Y_all[rows_idx], models=names, items=item_ids, source=f"(c) calibration, seed {s}"
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            bank = calibrate(resp, model="2PL", max_iter=cs["max_iter"], force=cs["tiny"])
        cols = [item_ids.index(i) for i in bank.ids]
        Y = Y_all[test][:, cols]
        ref, _ = estimate_theta(bank, Y, "wle")
        ok = np.isfinite(ref)
        Y, ref = Y[ok], ref[ok]
        acc = Y.mean(1)
        systems = {
            f"ATLAS SE {se}": run_cats(bank, Y, s, se_stop=se, min_items=30) for se in (0.3, 0.2)
        }
        k_used = systems[HEADLINE]["used"].sum(1)
        T, N = Y.shape
        rng = np.random.default_rng([ctx.seed, 40_000 + s])
        for name, mult in ((RANDOM_K, 1), (CONTROL, 4)):
            used = np.zeros((T, N), bool)
            for m in range(T):
                used[m, rng.choice(N, min(N, mult * int(k_used[m])), replace=False)] = True
            systems[name] = score_subsets(bank, Y, used)
        systems[FLOOR] = {
            "theta": np.zeros(T),
            "se": np.ones(T),
            "acc_hat": np.full(T, float(np.nanmean(resp.matrix))),
            "used": np.zeros((T, N), bool),
        }
        per_seed.append({n: metrics(o, ref, None, acc) for n, o in systems.items()})
        errs.append({n: np.abs(o["theta"] - ref) for n, o in systems.items()})
        fits.append(
            {
                "held": held,
                "items": bank.n_items,
                "converged": bank.fit["converged"],
                "calibration": len(names),
                "test": int(T),
            }
        )
        if scatter is None:
            scatter = (ref, systems[HEADLINE]["theta"], systems[RANDOM_K]["theta"], acc, held)
    ci = {
        n: clustered_bootstrap([e[n] for e in errs], statistic="mean", seed=ctx.seed)
        for n in errs[0]
    }
    ratio = clustered_bootstrap(
        [e[HEADLINE] for e in errs], [e[RANDOM_K] for e in errs], statistic="ratio", seed=ctx.seed
    )
    greedy = {
        c.key: float(
            np.mean([np.argmax(lp) in it.gold for lp, it in zip(tables[c.key], items, strict=True)])
        )
        for c in cfgs
    }
    rows = _rows(per_seed, ci, cs)
    notes = _notes(cs, items, models, cfgs, exs, fits, lm_s, greedy, drops, ratio)
    return {
        "rows": rows,
        "notes": notes,
        "errs": errs,
        "ratio": ratio,
        "ci": ci,
        "figure": _figure(ctx, scatter),
    }


def _tiny_items(n: int):
    """Tiny: generated arithmetic items (no data package needed; the models are random anyway)."""
    from icml26.core.mcq import MCQItem

    rng = np.random.default_rng(0)
    items = []
    for i in range(n):
        x, y = (int(v) for v in rng.integers(1, 20, 2))
        wrong = [x + y + int(d) for d in rng.choice([-3, -2, -1, 1, 2, 3], 3, replace=False)]
        choices = [x + y, *wrong]
        order = rng.permutation(4)
        items.append(
            MCQItem(
                id=f"tiny:{i}",
                task="tiny",
                question=f"What is {x} + {y}?",
                choices=tuple(str(choices[j]) for j in order),
                answer=int(np.flatnonzero(order == 0)[0]),
            )
        )
    return items


def _rows(per_seed, ci, cs) -> list[dict]:
    part = "(c) held-out model family (tiny Llamas)" if cs["tiny"] else "(c) held-out zoo family"
    rows = []
    for n in per_seed[0]:
        row = {"part": part, "system": n}
        for key in ("items", "theta_mae", "acc_mae", "max_exposure", "rank_shift"):
            v = np.array([p[n][key] for p in per_seed])
            row[key] = round(float(v.mean()), 4)
            if key == "theta_mae":
                row["theta_mae_min_max"] = [round(float(v.min()), 4), round(float(v.max()), 4)]
        row["theta_mae_ci95"] = [round(ci[n].low, 4), round(ci[n].high, 4)]
        rows.append(row)
    return rows


def _notes(cs, items, models, cfgs, exs, fits, lm_s, greedy, drops, ratio) -> list[str]:
    fams = {}
    for m, f in models.items():
        fams.setdefault(f, []).append(m)
    cut_txt = sorted({f"{k.split('|')[0]}: {d}/{n}" for k, (d, n) in drops.items()})
    per = ", ".join(
        f"{f['held']} ({f['test']} test / {f['calibration']} calibration examinees, "
        f"{f['items']} items, converged {f['converged']})"
        for f in fits
    )
    notes = [
        f"(c) the headline. {len(items)} items "
        + ("(generated sums; tiny)" if cs["tiny"] else f"from {', '.join(TASKS)} (seeded pool)")
        + f"; examinees: {len(models)} models in {len(fams)} families "
        + "; ".join(f"{f}: {', '.join(ms)}" for f, ms in sorted(fams.items()))
        + f" x formats {', '.join(FORMATS)} x dtypes {', '.join(sorted({c.dtype for c in cfgs}))}"
        + f" x layers dropped ({'; '.join(cut_txt)}) = {len(cfgs)} log-prob tables "
        + f"({lm_s:.0f} s computed this run, the rest from the memo of earlier runs), "
        + f"x temperatures {list(cs['temps'])} x {cs['sample_seeds']} sampling seeds (T=0 once) "
        + f"= {len(exs)} examinees.",
        f"(c) per seed one whole family is held out and a 2PL bank is fitted on a cluster "
        f"bootstrap of the other families' configurations: {per}. Headline: theta MAE "
        f"{HEADLINE} / {RANDOM_K} against each held-out examinee's full-bank WLE = "
        f"{ratio.value:.3f} [{ratio.low:.3f}, {ratio.high:.3f}] (clustered bootstrap: seeds, each "
        "with its own bank, then examinees).",
        "(c) greedy (T=0) accuracy per configuration: "
        + ", ".join(f"{k} {v:.3f}" for k, v in greedy.items())
        + ".",
    ]
    if cs["tiny"]:
        notes.append(
            "(c) tiny: the examinees are randomly initialised Llamas answering near chance; the "
            "numbers test the plumbing, not ATLAS."
        )
    return notes


def _figure(ctx: RunContext, scatter) -> str:
    from icml26.core.plots import pyplot, save_figure

    ref, atlas, rnd, acc, held = scatter
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    lo = min(ref.min(), atlas.min(), rnd.min()) - 0.2
    hi = max(ref.max(), atlas.max(), rnd.max()) + 0.2
    axes[0].plot([lo, hi], [lo, hi], color="gray", lw=0.8)
    axes[0].scatter(ref, rnd, s=14, alpha=0.6, label="random-k (same k)")
    axes[0].scatter(ref, atlas, s=14, alpha=0.8, label="ATLAS SE 0.3")
    axes[0].set(
        xlabel="full-bank WLE theta",
        ylabel="estimated theta",
        title=f"(c) held-out family {held}, seed 0",
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
