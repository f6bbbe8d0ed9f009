"""QuartetIILinear / NvidiaNVFP4Linear: exactness with quantization off, the forward recipe,
unbiased backward GEMMs, construction errors and the model converter."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from icml26.quartet2.linear import (
    NvidiaNVFP4Linear,
    Quartet2Config,
    QuartetIILinear,
    convert_to_quartet2,
)
from icml26.quartet2.nvfp4 import fake_quant


def _pair(cls, in_f=128, out_f=128, **kw):
    torch.manual_seed(0)
    layer = cls(in_f, out_f, **kw)
    ref = nn.Linear(in_f, out_f, bias=layer.bias is not None)
    ref.load_state_dict(layer.state_dict())
    return layer, ref


@pytest.mark.parametrize("cls", [QuartetIILinear, NvidiaNVFP4Linear])
def test_quantization_disabled_matches_nn_linear(cls):
    layer, ref = _pair(cls, disable_forward_quant=True, disable_backward_quant=True)
    x = torch.randn(3, 37, 128)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    y1, y2 = layer(x1), ref(x2)
    dy = torch.randn_like(y1)
    y1.backward(dy)
    y2.backward(dy)
    assert torch.allclose(y1, y2, atol=1e-6, rtol=1e-6)
    assert torch.allclose(x1.grad, x2.grad, atol=1e-6, rtol=1e-6)
    assert torch.allclose(layer.weight.grad, ref.weight.grad, atol=1e-5, rtol=1e-6)
    assert torch.allclose(layer.bias.grad, ref.bias.grad, atol=1e-5, rtol=1e-6)


def test_forward_recipes_are_the_documented_quantizers():
    x = torch.randn(64, 128)
    q, _ = _pair(QuartetIILinear, bias=False)
    want = fake_quant(x, mode="four_over_six") @ fake_quant(q.weight.detach(), mode="four_over_six").T
    assert torch.equal(q(x).detach(), want)
    q_rtn, _ = _pair(QuartetIILinear, bias=False, four_over_six=False)
    want = fake_quant(x) @ fake_quant(q_rtn.weight.detach()).T
    assert torch.equal(q_rtn(x).detach(), want)
    n, _ = _pair(NvidiaNVFP4Linear, bias=False)
    want = fake_quant(x) @ fake_quant(n.weight.detach(), block=(16, 16)).T
    assert torch.equal(n(x).detach(), want)


@pytest.mark.parametrize("cls,tokens", [(QuartetIILinear, 128), (QuartetIILinear, 100),
                                        (NvidiaNVFP4Linear, 128)])
def test_backward_is_unbiased_for_dy_qw_and_dyt_qx(cls, tokens):
    """Averaged over K backward calls, dX -> dY Q(W) and dW -> dY^T Q(X) (NVIDIA: dY^T X) at
    ~1 bit per 4x K; 100 tokens exercises the zero-padding along tokens."""
    layer, _ = _pair(cls, bias=False, seed=7)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(tokens, 128, generator=g) * torch.exp2(torch.rand(tokens, 1, generator=g) * 3)
    dy = torch.randn(tokens, 128, generator=g)
    w = layer.weight.detach()
    if cls is QuartetIILinear:
        qx, qw = fake_quant(x, mode="four_over_six"), fake_quant(w, mode="four_over_six")
    else:
        qx, qw = x, fake_quant(w, block=(16, 16))
    want_dx, want_dw = (dy.double() @ qw.double()), (dy.double().T @ qx.double())
    ks, acc_x, acc_w, bx, bw = [2, 8, 32], 0, 0, [], []
    for k in range(1, ks[-1] + 1):
        xi = x.clone().requires_grad_()
        layer.weight.grad = None
        layer(xi).backward(dy)
        acc_x = acc_x + xi.grad.double()
        acc_w = acc_w + layer.weight.grad.double()
        if k in ks:
            bx.append(-0.5 * math.log2(float(((acc_x / k - want_dx) ** 2).sum() / (want_dx ** 2).sum())))
            bw.append(-0.5 * math.log2(float(((acc_w / k - want_dw) ** 2).sum() / (want_dw ** 2).sum())))
    slope_w = np.polyfit(np.log(ks) / np.log(4), bw, 1)[0]
    assert 0.7 < slope_w < 1.3, bw
    if cls is QuartetIILinear:
        slope_x = np.polyfit(np.log(ks) / np.log(4), bx, 1)[0]
        assert 0.7 < slope_x < 1.3, bx


def test_autocast_bf16_output_dtype_and_fp32_compute():
    layer, _ = _pair(QuartetIILinear)
    x = torch.randn(2, 16, 128, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert x.grad.dtype == torch.float32 and layer.weight.grad.dtype == torch.float32
    assert bool(torch.isfinite(layer.weight.grad).all())


def test_construction_errors_name_the_layer():
    with pytest.raises(ValueError, match=r"in_features=40 is not a multiple of 16"):
        QuartetIILinear(40, 128)
    with pytest.raises(ValueError, match=r"out_features=96 is not a multiple of hadamard_dim=128"):
        QuartetIILinear(128, 96)
    NvidiaNVFP4Linear(128, 96)  # NVIDIA's backward has no h constraint on out
    with pytest.raises(ValueError, match="power of two >= 16"):
        QuartetIILinear(128, 128, hadamard_dim=48)
    with pytest.raises(ValueError, match="`recipe`"):
        Quartet2Config(recipe="fp8")


def test_config_round_trip():
    for cfg in (Quartet2Config(), Quartet2Config(recipe="nvidia", hadamard_dim=64, seed=3)):
        assert Quartet2Config.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="version"):
        Quartet2Config.from_dict({"version": 99})


def test_all_zero_gradients_stay_zero():
    layer, _ = _pair(QuartetIILinear)
    x = torch.zeros(128, 128, requires_grad=True)
    layer(x).backward(torch.zeros(128, 128))
    assert torch.equal(x.grad, torch.zeros_like(x)) and not bool(layer.weight.grad.isnan().any())


def test_convert_tiny_llama_skips_head_and_trains():
    from icml26.core.lm import tiny_llama

    model, _ = tiny_llama(128, 1, 4, ffn=384, max_len=32, vocab="bytes", seed=0)
    params_before = {id(p) for p in model.parameters()}
    report = dict(convert_to_quartet2(model, recipe="quartet2"))
    assert report["lm_head"].startswith("skipped")
    converted = [n for n, r in report.items() if r == "converted"]
    assert len(converted) == 7  # q, k, v, o, gate, up, down
    assert isinstance(model.get_submodule("model.layers.0.mlp.down_proj"), QuartetIILinear)
    assert {id(p) for p in model.parameters()} == params_before  # shared, not copied
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batch = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(0))
    losses = []
    for _ in range(8):
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.3


def test_convert_skips_dims_not_multiple_of_h():
    model = nn.Sequential(nn.Linear(128, 576), nn.Linear(576, 128))
    report = dict(convert_to_quartet2(model, config=Quartet2Config(hadamard_dim=128)))
    assert report["0"].startswith("skipped: out_features 576")
    assert report["1"] == "converted"
    report64 = dict(convert_to_quartet2(nn.Sequential(nn.Linear(128, 576)),
                                        config=Quartet2Config(hadamard_dim=64)))
    assert report64["0"] == "converted"  # SmolLM2's 576 = 9 x 64
