"""Credit assignment, LCB, evolution priority and the Non-Parametric PPO gate.

All formulas follow the paper's description (see docs/skillpro.md):

* credit: ``A = R - b``; a trajectory with ``m`` skill calls gives each skill used ``c`` times
  ``total_gain += c * A / m`` and ``freq += c``; ``b`` is an EMA of the mean return per iteration.
* LCB: ``avg_gain - 0.2 * sqrt(log(1 + t) / n)``.
* priority: ``(1 - e^{-f/50}) (1 - e^{-f/30}) * gap * e^{-maturity/8}``, 0 if ``f < 15``.
* gate: ``rho_t = exp(clip(logpi_new - logpi_old, -10, 10))``,
  ``J = mean_t min(rho_t A_t, clip(rho_t, 1 - eps, 1 + eps) A_t)``, accept if ``J > 0.001``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass
class Baseline:
    """EMA of the per-iteration mean return. ``decay``: weight of the old value (first update sets it)."""

    decay: float = 0.9
    value: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.decay < 1.0:
            raise ValueError(f"baseline decay must be in [0, 1); got {self.decay}")

    def update(self, returns: Sequence[float]) -> float:
        mean = float(np.mean(returns))
        self.value = (
            mean if self.value is None else self.decay * self.value + (1 - self.decay) * mean
        )
        return self.value


def assign_credit(
    pool, trajectories: Sequence[tuple[float, Mapping[str, int]]], baseline: float
) -> dict:
    """Add each trajectory's advantage to the skills it called.

    ``trajectories``: ``(return R, {skill name: calls c})``. Returns ``{name: gain added}``.
    Skills no longer in the pool are ignored.
    """
    added: dict[str, float] = {}
    for ret, calls in trajectories:
        m = sum(calls.values())
        if m == 0:
            continue
        adv = float(ret) - baseline
        for name, c in calls.items():
            skill = pool.get(name)
            if skill is None or c == 0:
                continue
            skill.total_gain += c * adv / m
            skill.freq += c
            added[name] = added.get(name, 0.0) + c * adv / m
    return added


def lcb(avg_gain: float, n: float, t: int, c: float = 0.2) -> float:
    """Lower confidence bound ``avg_gain - c sqrt(log(1 + t) / n)``; ``-inf`` for ``n = 0``."""
    if n <= 0:
        return -math.inf
    return avg_gain - c * math.sqrt(math.log(1 + t) / n)


def evolution_priority(
    skill, best_mature_gain: float, *, min_freq: float = 15, elite_margin: float = 0.01
) -> float:
    """Impact x confidence x gap x age; 0 below ``min_freq`` calls or within ``elite_margin``."""
    f = skill.freq
    if f < min_freq:
        return 0.0
    gap = best_mature_gain - skill.avg_gain
    if gap <= elite_margin:
        return 0.0
    return (1 - math.exp(-f / 50)) * (1 - math.exp(-f / 30)) * gap * math.exp(-skill.maturity / 8)


def ppo_objective(
    logp_new, logp_old, adv, *, eps: float = 0.2, max_log_ratio: float = 10.0
) -> float:
    """The clipped surrogate ``J`` over stored steps (all 1-D float arrays of one length)."""
    logp_new, logp_old, adv = (np.asarray(x, dtype=np.float64) for x in (logp_new, logp_old, adv))
    if (
        not (logp_new.shape == logp_old.shape == adv.shape)
        or logp_new.ndim != 1
        or not logp_new.size
    ):
        raise ValueError(
            f"need equal non-empty 1-D arrays; got {logp_new.shape}, {logp_old.shape}, {adv.shape}"
        )
    rho = np.exp(np.clip(logp_new - logp_old, -max_log_ratio, max_log_ratio))
    return float(np.mean(np.minimum(rho * adv, np.clip(rho, 1 - eps, 1 + eps) * adv)))


def step_advantages(trajectories, baseline: float) -> np.ndarray:
    """``A_t = (R - b) / T`` for every stored step of every trajectory (concatenated)."""
    out = []
    for tr in trajectories:
        steps = len(tr.steps)
        out.extend([(tr.ret - baseline) / steps] * steps)
    return np.array(out, dtype=np.float64)


# ---------------------------------------------------------------- teacher-forced log-probs


def render_prompt(tok, messages: Sequence[Mapping[str, str]]) -> str:
    """The text a causal LM sees for ``messages``: the chat template with the assistant turn open,
    or (no template, e.g. the byte tokenizer) the contents joined by newlines."""
    if getattr(tok, "chat_template", None):
        return tok.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    return "\n".join(m["content"] for m in messages) + "\n"


def action_logprobs(
    model, tok, prompts: Sequence[str], actions: Sequence[str], *, batch_size: int = 8
) -> np.ndarray:
    """Sum of ``log p(action tokens | prompt)`` per pair, float64 (n,), teacher-forced.

    Prompt and action are tokenised separately (no special tokens added to the action) and
    right-padded per batch, so results do not depend on the batch they share. This is
    :func:`icml26.core.mcq.choice_logprobs`, the shared scorer.
    """
    from icml26.core.mcq import choice_logprobs

    if len(prompts) != len(actions):
        raise ValueError(f"{len(prompts)} prompts vs {len(actions)} actions")
    return choice_logprobs(model, tok, prompts, actions, batch_size=batch_size)


class LMScorer:
    """Scores ``log pi(action | messages)`` with a local causal LM (the gate's scorer)."""

    def __init__(self, model, tok, batch_size: int = 8):
        self.model, self.tok, self.batch_size = model, tok, batch_size

    def logprobs(self, messages_list, actions) -> np.ndarray:
        prompts = [render_prompt(self.tok, m) for m in messages_list]
        return action_logprobs(self.model, self.tok, prompts, actions, batch_size=self.batch_size)
