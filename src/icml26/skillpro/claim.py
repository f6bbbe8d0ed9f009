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

Options: ``embed`` ("minilm" default, "none" skips MiniLM: naive memory then retrieves the last 3).
"""

from __future__ import annotations

import numpy as np

from icml26.core.claims import Measure, Result, RunContext
from icml26.core.plots import pyplot, save_figure
from icml26.core.torchutil import bootstrap_ci
from icml26.skillpro.agent import NaiveMemory, ScriptedPolicy, SkillAgent, SolverPolicy
from icml26.skillpro.env import make_env
from icml26.skillpro.evolve import SkillProConfig, TemplateMutator, Trainer
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


def _eval(agent, env, seeds, eps):
    agent.epsilon = eps
    return [agent.run_episode(env, s) for s in seeds]


def run(ctx: RunContext) -> Result:
    iters, eps_n, n_eval, n_hard = ctx.pick(
        tiny=(2, 2, 6, 2), small=(40, 5, 60, 20), full=(50, 5, 100, 50)
    )
    seed = ctx.seed
    embed_fn = _Recency()
    if ctx.options.get("embed", "minilm") == "minilm" and ctx.scale != "tiny":
        from icml26.core.embed import embed as embed_fn  # noqa: F811
    env, hard = make_env("Mastermind-v0"), make_env("Mastermind-v0-hard")
    train_seeds = [
        [10_000 + seed * 1000 + i * eps_n + k for k in range(eps_n)] for i in range(iters)
    ]
    eval_seeds = [900_000 + seed * 1000 + k for k in range(n_eval)]
    hard_seeds = [950_000 + seed * 1000 + k for k in range(n_hard)]
    policy = ScriptedPolicy()
    systems = ["no skills", "naive memory", "Skill-Pro (gate)", "wo_ppo", "wo_score"]
    curves, evals, hard_evals, rows, trainers = {}, {}, {}, [], {}
    tick = ctx.progress.task("skillpro: training conditions", total=len(systems) * iters)
    for name in systems:
        if name in ("no skills", "naive memory"):
            mem = NaiveMemory(embed_fn) if name == "naive memory" else None
            agent = SkillAgent(policy, None, memory=mem, seed=seed)
            curve = []
            for it in range(iters):
                trajs = [agent.run_episode(env, s) for s in train_seeds[it]]
                if mem is not None:
                    for t in trajs:
                        mem.add(t)
                curve.append(float(np.mean([t.ret for t in trajs])))
                tick(1)
            trainer = None
        else:
            abl = {"wo_ppo": "wo_ppo", "wo_score": "wo_score"}.get(name)
            cfg = SkillProConfig(iterations=iters, episodes_per_iter=eps_n, ablation=abl)
            agent = SkillAgent(policy, SkillPool.seeded(), select="llm_topk_lcb", seed=seed)
            trainer = Trainer(
                cfg, agent, env, TemplateMutator(seed), scorer=policy, embed_fn=embed_fn
            )
            curve = []
            for it in range(iters):
                curve.append(float(np.mean(trainer.iteration(it, train_seeds[it])["returns"])))
                tick(1)
        eps_eval = SkillProConfig().eps_end
        ev = _eval(agent, env, eval_seeds, eps_eval)
        hv = _eval(agent, hard, hard_seeds, eps_eval)
        curves[name], evals[name], hard_evals[name], trainers[name] = curve, ev, hv, trainer
        rows.append(
            {
                "system": name,
                "eval return": round(float(np.mean([t.ret for t in ev])), 3),
                "win rate": round(float(np.mean([t.ret == 1.0 for t in ev])), 3),
                "-hard return (cross-task)": round(float(np.mean([t.ret for t in hv])), 3),
                "invalid moves/episode": round(float(np.mean([t.invalid_moves for t in ev])), 2),
                "reuse rate": round(float(np.mean([t.reuse for t in ev])), 3),
                "guidance chars/step": round(
                    float(np.mean([t.prompt_chars / max(1, len(t.steps)) for t in ev])), 1
                ),
                "pool size": len(agent.pool) if agent.pool is not None else 0,
                "gate accept / reject": f"{trainer.accepted} / {trainer.rejected}"
                if trainer
                else "-",
            }
        )
    for kind, label in (
        ("random", "reference: random valid guesser"),
        ("consistent", "reference: consistent solver"),
    ):
        ag = SkillAgent(SolverPolicy(kind), None, seed=seed)
        ev = _eval(ag, env, eval_seeds, 0.0)
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
    ax1.axhline(rows[-2]["eval return"], ls="--", c="grey", label="random valid (eval)")
    ax1.set_xlabel("iteration")
    ax1.set_ylabel(f"mean return ({eps_n} episodes)")
    ax1.set_title("Mastermind-v0, scripted policy (mechanism check)")
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

    notes = [
        "MECHANISM CHECK: the agent is a scripted stochastic policy whose move distribution depends on "
        "the injected skill text (exact log-probs for the gate), the evolver is the template mutator. "
        "Not the paper's LLM experiment; no language model is run.",
        f"{iters} iterations x {eps_n} episodes per condition (same seeds); eval on {n_eval} held-out "
        f"Mastermind-v0 seeds and {n_hard} Mastermind-v0-hard seeds with frozen pools, epsilon 0.05.",
        "Spread: 95% paired percentile bootstrap over eval episodes (2,000 resamples).",
    ]
    if rows[3]["eval return"] > rows[2]["eval return"]:
        notes.append("wo_ppo (always accept) beat the gated run in this measurement.")
    return Result(
        rows=rows,
        headline=Measure("eval return Skill-Pro / no skills", value, "x", spread),
        target=TARGET,
        notes=notes,
        figures=[fig_path],
    )
