"""Float64 checks of the transforms against closed forms (docs/cat.md, eqs. A-B)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.cat.sqnr import sqnr_terms
from icml26.cat.transforms import (
    BlockTransform,
    alignment_objective,
    cat_transform,
    hadamard,
    hadamard_transform,
    nuclear_bound,
    random_hadamard,
    smoothquant_transform,
)

F64 = torch.float64


def _problem(seed=0, d=32, m=48):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(m, d, generator=g, dtype=F64) * torch.linspace(0.1, 3, d, dtype=F64)
    a = torch.randn(d, d, generator=g, dtype=F64)
    sigma = a @ a.T / d + 0.1 * torch.eye(d, dtype=F64)
    return w, sigma


@pytest.mark.parametrize("n", [1, 2, 12, 64, 576, 1536])
def test_hadamard_is_hadamard(n):
    h = hadamard(n)
    assert set(h.unique().tolist()) <= {-1.0, 1.0}
    torch.testing.assert_close(h.T @ h, n * torch.eye(n, dtype=F64), rtol=0, atol=0)


def test_hadamard_rejects_unreachable_order():
    with pytest.raises(ValueError, match="order 7"):
        hadamard(7)


def test_orthogonal_transform_leaves_alignment_unchanged():
    w, _ = _problem()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4000, 32, generator=g, dtype=F64) @ torch.randn(32, 32, generator=g, dtype=F64)
    q, _ = torch.linalg.qr(torch.randn(32, 32, generator=g, dtype=F64))
    base = sqnr_terms(w, x, 4, 4)
    rot = sqnr_terms(w, x, 4, 4, BlockTransform(q[None]))
    assert abs(base["alignment"] - rot["alignment"]) < 1e-12 * base["alignment"]
    assert base["concentration_db"] != pytest.approx(rot["concentration_db"])


def test_hadamard_improves_concentration_on_outliers():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2000, 64, generator=g, dtype=F64)
    x[:, 3] *= 50.0  # one outlier channel
    w = torch.randn(32, 64, generator=g, dtype=F64)
    w[:, 7] *= 20.0
    base = sqnr_terms(w, x, 4, 4)
    had = sqnr_terms(w, x, 4, 4, hadamard_transform(64, seed=0))
    assert had["concentration_db"] > base["concentration_db"] + 6
    assert had["measured_db"] > base["measured_db"] + 3


@pytest.mark.parametrize("block", [None, 8, 4])
def test_cat_reaches_nuclear_bound(block):
    w, sigma = _problem()
    t = cat_transform([w], sigma, block=block, damp=0.0, seed=3)
    bound = nuclear_bound(w, sigma, block)
    assert alignment_objective(w, sigma, t.dense()) == pytest.approx(bound, rel=1e-10)
    assert bound < alignment_objective(w, sigma, torch.eye(32, dtype=F64))


_W8, _S8 = _problem(d=8, m=12)
_T8 = cat_transform([_W8], _S8, block=None, damp=0.0, hadamard=False).dense()
_BEST8 = alignment_objective(_W8, _S8, _T8)


@settings(max_examples=30, deadline=None)
@given(
    e=st.lists(st.floats(-1, 1, allow_nan=False), min_size=64, max_size=64),
    scale=st.floats(1e-4, 0.5),
)
def test_random_perturbations_never_beat_cat(e, scale):
    t2 = _T8 + scale * torch.tensor(e, dtype=F64).reshape(8, 8) * _T8.abs().mean()
    if abs(float(torch.linalg.det(t2))) > 1e-9:
        assert alignment_objective(_W8, _S8, t2) >= _BEST8 * (1 - 1e-12)


def test_block_one_is_smoothquant_rms_half():
    w, sigma = _problem()
    t = cat_transform([w], sigma, block=1, damp=0.0)
    expected = (w.pow(2).sum(0) / torch.diagonal(sigma)) ** 0.25  # sqrt(||W_:j|| / rms(x_j))
    torch.testing.assert_close(t.blocks.reshape(-1), expected, rtol=1e-12, atol=0)


def test_smoothquant_scales_closed_form():
    w, _ = _problem()
    amax = torch.linspace(1, 10, 32, dtype=F64)
    t = smoothquant_transform([w], amax, alpha=0.5)
    s = amax.sqrt() / w.abs().amax(0).sqrt()
    torch.testing.assert_close(t.blocks.reshape(-1), 1 / s)


def test_transform_roundtrip_exact():
    w, sigma = _problem()
    t = cat_transform([w], sigma, block=8, damp=1e-3)
    x = torch.randn(5, 32, dtype=F64)
    torch.testing.assert_close(t.apply(x) @ t.inverse_into(w).T, x @ w.T, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(t.apply(x), x @ t.dense().T)


def test_bad_block_names_layer_and_sizes():
    w, sigma = _problem()
    with pytest.raises(ValueError, match=r"block 5 does not divide .* 32 of q_proj.*valid sizes"):
        cat_transform([w], sigma, block=5, layer="q_proj")


def test_not_pd_reports_smallest_eigenvalue():
    w, _ = _problem()
    sigma = torch.zeros(32, 32, dtype=F64)
    sigma[0, 0] = 1.0
    with pytest.raises(ValueError, match="smallest eigenvalue"):
        cat_transform([w], sigma, block=None, damp=0.0)


def test_random_hadamard_orthogonal_and_seeded():
    q = random_hadamard(12, seed=4)
    torch.testing.assert_close(q.T @ q, torch.eye(12, dtype=F64))
    assert torch.equal(q, random_hadamard(12, seed=4))
    assert not torch.equal(q, random_hadamard(12, seed=5))
    assert math.isclose(float(q.abs().max()), 1 / math.sqrt(12))
