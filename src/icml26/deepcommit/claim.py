"""Claim ``deepcommit``: milestones are recoverable from noisy history (DeepCommit-lite).

Generated repositories (:mod:`icml26.deepcommit.synth`) with known commit -> milestone truth.
Every system is tuned on the tuning seeds only (0-4; tiny: 0) by mean ARI and evaluated on the test
seeds (100-109; tiny: 100): DeepCommit-lite (grid over which of the five signals are on, the time
scale and the cut), and the baselines one-milestone-per-commit, windows of the true mean size
(given the truth), time gaps (tuned gap), files-only and messages-only (tuned cuts).
Headline: mean test ARI (non-noise commits) of DeepCommit-lite / that of the best baseline
*outside* its search space (one milestone per commit, windows of the true mean size, time gaps),
95% bootstrap CI over repositories (the best baseline re-chosen in every resample). Target > 1.
Files-only and messages-only are single-signal configurations that DeepCommit-lite's own grid
contains, so they are ablation rows, not the comparison: tuning could always pick one of them
and tie it by construction.

Power checks: the control is the same clustering on an oracle signal (true milestone
co-membership, blended with time, cut tuned on the tuning seeds) against the time-gaps baseline;
the floor is the better of one milestone per commit and one milestone for all (ARI 0); the
degeneracy check counts the test repositories where DeepCommit-lite's partition differs from the
nearest in-space ablation's (zero when tuning chose an ablation's configuration).

Harness check (extra rows, not the headline): scripted agents with per-milestone success
probability q on the reconstructed DAGs, continuous vs isolated, score by DAG depth. This checks the
harness mechanics; it is not the paper's LLM-agent figure (> 80% isolated -> <= 38% continuous).
"""

from __future__ import annotations

import itertools
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from icml26.core import power
from icml26.core.checkpoint import Memo
from icml26.core.claims import Measure, Result, RunContext
from icml26.core.io import atomic_write_text
from icml26.core.stats import clustered_bootstrap
from icml26.deepcommit.agent import LLMAgent, milestone_srs
from icml26.deepcommit.dag import build_dag
from icml26.deepcommit.evaluate import adjusted_rand, edge_scores, match_milestones
from icml26.deepcommit.harness import ScriptedAgent, TrialSpec, depths, run_trial
from icml26.deepcommit.history import load_history
from icml26.deepcommit.milestones import SIGNALS, GroupConfig, group_from_signals, signal_matrices
from icml26.deepcommit.synth import make_repo
from icml26.deepcommit.verify import verify

TARGET = 1.0
AGENT_TARGET = 1.0  # continuous / isolated below 1: evolution loses what isolation shows
AGENT_MODEL = "qwen2.5-coder-0.5b-instruct"
AGENT_TEMPERATURE = 0.2
THRESHOLDS = tuple(np.round(np.linspace(0.3, 0.95, 14), 3))
TIME_SCALES = (3.0, 12.0, 48.0)
GAPS_H = (0.5, 1, 2, 3, 4, 6, 8, 12, 24, 48)


#: ``--opt generator=hard``: single signals defeated (issue 38) -- half of the growth commits put
#: their function in a shared module (``spread``), registry lines and cross-module appends twice
#: as often, two of four authors write topic-free messages, three interleaved refactors
GENERATORS = {
    "standard": {},
    "hard": {"shared": 0.6, "mixed": 0.3, "topic_free": 2, "refactors": 3, "spread": 0.5},
}


def _prepare(root: Path, seed: int, n_commits: int, embed_fn=None, generator: str = "standard"):
    truth = make_repo(
        root / f"repo{seed}",
        seed,
        n_features=min(8, 3 + n_commits // 20 + seed % 3),
        n_commits=n_commits,
        **GENERATORS[generator],
    )
    hist = load_history(truth.path)
    idx = np.array([i for i, c in enumerate(hist.commits) if truth.label.get(c.sha, -1) >= 0])
    y = np.array([truth.label[hist.commits[i].sha] for i in idx])
    return {
        "truth": truth,
        "hist": hist,
        "idx": idx,
        "y": y,
        "times": np.array([c.time for c in hist.commits], dtype=np.float64),
        "signals": signal_matrices(hist.commits, embed_fn),
    }


def _ari(r: dict, labels: np.ndarray) -> float:
    return adjusted_rand(r["y"], labels[r["idx"]])


def _oracle_signals(r: dict) -> dict:
    """The signals with the file matrix replaced by true milestone co-membership (noise commits
    similar only to themselves): the positive control's input."""
    lab = np.full(len(r["times"]), -1)
    lab[r["idx"]] = r["y"]
    same = (lab[:, None] == lab[None, :]) & (lab[:, None] >= 0)
    return {**r["signals"], "file": np.maximum(same, np.eye(len(lab))).astype(np.float64)}


def _oracle(thr: float):
    cfg = GroupConfig(file=1.0, symbol=0.0, message=0.0, time=1.0, author=0.0, threshold=thr)
    fn = lambda r: group_from_signals(_oracle_signals(r), cfg, r["times"])  # noqa: E731
    fn.cfg = cfg
    return fn


def _differing(test: list[dict], a, b) -> int:
    """How many repositories ``a`` and ``b`` partition differently (all kept commits)."""
    return sum(adjusted_rand(a(r), b(r)) < 1.0 - 1e-9 for r in test)


#: baselines whose configuration DeepCommit-lite's own grid contains: ablations, not the comparison
ABLATIONS = ("files only (tuned)", "messages only (tuned)")
ORACLE = "oracle milestone signal + time (positive control)"
ALL_IN_ONE = "one milestone for all"


def _windows(r: dict) -> np.ndarray:
    size = max(1, int(round(r["truth"].mean_size)))
    return np.arange(len(r["times"])) // size


def _gaps(r: dict, gap_h: float) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.diff(r["times"]) > gap_h * 3600)])


def _configs(signal_sets):
    for on, tau, thr in itertools.product(signal_sets, TIME_SCALES, THRESHOLDS):
        if "time" not in on and tau != TIME_SCALES[0]:
            continue
        w = {s: float(s in on) for s in SIGNALS}
        yield GroupConfig(**w, time_scale_h=tau, threshold=float(thr))


def _tune(repos: list[dict], candidates) -> tuple[object, float]:
    best, best_score = None, -np.inf
    for cand in candidates:
        score = np.mean([_ari(r, cand(r)) for r in repos])
        if score > best_score:
            best, best_score = cand, score
    return best, float(best_score)


def _cluster(cfg):
    fn = lambda r: group_from_signals(r["signals"], cfg, r["times"])  # noqa: E731
    fn.cfg = cfg
    return fn


def _describe(fn) -> str:
    cfg = getattr(fn, "cfg", None)
    if cfg is None:
        return "?"
    on = [s for s in SIGNALS if getattr(cfg, s) > 0]
    return f"signals {'+'.join(on)}, time scale {cfg.time_scale_h} h, cut {cfg.threshold}"


def run(ctx: RunContext) -> Result:
    tune_seeds = ctx.pick(tiny=[0], small=[0, 1, 2, 3, 4], full=[0, 1, 2, 3, 4])
    test_seeds = ctx.pick(tiny=[100], small=list(range(100, 110)), full=list(range(100, 110)))
    n_commits = int(ctx.options.get("n_commits", ctx.pick(tiny=12, small=60, full=60)))
    # the recovery row's histories defeat single signals (issue 38); the agents implement the
    # DAGs of histories whose features own their modules, so that milestones are clean tasks
    generator = str(ctx.options.get("generator", "hard"))
    agent_generator = str(ctx.options.get("agent_generator", "standard"))
    with tempfile.TemporaryDirectory(prefix="deepcommit-") as tmp:
        seeds = tune_seeds + test_seeds
        data = {
            s: _prepare(Path(tmp), s, n_commits, generator=generator)
            for s in ctx.progress.track(seeds, len(seeds), "generate + embed repositories")
        }
        tune = [data[s] for s in tune_seeds]
        test = [data[s] for s in test_seeds]
        all_sets = [set(c) for k in range(1, 6) for c in itertools.combinations(SIGNALS, k)]
        systems = {}
        cands = [_cluster(c) for c in _configs(all_sets)]
        lite, _ = _tune(tune, ctx.progress.track(cands, len(cands), "tune DeepCommit-lite"))
        systems["DeepCommit-lite"] = lite
        systems["one milestone per commit"] = lambda r: np.arange(len(r["times"]))
        systems["windows of true mean size"] = _windows
        systems["time gaps (tuned)"], _ = _tune(tune, [lambda r, g=g: _gaps(r, g) for g in GAPS_H])
        systems["files only (tuned)"], _ = _tune(tune, [_cluster(c) for c in _configs([{"file"}])])
        systems["messages only (tuned)"], _ = _tune(
            tune, [_cluster(c) for c in _configs([{"message"}])]
        )
        systems[ALL_IN_ONE] = lambda r: np.zeros(len(r["times"]), dtype=int)
        systems[ORACLE], _ = _tune(tune, [_oracle(float(t)) for t in THRESHOLDS])
        # degeneracy: does DeepCommit-lite partition differently from the nearest ablation?
        differ = {a: _differing(test, lite, systems[a]) for a in ABLATIONS}
        nearest = min(ABLATIONS, key=lambda a: differ[a])
        ari = {name: np.array([_ari(r, f(r)) for r in test]) for name, f in systems.items()}
        # DAG + preprocessing quality of DeepCommit-lite on the test repositories
        drop_p, drop_r, edge_rows = [], [], []
        for r in test:
            truth, hist = r["truth"], r["hist"]
            found = {d.sha for d in hist.dropped}
            drop_p.append(len(found & truth.dropped.keys()) / max(len(found), 1))
            drop_r.append(len(found & truth.dropped.keys()) / max(len(truth.dropped), 1))
            labels = lite(r)
            dag = build_dag(hist, labels)
            mapping = match_milestones(r["y"], labels[r["idx"]])
            graded = set(labels[r["idx"]].tolist())  # groups holding a true-milestone commit
            found = {e: s for e, s in dag.edges.items() if set(e) <= graded}
            edge_rows.append(edge_scores(truth.edges, found, mapping))
        fig = _figure(ctx.out_dir, ari, test[0], lite(test[0]))
        n_dags = int(ctx.options.get("n_dags", ctx.pick(tiny=1, small=10, full=10)))
        qs = ctx.pick(tiny=[0.8], small=[0.6, 0.8, 0.95], full=[0.6, 0.8, 0.95])
        runs = ctx.pick(tiny=1, small=2, full=3)
        agent_test, agent_lite = test, lite
        if agent_generator != generator:  # the agents' repositories, with their own tuning
            a_seeds = tune_seeds + test_seeds[:n_dags]
            a_data = {
                s: _prepare(Path(tmp) / "agent", s, n_commits, generator=agent_generator)
                for s in ctx.progress.track(a_seeds, len(a_seeds), "generate agent repositories")
            }
            agent_lite, _ = _tune([a_data[s] for s in tune_seeds], ctx.progress.track(
                cands, len(cands), "tune DeepCommit-lite (agent repositories)"))
            agent_test = [a_data[s] for s in test_seeds[:n_dags]]
        specs = _specs(agent_test[:n_dags], agent_lite, runs, ctx)
        harness = _harness(specs, qs, ctx)
        graded = {r["truth"].path.name: spec.graded for r, spec in specs}
        dags = list(graded)
        if str(ctx.options.get("agent", "llm")) == "llm":
            trials, agent_info = _agent_trials(specs, ctx, n_commits, agent_generator)
        else:
            trials, agent_info = [], None
        figs = [fig, _depth_figure(ctx.out_dir, harness)]
    not_compared = {"DeepCommit-lite", ORACLE, ALL_IN_ONE, *ABLATIONS}
    base_names = [n for n in ari if n not in not_compared]
    lite_ari = ari["DeepCommit-lite"]
    best = max(base_names, key=lambda n: ari[n].mean())
    rng = np.random.default_rng(ctx.seed)
    boot_ix = [rng.integers(0, len(test), len(test)) for _ in range(2000)]

    def ratio(ix, names=base_names):
        return lite_ari[ix].mean() / max(max(ari[n][ix].mean() for n in names), 1e-9)

    def ci(stat):
        b = [stat(ix) for ix in boot_ix]
        return (float(np.percentile(b, 2.5)), float(np.percentile(b, 97.5)))

    value = ratio(np.arange(len(test)))
    spread = ci(ratio)
    ablation_ratio = ratio(np.arange(len(test)), list(ABLATIONS))
    ablation_ci = ci(lambda ix: ratio(ix, list(ABLATIONS)))
    mean_ci = {n: ci(lambda ix, n=n: float(ari[n][ix].mean())) for n in ari}
    role = {n: "compared baseline" for n in base_names}
    role.update({a: "ablation (inside DeepCommit-lite's search space)" for a in ABLATIONS})
    role.update(
        {
            "DeepCommit-lite": "method",
            ORACLE: "positive control (oracle)",
            ALL_IN_ONE: "floor",
            "one milestone per commit": "compared baseline, floor",
        }
    )
    rows = [
        {
            "system": n,
            "role": role[n],
            "mean ARI": round(float(v.mean()), 3),
            "min": round(float(v.min()), 3),
            "max": round(float(v.max()), 3),
        }
        for n, v in ari.items()
    ]
    rows.append(
        {
            "system": "DeepCommit-lite / best in-space ablation (not the headline)",
            "value": f"{ablation_ratio:.3f}x [{ablation_ci[0]:.3f}, {ablation_ci[1]:.3f}]; "
            f"partitions differ from "
            f"{nearest} on {differ[nearest]}/{len(test)} test repositories",
        }
    )
    floor_name = max(("one milestone per commit", ALL_IN_ONE), key=lambda n: ari[n].mean())
    checks = [
        power.control(
            ORACLE,
            float(ari[ORACLE].mean()),
            "time gaps (tuned)",
            float(ari["time gaps (tuned)"].mean()),
            spread=mean_ci[ORACLE],
            null_spread=mean_ci["time gaps (tuned)"],
            metric="mean test ARI",
        ),
        power.floor(
            {n: float(ari[n].mean()) for n in ["DeepCommit-lite", *base_names] if n != floor_name},
            floor_name,
            float(ari[floor_name].mean()),
            floor_spread=mean_ci[floor_name],
            metric="mean test ARI",
        ),
        power.degeneracy(
            ("DeepCommit-lite", nearest),
            differ[nearest],
            len(test),
            what="test repositories' partitions",
        ),
    ]
    for q in qs:
        h = [x for x in harness if x["q"] == q]
        for mode in ("isolated", "continuous"):
            rows.append(
                {
                    "system": f"scripted agent q={q}, {mode}",
                    "role": "harness check (known per-milestone skill q)",
                    "score": round(float(np.mean([x[mode]["score"] for x in h])), 2),
                    "resolve rate %": round(
                        float(np.mean([x[mode]["resolve_rate"] for x in h])), 2
                    ),
                    "trials": len(h),
                }
            )
    mean = lambda key: round(float(np.nanmean([e[key] for e in edge_rows])), 3)  # noqa: E731
    rows += [
        {
            "system": "preprocessing: noise-drop precision / recall",
            "value": f"{np.mean(drop_p):.3f} / {np.mean(drop_r):.3f}",
        },
        {
            "system": "DeepCommit-lite DAG: edge P / R / F1 (Hungarian-matched)",
            "value": f"{mean('precision')} / {mean('recall')} / {mean('f1')}",
        },
        {
            "system": "DeepCommit-lite DAG: strength accuracy on true-positive edges",
            "value": f"{mean('strength_acc')}",
        },
    ]
    notes = [
        f"{len(test)} test repositories (seeds {test_seeds[0]}..{test_seeds[-1]}), ~{n_commits} "
        f"commits each, generator {generator} {GENERATORS[generator] or ''}; tuned on seeds {tune_seeds}. Best baseline outside DeepCommit-lite's "
        f"search space: {best}. Files-only and messages-only are configurations of "
        "DeepCommit-lite's own grid (ablations); a tie with them is by construction, so they are "
        "not the comparison.",
        "Edges touching groups made only of noise commits (typos, the refactor) have no truth "
        "and are left out of the edge scores.",
        f"Tuned DeepCommit-lite: {_describe(lite)}; nearest ablation {nearest} "
        f"({_describe(systems[nearest])}), partitions differ on {differ[nearest]}/{len(test)} "
        "test repositories.",
        "The 'windows' baseline is given the true mean milestone size (an oracle advantage).",
        "Spread: 95% bootstrap over test repositories; the best baseline is re-chosen per resample.",
        f"Harness check (not the paper's LLM-agent figure): on DeepCommit-lite's DAGs of the first "
        f"{n_dags} test repositories of the {agent_generator} generator"
        + (f" (DeepCommit-lite tuned on that generator's seeds: {_describe(agent_lite)})"
           if agent_generator != generator else "")
        + f", verified with {runs} test run(s) per state, a scripted agent "
        "applies the gold patch with probability q, else a regression-injected or half patch; "
        "the same draws in both modes. Continuous locks milestones whose predecessors are not "
        "resolved and keeps the agent's tree; isolated restarts each milestone from gold.",
        "The synthetic history is ours; ARI on it says the pipeline works, not how it does on "
        "real repositories. No LLM pass is run.",
    ]
    recovery = Measure(
        "ARI DeepCommit-lite / best baseline outside its search space", float(value), "x", spread
    )
    if agent_info is None:  # --opt agent=none: milestone recovery is the headline
        notes.append("No LLM agent run (agent=none): milestone recovery is the headline.")
        return Result(
            rows=rows, headline=recovery, target=TARGET, notes=notes, figures=figs, power=checks
        )
    # milestone recovery becomes a row (with its own power checks as text)
    rows.append(
        {
            "system": "milestone recovery: " + recovery.name,
            "value": f"{value:.3f}x [{spread[0]:.3f}, {spread[1]:.3f}] (target > 1); "
            + "; ".join(f"{c.kind} {'passes' if c.passed else 'fails'}" for c in checks),
        }
    )
    headline, agent_checks, agent_rows, agent_notes, unin = _agent_result(
        trials, agent_info, harness, qs, dags, graded, ctx.seed
    )
    rows += agent_rows
    notes += agent_notes
    figs.append(_agent_figure(ctx.out_dir, trials, harness, qs))
    return Result(
        rows=rows,
        headline=headline,
        target=AGENT_TARGET,
        notes=notes,
        figures=figs,
        power=agent_checks,
        uninformative=unin,
    )


def _specs(repos: list[dict], lite, runs: int, ctx: RunContext) -> list[tuple[dict, TrialSpec]]:
    """DeepCommit-lite's verified DAG of each repository as a TrialSpec with behaviour SRSes."""
    out = []
    for r in ctx.progress.track(repos, len(repos), "verify DAGs"):
        labels = lite(r)
        dag = build_dag(r["hist"], labels)
        v = verify(r["hist"], labels, dag, runs=runs)
        commits = r["hist"].commits
        srs = {}
        for m in v.order:
            if m not in v.start:
                continue
            subjects = [c.subject for c, lab in zip(commits, labels, strict=True) if lab == m]
            title = f"M{m:03d}: {subjects[0] if subjects else 'milestone'}"
            srs[m] = milestone_srs(r["truth"].path, v.start[m], v.end[m], title, subjects)
        out.append((r, TrialSpec.from_verified(r["truth"].path, v, dag, srs=srs)))
    return out


def _harness(specs, qs, ctx: RunContext) -> list[dict]:
    out = []
    for r, spec in ctx.progress.track(specs, len(specs), "scripted-agent trials"):
        depth = depths(spec.graded, spec.edges)
        for q in qs:
            agent = ScriptedAgent(spec, q, seed=ctx.seed * 1000 + int(r["truth"].path.name[4:]))
            res = {mode: run_trial(spec, agent, mode) for mode in ("isolated", "continuous")}
            out.append({"q": q, "depth": depth, "repo": r["truth"].path.name, **res})
    return out


def _trial_json(res: dict) -> dict:
    return {
        "score": res["score"],
        "resolve_rate": res["resolve_rate"],
        "per_milestone": {
            str(m): {"score": s.score, "resolved": bool(s.resolved)}
            for m, s in res["per_milestone"].items()
        },
        "log": res["log"][-20:],
    }


class _OutOfBudget(Exception):
    pass


def _agent_trials(specs, ctx: RunContext, n_commits: int, generator: str = "standard"):
    """The LLM agent (and the null agent) through every DAG, isolated and continuous, per seed.

    The trials run concurrently (``agent_parallel`` threads, each in its own copy of the
    repository) and share one model through :class:`icml26.core.chat.BatchingChat`, so their
    calls are generated in batches. Resumable: one memo unit per finished trial; a trial still
    running after ``agent_budget_min`` minutes is dropped (it starts again on the next run)."""
    import shutil
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from icml26.core.chat import BatchingChat, get_chat

    opts = ctx.options
    model = opts.get("agent_model") or ctx.pick(tiny="smollm2", small=AGENT_MODEL, full=AGENT_MODEL)
    seeds = opts.get("agent_seeds") or ctx.pick(tiny=[0], small=[0, 1], full=[0, 1, 2])
    seeds = [int(x) for x in (seeds.split(",") if isinstance(seeds, str) else seeds)]
    temp = float(opts.get("agent_temperature", AGENT_TEMPERATURE))
    tokens = int(opts.get("agent_tokens") or ctx.pick(tiny=32, small=512, full=768))
    rounds = int(opts.get("agent_rounds") or ctx.pick(tiny=1, small=2, full=3))
    cfg = {
        "model": str(model),
        "temperature": temp,
        "tokens": tokens,
        "n_commits": n_commits,
        "scale": ctx.scale,
        # no DAG list: units are keyed by DAG, so a run with more DAGs reuses the finished ones
        **({"generator": generator} if generator != "standard" else {}),
        "seed": ctx.seed,
        "dtype": str(opts.get("dtype")),
        "rounds": rounds,
    }
    memo = Memo(ctx.out_dir / "agent_memo.json", config=cfg)
    budget = opts.get("agent_budget_min")
    deadline = time.monotonic() + 60 * float(budget) if budget is not None else float("inf")
    info = {
        "model": str(model),
        "seeds": seeds,
        "temperature": temp,
        "tokens": tokens,
        "rounds": rounds,
        "resumed": memo.resumed,
        "skipped": 0,
        "calls": 0,
        "batches": [],
    }
    units = [
        (r, spec, s, mode)
        for r, spec in specs
        for s in seeds
        for mode in ("isolated", "continuous")
    ]
    key = lambda u: f"{u[0]['truth'].path.name}/seed{u[2]}/{u[3]}"  # noqa: E731
    todo = [u for u in units if key(u) not in memo]
    lock = threading.Lock()
    if todo:
        local = not str(model).startswith(("http://", "https://"))
        inner = get_chat(
            f"local:{model}" if local else str(model), dtype=opts.get("dtype"), device=ctx.device
        )
        parallel = int(opts.get("agent_parallel") or len(todo))
        with BatchingChat(inner, max_batch=parallel, window_s=0.5) as chat:
            advance = ctx.progress.task(f"LLM agent trials ({model})", total=len(todo))

            def one(i_u):
                i, u = i_u
                r, spec, s, mode = u
                # the trial's own copy of the repository (its refs and worktrees), kept until the
                # trial finishes: run_trial's state (finished milestones, the agent's tree as a
                # ref) lets a stopped trial go on from its last finished milestone
                home = ctx.out_dir / "agent_trials" / key(u).replace("/", "_")
                repo = home / "repo"
                if not (repo / ".git").exists():
                    shutil.rmtree(home, ignore_errors=True)
                    shutil.copytree(spec.repo, repo, symlinks=True)
                llm = LLMAgent(
                    chat,
                    max_new_tokens=tokens,
                    temperature=temp,
                    seed=s,
                    log_dir=ctx.out_dir / "agent" / key(u),
                )

                def agent(w, t):
                    if time.monotonic() > deadline:
                        raise _OutOfBudget
                    return llm(w, t)

                try:
                    res = run_trial(
                        replace(spec, repo=repo),
                        agent,
                        mode,
                        max_idle_rounds=rounds,
                        state_path=home / "state.json",
                        state_key=cfg,
                    )
                except _OutOfBudget:
                    with lock:
                        info["skipped"] += 1
                    return
                finally:  # calls add up over the runs a trial spans
                    n = home / "calls.txt"
                    calls = llm.calls + (int(n.read_text()) if n.exists() else 0)
                    atomic_write_text(n, str(calls))
                with lock:
                    memo.put(key(u), {**_trial_json(res), "calls": calls})
                    advance(1)
                shutil.rmtree(home, ignore_errors=True)

            with ThreadPoolExecutor(max(1, min(parallel, len(todo)))) as pool:
                list(pool.map(one, enumerate(todo)))
            info["batches"] = list(chat.batches)
    out = []
    for u in units:
        if key(u) in memo:
            res = memo.get(key(u))
            info["calls"] += res["calls"]
            out.append({"repo": u[0]["truth"].path.name, "seed": u[2], "mode": u[3], **res})
    for r, spec in specs:  # the null agent: submits the tree it was handed
        k = f"{r['truth'].path.name}/null/isolated"
        if k not in memo:
            memo.put(k, {**_trial_json(run_trial(spec, lambda w, t: True, "isolated")), "calls": 0})
        out.append({"repo": r["truth"].path.name, "seed": -1, "mode": "null", **memo.get(k)})
    return out, info


def _paired(trials: list[dict], dags: list[str], graded: dict, a: str, b: str, key: str = "score"):
    """Per-DAG paired per-(seed, milestone) values (``key``: ``score`` or ``resolved``) of modes
    ``a`` and ``b``, on the seeds where both finished, and the DAGs kept."""
    xa, xb, kept = [], [], []
    for d in dags:
        ta = {t["seed"]: t for t in trials if t["repo"] == d and t["mode"] == a}
        tb = {t["seed"]: t for t in trials if t["repo"] == d and t["mode"] == b}
        seeds = sorted(set(ta) & set(tb))
        if not seeds or not graded[d]:
            continue
        xa.append([ta[s]["per_milestone"][str(m)][key] for s in seeds for m in graded[d]])
        xb.append([tb[s]["per_milestone"][str(m)][key] for s in seeds for m in graded[d]])
        kept.append(d)
    return xa, xb, kept


def _agent_result(trials, info, harness, qs, dags, graded, seed):
    """Headline, power checks, rows and notes of the LLM-agent part (continuous / isolated)."""
    model = info["model"]
    con, iso, kept = _paired(trials, dags, graded, "continuous", "isolated")
    rows, notes = [], []
    unin = None
    if not kept:
        unin = "no DAG has finished LLM-agent trials in both modes"
    elif not any(x > 0 for c in iso for x in c):
        unin = f"the {model} agent scores 0 on every isolated milestone: the ratio is undefined"
    if unin is None:
        ci = clustered_bootstrap(con, iso, statistic="ratio", seed=seed)
        value, spread = float(ci.value), (float(ci.low), float(ci.high))
    else:
        value, spread = float("nan"), None
    mean = lambda xs: float(np.mean([x for c in xs for x in c])) if xs else float("nan")  # noqa
    headline = Measure(
        f"score continuous / isolated, {model} agent (score_reliable, mean F1)",
        value,
        "x",
        spread,
        higher_is_better=False,
    )
    for mode in ("isolated", "continuous"):
        t = [x for x in trials if x["mode"] == mode and x["repo"] in kept]
        rows.append(
            {
                "system": f"LLM agent {model}, {mode}",
                "role": "method" if mode == "continuous" else "reference (isolated)",
                "score": round(float(np.mean([x["score"] for x in t])), 2) if t else None,
                "resolve rate %": round(float(np.mean([x["resolve_rate"] for x in t])), 2)
                if t
                else None,
                "trials": len(t),
            }
        )
    null = [x for x in trials if x["mode"] == "null" and x["repo"] in kept]
    null_items = [[x["per_milestone"][str(m)]["score"] for m in graded[x["repo"]]] for x in null]
    rows.append(
        {
            "system": "null agent, isolated",
            "role": "floor (submits the tree it was handed)",
            "score": round(100 * mean(null_items), 2) if null else None,
            "resolve rate %": round(float(np.mean([x["resolve_rate"] for x in null])), 2)
            if null
            else None,
            "trials": len(null),
        }
    )
    checks = []
    if not kept:
        reason = "no DAG has finished trials in both modes"
        checks = [power.not_measured(k, reason) for k in ("control", "floor", "degeneracy")]
    else:
        q = min(qs)
        h = [x for x in harness if x["q"] == q and x["repo"] in kept]
        sc = [[100 * s.score for s in x["continuous"]["per_milestone"].values()] for x in h]
        si = [[100 * s.score for s in x["isolated"]["per_milestone"].values()] for x in h]
        qci = clustered_bootstrap(sc, si, statistic="ratio", seed=seed)
        checks.append(
            power.control(
                f"scripted agent q={q}, continuous",
                mean(sc),
                f"scripted agent q={q}, isolated",
                mean(si),
                paired=(float(qci.low), float(qci.high)),
                paired_null=1.0,
                higher_is_better=False,
                metric="score ratio continuous / isolated (known per-milestone skill q: the harness "
                "can show a drop)",
            )
        )
        iso_llm = mean(iso)
        checks.append(
            power.floor(
                {f"LLM agent {model}, isolated": iso_llm},
                "null agent, isolated",
                mean(null_items),
                metric="mean milestone score (isolated)",
            )
        )
        rc, ri, _ = _paired(trials, dags, graded, "continuous", "isolated", key="resolved")
        differ = sum(x != y for c, i in zip(rc, ri, strict=True) for x, y in zip(c, i, strict=True))
        total = sum(len(c) for c in rc)
        checks.append(
            power.degeneracy(
                (f"LLM agent {model}, continuous", f"LLM agent {model}, isolated"),
                differ,
                total,
                what="graded milestones' resolved status",
            )
        )
    notes += [
        f"Headline (the paper's quantity, issue 38): an LLM command agent ({model}, "
        f"temperature {info['temperature']}, <= {info['tokens']} new tokens per milestone, seeds "
        f"{info['seeds']}) implements each milestone of DeepCommit-lite's verified DAGs ({len(kept)} "
        f"of {len(dags)} DAGs finished) from a behaviour SRS written from the milestone's gold "
        "source diff (deepcommit.agent.milestone_srs; hidden tests never shown), in one turn: "
        "files or definitions per '### path' block, merged by name (deepcommit.agent.LLMAgent). "
        "Continuous: one workspace, locking; "
        "isolated: every graded milestone from its gold start. Score = score_reliable (mean "
        "per-milestone F1 x 100); ratio of means continuous / isolated over (seed, milestone) "
        "items, 95% bootstrap clustered over DAGs then items. Target < 1 (paper: > 80% isolated "
        "vs <= 38% continuous).",
        f"{info['calls']} LLM calls in all; {info['resumed']} trials resumed from the memo; "
        + (f"batch sizes of this run's generation calls: mean {np.mean(info['batches']):.1f} "
           f"over {len(info['batches'])}" if info["batches"]
           else "no generation call in this run (every trial from the memo)")
        + (f"; {info['skipped']} trials not started (agent_budget_min)" if info["skipped"] else "")
        + ".",
        "Power: control = the scripted agent at the lowest q on the same DAGs (continuous / "
        "isolated must lie below 1: the harness can show the drop); floor = the null agent in "
        "isolated mode (the LLM agent must beat submitting nothing); degeneracy = graded "
        "milestones resolved in one mode and not the other.",
    ]
    return headline, checks, rows, notes, unin


def _agent_figure(out_dir: Path, trials, harness, qs) -> Path:
    from icml26.core.plots import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    names, iso, con = [], [], []
    for q in qs:
        h = [x for x in harness if x["q"] == q]
        names.append(f"scripted q={q}")
        iso.append(np.mean([x["isolated"]["score"] for x in h]))
        con.append(np.mean([x["continuous"]["score"] for x in h]))
    for mode, lst in (("isolated", iso), ("continuous", con)):
        t = [x["score"] for x in trials if x["mode"] == mode]
        lst.append(np.mean(t) if t else np.nan)
    names.append("LLM agent")
    x = np.arange(len(names))
    ax.bar(x - 0.2, iso, 0.4, label="isolated")
    ax.bar(x + 0.2, con, 0.4, label="continuous")
    ax.set_xticks(x, names, fontsize=8)
    ax.set_ylabel("score_reliable x100 (mean over trials)")
    ax.set_title("Continuous vs isolated evolution", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, Path(out_dir) / "deepcommit_agent.png")


def _depth_figure(out_dir: Path, harness: list[dict]) -> Path:
    from icml26.core.plots import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for q in sorted({x["q"] for x in harness}):
        for mode, ls in (("isolated", "--"), ("continuous", "-")):
            by: dict[int, list[float]] = {}
            for x in harness:
                if x["q"] != q:
                    continue
                for m, s in x[mode]["per_milestone"].items():
                    by.setdefault(x["depth"][m], []).append(100 * s.score)
            ds = sorted(by)
            ax.plot(ds, [np.mean(by[d]) for d in ds], ls, marker="o", label=f"{mode}, q={q}")
    ax.set_xlabel("milestone depth in the DAG")
    ax.set_ylabel("score_reliable x100 (mean)")
    ax.set_title("Harness check with scripted agents (not LLM agents)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, Path(out_dir) / "deepcommit_depth.png")


def _figure(out_dir: Path, ari: dict, r: dict, labels: np.ndarray) -> Path:
    from icml26.core.plots import pyplot, save_figure

    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
    names = list(ari)
    a1.boxplot([ari[n] for n in names], orientation="horizontal")
    a1.set_yticks(range(1, len(names) + 1), names, fontsize=8)
    a1.set_xlabel("ARI vs true milestones (test repositories)")
    x = np.arange(len(r["idx"]))
    a2.scatter(x, r["y"], s=30, label="true milestone", marker="s", alpha=0.6)
    a2.scatter(x, labels[r["idx"]] + 0.25, s=12, label="found group (+0.25)")
    a2.set_xlabel("commit (time order, noise removed)")
    a2.set_ylabel("group id")
    a2.set_title("true vs found groups, first test repository", fontsize=9)
    a2.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, Path(out_dir) / "deepcommit_groups.png")
