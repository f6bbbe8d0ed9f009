"""The claim's parts that need no language model: the GuessTheNumber references, the precondition
that stops an agent which cannot play (uninformative, nothing trained), skill counts, options."""

import numpy as np
import pytest

from icml26.core.claims import RunContext, verdict_for
from icml26.core.errors import UserError
from icml26.skillpro.agent import SkillAgent, SolverPolicy, guess_candidates, parse_guess
from icml26.skillpro.claim import PRE_AGENT, _stopped, precondition, run, skill_counts
from icml26.skillpro.env import make_env
from icml26.skillpro.skill import Skill, SkillPool


def test_guess_candidates_match_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(200):
        secret = int(rng.integers(1, 21))
        hist = []
        for g in rng.choice(np.arange(1, 21), size=int(rng.integers(0, 6)), replace=False):
            if g != secret:
                hist.append((int(g), "higher" if secret > g else "lower"))
        allc, cons = guess_candidates(1, 20, hist)
        guessed = {g for g, _ in hist}
        brute = [x for x in range(1, 21) if x not in guessed and all(
            (x > g) == (h == "higher") for g, h in hist)]
        assert cons == brute and secret in cons
        assert allc == [x for x in range(1, 21) if x not in guessed]


def test_guess_observation_parses_and_references_play():
    env = make_env("GuessTheNumber-v0")
    obs = env.reset(3)
    env.step("[10]")
    lo, hi, hist = parse_guess(env.observation())
    assert (lo, hi) == (1, 20) and hist[0][0] == 10 and obs.startswith("Guess the number")
    hard = make_env("GuessTheNumber-v0-hard")
    hard.reset(0)
    assert (hard.low, hard.high, hard.max_turns) == (1, 100, 8)
    rets = {}
    for kind in ("random", "consistent"):
        ag = SkillAgent(SolverPolicy(kind), None, seed=0)
        ag.epsilon = 0.0
        rets[kind] = np.mean([ag.run_episode(make_env("GuessTheNumber-v0"), s).ret
                              for s in range(40)])
    # 10 random distinct guesses of 20 win half the time; a consistent player almost always
    assert 0.3 < rets["random"] < 0.7 and rets["consistent"] > 0.9


class Stubborn:
    """An agent that cannot play: repeats its first guess (invalid twice ends the episode)."""

    def chat(self, messages, **kw):
        return "[1]"


def test_precondition_stops_an_agent_that_cannot_play():
    bad = SkillAgent(Stubborn(), None, seed=0)
    bad.epsilon = 0.0
    pre = precondition(bad, "GuessTheNumber-v0", 30, seed=0, batched=False)
    assert not pre["passed"] and "FAILED" in pre["note"]
    res = _stopped(pre, "stub", "GuessTheNumber-v0", 0)
    verdict, reason = verdict_for(res.headline, res.target, res.uninformative, res.power)
    assert verdict == "uninformative" and "precondition failed" in reason
    assert [r["system"] for r in res.rows][0] == PRE_AGENT
    good = SkillAgent(SolverPolicy("consistent"), None, seed=0)
    good.epsilon = 0.0
    pre = precondition(good, "GuessTheNumber-v0", 30, seed=0, batched=False)
    assert pre["passed"] and np.mean(pre["agent"]) > np.mean(pre["random"])


class _Trainer:
    def __init__(self, events):
        self.log = [{"iteration": 0, "events": [{"event": e} for e in events]}]


def test_skill_counts():
    pool = SkillPool.seeded(cap=10)
    pool.add(Skill("bisect", "a range is known", ("guess the middle", "halve", "repeat"), "won"))
    old = pool.skills[0]
    pool.add(old.child(steps=("a", "b", "c")))  # a refined seed skill (version 2)
    t = _Trainer(["accept", "reject", "reject", "no-candidate", "prune-negative", "dedup"])
    assert skill_counts(t, pool) == (
        "3 evolved, 1 accepted / 2 rejected by the gate, 2 pruned, 2 evolved skill(s) kept of "
        f"{len(pool)}"
    )


@pytest.mark.parametrize(
    "opts, match",
    [
        ({"env": "chess"}, "--opt env must be one of mastermind, guess; got 'chess'"),
        ({"env": "guess"}, "env=guess needs a language-model agent"),
        ({"cross": "smollm2"}, "cross=MODEL needs a language-model agent"),
    ],
)
def test_bad_options(tmp_path, opts, match):
    ctx = RunContext(scale="tiny", seed=0, device="cpu", out_dir=tmp_path, options=opts)
    with pytest.raises(UserError, match=match):
        run(ctx)
