import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.uds.scores import (
    EmbeddingFIFO,
    FJLTProjector,
    gram,
    nuclear_norm,
    token_loss_and_gradnorm,
)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 12),
    v=st.integers(1, 40),
    rank=st.integers(0, 12),
    chunk=st.integers(1, 50),
    seed=st.integers(0, 2**16),
)
def test_gram_nuclear_norm_equals_svdvals(n, v, rank, chunk, seed):
    g = torch.Generator().manual_seed(seed)
    r = min(rank, n, v)
    x = torch.randn(n, r, generator=g, dtype=torch.float64) @ torch.randn(
        r, v, generator=g, dtype=torch.float64
    )
    ref = torch.linalg.svdvals(x).sum()
    got = nuclear_norm(x, chunk=chunk)
    # sqrt of a tiny eigenvalue amplifies rounding: eps ~ 1e-16 * ||x||^2 -> ~1e-8 * ||x||.
    assert float(got) == pytest.approx(float(ref), abs=1e-6 * (1 + float(x.norm())), rel=1e-9)
    torch.testing.assert_close(gram(x, chunk), gram(x, 10**6))


def test_nuclear_norm_batched_and_zero_rows_ignored():
    x = torch.randn(3, 5, 17, dtype=torch.float64)
    padded = torch.cat([x, torch.zeros(3, 4, 17, dtype=torch.float64)], 1)
    ref = torch.linalg.svdvals(x).sum(-1)
    torch.testing.assert_close(nuclear_norm(x, chunk=4), ref)
    torch.testing.assert_close(nuclear_norm(padded, chunk=4), ref)


def test_fjlt_matrix_route_equals_fft_and_is_seeded():
    x = torch.randn(2, 7, 53, dtype=torch.float64)
    p = FJLTProjector(53, 16, r_time=4, r_vocab=10, seed=3, dtype=torch.float64)
    torch.testing.assert_close(p.project(x, chunk=8), p.project_fft(x))
    q = FJLTProjector(53, 16, r_time=4, r_vocab=10, seed=3, dtype=torch.float64)
    torch.testing.assert_close(p.project(x), q.project(x))
    r = FJLTProjector(53, 16, r_time=4, r_vocab=10, seed=4, dtype=torch.float64)
    assert not torch.allclose(p.project(x), r.project(x))


def test_fjlt_distortion_of_pairwise_distances():
    g = torch.Generator().manual_seed(0)
    t, v = 32, 512
    x = torch.randn(24, t, v, generator=g, dtype=torch.float64)
    p = FJLTProjector(v, t, r_time=8, r_vocab=128, seed=1, dtype=torch.float64)
    e = p.project(x)
    iu = torch.triu_indices(24, 24, 1)
    d = torch.cdist(x.flatten(1), x.flatten(1))[iu[0], iu[1]]
    de = torch.cdist(e, e)[iu[0], iu[1]]
    scale = float((de * d).sum() / (d * d).sum())  # the unnormalized FFT scales all distances alike
    distortion = float(((de / (scale * d)) - 1).abs().mean())
    assert distortion <= 0.3
    # The official scaling keeps the squared norm at about (T V / 4) ||x||^2 (real parts: 1/2 each side).
    assert scale == pytest.approx(math.sqrt(t * v) / 2, rel=0.3)


def test_fifo_order_empty_and_distances():
    q = EmbeddingFIFO(3)
    e = torch.randn(2, 5)
    assert torch.equal(q.mean_distance(e), torch.zeros(2, dtype=torch.float64))
    items = [torch.full((1, 5), float(i)) for i in range(5)]
    for it in items:
        q.push(it)
    assert len(q) == 3
    torch.testing.assert_close(q.items, torch.cat(items[2:]))
    ref = np.mean([[np.linalg.norm(a - b) for b in q.items.numpy()] for a in e.numpy()], axis=1)
    np.testing.assert_allclose(q.mean_distance(e).numpy(), ref, rtol=1e-6)
    with pytest.raises(ValueError, match="queue_size"):
        EmbeddingFIFO(0)


def test_gradnorm_closed_form_equals_autograd():
    g = torch.Generator().manual_seed(0)
    n, h, v = 6, 5, 11
    hid = torch.randn(n, h, generator=g, dtype=torch.float64)
    w = torch.randn(v, h, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, v, (n,), generator=g)
    logits = hid @ w.T
    loss = torch.nn.functional.cross_entropy(logits, y)
    (grad,) = torch.autograd.grad(loss, w)
    got_loss, got_norm = token_loss_and_gradnorm(logits.detach(), y, hid, chunk=3)
    assert float(got_loss) == pytest.approx(float(loss.detach()), rel=1e-12)
    assert float(got_norm) == pytest.approx(float(grad.norm()), rel=1e-10)
