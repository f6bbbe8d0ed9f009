"""policy_loss: closed-form gradients in float64, baseline formulas, invariants, bad input."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.quatro.dual import group_advantages, solve_dual
from icml26.quatro.losses import METHODS, loss_config, policy_loss

G = 4


def _batch(seed=0, q=3, t=5, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(q * G, t, generator=g, dtype=dtype) * 2
    lp = (old + 0.3 * torch.randn(q * G, t, generator=g, dtype=dtype)).requires_grad_()
    mask = torch.ones(q * G, t, dtype=dtype)
    mask[0, 3:] = 0
    mask[5, 1:] = 0
    r = torch.randint(0, 2, (q * G,), generator=g).to(dtype)
    r[:G] = torch.tensor([1.0, 0, 0, 1])
    return lp, old, r, mask


@pytest.mark.parametrize("kl_form", ["rho_log_rho", "k3"])
def test_tr_dual_sequence_gradient_closed_form(kl_form):
    lp, old, r, mask = _batch()
    cfg = loss_config("tr_dual", delta=0.05, kl_form=kl_form)
    loss, st_ = policy_loss(lp, old, r, mask, G, cfg)
    loss.backward()
    a = group_advantages(r, G)
    lam = solve_dual(a, 0.05, G).repeat_interleave(G)
    log_rho = ((lp.detach() - old) * mask).sum(1)
    rho = log_rho.exp()
    extra = 1.0 if kl_form == "rho_log_rho" else 0.0
    factor = -rho * (a - lam * (extra + log_rho)) / len(r)  # d loss / d log rho_i
    expect = factor[:, None] * mask  # d log rho_i / d logp_it = mask
    assert torch.allclose(lp.grad, expect, atol=1e-12)
    assert torch.allclose(st_["lam"], solve_dual(a, 0.05, G))


def test_tr_dual_value_matches_written_objective():
    lp, old, r, mask = _batch(1)
    loss, _ = policy_loss(lp, old, r, mask, G, loss_config("tr_dual", kl_form="rho_log_rho"))
    a = group_advantages(r, G)
    lam = solve_dual(a, 0.05, G)
    total = 0.0
    for qi in range(len(r) // G):
        for i in range(qi * G, qi * G + G):
            lr = float(((lp[i] - old[i]) * mask[i]).sum())
            rho = torch.tensor(lr, dtype=torch.float64).exp()
            total += float(rho * a[i] - lam[qi] * rho * lr)
    assert abs(float(loss) + total / len(r)) < 1e-12


def _ref_clip(lp, old, adv, mask, lo, hi, seq_level, agg):
    """Straightforward loop reference of TRL's clipped loss (grpo/dapo/gspo)."""
    per, tot, n = [], 0.0, 0.0
    for i in range(lp.shape[0]):
        idx = mask[i].bool()
        lr = lp[i][idx] - old[i][idx]
        w = lr.mean().expand_as(lr) if seq_level else lr
        c1 = w.exp()
        lt = -torch.minimum(c1 * adv[i], c1.clamp(1 - lo, 1 + hi) * adv[i])
        per.append(lt.mean())
        tot, n = tot + lt.sum(), n + idx.sum()
    return torch.stack(per).mean() if agg == "seq" else tot / n


@pytest.mark.parametrize(
    "method,seq,agg", [("grpo", False, "seq"), ("dapo", False, "tok"), ("gspo", True, "seq")]
)
def test_clipped_baselines_match_reference(method, seq, agg):
    lp, old, r, mask = _batch(2)
    cfg = loss_config(method)
    loss, st_ = policy_loss(lp, old, r, mask, G, cfg)
    adv = group_advantages(r, G, scale=True)
    ref = _ref_clip(lp, old, adv, mask, cfg.eps_low, cfg.eps_high, seq, agg)
    assert torch.allclose(loss, ref, atol=1e-12)
    g1 = torch.autograd.grad(loss, lp)[0]
    g2 = torch.autograd.grad(ref, lp)[0]
    assert torch.allclose(g1, g2, atol=1e-12)
    assert 0 <= float(st_["clip_frac"]) <= 1


def test_kl_penalty_k3_is_nonnegative_and_zero_at_ratio_one():
    lp, old, r, mask = _batch(3)
    cfg = loss_config("kl_penalty", beta=1.0)
    adv = torch.zeros_like(r)
    loss, _ = policy_loss(lp, old, r, mask, G, cfg, advantages=adv)
    assert float(loss) > 0
    loss0, _ = policy_loss(old.clone().requires_grad_(), old, r, mask, G, cfg, advantages=adv)
    assert abs(float(loss0)) < 1e-15


@pytest.mark.parametrize("method", METHODS)
def test_equal_rewards_zero_gradient(method):
    lp, old, r, mask = _batch(4)
    r = torch.ones_like(r)
    loss, _ = policy_loss(lp, old, r, mask, G, method)
    (g,) = torch.autograd.grad(loss, lp, allow_unused=True)
    if method == "kl_penalty":  # the KL penalty still pulls back to pi_old
        return
    assert g is None or float(g.abs().max()) < 1e-12


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 1000), st.sampled_from(METHODS))
def test_permuting_rows_within_groups_changes_nothing(seed, method):
    lp, old, r, mask = _batch(seed)
    perm = torch.cat(
        [
            torch.randperm(G, generator=torch.Generator().manual_seed(seed + q)) + q * G
            for q in range(len(r) // G)
        ]
    )
    l1, s1 = policy_loss(lp, old, r, mask, G, method)
    l2, s2 = policy_loss(lp[perm], old[perm], r[perm], mask[perm], G, method)
    assert torch.allclose(l1, l2, atol=1e-12)
    assert torch.allclose(s1["kl_q"], s2["kl_q"], atol=1e-12)


def test_first_inner_step_ratio_is_one():
    lp, old, r, mask = _batch(5)
    _, st_ = policy_loss(old.clone().requires_grad_(), old, r, mask, G, "grpo")
    assert float(st_["clip_frac"]) == 0.0 and float(st_["ratio_q50"]) == 1.0
    assert torch.allclose(st_["kl_q"], torch.zeros_like(st_["kl_q"]))


def test_bad_input():
    lp, old, r, mask = _batch(6)
    with pytest.raises(ValueError, match="not a multiple of group_size=5"):
        policy_loss(lp, old, r, mask, 5, "grpo")
    with pytest.raises(ValueError, match="G must be >= 2"):
        policy_loss(lp, old, r, mask, 1, "grpo")
    with pytest.raises(ValueError, match="unknown method 'ppo'; known: tr_dual"):
        loss_config("ppo")
    with pytest.raises(ValueError, match="delta"):
        loss_config("tr_dual", delta=-1.0)
    bad = old.clone()
    bad[1, 0] = float("nan")
    with pytest.raises(ValueError, match="old_logp has non-finite"):
        policy_loss(lp, bad, r, mask, G, "tr_dual")
    r2 = r.clone()
    r2[0] = float("inf")
    with pytest.raises(ValueError, match="rewards"):
        policy_loss(lp, old, r2, mask, G, "tr_dual")


def test_given_lam_equals_solved_lam_and_is_checked():
    lp, old, r, mask = _batch(seed=3)
    cfg = loss_config("tr_dual", delta=0.05)
    a = group_advantages(r, G)
    l1, s1 = policy_loss(lp, old, r, mask, G, cfg)
    l2, s2 = policy_loss(lp, old, r, mask, G, cfg, lam=solve_dual(a, 0.05, G))
    assert torch.allclose(l1, l2, atol=1e-14) and torch.allclose(s1["lam"], s2["lam"])
    l3, _ = policy_loss(lp, old, r, mask, G, cfg, lam=2 * solve_dual(a, 0.05, G))
    assert not torch.allclose(l1, l3)
    with pytest.raises(ValueError, match="lam must be"):
        policy_loss(lp, old, r, mask, G, cfg, lam=torch.ones(2, dtype=lp.dtype))
    with pytest.raises(ValueError, match=">= 0"):
        policy_loss(lp, old, r, mask, G, cfg, lam=-torch.ones(3, dtype=lp.dtype))


def test_trl_trainer_import_error_names_the_pin(monkeypatch):
    import sys

    import icml26.quatro as q

    monkeypatch.setitem(sys.modules, "trl", None)  # as if TRL were not installed
    monkeypatch.delitem(sys.modules, "icml26.quatro.trl_trainer", raising=False)
    monkeypatch.delattr(q, "trl_trainer", raising=False)  # set if another test imported it
    with pytest.raises(ImportError, match=r"trl==1\.16\.0"):
        q.TrDualGRPOTrainer  # noqa: B018
    with pytest.raises(AttributeError):
        q.NoSuchThing  # noqa: B018
