"""Smoothing-then-rotation and FlatQuant-lite (icml26.cat.baselines)."""

import pytest
import torch

from icml26.cat.baselines import learn_affine_transform, smooth_then_rotate
from icml26.cat.model import apply_transform, build_transforms, collect_covariances
from icml26.cat.quant import quantize_sym
from icml26.cat.transforms import BlockTransform, hadamard_transform, smoothquant_transform
from icml26.core.lm import tiny_llama

F64 = torch.float64


def test_smooth_then_rotate_is_the_product():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(8, 16, generator=g, dtype=F64)
    sq = smoothquant_transform([w], torch.rand(16, generator=g, dtype=F64) * 5 + 0.1)
    for block in (4, 16):
        r = hadamard_transform(16, block, seed=1)
        t = smooth_then_rotate(sq, r)
        assert torch.allclose(t.dense(), r.dense() @ sq.dense(), atol=1e-13)
        x = torch.randn(3, 16, generator=g, dtype=F64)
        # function preserving: (T x)(W T^-1)^T = x W^T
        assert torch.allclose(t.apply(x) @ t.inverse_into(w).T, x @ w.T, atol=1e-10)
    with pytest.raises(ValueError, match="diagonal"):
        smooth_then_rotate(r, r)


def test_sq_hadamard_on_a_model_preserves_its_logits():
    model = tiny_llama(hidden=64, layers=2, heads=4, kv_heads=2, ffn=96, seed=0, dtype=F64)[0]
    ids = torch.randint(0, 250, (2, 32), generator=torch.Generator().manual_seed(0))
    groups = collect_covariances(model, [ids])
    sq = build_transforms(model, groups, "smoothquant")
    had = build_transforms(model, groups, "hadamard", seed=3)
    tr = {n: smooth_then_rotate(sq[n], had[n]) for n in sq}
    with torch.no_grad():
        ref = model(input_ids=ids).logits
        apply_transform(model, tr)
        assert torch.allclose(model(input_ids=ids).logits, ref, atol=1e-9 * ref.abs().max())


def _err(t, x, w):
    y = x @ w.T
    out = quantize_sym(t.apply(x), 4, "token") @ quantize_sym(t.inverse_into(w), 4, "channel").T
    return float((out - y).pow(2).mean() / y.pow(2).mean())


def test_flatquant_lite_lowers_its_objective_and_keeps_the_block():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 32, generator=g, dtype=F64)
    x[:, 3] *= 30  # an outlier channel
    w = torch.randn(24, 32, generator=g, dtype=F64) @ torch.diag(
        torch.rand(32, generator=g, dtype=F64) * 3
    )
    init = hadamard_transform(32, 8, seed=0)
    t = learn_affine_transform([w], x.float(), init, 4, 4, steps=40, lr=5e-3)
    assert isinstance(t, BlockTransform) and t.blocks.shape == (4, 8, 8)
    assert t.kind == "flatquant-lite-b8"
    assert _err(t, x, w) < 0.9 * _err(init, x, w)
    # zero steps: the initial transform back
    t0 = learn_affine_transform([w], x.float(), init, 4, 4, steps=0)
    assert torch.allclose(t0.blocks, init.blocks)
    # under no_grad (a lazy arm built inside layer_sqnr) it trains the same
    with torch.no_grad():
        t_ng = learn_affine_transform([w], x.float(), init, 4, 4, steps=40, lr=5e-3)
    assert torch.equal(t_ng.blocks, t.blocks)
