"""Claim ``skillpro``: a gated, maintained skill pool raises return over no skills (mechanism check).

What runs here (all scales, until a language-model agent run is wired): the agent is
:class:`~icml26.skillpro.agent.ScriptedPolicy`, a stochastic Mastermind player whose move
distribution depends on the injected guidance text and whose log-probs are exact, so the PPO gate
is scored without approximation. The evolver is the rule-based template mutator. This checks the
*mechanism* (selection, credit, semantic edits, gate, maintenance) end to end on the offline
Mastermind-v0; it is NOT the paper's LLM experiment and its numbers say nothing about SmolLM2 or a
9B agent.

Conditions, same seeds and episode budget: no skills; naive memory (all episode summaries, top-3
by MiniLM cosine); Skill-Pro; ``wo_ppo``; ``wo_score``; references random-valid and consistent
solver. Headline: held-out eval return Skill-Pro / no-skill, 95% paired bootstrap CI over
episodes; target > 1.

Options (``--opt key=value``):

* ``embed``: "minilm" (default at small/full) or "none" (naive memory then retrieves the newest 3).
* ``agent``: "scripted" (default; the mechanism check above) or "smollm2" / an HF folder: the LLM
  experiment. The model (bf16) is the agent, skill selector, meta-controller and evolver; a float32
  copy scores the gate (bf16 log-probs move by more than the clip range). All conditions' episodes
  of an iteration run as one KV-cached batch (:func:`~icml26.skillpro.rollout.run_episodes`).
  Conditions: no skills; naive memory; Skill-Pro (gate, LLM evolver); Skill-Pro with the template
  mutator; ``wo_ppo``; ``wo_score``; ``wo_sg``.
* ``iters``, ``episodes``, ``eval``, ``hard``: iterations, episodes per iteration, held-out
  Mastermind-v0 and -hard seeds (defaults per scale; LLM small: 8, 5, 20, 10 as in the issue).
* ``meta``: "1" (default for LLM agents) / "0": the meta-controller checks termination each step.
* ``temperature``: the LLM agent's action temperature (default 0.7).
* ``env``: "mastermind" (default; Mastermind-v0, cross-task -hard) or "guess" (GuessTheNumber-v0,
  1..20 in 10 turns, where bisection is the skill; cross-task GuessTheNumber-v0-hard, 1..100 in 8;
  LLM agents only).
* ``precondition``: episodes of the no-skill agent (own seeds, its own agent) played first against
  the random valid guesser on the same seeds (default 20 for LLM agents, 0 = off for the scripted
  one). When it does not beat the guesser's 95% CI the run stops before any training and is
  ``uninformative`` (the floor check, measured up front).
* ``cross``: another model (zoo name / HF folder): the trained Skill-Pro pool is used, frozen, by
  that model on the held-out seeds, beside it without skills (the cross-agent rows).
"""

from __future__ import annotations

import numpy as np

from icml26.core.claims import Measure, Result, RunContext
from icml26.core.errors import UserError
from icml26.core.plots import pyplot, save_figure
from icml26.core.torchutil import bootstrap_ci
from icml26.skillpro.agent import NaiveMemory, ScriptedPolicy, SkillAgent, SolverPolicy
from icml26.skillpro.env import make_env
from icml26.skillpro.evolve import LLMEvolver, SkillProConfig, TemplateMutator, Trainer
from icml26.skillpro.skill import SkillPool

TARGET = 1.0


class _Recency:
    """Embed stand-in when MiniLM is off: a growing counter, so retrieval returns the newest."""

    def __init__(self):
        self.n = 0

    def __call__(self, texts):
        out = np.arange(self.n + 1, self.n + 1 + len(texts), dtype=np.float32)[:, None]
        self.n += len(texts)
        return out


def _rollout(jobs, batched: bool):
    if batched:
        from icml26.skillpro.rollout import run_episodes

        return run_episodes(jobs)
    return [agent.run_episode(env, seed) for agent, env, seed in jobs]


def _llm_parts(ctx: RunContext, spec: str):
    """(policy, meta, scorer, token counter) for an LLM agent (bf16 agent, fp32 gate scorer)."""
    import torch

    from icml26.core.lm import load_lm
    from icml26.skillpro.ppo import LMScorer
    from icml26.skillpro.rollout import BatchedLocalChat

    path = None if spec in ("smollm2", "local") else spec
    chat = BatchedLocalChat(path)  # dtype: the policy (bf16 only where native)
    scorer = LMScorer(*load_lm(path, dtype=torch.float32), batch_size=8)
    meta = chat if ctx.options.get("meta", "1") == "1" else None
    return chat, meta, scorer, lambda text: len(chat.tokenizer(text)["input_ids"]) if text else 0


def run(ctx: RunContext) -> Result:
    spec = ctx.options.get("agent", "scripted")
    llm = spec != "scripted"
    iters, eps_n, n_eval, n_hard = ctx.pick(
        tiny=(2, 2, 6, 2),
        small=(8, 5, 20, 10) if llm else (40, 5, 60, 20),
        full=(50, 5, 100, 50),
    )
    o = ctx.options
    iters, eps_n = int(o.get("iters", iters)), int(o.get("episodes", eps_n))
    n_eval, n_hard = int(o.get("eval", n_eval)), int(o.get("hard", n_hard))
    seed = ctx.seed
    game = o.get("env", "mastermind")
    if game not in GAMES:
        raise UserError(f"--opt env must be one of {', '.join(GAMES)}; got {game!r}")
    if game == "guess" and not llm:
        raise UserError("--opt env=guess needs a language-model agent (--opt agent=MODEL): the "
                        "scripted policy plays Mastermind only")
    n_pre = int(o.get("precondition", 20 if llm else 0))
    cross = o.get("cross")
    if cross and not llm:
        raise UserError("--opt cross=MODEL needs a language-model agent (--opt agent=MODEL)")
    embed_fn = _Recency()
    if o.get("embed", "minilm") == "minilm" and ctx.scale != "tiny":
        from icml26.core.embed import embed as embed_fn  # noqa: F811
    env_name, hard_name = GAMES[game]
    env = make_env(env_name)
    train_seeds = [
        [10_000 + seed * 1000 + i * eps_n + k for k in range(eps_n)] for i in range(iters)
    ]
    eval_seeds = [900_000 + seed * 1000 + k for k in range(n_eval)]
    hard_seeds = [950_000 + seed * 1000 + k for k in range(n_hard)]
    if llm:
        policy, meta, scorer, count_tokens = _llm_parts(ctx, spec)
        temperature = float(o.get("temperature", 0.7))
        systems = [
            "no skills", "naive memory", "Skill-Pro (gate)", "Skill-Pro (template mutator)",
            "wo_ppo", "wo_score", "wo_sg",
        ]
    else:
        policy = scorer = ScriptedPolicy()
        meta, count_tokens, temperature = None, None, 0.7
        systems = ["no skills", "naive memory", "Skill-Pro (gate)", "wo_ppo", "wo_score"]
    agents, trainers, mems = {}, {}, {}
    for name in systems:
        if name in ("no skills", "naive memory"):
            mems[name] = NaiveMemory(embed_fn) if name == "naive memory" else None
            agents[name] = SkillAgent(
                policy, None, memory=mems[name], seed=seed, temperature=temperature
            )
            trainers[name] = None
            continue
        abl = {"wo_ppo": "wo_ppo", "wo_score": "wo_score", "wo_sg": "wo_sg"}.get(name)
        cfg = SkillProConfig(iterations=iters, episodes_per_iter=eps_n, ablation=abl)
        agents[name] = SkillAgent(
            policy, SkillPool.seeded(), meta=meta, select="llm_topk_lcb", seed=seed,
            temperature=temperature,
        )
        evolver = (
            LLMEvolver(policy) if llm and name != "Skill-Pro (template mutator)"
            else TemplateMutator(seed)
        )
        trainers[name] = Trainer(
            cfg, agents[name], env, evolver, scorer=scorer if abl != "wo_ppo" else None,
            embed_fn=embed_fn,
        )
    if n_pre:
        pre_agent = SkillAgent(policy, None, seed=seed + 7919, temperature=temperature)
        pre_agent.epsilon = SkillProConfig().eps_end
        pre = precondition(pre_agent, env_name, n_pre, seed, llm)
        ctx.progress.log(f"skillpro: precondition {pre['note']}")
        if not pre["passed"]:
            return _stopped(pre, spec, env_name, seed)
    curves = {name: [] for name in systems}
    tick = ctx.progress.task("skillpro: training iterations", total=iters)
    for it in range(iters):
        for name in systems:
            if trainers[name] is not None:
                trainers[name].begin(it)
        jobs = [(agents[n], make_env(env_name), s) for n in systems for s in train_seeds[it]]
        trajs = _rollout(jobs, llm)
        for k, name in enumerate(systems):
            mine = trajs[k * eps_n : (k + 1) * eps_n]
            if trainers[name] is not None:
                trainers[name].update(it, mine)
            elif mems[name] is not None:
                for t in mine:
                    mems[name].add(t)
            curves[name].append(float(np.mean([t.ret for t in mine])))
        tick(1)
        ctx.progress.log(
            f"skillpro: iteration {it + 1}/{iters}: "
            + ", ".join(f"{n} {curves[n][-1]:.2f}" for n in systems)
        )
    eps_eval = SkillProConfig().eps_end
    for name in systems:
        agents[name].epsilon = eps_eval
    jobs = [(agents[n], make_env(env_name), s) for n in systems for s in eval_seeds]
    jobs += [(agents[n], make_env(hard_name), s) for n in systems for s in hard_seeds]
    ctx.progress.log(f"skillpro: evaluating {len(jobs)} held-out episodes")
    out = _rollout(jobs, llm)
    evals = {n: out[k * n_eval : (k + 1) * n_eval] for k, n in enumerate(systems)}
    off = len(systems) * n_eval
    hard_evals = {n: out[off + k * n_hard : off + (k + 1) * n_hard] for k, n in enumerate(systems)}
    rows = []
    for name in systems:
        ev, hv, agent, trainer = evals[name], hard_evals[name], agents[name], trainers[name]
        steps = [s for t in ev for s in t.steps]
        row = {
            "system": name,
            "eval return": round(float(np.mean([t.ret for t in ev])), 3),
            "win rate": round(float(np.mean([t.ret == 1.0 for t in ev])), 3),
            "-hard return (cross-task)": round(float(np.mean([t.ret for t in hv])), 3),
            "invalid moves/episode": round(float(np.mean([t.invalid_moves for t in ev])), 2),
            "reuse rate": round(float(np.mean([t.reuse for t in ev])), 3),
            "guidance chars/step": round(
                float(np.mean([t.prompt_chars / max(1, len(t.steps)) for t in ev])), 1
            ),
        }
        if count_tokens is not None:
            row["guidance tokens/step"] = round(
                float(np.mean([count_tokens(s.guidance) for s in steps])) if steps else 0.0, 1
            )
        row["pool size"] = len(agent.pool) if agent.pool is not None else 0
        row["gate accept / reject"] = (
            f"{trainer.accepted} / {trainer.rejected}" if trainer else "-"
        )
        if llm:
            ev_fail = getattr(trainer.evolver, "failures", 0) if trainer else None
            ev_calls = getattr(trainer.evolver, "calls", 0) if trainer else None
            row["evolver JSON failures / calls"] = (
                f"{ev_fail} / {ev_calls}" if trainer and ev_calls is not None else "-"
            )
        rows.append(row)
    if cross:
        rows += cross_agent_rows(ctx, cross, agents["Skill-Pro (gate)"].pool, env_name,
                                 eval_seeds, seed, temperature, evals)
    for kind, label in (
        ("random", "reference: random valid guesser"),
        ("consistent", "reference: consistent solver"),
    ):
        ag = SkillAgent(SolverPolicy(kind), None, seed=seed)
        ag.epsilon = 0.0
        ev = [ag.run_episode(make_env(env_name), s) for s in eval_seeds]
        rows.append(
            {
                "system": label,
                "eval return": round(float(np.mean([t.ret for t in ev])), 3),
                "win rate": round(float(np.mean([t.ret == 1.0 for t in ev])), 3),
            }
        )
        evals[label] = ev

    sp = np.array([t.ret for t in evals["Skill-Pro (gate)"]])
    base = np.array([t.ret for t in evals["no skills"]])

    def ratio(a, b):
        return float(a.mean() / max(b.mean(), 1e-9))

    value = ratio(sp, base)
    spread = bootstrap_ci(ratio, sp, base, seed=seed)

    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, c in curves.items():
        ax1.plot(range(1, len(c) + 1), c, marker="o", ms=3, label=name)
    ax1.axhline(next(r["eval return"] for r in rows if r["system"] == RANDOM), ls="--", c="grey",
                label="random valid (eval)")
    ax1.set_xlabel("iteration")
    ax1.set_ylabel(f"mean return ({eps_n} episodes)")
    ax1.set_title(
        f"{env_name}, {spec if llm else 'scripted policy (mechanism check)'}", fontsize=9
    )
    ax1.legend(fontsize=7)
    tr = trainers["Skill-Pro (gate)"]
    kinds = ("accept", "reject", "prune-negative", "prune-cap", "dedup")
    for k, kind in enumerate(kinds):
        its = [r["iteration"] + 1 for r in tr.log for e in r["events"] if e["event"] == kind]
        ax2.scatter(its, [k] * len(its), label=kind)
    ax2.set_yticks(range(len(kinds)), kinds)
    ax2.set_xlabel("iteration")
    ax2.set_title("Skill-Pro pool timeline")
    fig_path = save_figure(fig, ctx.out_dir / "skillpro.png")
    fig2, ax = plt.subplots(figsize=(5, 3.2))
    named = [r for r in rows if r["system"] in systems]
    ax.bar(
        [r["system"] for r in named], [r["reuse rate"] for r in named], color="tab:green"
    )
    ax.set_ylabel("reuse rate (share of steps with a skill)")
    ax.set_title(f"skill reuse, held-out {env_name}")
    ax.tick_params(axis="x", rotation=35, labelsize=7)
    reuse_path = save_figure(fig2, ctx.out_dir / "skillpro_reuse.png")

    by = {r["system"]: r for r in rows}
    if llm:
        eng = policy.engine
        notes = [
            f"LLM EXPERIMENT: {spec} (bf16) is agent, skill selector, "
            f"{'meta-controller, ' if meta is not None else ''}and evolver; a float32 copy scores "
            f"the gate. Action temperature {temperature}. All conditions' episodes of an iteration "
            "run in one KV-cached batch.",
            f"KV engine: {eng.tokens_computed:,} prompt tokens computed, {eng.tokens_cached:,} "
            f"served from per-episode / shared-prefix caches, {eng.forwards:,} batched forwards.",
        ]
    else:
        notes = [
            "MECHANISM CHECK: the agent is a scripted stochastic policy whose move distribution "
            "depends on the injected skill text (exact log-probs for the gate), the evolver is the "
            "template mutator. Not the paper's LLM experiment; no language model is run.",
        ]
    notes += [
        f"{iters} iterations x {eps_n} episodes per condition (same seeds); eval on {n_eval} held-out "
        f"{env_name} seeds and {n_hard} {hard_name} seeds with frozen pools, epsilon 0.05.",
        "Spread: 95% paired percentile bootstrap over eval episodes (2,000 resamples).",
    ]
    tried = {
        n: sum(e["event"] in ("accept", "reject", "no-candidate") for r in t.log for e in r["events"])
        for n, t in trainers.items()
        if t is not None
    }

    def _evolution_state(pool) -> str:
        # Why a skill did or did not become a candidate: calls, and its gap to the best mature skill
        # (the priority is 0 within 0.01 of it, so the best skill itself never evolves).
        if not len(pool):
            return "empty pool"
        s = max(pool, key=lambda k: k.freq)
        mature = [k.avg_gain for k in pool if k.maturity >= 3 and k.freq > 0]
        best = max(mature, default=0.0)
        return (f"most-called skill {s.freq:g} calls, avg gain {s.avg_gain:+.3f} vs best mature "
                f"{best:+.3f}")

    notes.append(
        "Evolution attempts per condition (a skill needs >= 15 calls, >= 6 buffered episodes and "
        "an average gain more than 0.01 below the best mature skill's): "
        + ", ".join(f"{n} {tried[n]} ({_evolution_state(agents[n].pool)})" for n in tried)
    )
    notes.append("Skills per condition: " + "; ".join(
        f"{n}: {skill_counts(t, agents[n].pool)}" for n, t in trainers.items() if t is not None))
    if n_pre:
        notes.append(f"Precondition: {pre['note']}")
    if by["wo_ppo"]["eval return"] > by["Skill-Pro (gate)"]["eval return"]:
        notes.append("wo_ppo (always accept) beat the gated run in this measurement.")
    checks = power_checks(
        {n: [t.ret for t in ev] for n, ev in evals.items()},
        systems,
        trainers["Skill-Pro (gate)"],
        by["Skill-Pro (gate)"]["reuse rate"],
        tried.get("Skill-Pro (gate)", 0),
        seed,
    )
    notes.append(
        "Power checks: control = the consistent solver against the random valid guesser; floor = "
        "the random valid guesser (every condition at or below its 95% CI = no procedural skill "
        "measured); degeneracy = edits accepted into the Skill-Pro pool while the pool is used "
        "(none = Skill-Pro is its seed pool). CIs: percentile bootstrap over eval episodes."
    )
    return Result(
        rows=rows,
        headline=Measure("eval return Skill-Pro / no skills", value, "x", spread),
        target=TARGET,
        notes=notes,
        figures=[fig_path, reuse_path],
        power=checks,
    )


RANDOM = "reference: random valid guesser"
SOLVER = "reference: consistent solver"
#: --opt env -> (training/eval env, cross-task env)
GAMES = {
    "mastermind": ("Mastermind-v0", "Mastermind-v0-hard"),
    "guess": ("GuessTheNumber-v0", "GuessTheNumber-v0-hard"),
}
PRE_AGENT = "no skills (precondition)"
PRE_RANDOM = "random valid guesser (precondition)"


def precondition(agent, env_name: str, n: int, seed: int, batched: bool) -> dict:
    """Can the no-skill agent play at all? Its mean return on ``n`` seeds of their own against
    the random valid guesser's 95% CI on the same seeds (the claim's floor, measured first, so a
    model that cannot play stops before the training budget is spent)."""
    from icml26.core import power
    from icml26.core.stats import item_bootstrap

    seeds = [800_000 + seed * 1000 + k for k in range(n)]
    mine = [t.ret for t in _rollout([(agent, make_env(env_name), s) for s in seeds], batched)]
    ref = SkillAgent(SolverPolicy("random"), None, seed=seed)
    ref.epsilon = 0.0
    rand = [ref.run_episode(make_env(env_name), s).ret for s in seeds]
    ci_m = item_bootstrap(mine, statistic="mean", seed=seed).spread
    ci_r = item_bootstrap(rand, statistic="mean", seed=seed).spread
    check = power.floor({PRE_AGENT: float(np.mean(mine))}, PRE_RANDOM, float(np.mean(rand)),
                        spreads={PRE_AGENT: ci_m}, floor_spread=ci_r, metric="return")
    note = (f"{'passed' if check.passed else 'FAILED'} on {n} {env_name} seeds: no-skill agent "
            f"{np.mean(mine):.3f} [{ci_m[0]:.3f}, {ci_m[1]:.3f}] vs random valid guesser "
            f"{np.mean(rand):.3f} [{ci_r[0]:.3f}, {ci_r[1]:.3f}]")
    return {"passed": bool(check.passed), "check": check, "note": note, "agent": mine,
            "random": rand, "n": n}


def _stopped(pre: dict, spec: str, env_name: str, seed: int) -> Result:
    """The result of a run stopped by a failed precondition: uninformative, nothing trained."""
    from icml26.core import power

    rows = [
        {"system": PRE_AGENT, "eval return": round(float(np.mean(pre["agent"])), 3)},
        {"system": PRE_RANDOM, "eval return": round(float(np.mean(pre["random"])), 3)},
    ]
    why = (f"precondition failed: the {spec} agent without skills does not beat the random valid "
           f"guesser on {env_name}, so no skill library can be measured on it")
    return Result(
        rows=rows,
        headline=Measure("eval return Skill-Pro / no skills", float("nan"), "x"),
        target=TARGET,
        notes=[f"STOPPED EARLY: {pre['note']}. Nothing was trained (training budget not spent)."],
        power=[power.not_measured("control", "stopped by the precondition"), pre["check"],
               power.not_measured("degeneracy", "stopped by the precondition")],
        uninformative=why,
    )


def skill_counts(trainer, pool) -> str:
    """How many skills evolution proposed, the gate accepted / rejected, maintenance pruned, and
    how many evolved skills the final pool keeps."""
    ev = [e["event"] for r in trainer.log for e in r["events"]]
    seeded = {s.name for s in SkillPool.seeded(cap=pool.cap)}
    evolved = sum(1 for s in pool if s.version > 1 or s.name not in seeded)
    return (f"{ev.count('accept') + ev.count('reject')} evolved, {ev.count('accept')} accepted / "
            f"{ev.count('reject')} rejected by the gate, "
            f"{sum(e.startswith(('prune', 'dedup')) for e in ev)} pruned, {evolved} evolved "
            f"skill(s) kept of {len(pool)}")


def cross_agent_rows(ctx, spec: str, pool, env_name, seeds, seed, temperature, evals) -> list:
    """Skills built with the run's agent, used by another model ``spec`` (frozen pool, no
    training), beside that model without skills, on the same held-out seeds."""
    import copy

    policy, meta, _, _ = _llm_parts(ctx, spec)
    rows = []
    for label, p in ((f"cross-agent: {spec}, no skills", None),
                     (f"cross-agent: {spec} with the Skill-Pro pool", copy.deepcopy(pool))):
        ag = SkillAgent(policy, p, meta=meta if p is not None else None,
                        select="llm_topk_lcb", seed=seed, temperature=temperature)
        ag.epsilon = SkillProConfig().eps_end
        ev = _rollout([(ag, make_env(env_name), s) for s in seeds], True)
        evals[label] = ev
        rows.append({"system": label,
                     "eval return": round(float(np.mean([t.ret for t in ev])), 3),
                     "win rate": round(float(np.mean([t.ret == 1.0 for t in ev])), 3),
                     "reuse rate": round(float(np.mean([t.reuse for t in ev])), 3)})
    return rows


def power_checks(returns, systems, gate_trainer, reuse, tried, seed) -> list:
    """The claim's power checks from per-episode eval returns (``{system: [return, ...]}``).

    Control: the consistent solver must beat the random valid guesser beyond both 95% CIs.
    Floor: some compared condition (``systems``) must lie above the random guesser's CI.
    Degeneracy: edits accepted into the gated Skill-Pro pool, counted only when the pool is used
    (``reuse`` > 0); ``tried`` evolution attempts in all.
    """
    from icml26.core import power
    from icml26.core.stats import item_bootstrap

    stat = {
        n: (float(np.mean(r)), item_bootstrap(r, statistic="mean", seed=seed).spread)
        for n, r in returns.items()
    }
    accepted = gate_trainer.accepted if gate_trainer is not None else 0
    return [
        power.control(
            SOLVER,
            stat[SOLVER][0],
            RANDOM,
            stat[RANDOM][0],
            spread=stat[SOLVER][1],
            null_spread=stat[RANDOM][1],
            metric="eval return",
        ),
        power.floor(
            {n: stat[n][0] for n in systems},
            RANDOM,
            stat[RANDOM][0],
            spreads={n: stat[n][1] for n in systems},
            floor_spread=stat[RANDOM][1],
            metric="eval return",
        ),
        power.degeneracy(
            ("Skill-Pro (gate)", "no skills"),
            accepted if reuse > 0 else 0,
            tried,
            what=f"evolution attempts accepted into a pool that is used (reuse rate {reuse:g})",
        ),
    ]
