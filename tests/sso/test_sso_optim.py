"""The SSO optimizer: sphere geometry, equivalences, resume, bad input."""

import copy
import io
import math

import pytest
import torch
from torch import nn

from icml26.sso import SSO, ChainedOptimizer, spectral_init_, sso_param_groups
from icml26.sso.optim import radius, sso_update
from icml26.sso.spectral import msign, msign_exact, power_iteration


def _rand(shape, seed, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _gapped(m, n, seed):
    """(m, n) float64 with a clear spectral gap (σ = 1, 0.6, 0.5, ...)."""
    q1, _ = torch.linalg.qr(_rand((m, m), seed))
    q2, _ = torch.linalg.qr(_rand((n, n), seed + 1))
    r = min(m, n)
    s = torch.cat([torch.tensor([1.0]), torch.linspace(0.6, 0.1, r - 1, dtype=torch.float64)])
    return q1[:, :r] @ torch.diag(s) @ q2[:, :r].T


def _drift(lr, mode, m=12, n=8):
    w = nn.Parameter(_gapped(m, n, 0))
    opt = SSO([w], lr=lr, mode=mode, power_iter_steps=300, solver_tol=1e-13,
              solver_max_iter=100, msign_steps=12)
    opt.spectral_init_()
    w.grad = _rand((m, n), 5)
    opt.step()
    return abs(float(torch.linalg.matrix_norm(w.detach(), ord=2)) / radius(m, n) - 1)


def test_sphere_drift_is_second_order_for_sso_and_first_order_for_muonsphere():
    d1, d2 = _drift(0.02, "sso"), _drift(0.01, "sso")
    assert d1 < 0.02 * 0.1  # far below a first-order drift of size lr
    assert 0.2 < d2 / d1 < 0.3  # halving η quarters it: O(η²)
    m1, m2 = _drift(0.02, "muonsphere"), _drift(0.01, "muonsphere")
    assert 0.4 < m2 / m1 < 0.6  # λ = 0 is not tangent: O(η)
    assert m2 > 5 * d2  # and larger at the same step size


def test_step_follows_algorithm_one_in_float64():
    m, n, lr = 10, 6, 0.05
    w0 = _gapped(m, n, 3) * 2.5
    g = _rand((m, n), 4)
    w = nn.Parameter(w0.clone())
    opt = SSO([w], lr=lr, momentum=0.9, nesterov=True, power_iter_steps=300, solver_tol=1e-12,
              solver_max_iter=100, msign_steps=12)
    w.grad = g.clone()
    opt.step()
    # reference: EMA momentum from 0, Nesterov lerp, normalize, exact SVD, retract, exact msign
    mom = 0.1 * g
    upd = g + 0.9 * (mom - g)
    mhat = upd / upd.norm()
    u_, s_, vh = torch.linalg.svd(w0)
    r = radius(m, n)
    theta = torch.outer(u_[:, 0], vh[0])
    lam = opt.state[w]["lam"].item()
    phi = msign_exact(mhat + lam * theta)
    # 12 Polar Express steps leave ~1e-7 of msign error on small singular values
    assert abs(float((theta * phi).sum())) < 1e-6
    ref = w0 * r / s_[0] - lr * r * phi
    torch.testing.assert_close(w.detach(), ref, atol=1e-7, rtol=0)


def test_muonsphere_equals_sso_with_lambda_zero():
    w0, g = _gapped(16, 12, 1), _rand((16, 12), 2)
    v0 = None
    out_ms = sso_update(w0[None], g[None], v0, torch.zeros(1, dtype=torch.float64),
                        torch.tensor([1.0], dtype=torch.float64), lr=0.03, mode="muonsphere")
    # SSO with λ pinned to 0: tolerance so loose that the warm start λ₀ = 0 is accepted
    out_sso = sso_update(w0[None], g[None], v0, torch.zeros(1, dtype=torch.float64),
                         torch.tensor([1.0], dtype=torch.float64), lr=0.03, mode="sso",
                         solver_tol=10.0)
    assert out_sso.lam.item() == 0.0
    torch.testing.assert_close(out_ms.w, out_sso.w, atol=0, rtol=0)


def test_split_heads_and_3d_params_equal_separate_matrices():
    torch.manual_seed(0)
    a = nn.Parameter(_rand((8, 6), 1))  # 2 heads of 4 rows
    e = nn.Parameter(_rand((2, 5, 6), 2))  # 2 experts
    parts = [nn.Parameter(a.detach()[:4].clone()), nn.Parameter(a.detach()[4:].clone()),
             nn.Parameter(e.detach()[0].clone()), nn.Parameter(e.detach()[1].clone())]
    opt = SSO([{"params": [a], "split": 4}, {"params": [e]}], lr=0.05)
    ref = SSO(parts, lr=0.05)
    for step in range(3):
        ga, ge = _rand((8, 6), 10 + step), _rand((2, 5, 6), 20 + step)
        a.grad, e.grad = ga, ge
        for p, gp in zip(parts, [ga[:4], ga[4:], ge[0], ge[1]], strict=True):
            p.grad = gp.clone()
        opt.step()
        ref.step()
    got = [a.detach()[:4], a.detach()[4:], e.detach()[0], e.detach()[1]]
    for x, y in zip(got, parts, strict=True):
        torch.testing.assert_close(x, y.detach(), atol=1e-10, rtol=0)
    # each head sits on its own sphere R = sqrt(4/6)
    assert radius(4, 6) == pytest.approx(math.sqrt(4 / 6))


def _tiny_net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16, bias=False), nn.Tanh(), nn.Linear(16, 8, bias=False),
                         nn.Tanh(), nn.Linear(8, 1))


def _batches(n):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(32, 8, generator=g), torch.randn(32, 1, generator=g)) for _ in range(n)]


def _make(net):
    mats = [net[0].weight, net[2].weight]
    rest = [p for p in net.parameters() if all(p is not q for q in mats)]
    return ChainedOptimizer(SSO(mats, lr=0.05), torch.optim.AdamW(rest, lr=1e-2))


def test_resume_from_state_dict_is_bit_identical_and_closure_returns_loss():
    data = _batches(5)
    net = _tiny_net()
    opt = _make(net)

    def closure_for(model, o, x, y):
        def closure():
            o.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss
        return closure

    losses = [opt.step(closure_for(net, opt, x, y)) for x, y in data]
    assert all(isinstance(v, torch.Tensor) for v in losses)

    net2 = _tiny_net()
    opt2 = _make(net2)
    for x, y in data[:2]:
        opt2.step(closure_for(net2, opt2, x, y))
    buf = io.BytesIO()
    torch.save({"model": net2.state_dict(), "opt": opt2.state_dict()}, buf)
    buf.seek(0)
    saved = torch.load(buf, weights_only=True)
    net3 = _tiny_net(seed=123)
    opt3 = _make(net3)
    net3.load_state_dict(saved["model"])
    opt3.load_state_dict(saved["opt"])
    st = opt3.optimizers[0].state[net3[0].weight]
    assert {"momentum_buffer", "lam", "u", "v", "step"} <= set(st)
    for x, y in data[2:]:
        opt3.step(closure_for(net3, opt3, x, y))
    for p, q in zip(net.parameters(), net3.parameters(), strict=True):
        assert torch.equal(p, q)


def test_load_state_dict_rejects_other_shapes_and_groups():
    a = nn.Parameter(torch.randn(4, 3))
    opt = SSO([a], lr=0.1)
    a.grad = torch.randn(4, 3)
    opt.step()
    sd = copy.deepcopy(opt.state_dict())
    b = nn.Parameter(torch.randn(5, 3))
    with pytest.raises(ValueError, match="shape"):
        SSO([b], lr=0.1).load_state_dict(sd)
    with pytest.raises(ValueError, match="param groups"):
        SSO([a, b], lr=0.1).load_state_dict(sd)
    with pytest.raises(ValueError, match="expected 2"):
        ChainedOptimizer(opt, SSO([b])).load_state_dict({"optimizers": [sd]})


@pytest.mark.parametrize("kwargs, match", [
    ({"lr": 0.0}, "lr"), ({"lr": -1.0}, "lr"), ({"momentum": 1.0}, "momentum"),
    ({"momentum": -0.1}, "momentum"), ({"radius_scaler": 0.0}, "radius_scaler"),
    ({"solver_tol": 0.0}, "solver_tol"), ({"mode": "adam"}, "mode"), ({"solver": "newton"}, "solver"),
])
def test_bad_hyperparameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SSO([nn.Parameter(torch.randn(3, 3))], **kwargs)


def test_bad_parameters_and_gradients_name_the_parameter():
    with pytest.raises(ValueError, match="'bias'.*shape"):
        SSO([{"params": [nn.Parameter(torch.randn(3))], "names": ["bias"]}])
    with pytest.raises(ValueError, match="split=3 must divide"):
        SSO([{"params": [nn.Parameter(torch.randn(4, 3))], "split": 3}])
    p = nn.Parameter(torch.randn(4, 3))
    opt = SSO([{"params": [p], "names": ["layer.q"]}])
    p.grad = torch.full((4, 3), float("nan"))
    with pytest.raises(ValueError, match="non-finite.*layer.q"):
        opt.step()
    p.grad = torch.randn(4, 3).to_sparse()
    with pytest.raises(ValueError, match="sparse.*layer.q"):
        opt.step()
    z = nn.Parameter(torch.zeros(4, 3))
    opt = SSO([{"params": [z], "names": ["dead"]}])
    z.grad = torch.randn(4, 3)
    with pytest.raises(ValueError, match="'dead' is an all-zero matrix"):
        opt.step()


def test_param_groups_spectral_init_and_hf_model():
    from icml26.core.lm import tiny_llama

    model, _ = tiny_llama(hidden=32, layers=1, heads=2, max_len=16, tie_embeddings=False)
    mats, aux = sso_param_groups(model)
    names = [n for g in mats for n in g["names"]]
    assert any(n.endswith("q_proj.weight") for n in names)
    assert not any("embed" in n or "lm_head" in n or "norm" in n for n in names)
    assert mats[0]["split"] == 16 and mats[1]["split"] is None
    aux_names = aux[0]["names"]
    assert "lm_head.weight" in aux_names and "model.embed_tokens.weight" in aux_names
    assert aux[0]["weight_decay"] == 0.1
    n_all = sum(1 for _ in model.parameters())
    assert len(names) + len(aux_names) == n_all
    spectral_init_(mats)
    q = model.model.layers[0].self_attn.q_proj.weight.detach().view(2, 16, 32).double()
    torch.testing.assert_close(torch.linalg.matrix_norm(q, ord=2),
                               torch.full((2,), radius(16, 32), dtype=torch.float64))


def test_solver_stats_and_sphere_after_training_steps():
    w = nn.Parameter(_rand((3, 24, 16), 0).float())
    opt = SSO([w], lr=0.02)
    opt.spectral_init_()
    for i in range(4):
        w.grad = _rand((3, 24, 16), i + 1).float()
        opt.step()
    st = opt.last_stats
    assert (st["h"].abs() <= 2e-4).all()
    assert st["sigma_ratio"].shape == (3,)
    # warm-started power iteration: the σ estimate tracks the exact norm
    sig, _, _ = power_iteration(w.detach(), opt.state[w]["v"], steps=5)
    exact = torch.linalg.matrix_norm(w.detach().double(), ord=2)
    assert ((sig.double() - exact).abs() / exact).max() < 0.05
    assert msign(torch.randn(2, 3)).shape == (2, 3)
