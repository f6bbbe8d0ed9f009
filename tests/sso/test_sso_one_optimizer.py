"""SSO as one torch.optim.Optimizer: ``algorithm`` groups, schedulers, Trainer, state_dict."""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn

from icml26.sso import SSO, ChainedOptimizer, sso_optimizer, sso_param_groups
from icml26.sso.optim import radius


def _model(seed=0):
    from icml26.core.lm import tiny_llama

    model, _ = tiny_llama(hidden=32, layers=1, heads=2, max_len=16, tie_embeddings=False,
                          seed=seed)
    return model.train()


def _batches(n, vocab, seed=3):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (4, 12), generator=g) for _ in range(n)]


def _train(model, opt, batches, sched=None):
    losses = []
    for x in batches:
        opt.zero_grad()
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        losses.append(loss.item())
    return losses


def test_one_sso_equals_sso_chained_with_torch_adamw_bit_for_bit():
    """The AdamW groups inside SSO are torch's AdamW arithmetic, and the matrix groups are
    untouched by sharing the optimizer: same parameters after 4 steps, to the bit."""
    a, b = _model(), _model()
    batches = _batches(4, a.config.vocab_size)
    one = sso_optimizer(a, lr=0.03, adamw_lr=2e-3, adamw_weight_decay=0.1)
    mats, aux = sso_param_groups(b)
    sso = SSO(mats, lr=0.03)
    sso.spectral_init_()
    two = ChainedOptimizer(sso, torch.optim.AdamW(aux, lr=2e-3, betas=(0.9, 0.95),
                                                  foreach=False))
    _train(a, one, batches)
    _train(b, two, batches)
    for (n, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), n
    algos = [g["algorithm"] for g in one.param_groups]
    assert algos == ["sso", "sso", "adamw"]
    st = one.state[a.lm_head.weight]
    assert set(st) == {"step", "exp_avg", "exp_avg_sq"} and float(st["step"]) == 4


def test_adamw_group_equals_torch_adamw_with_weight_decay_and_never_takes_spectral_lr():
    torch.manual_seed(0)
    p1 = nn.Parameter(torch.randn(5))
    p2 = nn.Parameter(p1.detach().clone())
    ours = SSO([{"params": [p1], "algorithm": "adamw", "weight_decay": 0.3}], lr=0.5,
               adamw_lr=1e-2, adamw_betas=(0.8, 0.99), adamw_eps=1e-6)
    ref = torch.optim.AdamW([p2], lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.3,
                            foreach=False)
    assert ours.param_groups[0]["lr"] == 1e-2  # the adamw default, not the spectral 0.5
    for i in range(5):
        g = torch.randn(5, generator=torch.Generator().manual_seed(i))
        p1.grad, p2.grad = g.clone(), g.clone()
        ours.step()
        ref.step()
    assert torch.equal(p1, p2)


@pytest.mark.parametrize("make", ["lambda", "cosine", "onecycle"])
def test_lr_schedulers_drive_every_group_of_one_sso(make):
    model = _model()
    opt = sso_optimizer(model, lr=0.02, adamw_lr=1e-3)
    base = [g["lr"] for g in opt.param_groups]
    if make == "lambda":
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
        want = [b / 4 for b in base]
    elif make == "cosine":
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=6)
        want = [b * 0.5 for b in base]  # cos(pi*3/6) = 0 -> half way
    else:
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[b for b in base],
                                                    total_steps=10)
        want = None
    _train(model, opt, _batches(3, model.config.vocab_size), sched)
    got = [g["lr"] for g in opt.param_groups]
    if want is not None:
        assert got == pytest.approx(want, rel=1e-12)
    else:  # OneCycle warms up: after 3 of 10 steps every group sits below its own max_lr
        assert all(0 < g < b for g, b in zip(got, base, strict=True))
    assert got[0] / got[-1] == pytest.approx(base[0] / base[-1], rel=1e-9)


def test_chained_optimizer_is_a_torch_optimizer_for_schedulers():
    model = _model()
    mats, aux = sso_param_groups(model)
    chained = ChainedOptimizer(SSO(mats, lr=0.02), torch.optim.AdamW(aux, lr=1e-3))
    assert isinstance(chained, torch.optim.Optimizer)
    sched = torch.optim.lr_scheduler.LambdaLR(chained, lambda s: 0.5 ** s)
    _train(model, chained, _batches(2, model.config.vocab_size), sched)
    assert chained.optimizers[1].param_groups[0]["lr"] == pytest.approx(1e-3 / 4)
    assert chained.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.02 / 4)
    assert model.lm_head.weight in chained.state  # the view over the members' states
    with pytest.raises(TypeError, match="member"):
        chained.add_param_group({"params": [nn.Parameter(torch.randn(3, 3))]})
    with pytest.raises(TypeError, match="member 1 is a list"):
        ChainedOptimizer(SSO(mats, lr=0.02), [])
    with pytest.raises(ValueError, match="two members"):
        ChainedOptimizer(SSO(mats, lr=0.02), torch.optim.SGD(mats[0]["params"], lr=0.1))


def test_state_dict_round_trip_resumes_bit_identically():
    batches = _batches(5, 256)
    a = _model()
    opt_a = sso_optimizer(a, lr=0.03)
    sched_a = torch.optim.lr_scheduler.LambdaLR(opt_a, lambda s: 1.0 / (1 + s))
    _train(a, opt_a, batches, sched_a)

    b = _model()
    opt_b = sso_optimizer(b, lr=0.03)
    sched_b = torch.optim.lr_scheduler.LambdaLR(opt_b, lambda s: 1.0 / (1 + s))
    _train(b, opt_b, batches[:2], sched_b)
    buf = io.BytesIO()
    torch.save({"model": b.state_dict(), "opt": opt_b.state_dict(),
                "sched": sched_b.state_dict()}, buf)
    buf.seek(0)
    saved = torch.load(buf, weights_only=True)
    c = _model(seed=9)
    opt_c = sso_optimizer(c, lr=0.03, spectral_init=False)
    sched_c = torch.optim.lr_scheduler.LambdaLR(opt_c, lambda s: 1.0 / (1 + s))
    c.load_state_dict(saved["model"])
    opt_c.load_state_dict(saved["opt"])
    sched_c.load_state_dict(saved["sched"])
    _train(c, opt_c, batches[2:], sched_c)
    for p, q in zip(a.parameters(), c.parameters(), strict=True):
        assert torch.equal(p, q)
    # a saved adamw group cannot load into an sso group
    sd = copy.deepcopy(opt_a.state_dict())
    sd["param_groups"][0]["algorithm"] = "adamw"
    with pytest.raises(ValueError, match="algorithm"):
        opt_c.load_state_dict(sd)


def test_compiled_model_trains_like_the_eager_one():
    a, b = _model(), _model()
    batches = _batches(3, a.config.vocab_size)
    ca = torch.compile(a, backend="eager")
    opt_a = sso_optimizer(ca, lr=0.03)
    opt_b = sso_optimizer(b, lr=0.03)
    names = [n for g in opt_a.param_groups for n in g["names"]]
    assert any(n.startswith("_orig_mod.") and n.endswith("q_proj.weight") for n in names)
    _train(ca, opt_a, batches)
    _train(b, opt_b, batches)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=0)


def test_hf_trainer_accepts_one_sso_and_its_scheduler(tmp_path):
    pytest.importorskip("accelerate")
    from transformers import Trainer, TrainingArguments

    model = _model()
    data = [{"input_ids": x, "labels": x} for x in _batches(6, model.config.vocab_size)[0]]
    opt = sso_optimizer(model, lr=0.02, adamw_lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / 3)
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2,
                             report_to=[], use_cpu=True, logging_steps=1, save_strategy="no",
                             disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=data, optimizers=(opt, sched))
    out = trainer.train()
    assert out.global_step == 2 and torch.isfinite(torch.tensor(out.training_loss))
    assert opt.param_groups[-1]["lr"] == pytest.approx(1e-3 / 3)
    # the SSO groups stepped: q heads sit on their sphere up to the retraction's power iteration
    q = model.model.layers[0].self_attn.q_proj.weight.detach().view(2, 16, 32).double()
    ratio = torch.linalg.matrix_norm(q, ord=2) / radius(16, 32)
    assert ((ratio - 1).abs() < 0.2).all()
    assert float(opt.state[model.lm_head.weight]["step"]) == 2


def test_bad_groups_name_the_group_or_parameter():
    w = nn.Parameter(torch.randn(4, 3))
    bias = nn.Parameter(torch.randn(4))
    with pytest.raises(ValueError, match="param group 0: algorithm must be one of"):
        SSO([{"params": [w], "algorithm": "lion"}])
    with pytest.raises(ValueError, match="'b'.*shape.*algorithm='adamw'"):
        SSO([{"params": [bias], "names": ["b"], "algorithm": "sso"}])
    with pytest.raises(ValueError, match=r"param group 1 \(adamw\).*more than one"):
        SSO([{"params": [w]}, {"params": [w], "algorithm": "adamw"}])
    with pytest.raises(ValueError, match=r"param group 0 \(adamw\): betas"):
        SSO([{"params": [bias], "algorithm": "adamw", "betas": (0.9, 1.0)}])
    with pytest.raises(ValueError, match=r"param group 0 \(adamw\): weight_decay"):
        SSO([{"params": [bias], "algorithm": "adamw", "weight_decay": -1.0}])
    with pytest.raises(ValueError, match="algorithm must be 'sso' or 'muonsphere'"):
        sso_param_groups(_model(), algorithm="adamw")


def test_param_groups_without_qkv_need_no_head_dim():
    net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    mats, aux = sso_param_groups(net)  # no q/k/v layers: head_dim is not needed
    assert [g["split"] for g in mats] == [None]
    assert aux[0]["algorithm"] == "adamw" and len(aux[0]["params"]) == 2  # the two biases

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(8, 8, bias=False)

    with pytest.raises(ValueError, match="q_proj.weight.*head_dim="):
        sso_param_groups(Attn())
