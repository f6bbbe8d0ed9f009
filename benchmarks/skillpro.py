"""Skill-Pro gate scoring: batched vs per-pair teacher-forced log-probs, side by side in one process.

Run: ``.venv/bin/python benchmarks/skillpro.py [--model smollm2|PATH] [--pairs 32] [--batch 16]``
(``--device cuda`` on a GPU). Builds ``--pairs`` real Mastermind (state, action) decision prompts
with a skill injected (the gate's workload), scores them with ``action_logprobs`` at batch size 1
and at ``--batch``, checks both agree (max abs difference printed), and prints a markdown row of
pairs/s and the speed-up. Saves a PNG to ``--plot`` (default results/benchmarks/skillpro_gate.png).

``--rollouts N``: instead, play N Mastermind-v0 episodes (seeded skill pool, LCB selection,
greedy actions) with per-step ``generate`` one episode after another (``LocalChat.chat``, the
reference path), then all N together through the batched KV-cached engine
(``rollout.run_episodes``), and print episodes/s, the speed-up, and how many episodes picked
identical actions. ``--no-reuse`` adds a batched run whose prompts are recomputed every turn.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from icml26.core.lm import load_lm  # noqa: E402
from icml26.core.plots import pyplot, save_figure  # noqa: E402
from icml26.core.torchutil import parse_dtype  # noqa: E402
from icml26.skillpro.agent import ScriptedPolicy, SkillAgent, decision_messages  # noqa: E402
from icml26.skillpro.env import make_env  # noqa: E402
from icml26.skillpro.ppo import action_logprobs, render_prompt  # noqa: E402
from icml26.skillpro.skill import SkillPool  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--pairs", type=int, default=32)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--plot", default="results/benchmarks/skillpro_gate.png")
    ap.add_argument("--rollouts", type=int, default=0)
    ap.add_argument("--meta", action="store_true", help="rollouts: with the meta-controller")
    ap.add_argument("--no-reuse", action="store_true")
    a = ap.parse_args()
    if a.rollouts:
        return rollouts(a)
    model, tok = load_lm(a.model, dtype=parse_dtype(a.dtype), device=a.device)
    pool = SkillPool.seeded()
    agent = SkillAgent(ScriptedPolicy(), pool, select="llm_topk_lcb", epsilon=1.0, seed=0)
    steps = []
    seed = 0
    while len(steps) < a.pairs:
        steps += agent.run_episode(make_env("Mastermind-v0"), seed).steps
        seed += 1
    steps = steps[: a.pairs]
    prompts = [render_prompt(tok, decision_messages(s.obs, s.guidance)) for s in steps]
    actions = [s.action for s in steps]
    action_logprobs(model, tok, prompts[:2], actions[:2], batch_size=2)  # warm-up
    res = {}
    for bs in (1, a.batch):
        t = time.perf_counter()
        lp = action_logprobs(model, tok, prompts, actions, batch_size=bs)
        res[bs] = (a.pairs / (time.perf_counter() - t), lp)
    diff = float(np.max(np.abs(res[1][1] - res[a.batch][1])))
    speed = res[a.batch][0] / res[1][0]
    print("| benchmark | per-pair (pairs/s) | batched (pairs/s) | speed-up | max abs diff (nats) |")
    print("|---|---|---|---|---|")
    print(
        f"| skillpro gate scoring, {a.model or 'SmolLM2-135M'} {a.dtype}, {a.device}, "
        f"batch {a.batch} | {res[1][0]:.2f} | {res[a.batch][0]:.2f} | {speed:.2f}x | {diff:.3g} |"
    )
    if a.plot:
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(4, 3))
        ax.bar(["per pair", f"batch {a.batch}"], [res[1][0], res[a.batch][0]])
        ax.set_ylabel("(state, action) pairs / s")
        ax.set_title("Skill-Pro gate scoring")
        Path(a.plot).parent.mkdir(parents=True, exist_ok=True)
        save_figure(fig, a.plot)


def rollouts(a) -> None:
    from icml26.skillpro.rollout import BatchedLocalChat, run_episodes

    chat = BatchedLocalChat(a.model, dtype=parse_dtype(a.dtype), device=a.device)

    def jobs():
        return [
            (
                SkillAgent(chat, SkillPool.seeded(), meta=chat if a.meta else None,
                           select="llm_topk_lcb", epsilon=0.3, seed=k, temperature=0.0),
                make_env("Mastermind-v0"),
                500 + k,
            )
            for k in range(a.rollouts)
        ]

    chat.chat([{"role": "user", "content": "warm up"}], max_new_tokens=2)
    t = time.perf_counter()
    ref = [ag.run_episode(env, s) for ag, env, s in jobs()]
    t_ref = time.perf_counter() - t
    runs = [("batched + KV reuse", True)] + ([("batched, no reuse", False)] if a.no_reuse else [])
    turns = sum(len(r.steps) for r in ref)
    print(f"{a.rollouts} episodes, {turns} decisions; per-step generate: {t_ref:.1f} s")
    print("| rollouts | per-step generate (episodes/s) | batched (episodes/s) | speed-up | "
          "episodes with identical actions |")
    print("|---|---|---|---|---|")
    for label, reuse in runs:
        chat.engine.reuse = reuse
        chat.engine.slots.clear()
        chat.engine.retired.clear()
        t = time.perf_counter()
        got = run_episodes(jobs())
        dt = time.perf_counter() - t
        same = sum([s.action for s in g.steps] == [s.action for s in r.steps]
                   for g, r in zip(got, ref, strict=True))
        print(
            f"| {a.rollouts} Mastermind-v0 episodes, {a.model or 'SmolLM2-135M'} {a.dtype}, "
            f"{a.device}, greedy{', meta' if a.meta else ''}, {label} | {a.rollouts / t_ref:.3f} | "
            f"{a.rollouts / dt:.3f} | {t_ref / dt:.2f}x | {same}/{a.rollouts} |"
        )
    print(f"engine: {chat.engine.tokens_computed} prompt tokens computed, "
          f"{chat.engine.tokens_cached} from cache, {chat.engine.forwards} forwards")


if __name__ == "__main__":
    main()
