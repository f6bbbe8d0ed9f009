"""The Skill-MDP agent loop, naive episodic memory, and scripted reference policies.

``SkillAgent.run_episode`` plays one episode: with no active skill it selects one (epsilon-greedy;
``llm_model`` or ``llm_topk_lcb``), injects its text into the decision prompt, asks the policy for
an action, and lets the meta-controller check the skill's termination condition after each step.
The agent's randomness comes from its own ``random.Random`` (never the env's, never the global one).
"""

from __future__ import annotations

import functools
import itertools
import math
import random
import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from icml26.skillpro.ppo import lcb
from icml26.skillpro.skill import SkillPool

GUIDE_OPEN, GUIDE_CLOSE = "### Guidance", "### End of guidance"


@dataclass
class Step:
    obs: str
    action: str
    skill: str | None
    guidance: str = ""


@dataclass
class Trajectory:
    seed: int
    ret: float
    steps: list[Step]
    calls: Counter = field(default_factory=Counter)
    invalid_moves: int = 0
    prompt_chars: int = 0

    @property
    def reuse(self) -> float:
        """Share of steps taken with an active skill."""
        return sum(s.skill is not None for s in self.steps) / max(1, len(self.steps))


def decision_messages(obs: str, guidance: str) -> list[dict]:
    system = "You are an agent playing a text game. Reply with your move only."
    if guidance:
        system += f"\n{GUIDE_OPEN}\n{guidance}\n{GUIDE_CLOSE}"
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": obs + "\nYour move:"},
    ]


class NaiveMemory:
    """ExpeL/AWM-style baseline: every episode summary kept; top-k by embedding cosine injected."""

    def __init__(self, embed_fn, k: int = 3):
        self.embed_fn, self.k, self.texts, self.vecs = embed_fn, k, [], []
        self._cache: dict[str, np.ndarray] = {}

    def add(self, traj: Trajectory) -> None:
        moves = " ".join(s.action.strip()[:20] for s in traj.steps[-6:])
        text = f"Episode (return {traj.ret:.2f}, {len(traj.steps)} moves): last moves {moves}"
        self.texts.append(text)
        self.vecs.append(self.embed_fn([text])[0])  # embedded once

    def retrieve(self, obs: str) -> str:
        if not self.texts:
            return ""
        if obs not in self._cache:
            self._cache[obs] = self.embed_fn([obs])[0]
        top = np.argsort(-(np.stack(self.vecs) @ self._cache[obs]), kind="stable")[: self.k]
        return "Past experience:\n" + "\n".join(self.texts[i] for i in top)


class SkillAgent:
    """Args:
    policy: a ``ChatModel`` choosing actions (and, for ``llm_*`` selection, skills).
    pool: the :class:`SkillPool`; ``None`` plays without skills.
    meta: a ``ChatModel`` checking termination (``None``: a skill stays active to the end).
    select: ``"llm_model"`` or ``"llm_topk_lcb"``.
    epsilon: exploration rate (set per iteration by the trainer).
    memory: a :class:`NaiveMemory` (the baseline) instead of skills.
    """

    def __init__(
        self,
        policy,
        pool: SkillPool | None,
        *,
        meta=None,
        select: str = "llm_model",
        epsilon: float = 0.3,
        seed: int = 0,
        topk: int = 5,
        memory=None,
        temperature: float = 0.7,
        max_new_tokens: int = 24,
    ):
        if select not in ("llm_model", "llm_topk_lcb"):
            raise ValueError(f"select must be 'llm_model' or 'llm_topk_lcb'; got {select!r}")
        self.policy, self.pool, self.meta, self.select = policy, pool, meta, select
        self.epsilon, self.topk, self.memory = epsilon, topk, memory
        self.temperature, self.max_new_tokens = temperature, max_new_tokens
        self.rng = random.Random(seed)
        self.t = 0  # iterations seen (for the LCB)

    def _ask_names(self, obs: str, k: int):
        """Coroutine: ask the policy for ``k`` skill names; returns the names found, in order."""
        menu = "\n".join(f"- {s.name}: {s.initiation}" for s in self.pool)
        reply = yield ChatCall(
            self.policy,
            [
                {
                    "role": "user",
                    "content": (
                        f"{obs}\n\nSkills:\n{menu}\nReply with the name{'s' if k > 1 else ''} of the "
                        f"{k} most useful skill{'s' if k > 1 else ''}, comma separated."
                    ),
                }
            ],
            {"max_new_tokens": 48, "temperature": 0.0},
            "select",
        )
        names = [s.name for s in self.pool]
        found = sorted((reply.find(n), n) for n in names if n in reply)
        return [n for _, n in found][:k]

    def _choose(self, obs: str):
        """Coroutine form of :meth:`choose_skill`."""
        if self.pool is None or not len(self.pool):
            return None
        if self.rng.random() < self.epsilon:
            return self.rng.choice(self.pool.skills)
        if self.select == "llm_model":
            names = yield from self._ask_names(obs, 1)
            s = self.pool.get(names[0]) if names else None
            return s if s is not None and (s.avg_gain > -0.015 or s.maturity < 3) else None
        cands = [self.pool.get(n) for n in (yield from self._ask_names(obs, self.topk))]
        scored = [(lcb(s.avg_gain, s.freq, self.t), s) for s in cands if s is not None]
        if not scored:
            return None
        score, best = max(scored, key=lambda x: x[0])
        return best if best.maturity < 3 or score > 0 else None

    def _terminated(self, skill, obs: str):
        if self.meta is None:
            return False
        reply = yield ChatCall(
            self.meta,
            [
                {
                    "role": "user",
                    "content": (
                        f"{obs}\n\nTermination condition: {skill.termination}\nIs it met? Answer yes or no."
                    ),
                }
            ],
            {"max_new_tokens": 3, "temperature": 0.0},
            "meta",
        )
        return reply.strip().lower().startswith("yes")

    def choose_skill(self, obs: str):
        """The skill to activate now, or ``None``."""
        return drive(self._choose(obs))

    def terminated(self, skill, obs: str) -> bool:
        return drive(self._terminated(skill, obs))

    def episode(self, env, seed: int):
        """One episode as a coroutine: yields :class:`ChatCall` requests, receives the reply text,
        returns the :class:`Trajectory`. :meth:`run_episode` drives it one call at a time;
        :func:`icml26.skillpro.rollout.run_episodes` drives many at once (batched)."""
        obs = env.reset(seed)
        traj = Trajectory(seed=seed, ret=0.0, steps=[])
        active, done, ret = None, False, 0.0
        while not done:
            if active is None and self.pool is not None:
                active = yield from self._choose(obs)
                if active is not None:
                    traj.calls[active.name] += 1
            guidance = (
                active.text()
                if active is not None
                else (self.memory.retrieve(obs) if self.memory is not None else "")
            )
            msgs = decision_messages(obs, guidance)
            traj.prompt_chars += len(guidance)
            action = yield ChatCall(
                self.policy,
                msgs,
                {
                    "max_new_tokens": self.max_new_tokens,
                    "temperature": self.temperature,
                    "seed": self.rng.randrange(2**31),
                },
                "act",
            )
            traj.steps.append(Step(obs, action, active.name if active else None, guidance))
            obs, done, ret = env.step(action)
            if active is not None and not done and (yield from self._terminated(active, obs)):
                active = None
        traj.ret, traj.invalid_moves = ret, getattr(env, "invalid_moves", 0)
        return traj

    def run_episode(self, env, seed: int) -> Trajectory:
        return drive(self.episode(env, seed))


@dataclass
class ChatCall:
    """One chat request from an episode coroutine: ``model.chat(messages, **kwargs)``.
    ``stream`` names the prompt family ("act", "select", "meta") for KV-cache slots."""

    model: object
    messages: list
    kwargs: dict
    stream: str


def drive(gen):
    """Run an agent coroutine to completion, answering each :class:`ChatCall` with ``chat``."""
    try:
        req = next(gen)
        while True:
            req = gen.send(req.model.chat(req.messages, **req.kwargs))
    except StopIteration as stop:
        return stop.value


# ------------------------------------------------------------------ scripted reference policies

_RULES_RE = re.compile(
    r"code of (\d+) digits, each from 1 to (\d+), with (possible repeats|no duplicates)"
)
_HIST_RE = re.compile(r"Guess \[([\d ]+)\]: (\d+) black, (\d+) white")
GOOD_CONSISTENT = "Only guess a code consistent with every feedback so far"
MILD_CONSISTENT = "Prefer codes that fit the feedback"
GOOD_FORMAT = "Answer only with the bracketed guess"
BAD_REPEAT = "Repeat your previous guess to confirm it"


def parse_mastermind(obs: str):
    """``(length, colours, repeats, [(guess, black, white), ...])`` from a Mastermind observation."""
    m = _RULES_RE.search(obs)
    if m is None:
        raise ValueError("not a Mastermind observation")
    hist = [(tuple(map(int, g.split())), int(b), int(w)) for g, b, w in _HIST_RE.findall(obs)]
    return int(m.group(1)), int(m.group(2)), m.group(3) == "possible repeats", tuple(hist)


@functools.lru_cache(maxsize=4096)
def consistent_codes(length, colours, repeats, hist):
    from icml26.skillpro.env import score_guess

    gen = (
        itertools.product(range(1, colours + 1), repeat=length)
        if repeats
        else itertools.permutations(range(1, colours + 1), length)
    )
    guessed = {g for g, _, _ in hist}
    allc, cons = [], []
    for c in gen:
        if c in guessed:
            continue
        allc.append(c)
        if all(score_guess(list(c), list(g)) == (b, w) for g, b, w in hist):
            cons.append(c)
    return tuple(allc), tuple(cons)


_SETS: dict = {}


def _sets(allc, cons):
    key = (id(allc), id(cons))
    if key not in _SETS or _SETS[key][0] is not allc:
        if len(_SETS) > 4096:
            _SETS.clear()
        _SETS[key] = (allc, frozenset(cons), frozenset(allc))
    return _SETS[key][1], _SETS[key][2]


class ScriptedPolicy:
    """A stochastic Mastermind policy whose behaviour depends on the injected guidance text, with
    exact log-probs (the gate's scorer in the mechanism check).

    pi(a) = p_c U(consistent codes) + p_v U(valid unguessed codes) + p_inv [a == "pass"], with
    ``p_c`` 0.85 when the guidance says :data:`GOOD_CONSISTENT` (0.2 for :data:`MILD_CONSISTENT`,
    else 0.05), ``p_inv`` lowered by
    :data:`GOOD_FORMAT` and raised by :data:`BAD_REPEAT`. Not a language model: a mechanism check.
    """

    def mix(self, guidance: str) -> tuple[float, float, float]:
        p_c = 0.85 if GOOD_CONSISTENT in guidance else 0.2 if MILD_CONSISTENT in guidance else 0.05
        p_inv = 0.02 if GOOD_FORMAT in guidance else 0.12
        if BAD_REPEAT in guidance:
            p_inv = min(0.9, p_inv + 0.4)
        p_c = min(p_c, 1 - p_inv)
        return p_c, 1 - p_c - p_inv, p_inv

    @staticmethod
    def _split(messages):
        sys = messages[0]["content"]
        g = sys.split(GUIDE_OPEN, 1)[1].split(GUIDE_CLOSE, 1)[0] if GUIDE_OPEN in sys else ""
        return g, messages[-1]["content"]

    def chat(self, messages, *, max_new_tokens=24, temperature=0.0, seed=None, stop=None):
        guidance, obs = self._split(messages)
        if "Skills:" in obs:  # skill selection: name the skills in pool order (stub behaviour)
            return ", ".join(re.findall(r"^- ([a-z0-9-]+):", obs, re.M))
        rng = random.Random(seed)
        p_c, p_v, _ = self.mix(guidance)
        allc, cons = consistent_codes(*parse_mastermind(obs))
        u = rng.random()
        if u < p_c and cons:
            return "[" + " ".join(map(str, rng.choice(cons))) + "]"
        if u < p_c + p_v and allc:
            return "[" + " ".join(map(str, rng.choice(allc))) + "]"
        return "pass"

    def logprobs(self, messages_list, actions) -> np.ndarray:
        out = []
        for msgs, a in zip(messages_list, actions, strict=True):
            guidance, obs = self._split(msgs)
            p_c, p_v, p_inv = self.mix(guidance)
            allc, cons = consistent_codes(*parse_mastermind(obs))
            cons_set, all_set = _sets(allc, cons)
            m = re.fullmatch(r"\[([\d ]+)\]", a.strip())
            if m is None:
                p = p_inv
            else:
                code = tuple(map(int, m.group(1).split()))
                p = (p_c / len(cons) if code in cons_set else 0.0) + (
                    p_v / len(allc) if code in all_set else 0.0
                )
            out.append(math.log(max(p, 1e-300)))
        return np.array(out)


_GUESS_RULES_RE = re.compile(r"Guess the number between (\d+) and (\d+) in (\d+) turns")
_GUESS_HIST_RE = re.compile(r"Guess \[(\d+)\]: the number is (higher|lower)\.")


def parse_guess(obs: str):
    """``(low, high, [(guess, "higher" | "lower"), ...])`` from a GuessTheNumber observation."""
    m = _GUESS_RULES_RE.search(obs)
    if m is None:
        raise ValueError("not a GuessTheNumber observation")
    hist = [(int(g), h) for g, h in _GUESS_HIST_RE.findall(obs)]
    return int(m.group(1)), int(m.group(2)), hist


def guess_candidates(low: int, high: int, hist) -> tuple[list[int], list[int]]:
    """(every unguessed number in range, those consistent with every 'higher'/'lower')."""
    guessed = {g for g, _ in hist}
    lo, hi = low, high
    for g, h in hist:
        if h == "higher":
            lo = max(lo, g + 1)
        else:
            hi = min(hi, g - 1)
    allc = [x for x in range(low, high + 1) if x not in guessed]
    return allc, [x for x in allc if lo <= x <= hi]


class SolverPolicy:
    """Reference players: ``"consistent"`` (a random code / number consistent with all feedback)
    or ``"random"`` (a random valid unguessed code / number), for Mastermind and GuessTheNumber
    (told apart by the observation). Own RNG from the ``seed`` argument. Neither is the skill a
    good agent learns (bisection for GuessTheNumber): the consistent player is the control's
    strong reference, the random one the floor."""

    def __init__(self, kind: str = "consistent"):
        if kind not in ("consistent", "random"):
            raise ValueError(f"kind must be 'consistent' or 'random'; got {kind!r}")
        self.kind = kind

    def chat(self, messages, *, max_new_tokens=24, temperature=0.0, seed=None, stop=None):
        obs = messages[-1]["content"]
        rng = random.Random(seed)
        if _GUESS_RULES_RE.search(obs):
            allc, cons = guess_candidates(*parse_guess(obs))
            return f"[{rng.choice(cons if self.kind == 'consistent' and cons else allc)}]"
        allc, cons = consistent_codes(*parse_mastermind(obs))
        code = rng.choice(cons if self.kind == "consistent" and cons else allc)
        return "[" + " ".join(map(str, code)) + "]"
