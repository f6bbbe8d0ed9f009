"""Non-Parametric PPO training: rollouts, credit, evolution (semantic gradient + gate), maintenance."""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass

import numpy as np

from icml26.core.errors import UserError
from icml26.skillpro.agent import (
    BAD_REPEAT,
    GOOD_CONSISTENT,
    GOOD_FORMAT,
    MILD_CONSISTENT,
    decision_messages,
)
from icml26.skillpro.ppo import (
    Baseline,
    assign_credit,
    evolution_priority,
    lcb,
    ppo_objective,
    step_advantages,
)
from icml26.skillpro.skill import Skill, kebab

ABLATIONS = (None, "wo_ppo", "wo_score", "wo_sg")


@dataclass(frozen=True)
class SkillProConfig:
    """Paper defaults; ``ablation`` in ``None | "wo_ppo" | "wo_score" | "wo_sg"``.

    ``wo_ppo``: every best candidate accepted (no gate); ``wo_score``: FIFO maintenance instead of
    score-based pruning; ``wo_sg``: no semantic gradient (the LLM evolver rewrites the skill from
    plain episode summaries; needs an :class:`LLMEvolver`)."""

    iterations: int = 50
    episodes_per_iter: int = 5
    eps_start: float = 0.3
    eps_end: float = 0.05
    min_buffer: int = 6
    min_freq: float = 15
    max_parents: int = 2
    best_of: int = 3
    clip: float = 0.2
    gate_threshold: float = 0.001
    cooldown: int = 3
    protect: int = 3
    keep_on_reject: int = 3
    dedup_cosine: float = 0.9
    baseline_decay: float = 0.9
    ablation: str | None = None

    def __post_init__(self) -> None:
        if self.ablation not in ABLATIONS:
            raise UserError(f"ablation must be one of {ABLATIONS}; got {self.ablation!r}")
        if self.iterations < 1 or self.episodes_per_iter < 1 or self.best_of < 1:
            raise UserError("iterations, episodes_per_iter and best_of must be >= 1")
        if not 0 <= self.eps_end <= self.eps_start <= 1:
            raise UserError(
                f"need 0 <= eps_end <= eps_start <= 1; got {self.eps_end}, {self.eps_start}"
            )

    def epsilon(self, it: int) -> float:
        frac = it / max(1, self.iterations - 1)
        return self.eps_start + (self.eps_end - self.eps_start) * min(1.0, frac)


PHRASES = (
    GOOD_CONSISTENT,
    MILD_CONSISTENT,
    GOOD_FORMAT,
    BAD_REPEAT,
    "Try digits not used yet",
    "Keep digits that scored black pegs in place",
    "Think about which digits are excluded",
    "Move digits that scored white pegs to new positions",
)


class TemplateMutator:
    """Rule-based evolver (the labelled second arm): edits drawn from a small step grammar."""

    name = "template"

    def __init__(self, seed: int = 0, phrases=PHRASES):
        self.rng, self.phrases, self.failures = random.Random(seed), tuple(phrases), 0

    def propose(self, parent: Skill, batch, n: int) -> list[Skill]:
        out = []
        for _ in range(n):
            steps = list(parent.steps)
            op = self.rng.choice(["replace", "add", "drop", "new"])
            new = self.rng.choice([p for p in self.phrases if p not in steps] or [steps[0]])
            if op == "add" and len(steps) < 5:
                steps.insert(self.rng.randrange(len(steps) + 1), new)
            elif op == "drop" and len(steps) > 3:
                steps.pop(self.rng.randrange(len(steps)))
            else:
                steps[self.rng.randrange(len(steps))] = new
            if op == "new":  # a NEW skill: the parent's frame with three grammar steps
                steps = self.rng.sample(self.phrases, 3)
                tag = "".join(self.rng.choice("abcdefghjkmnpqrstuvwxyz") for _ in range(4))
                out.append(parent.child(name=kebab(f"{parent.name[:50]}-{tag}"), steps=steps))
            else:
                out.append(parent.child(steps=steps))
        return out


class LLMEvolver:
    """Semantic-gradient evolver: one JSON gradient per trajectory, then an aggregation call.

    ``semantic_gradient=False`` is the paper's ``wo_sg`` ablation: no per-trajectory gradients
    (no ``is_related``, always REFINE); the evolver sees plain summaries of the batch's episodes
    and rewrites the steps in one call per candidate.

    Invalid JSON is retried ``retries`` times, then skipped and counted in ``failures``. Calls that
    do not depend on each other (the gradients of a batch, the candidates) go out as one batch
    when the chat model has ``generate_batch`` (:class:`~icml26.skillpro.rollout.BatchedLocalChat`).
    Length caps: ``grad_tokens`` / ``agg_tokens`` new tokens, ``max_chars`` per step.
    """

    name = "llm"

    def __init__(
        self,
        chat,
        retries: int = 2,
        max_chars: int = 200,
        *,
        semantic_gradient: bool = True,
        grad_tokens: int = 96,
        agg_tokens: int = 160,
    ):
        self.chat, self.retries, self.max_chars = chat, retries, max_chars
        self.semantic_gradient, self.grad_tokens, self.agg_tokens = (
            semantic_gradient,
            grad_tokens,
            agg_tokens,
        )
        self.failures = self.calls = 0

    @staticmethod
    def _parse(reply: str) -> dict | None:
        m = re.search(r"\{.*\}", reply, re.S)
        try:
            obj = json.loads(m.group(0)) if m else None
        except json.JSONDecodeError:
            obj = None
        return obj if isinstance(obj, dict) else None

    def _json_many(self, prompts: list[str], seeds: list[int], max_new_tokens: int, temps=None):
        """Ask every prompt, retrying the unparsable ones; ``None`` where all tries failed.
        First tries use ``temps`` (default greedy), retries sample at 0.7."""
        out: list[dict | None] = [None] * len(prompts)
        todo = list(range(len(prompts)))
        for k in range(self.retries + 1):
            if not todo:
                break
            kws = [
                {
                    "max_new_tokens": max_new_tokens,
                    "temperature": (temps[i] if temps else 0.0) if k == 0 else 0.7,
                    "seed": seeds[i] + k,
                }
                for i in todo
            ]
            msgs = [[{"role": "user", "content": prompts[i]}] for i in todo]
            self.calls += len(todo)
            if hasattr(self.chat, "generate_batch"):
                replies = self.chat.generate_batch(
                    [(m, kw, None) for m, kw in zip(msgs, kws, strict=True)]
                )
            else:
                replies = [self.chat.chat(m, **kw) for m, kw in zip(msgs, kws, strict=True)]
            for i, r in zip(todo, replies, strict=True):
                out[i] = self._parse(r)
            todo = [i for i in todo if out[i] is None]
        self.failures += len(todo)
        return out

    def _json(self, prompt: str, seed: int) -> dict | None:
        return self._json_many([prompt], [seed], self.grad_tokens)[0]

    @staticmethod
    def summary(tr) -> str:
        moves = ", ".join(s.action.strip().splitlines()[0][:24] if s.action.strip() else "''"
                          for s in tr.steps[-6:])
        return f"return {tr.ret:.2f} in {len(tr.steps)} moves; last moves: {moves}"

    def _steps(self, agg) -> tuple[str, ...] | None:
        steps = agg.get("steps") if agg else None
        if not (
            isinstance(steps, list)
            and 3 <= len(steps) <= 5
            and all(isinstance(s, str) and s.strip() for s in steps)
        ):
            return None
        return tuple(s.strip().splitlines()[0][: self.max_chars] for s in steps)

    def propose(self, parent: Skill, batch, n: int) -> list[Skill]:
        fmt = '{"steps": ["...", "...", "..."]} (3-5 steps)'
        if self.semantic_gradient:
            prompts = [
                f"Skill:\n{parent.text()}\n\nEpisode return {tr.ret:.2f}. Last state:\n"
                f"{tr.steps[-1].obs[-400:] if tr.steps else ''}\n"
                'Reply JSON: {"is_related": true|false, "edit": "<one new step, <= 120 chars>"}'
                for tr in batch
            ]
            grads = []
            for g in self._json_many(prompts, list(range(len(batch))), self.grad_tokens):
                if g is not None and isinstance(g.get("edit"), str) and g["edit"].strip():
                    grads.append(
                        (
                            bool(g.get("is_related")),
                            g["edit"].strip().splitlines()[0][: self.max_chars],
                        )
                    )
            if not grads:
                return []
            refine = sum(r for r, _ in grads) >= 0.5 * len(grads)
            agg_prompt = (
                f"Skill:\n{parent.text()}\nProposed edits:\n"
                + "\n".join(f"- {e}" for _, e in grads)
                + f"\nKeep recurring ones. Reply JSON: {fmt}"
            )
        else:  # wo_sg: plain episode summaries, one rewrite per candidate, always REFINE
            refine = True
            agg_prompt = (
                f"Skill:\n{parent.text()}\nEpisodes played with it:\n"
                + "\n".join(f"- {self.summary(tr)}" for tr in batch)
                + f"\nRewrite the skill's steps. Reply JSON: {fmt}"
            )
        out = []
        # candidate 0 greedy, the others sampled (best-of-n needs distinct candidates)
        aggs = self._json_many(
            [agg_prompt] * n,
            [100 + j for j in range(n)],
            self.agg_tokens,
            [0.0] + [0.7] * (n - 1),
        )
        for j, agg in enumerate(aggs):
            steps = self._steps(agg)
            if steps is None:
                if agg is not None:
                    self.failures += 1
                continue
            try:
                out.append(
                    parent.child(steps=steps)
                    if refine
                    else Skill(
                        kebab(f"{parent.name}-new-{j}"),
                        parent.initiation,
                        steps,
                        parent.termination,
                        parent=f"{parent.name}@v{parent.version}",
                    )
                )
            except ValueError:
                self.failures += 1
        return out


def gate_objective(
    scorer, old: Skill, cand: Skill, batch, baseline: float, clip: float = 0.2
) -> float:
    """J of ``cand`` vs ``old`` on the batch's steps taken under ``old`` (teacher-forced scorer)."""
    steps, adv = [], []
    for tr in batch:
        a = step_advantages([tr], baseline)
        for s, a_t in zip(tr.steps, a, strict=True):
            if s.skill == old.name:
                steps.append(s)
                adv.append(a_t)
    if not steps:
        return 0.0
    acts = [s.action for s in steps]
    lp_old = scorer.logprobs([decision_messages(s.obs, old.text()) for s in steps], acts)
    lp_new = scorer.logprobs([decision_messages(s.obs, cand.text()) for s in steps], acts)
    return ppo_objective(lp_new, lp_old, np.array(adv), eps=clip)


class Trainer:
    """Runs Skill-Pro iterations on one env. ``scorer``: has ``logprobs(messages_list, actions)``
    (required unless ``ablation == "wo_ppo"``). ``embed_fn``: texts -> unit vectors, for de-dup."""

    def __init__(
        self, cfg: SkillProConfig, agent, env, evolver, scorer=None, embed_fn=None, progress=None
    ):
        if scorer is None and cfg.ablation != "wo_ppo":
            raise UserError(
                "the PPO gate needs action log-probs: pass a local scorer model (--scorer PATH)"
            )
        if cfg.ablation == "wo_sg":
            if not isinstance(evolver, LLMEvolver):
                raise UserError(
                    "ablation wo_sg removes the LLM evolver's semantic gradient; it needs an LLM "
                    f"evolver, got {getattr(evolver, 'name', type(evolver).__name__)!r}"
                )
            evolver.semantic_gradient = False
        self.cfg, self.agent, self.env, self.evolver, self.scorer = cfg, agent, env, evolver, scorer
        self.embed_fn, self.baseline, self.buffers = embed_fn, Baseline(cfg.baseline_decay), {}
        self.log: list[dict] = []
        self.accepted = self.rejected = self.pruned = 0

    def iteration(self, it: int, seeds) -> dict:
        """Roll out one episode per seed (one at a time), then :meth:`update`."""
        self.begin(it)
        return self.update(it, [self.agent.run_episode(self.env, s) for s in seeds])

    def begin(self, it: int) -> None:
        """Set the agent's exploration for iteration ``it`` (before its rollouts)."""
        self.agent.epsilon, self.agent.t = self.cfg.epsilon(it), it

    def update(self, it: int, trajs) -> dict:
        """Credit, evolution and maintenance from iteration ``it``'s trajectories (rolled out
        by :meth:`iteration`, or batched with other runs by ``rollout.run_episodes``)."""
        pool = self.agent.pool
        b = (
            self.baseline.value
            if self.baseline.value is not None
            else float(np.mean([t.ret for t in trajs]))
        )
        assign_credit(pool, [(t.ret, t.calls) for t in trajs], b)
        for t in trajs:
            for name in t.calls:
                self.buffers.setdefault(name, []).append(t)
        events = self.evolve(it, b)
        self.baseline.update([t.ret for t in trajs])
        for s in pool:
            s.maturity += 1
            s.cooldown = max(0, s.cooldown - 1)
        events += self.maintain(it)
        rec = {
            "iteration": it,
            "returns": [t.ret for t in trajs],
            "baseline": b,
            "reuse": float(np.mean([t.reuse for t in trajs])),
            "invalid": float(np.mean([t.invalid_moves for t in trajs])),
            "guidance_chars_per_step": float(
                np.mean([t.prompt_chars / max(1, len(t.steps)) for t in trajs])
            ),
            "pool": [s.name + f"@v{s.version}" for s in pool],
            "events": events,
        }
        self.log.append(rec)
        return rec

    def evolve(self, it: int, b: float) -> list[dict]:
        cfg, pool = self.cfg, self.agent.pool
        mature = [s.avg_gain for s in pool if s.maturity >= 3 and s.freq > 0]
        best = max(mature, default=0.0)
        ready = [
            (evolution_priority(s, best, min_freq=cfg.min_freq), s)
            for s in pool
            if len(self.buffers.get(s.name, [])) >= cfg.min_buffer and s.cooldown == 0
        ]
        ready = sorted([x for x in ready if x[0] > 0], key=lambda x: -x[0])[: cfg.max_parents]
        events = []
        for prio, parent in ready:
            buf = sorted(self.buffers[parent.name], key=lambda t: t.ret)
            half = cfg.min_buffer // 2
            batch = buf[:half] + buf[-half:] if len(buf) > cfg.min_buffer else buf
            cands = self.evolver.propose(parent, batch, cfg.best_of)
            if not cands:
                events.append({"event": "no-candidate", "parent": parent.name})
                continue
            if cfg.ablation == "wo_ppo":
                j, cand = 0.0, cands[0]
            else:
                j, cand = max(
                    (
                        (gate_objective(self.scorer, parent, c, batch, b, cfg.clip), c)
                        for c in cands
                    ),
                    key=lambda x: x[0],
                )
            ok = cfg.ablation == "wo_ppo" or j > cfg.gate_threshold
            ev = {
                "event": "accept" if ok else "reject",
                "parent": parent.name,
                "J": j,
                "priority": prio,
                "steps": list(cand.steps),
            }
            if ok:
                cand.born, cand.cooldown = it, cfg.cooldown
                if cand.name != parent.name and len(pool) >= pool.cap:
                    pass  # a NEW skill may push the pool over cap; maintenance trims it
                pool.add(cand)
                self.buffers.pop(parent.name, None)
                self.accepted += 1
            else:
                parent.cooldown = cfg.cooldown
                self.buffers[parent.name] = self.buffers[parent.name][-cfg.keep_on_reject :]
                self.rejected += 1
            events.append(ev)
        return events

    def maintain(self, it: int) -> list[dict]:
        cfg, pool = self.cfg, self.agent.pool
        events = []

        def protected(s):
            return it - s.born < cfg.protect

        def score(s):
            return -s.born if cfg.ablation == "wo_score" else lcb(s.avg_gain, s.freq, it + 1)

        for s in list(pool):
            if (
                len(pool) >= pool.cap
                and s.maturity >= 3
                and s.freq >= cfg.min_freq
                and s.avg_gain < 0
                and not protected(s)
                and cfg.ablation != "wo_score"
            ):
                pool.remove(s.name)
                events.append({"event": "prune-negative", "skill": s.name})
        if self.embed_fn is not None and len(pool) > 1:
            vecs = self.embed_fn([s.text() for s in pool])
            sims = vecs @ vecs.T
            skills = list(pool)
            for i in range(len(skills)):
                for k in range(i + 1, len(skills)):
                    a, c = skills[i], skills[k]
                    if sims[i, k] > cfg.dedup_cosine and pool.get(a.name) and pool.get(c.name):
                        loser = min((a, c), key=score)
                        if not protected(loser):
                            pool.remove(loser.name)
                            events.append({"event": "dedup", "skill": loser.name})
        while len(pool) > pool.cap:
            victims = [s for s in pool if not protected(s)] or list(pool)
            loser = min(victims, key=score)
            pool.remove(loser.name)
            events.append({"event": "prune-cap", "skill": loser.name})
        self.pruned += sum(e["event"].startswith(("prune", "dedup")) for e in events)
        return events
