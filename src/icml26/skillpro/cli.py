"""``icml26 skillpro ...``: train a skill pool, evaluate it frozen, export it as Agent Skills folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="Skill-Pro: procedural skills for LLM agents evolved by Non-Parametric PPO.",
    no_args_is_help=True,
)


@app.callback()
def _group() -> None:
    """Train / evaluate / export SKILL.md skill pools."""


def _chat(spec: str):
    from icml26.core.chat import get_chat
    from icml26.skillpro.agent import ScriptedPolicy

    if spec == "scripted":
        return ScriptedPolicy()
    return _local_batched(spec) or get_chat(spec)


def _local_batched(spec: str):
    """A :class:`BatchedLocalChat` for local specs ('local', 'local:PATH', PATH), else None."""
    if spec.startswith(("http://", "https://", "stub")):
        return None
    from icml26.skillpro.rollout import BatchedLocalChat

    path = spec.split(":", 1)[1] if spec.startswith("local:") else spec
    return BatchedLocalChat(None if path in ("local", "smollm2") else path)


def _agent_and_scorer(agent: str, scorer: str | None):
    from icml26.core.chat import LocalChat, get_chat
    from icml26.core.errors import UserError
    from icml26.skillpro.agent import ScriptedPolicy
    from icml26.skillpro.ppo import LMScorer

    if agent == "scripted":
        pol = ScriptedPolicy()
        return pol, pol
    chat = _local_batched(agent) or get_chat(agent)
    if scorer:
        import torch

        from icml26.core.lm import load_lm

        return chat, LMScorer(*load_lm(scorer, dtype=torch.float32))
    if isinstance(chat, LocalChat):
        return chat, LMScorer(chat.model, chat.tokenizer)
    raise UserError(
        f"agent {agent!r} gives no action log-probs, which the PPO gate needs: pass a "
        "local copy of the agent model with --scorer PATH (or --ablation wo_ppo)"
    )


@app.command()
def train(
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="Pool folder (SKILL.md folders + log.json); resumed."),
    ],
    env: Annotated[
        str, typer.Option(help="Mastermind-v0, Mastermind-v0-hard, Mastermind-v0-extreme.")
    ] = "Mastermind-v0",
    agent: Annotated[
        str, typer.Option(help="'scripted', 'local', an HF folder, or http://HOST/v1#MODEL.")
    ] = "scripted",
    evolver: Annotated[
        str, typer.Option(help="'template' or a chat spec / HF folder.")
    ] = "template",
    scorer: Annotated[
        str | None, typer.Option(help="Local HF folder scoring action log-probs.")
    ] = None,
    iterations: int = 50,
    episodes: int = 5,
    select: str = "llm_topk_lcb",
    ablation: Annotated[
        str | None, typer.Option(help="wo_ppo | wo_score | wo_sg (wo_sg needs an LLM evolver)")
    ] = None,
    seed: int = 0,
) -> None:
    """Run Skill-Pro training; writes the pool and a JSON log after every iteration."""
    from icml26.core.errors import UserError
    from icml26.core.io import atomic_write_json
    from icml26.skillpro.agent import SkillAgent
    from icml26.skillpro.env import make_env
    from icml26.skillpro.evolve import LLMEvolver, SkillProConfig, TemplateMutator, Trainer
    from icml26.skillpro.rollout import run_episodes
    from icml26.skillpro.skill import SkillPool, load_pool, save_pool

    game = make_env(env)
    cfg = SkillProConfig(iterations=iterations, episodes_per_iter=episodes, ablation=ablation)
    config = {
        "env": env,
        "agent": agent,
        "evolver": evolver,
        "select": select,
        "seed": seed,
        "episodes": episodes,
        "ablation": ablation,
    }
    log_path = out / "log.json"
    log = {"config": config, "iterations": []}
    pool = SkillPool.seeded()
    if log_path.exists():
        old = json.loads(log_path.read_text())
        if old.get("config") != config:
            raise UserError(
                f"{log_path} was written by another config {old.get('config')}; use a new --out"
            )
        log, pool = old, load_pool(out)
    policy, score = _agent_and_scorer(agent, scorer)
    evo = (
        TemplateMutator(seed)
        if evolver == "template"
        else LLMEvolver(policy if evolver == agent else _chat(evolver))
    )
    ag = SkillAgent(policy, pool, select=select, seed=seed + len(log["iterations"]))
    tr = Trainer(cfg, ag, game, evo, scorer=score if ablation != "wo_ppo" else None)
    tr.baseline.value = log.get("baseline")
    for it in range(len(log["iterations"]), iterations):
        seeds = [seed * 100_000 + it * episodes + k for k in range(episodes)]
        if hasattr(policy, "generate_batch"):  # local model: the episodes as one KV-cached batch
            tr.begin(it)
            rec = tr.update(it, run_episodes([(ag, make_env(env), s) for s in seeds]))
        else:
            rec = tr.iteration(it, seeds)
        rec["evolver_failures"] = evo.failures
        log["iterations"].append(rec)
        log["baseline"] = tr.baseline.value
        save_pool(pool, out, force=True)
        atomic_write_json(
            out / "pool_snapshots" / f"iter_{it:04d}.json", {"skills": pool.snapshot()}
        )
        atomic_write_json(log_path, log)
        typer.echo(
            f"iter {it}: return {sum(rec['returns']) / len(rec['returns']):.3f} reuse {rec['reuse']:.2f} "
            f"pool {len(pool)} events {[e['event'] for e in rec['events']]}"
        )


@app.command("eval")
def evaluate(
    pool: Annotated[Path, typer.Option("--pool", help="Pool folder.")],
    env: str = "Mastermind-v0",
    agent: str = "scripted",
    episodes: int = 20,
    seed: int = 10_000,
) -> None:
    """Play ``episodes`` held-out seeds with the frozen pool (epsilon 0.05); print mean return."""
    from icml26.skillpro.agent import SkillAgent
    from icml26.skillpro.env import make_env
    from icml26.skillpro.skill import load_pool

    game = make_env(env)
    policy = _chat(agent)
    ag = SkillAgent(policy, load_pool(pool), select="llm_topk_lcb", epsilon=0.05, seed=seed)
    if hasattr(policy, "generate_batch"):
        from icml26.skillpro.rollout import run_episodes

        trajs = run_episodes([(ag, make_env(env), seed + k) for k in range(episodes)])
    else:
        trajs = [ag.run_episode(game, seed + k) for k in range(episodes)]
    typer.echo(
        json.dumps(
            {
                "env": env,
                "episodes": episodes,
                "return": sum(t.ret for t in trajs) / episodes,
                "win_rate": sum(t.ret == 1.0 for t in trajs) / episodes,
                "reuse": sum(t.reuse for t in trajs) / episodes,
            }
        )
    )


@app.command()
def export(
    pool: Annotated[Path, typer.Argument(help="Pool folder.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Destination for Agent Skills folders.")],
    force: bool = False,
) -> None:
    """Write one ``NAME/SKILL.md`` per skill (checked against the spec by re-reading it)."""
    from icml26.core.io import atomic_write_text
    from icml26.skillpro.skill import load_pool, parse_skill_md, skill_md

    p = load_pool(pool, force=force)
    for s in p:
        (out / s.name).mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / s.name / "SKILL.md", skill_md(s))
        parse_skill_md(
            (out / s.name / "SKILL.md").read_text(), out / s.name / "SKILL.md", folder=s.name
        )
    typer.echo(f"exported {len(p)} skills to {out}")
