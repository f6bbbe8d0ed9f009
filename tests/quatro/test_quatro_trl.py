"""TRL integration: the subclass equals policy_loss, our baselines equal TRL's own losses, the
group-preserving shuffle, split-group errors, and a 2-step run that logs lambda and KL."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.quatro.dual import solve_dual
from icml26.quatro.losses import loss_config, policy_loss

trl = pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402  (trl brings datasets)

from icml26.core.lm import tiny_llama  # noqa: E402
from icml26.quatro.trl_trainer import (  # noqa: E402
    TrDualGRPOConfig,
    TrDualGRPOTrainer,
    group_shuffle,
)

G = 4
PROMPTS = ["1+2=", "3+4=", "5+6=", "7+8="]


def _reward(completions, **_):
    # depends on the sampled text, so groups have reward variance even for a random policy
    return [float(sum(map(ord, c)) % 3 == 0) for c in completions]


@pytest.fixture(scope="module")
def tiny():
    model, tok = tiny_llama(hidden=32, layers=1, heads=2, seed=0)
    return model.train(), tok


def _trainer(tiny, tmp_path, cls, cfg_cls, **kw):
    model, tok = tiny
    ds = Dataset.from_dict({"prompt": PROMPTS * 4})
    args = dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=8,
        num_generations=G,
        max_completion_length=3,
        max_steps=2,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    args.update(kw)
    tr = cls(
        model=model,
        reward_funcs=[_reward],
        args=cfg_cls(**args),
        train_dataset=ds,
        processing_class=tok,
    )
    tr.current_gradient_accumulation_steps = 1
    return tr


def _inputs(tok, seed=0, q=2):
    g = torch.Generator().manual_seed(seed)
    b, t = q * G, 3
    enc = tok(PROMPTS[:q], add_special_tokens=False)["input_ids"]
    prompt_ids = torch.tensor([enc[i // G] for i in range(b)])
    comp = torch.randint(0, 200, (b, t), generator=g)
    cmask = torch.ones(b, t, dtype=torch.long)
    cmask[1, 2:] = 0
    cmask[6, 1:] = 0
    rewards = torch.tensor([1.0, 0, 0, 1, 0, 0, 1, 1][:b])
    adv = rewards - rewards.view(-1, G).mean(1).repeat_interleave(G)
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "completion_ids": comp,
        "completion_mask": cmask,
        "advantages": adv,
        "num_items_in_batch": cmask.sum().float(),
    }, g


def _logps(tr, inputs):
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    am = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    lp, _, _ = tr._get_per_token_logps_and_entropies(
        tr.model, ids, am, inputs["completion_ids"].shape[1], compute_entropy=True
    )
    return lp


@pytest.mark.parametrize("ratio_level", ["sequence", "token"])
def test_subclass_loss_equals_policy_loss(tiny, tmp_path, ratio_level):
    tr = _trainer(tiny, tmp_path, TrDualGRPOTrainer, TrDualGRPOConfig, tr_ratio_level=ratio_level)
    inputs, g = _inputs(tiny[1])
    lp = _logps(tr, inputs).detach()
    old = lp + 0.2 * torch.randn(lp.shape, generator=g)
    lam = solve_dual(inputs["advantages"], 0.05, G)
    inputs.update(
        old_per_token_logps=old,
        tr_lambda=lam.repeat_interleave(G),
        tr_group=torch.arange(2).repeat_interleave(G),
    )
    ours = tr._compute_loss(tr.model, inputs)
    ref, _ = policy_loss(
        _logps(tr, inputs),
        old,
        inputs["advantages"],
        inputs["completion_mask"].float(),
        G,
        loss_config("tr_dual", ratio_level=ratio_level, delta=0.05),
        advantages=inputs["advantages"],
    )
    assert lam.min() > 0
    assert torch.allclose(ours, ref, atol=1e-6, rtol=1e-6)
    # and the gradient is the same
    tr.model.zero_grad()
    ours.backward()
    g1 = [p.grad.clone() for p in tr.model.parameters() if p.grad is not None]
    tr.model.zero_grad()
    ref2, _ = policy_loss(
        _logps(tr, inputs),
        old,
        inputs["advantages"],
        inputs["completion_mask"].float(),
        G,
        loss_config("tr_dual", ratio_level=ratio_level, delta=0.05),
        advantages=inputs["advantages"],
    )
    ref2.backward()
    g2 = [p.grad.clone() for p in tr.model.parameters() if p.grad is not None]
    tr.model.zero_grad()
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-5) for a, b in zip(g1, g2, strict=True))


@pytest.mark.parametrize(
    "method, trl_kw",
    [
        ("grpo", dict(loss_type="grpo", epsilon=0.2)),
        ("dapo", dict(loss_type="dapo", epsilon=0.2, epsilon_high=0.28)),
        (
            "gspo",
            dict(
                loss_type="grpo",
                epsilon=3e-4,
                epsilon_high=4e-4,
                importance_sampling_level="sequence",
            ),
        ),
    ],
)
def test_our_baselines_equal_trl_loss(tiny, tmp_path, method, trl_kw):
    from trl import GRPOConfig, GRPOTrainer

    tr = _trainer(tiny, tmp_path, GRPOTrainer, GRPOConfig, beta=0.0, **trl_kw)
    inputs, g = _inputs(tiny[1], seed=1)
    lp = _logps(tr, inputs).detach()
    # ratios spread well beyond the clip ranges, so clipping is exercised
    inputs["old_per_token_logps"] = lp + 0.3 * torch.randn(lp.shape, generator=g)
    with torch.no_grad():
        theirs = tr._compute_loss(tr.model, inputs)
        ours, st_ = policy_loss(
            _logps(tr, inputs),
            inputs["old_per_token_logps"],
            inputs["advantages"],
            inputs["completion_mask"].float(),
            G,
            loss_config(method),
            advantages=inputs["advantages"],
        )
    assert st_["clip_frac"] > 0
    assert torch.allclose(ours, theirs, atol=1e-6, rtol=1e-6)


@settings(max_examples=25, deadline=None)
@given(q=st.integers(1, 6), g=st.integers(2, 5), seed=st.integers(0, 10_000))
def test_group_shuffle_keeps_groups_whole(q, g, seed):
    n = q * g
    batch = {
        "ids": torch.arange(n),
        "two_d": torch.arange(n).unsqueeze(1).repeat(1, 3),
        "names": [f"r{i}" for i in range(n)],
        "count": torch.tensor(7.0),
        "none": None,
    }
    out = group_shuffle(batch, g, torch.Generator().manual_seed(seed))
    ids = out["ids"].view(q, g)
    assert torch.equal(ids - ids[:, :1], torch.arange(g).expand(q, g))  # consecutive within a group
    assert (ids[:, 0] % g == 0).all()
    assert sorted(out["ids"].tolist()) == list(range(n))
    assert torch.equal(out["two_d"][:, 0], out["ids"])
    assert out["names"] == [f"r{i}" for i in out["ids"].tolist()]
    assert out["count"].item() == 7.0 and out["none"] is None


def test_split_group_and_bad_config_raise(tiny, tmp_path):
    tr = _trainer(tiny, tmp_path, TrDualGRPOTrainer, TrDualGRPOConfig)
    inputs, _ = _inputs(tiny[1])
    inputs.update(tr_lambda=torch.zeros(2 * G), tr_group=torch.tensor([0, 0, 0, 1, 1, 1, 1, 0]))
    with pytest.raises(ValueError, match="splits a group"):
        tr._compute_loss(tr.model, inputs)
    with pytest.raises(ValueError, match="per_device_train_batch_size"):
        _trainer(
            tiny,
            tmp_path,
            TrDualGRPOTrainer,
            TrDualGRPOConfig,
            per_device_train_batch_size=6,
            num_generations=4,
            generation_batch_size=12,
        )
    with pytest.raises(ValueError, match="delta"):
        TrDualGRPOConfig(output_dir=str(tmp_path), tr_delta=0.0, report_to=[], use_cpu=True)
    with pytest.raises(ValueError, match="tr_ratio_level"):
        TrDualGRPOConfig(
            output_dir=str(tmp_path), tr_ratio_level="tokens", report_to=[], use_cpu=True
        )
    with pytest.raises(ValueError, match="group_size|multiple"):
        group_shuffle({"x": torch.arange(5)}, 2)


def test_two_steps_log_lambda_and_kl(tiny, tmp_path):
    torch.manual_seed(0)
    tr = _trainer(
        tiny,
        tmp_path,
        TrDualGRPOTrainer,
        TrDualGRPOConfig,
        num_iterations=2,
        learning_rate=1e-2,
        temperature=1.0,
    )
    tr.train()
    logs = [h for h in tr.state.log_history if "tr_dual/lambda_mean" in h]
    assert len(logs) == 2
    for h in logs:
        for k in (
            "tr_dual/kl_q_mean",
            "tr_dual/kl_q_max",
            "tr_dual/kl_le_2delta",
            "entropy",
            "tr_dual/lambda_zero",
            "tr_dual/ratio_q95",
        ):
            assert np.isfinite(h[k])
    # reward variance exists, so some query binds (lambda > 0); the second step reuses the batch
    # after one update, so the policy has moved (KL-hat > 0) while the first step's ratio is 1
    assert logs[0]["tr_dual/lambda_max"] > 0
    assert logs[0]["tr_dual/kl_q_max"] == pytest.approx(0.0, abs=1e-10)
    assert logs[1]["tr_dual/kl_q_max"] > 0
