import math

import numpy as np
import pytest
import torch

from icml26.skillpro.ppo import (
    Baseline,
    action_logprobs,
    assign_credit,
    evolution_priority,
    lcb,
    ppo_objective,
)
from icml26.skillpro.skill import Skill, SkillPool


def _pool():
    return SkillPool([Skill(n, "x", ("a", "b", "c"), "t") for n in ("aa", "bb")])


def test_credit_by_hand():
    pool = _pool()
    added = assign_credit(
        pool, [(1.0, {"aa": 3, "bb": 1}), (0.2, {"bb": 2}), (0.9, {})], baseline=0.5
    )
    # traj 1: A = 0.5, m = 4 -> aa += 3*0.5/4, bb += 1*0.5/4; traj 2: A = -0.3, m = 2 -> bb += 2*(-0.3)/2
    assert pool.get("aa").total_gain == pytest.approx(0.375) and pool.get("aa").freq == 3
    assert pool.get("bb").total_gain == pytest.approx(0.125 - 0.3) and pool.get("bb").freq == 3
    assert pool.get("bb").avg_gain == pytest.approx(-0.175 / 3)
    assert added["aa"] == pytest.approx(0.375)
    b = Baseline(0.9)
    assert b.update([1.0, 0.0]) == 0.5 and b.update([1.0]) == pytest.approx(0.55)


def test_lcb_and_priority_by_hand():
    assert lcb(0.3, 4, 9) == pytest.approx(0.3 - 0.2 * math.sqrt(math.log(10) / 4))
    assert lcb(0.3, 0, 9) == -math.inf
    s = Skill("aa", "x", ("a", "b", "c"), "t", freq=20, total_gain=-2.0, maturity=4)  # avg -0.1
    want = (1 - math.exp(-20 / 50)) * (1 - math.exp(-20 / 30)) * 0.3 * math.exp(-4 / 8)
    assert evolution_priority(s, 0.2) == pytest.approx(want)
    assert evolution_priority(s, -0.095) == 0.0  # gap 0.005 <= 0.01: elite protection
    s.freq, s.total_gain = 14, -1.4
    assert evolution_priority(s, 0.2) == 0.0  # f < 15


def test_ppo_objective_clipping_by_hand():
    lp_old = np.zeros(4)
    lp_new = np.log([1.5, 0.5, 1.1, 2.0])
    adv = np.array([1.0, 1.0, -1.0, -2.0])
    # min(rho A, clip(rho) A): 1.2, 0.5, -1.1, -4.0
    assert ppo_objective(lp_new, lp_old, adv) == pytest.approx((1.2 + 0.5 - 1.1 - 4.0) / 4)
    assert ppo_objective(lp_old, lp_old, adv) == pytest.approx(adv.mean())
    assert ppo_objective(np.array([100.0]), np.array([0.0]), np.array([-1.0])) == pytest.approx(
        -math.exp(10)
    )
    with pytest.raises(ValueError):
        ppo_objective([], [], [])


def _softmax_logp(theta, s, a):
    return float(theta[s, a] - np.log(np.exp(theta[s]).sum()))


def test_softmax_policy_gate_exact_rho():
    """Edits raising positive-advantage actions pass, negative ones fail, identical skill J = 0."""
    rng = np.random.default_rng(0)
    n_s, n_a = 5, 4
    theta = rng.normal(size=(n_s, n_a))
    states, actions = rng.integers(0, n_s, 200), rng.integers(0, n_a, 200)
    adv_of_action = np.array([0.5, 0.2, -0.3, -0.6])
    adv = adv_of_action[actions] - adv_of_action[actions].mean()  # centred: identical skill J = 0
    old = np.array([_softmax_logp(theta, s, a) for s, a in zip(states, actions, strict=False)])

    def j(delta):
        new = np.array(
            [_softmax_logp(theta + delta, s, a) for s, a in zip(states, actions, strict=False)]
        )
        return ppo_objective(new, old, adv)

    good, bad = np.zeros((n_s, n_a)), np.zeros((n_s, n_a))
    good[:, 0] += 0.5
    bad[:, 3] += 0.5
    assert j(good) > 0.001
    assert j(bad) < 0.001
    assert j(np.zeros((n_s, n_a))) == pytest.approx(0.0, abs=1e-12)
    assert j(np.ones((n_s, n_a))) == pytest.approx(0.0, abs=1e-12)  # logit shift: same policy


def test_teacher_forced_logprob_float64_and_padding():
    from icml26.core.lm import tiny_llama

    model, tok = tiny_llama(hidden=32, layers=2, heads=2, max_len=128, seed=0)
    prompts = ["Guess the code", "a much longer prompt about pegs and colours", "x"]
    actions = ["[1 2 3 4]", "pass", "[6 5]"]
    got = action_logprobs(model, tok, prompts, actions, batch_size=3)
    single = np.array(
        [action_logprobs(model, tok, [p], [a])[0] for p, a in zip(prompts, actions, strict=False)]
    )
    np.testing.assert_allclose(got, single, atol=1e-5)
    m64 = model.double()
    for p, a, g in zip(prompts, actions, got, strict=False):
        pi = tok(p)["input_ids"]
        ai = tok(a, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([pi + ai])
        with torch.no_grad():
            lp = torch.log_softmax(m64(ids).logits[0].double(), -1)
        ref = sum(float(lp[len(pi) - 1 + k, t]) for k, t in enumerate(ai))
        assert g == pytest.approx(ref, abs=1e-4)
