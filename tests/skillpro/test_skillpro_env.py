import itertools
import random

import numpy as np
import pytest

from icml26.core.errors import UserError
from icml26.skillpro.agent import SkillAgent, SolverPolicy
from icml26.skillpro.env import make_env, score_guess


def _brute_pegs(secret, guess):
    black = sum(a == b for a, b in zip(secret, guess, strict=False))
    s = [a for a, b in zip(secret, guess, strict=False) if a != b]
    g = [b for a, b in zip(secret, guess, strict=False) if a != b]
    white = 0
    for d in g:
        if d in s:
            s.remove(d)
            white += 1
    return black, white


def test_pegs_match_brute_force_with_repeats():
    rng = random.Random(0)
    for _ in range(500):
        s, g = [rng.randint(1, 4) for _ in range(4)], [rng.randint(1, 4) for _ in range(4)]
        assert score_guess(s, g) == _brute_pegs(s, g)
    assert score_guess([1, 2, 3, 4], [2, 1, 3, 5]) == (1, 2)


def test_one_invalid_move_forgiven_second_ends_with_partial_credit():
    env = make_env("Mastermind-v0")
    env.reset(3)
    env.secret = [1, 2, 3, 4]
    _, done, _ = env.step("[1 2 5 6]")  # 2 black -> credit 0.5
    assert not done
    _, done, _ = env.step("hello")  # forgiven
    assert not done and "Invalid move" in env.observation()
    _, done, _ = env.step("[2 1 5 6]")  # valid resets the count: 0 black 2 white -> 0.25
    _, done, _ = env.step("[1 1 2 3]")  # duplicate: forgiven
    assert not done
    _, done, ret = env.step("[2 1 5 6]")  # repeated guess: second in a row ends it
    assert done and ret == pytest.approx(0.25) and env.invalid_moves == 3


def test_turn_limit_and_win():
    env = make_env("Mastermind-v0")
    env.reset(0)
    env.secret = [1, 2, 3, 4]
    codes = [c for c in itertools.permutations(range(1, 7), 4) if list(c) != [1, 2, 3, 4]][:20]
    for k, c in enumerate(codes):
        _, done, ret = env.step("[" + " ".join(map(str, c)) + "]")
        assert done == (k == 19)
    b, w = score_guess([1, 2, 3, 4], list(codes[-1]))
    assert ret == pytest.approx((b + 0.5 * w) / 4)
    env.reset(0)
    env.secret = [1, 2, 3, 4]
    assert env.step("[1 2 3 4]")[1:] == (True, 1.0)


def test_solver_references():
    env = make_env("Mastermind-v0")
    sol = [
        SkillAgent(SolverPolicy("consistent"), None, seed=1).run_episode(env, s) for s in range(30)
    ]
    assert all(t.ret == 1.0 for t in sol) and np.mean([len(t.steps) for t in sol]) <= 6
    rnd = [SkillAgent(SolverPolicy("random"), None, seed=1).run_episode(env, s) for s in range(30)]
    assert 0.3 < np.mean([t.ret for t in rnd]) < 0.6  # ~0.45: valid guesses, not skill


def test_env_and_agent_rngs_are_separate():
    env = make_env("Mastermind-v0")
    random.seed(123)
    before = random.random()
    random.seed(123)
    env.reset(5)
    assert random.random() == before  # env does not touch the global RNG
    a1 = SkillAgent(SolverPolicy("random"), None, seed=7)
    a2 = SkillAgent(SolverPolicy("random"), None, seed=7)
    t1 = a1.run_episode(env, 1)
    make_env("Mastermind-v0").reset(99)
    t2 = a2.run_episode(env, 1)
    assert [s.action for s in t1.steps] == [s.action for s in t2.steps]
    env.reset(1)
    s1 = list(env.secret)
    env.reset(2)
    env.reset(1)
    assert env.secret == s1


def test_unknown_env_names_near_ones():
    with pytest.raises(UserError, match="Mastermind-v0"):
        make_env("Mastermind-v1")
    assert make_env("Mastermind-v0-extreme").length == 6


def test_guess_the_number_bisection_wins():
    env = make_env("GuessTheNumber-v0")
    for seed in range(20):
        obs, lo, hi, done = env.reset(seed), 1, 20, False
        while not done:
            g = (lo + hi) // 2
            obs, done, ret = env.step(f"[{g}]")
            if not done:
                lo, hi = (g + 1, hi) if obs.endswith("higher.") else (lo, g - 1)
        assert ret == 1.0 and len(env.history) <= 4
