import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.cclrec.model import weighted_info_nce


def _hand(anchor, pos, neg, wp, wn, tau):
    """Float64 loops over the formula in the docstring."""

    def cos(x, y):
        return float(np.dot(x, y) / np.linalg.norm(x) / np.linalg.norm(y))

    R, P, _ = pos.shape
    num = den_w = 0.0
    for r in range(R):
        for j in range(P):
            sp = math.exp(cos(anchor[r], pos[r, j]) / tau)
            sn = sum(wn[r] * math.exp(cos(anchor[r], n) / tau) for n in neg[r])
            sb = sum(
                math.exp(cos(anchor[r], pos[q, k]) / tau)
                for q in range(R)
                if q != r
                for k in range(P)
            )
            num += wp[r] * -math.log(sp / (sp + sn + sb))
            den_w += wp[r]
    return num / den_w


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 7), st.integers(1, 3), st.integers(1, 3), st.integers(0, 10_000))
def test_weighted_infonce_matches_float64_hand_value(R, P, N, seed):
    rng = np.random.default_rng(seed)
    a, p, n = rng.normal(size=(R, 4)), rng.normal(size=(R, P, 4)), rng.normal(size=(R, N, 4))
    wp, wn = rng.choice([1.0, 3.0], R), rng.choice([1.0, 10.0], R)
    got = weighted_info_nce(*(torch.tensor(x) for x in (a, p, n, wp, wn)), tau=0.1)
    assert abs(float(got) - _hand(a, p, n, wp, wn, 0.1)) < 1e-8


def test_unit_weights_give_plain_infonce():
    g = torch.Generator().manual_seed(0)
    R, P, N, d = 5, 2, 2, 8
    a, p, n = (
        torch.randn(*s, generator=g, dtype=torch.float64) for s in ((R, d), (R, P, d), (R, N, d))
    )
    ones = torch.ones(R, dtype=torch.float64)
    got = weighted_info_nce(a, p, n, ones, ones, tau=0.2)
    # plain InfoNCE: cross-entropy over [own positive, explicit negatives, other rows' positives]
    an, pn, nn_ = F.normalize(a, dim=-1), F.normalize(p, dim=-1), F.normalize(n, dim=-1)
    losses = []
    for r in range(R):
        others = torch.cat([pn[q] for q in range(R) if q != r])
        for j in range(P):
            cands = torch.cat([pn[r, j : j + 1], nn_[r], others])
            logits = (cands @ an[r]) / 0.2
            losses.append(F.cross_entropy(logits[None], torch.tensor([0])))
    assert torch.allclose(got, torch.stack(losses).mean(), atol=1e-10)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 9), st.integers(0, 1000))
def test_weights_apply_for_every_batch_size(R, seed):
    """Trap 3: the official code silently keeps w=1 when samples don't divide the batch."""
    rng = np.random.default_rng(seed)
    a, p, n = (torch.tensor(rng.normal(size=s)) for s in ((R, 4), (R, 2, 4), (R, 2, 4)))
    one = torch.ones(R, dtype=torch.float64)
    wn = torch.full((R,), 10.0, dtype=torch.float64)
    base = weighted_info_nce(a, p, n, one, one)
    heavier = weighted_info_nce(a, p, n, one, wn)
    assert heavier > base  # weighting explicit negatives always raises the loss
    if R > 1:
        wp = one.clone()
        wp[0] = 3.0
        per_row = [
            float(weighted_info_nce(a[i : i + 1], p[i : i + 1], n[i : i + 1], one[:1], one[:1]))
            for i in range(R)
        ]
        assert float(weighted_info_nce(a, p, n, wp, one)) != float(base) or len(set(per_row)) == 1


def _started_cclrec(cl_weight):
    import scipy.sparse as sp

    from icml26.cclrec.model import CCLRec

    rng = np.random.default_rng(0)
    R = sp.csr_matrix((rng.random((30, 24)) < 0.3).astype(np.float32))
    sem = rng.normal(size=(24, 6)).astype(np.float32)
    m = CCLRec(dim=8, batch_size=16, seed=0, cl_weight=cl_weight)
    m.train_, (m.n_users_, m.n_items_) = R, R.shape
    m._gen = torch.Generator().manual_seed(0)
    m._setup(R, sem, {})
    return m


def test_zero_cl_weight_is_the_linear_limit_of_the_loss():
    """The cl_weight = 0 control skips the InfoNCE; its loss must equal the lambda -> 0 end of
    the loss, which is linear in lambda: L(0.5) - L(0) = (L(1) - L(0)) / 2 on the same batch."""
    losses = {}
    for w in (0.0, 0.5, 1.0):
        m = _started_cclrec(w)
        smp = next(m._batches(np.random.default_rng(3)))
        losses[w] = m._loss(smp).item()
    assert losses[1.0] > losses[0.0]  # the InfoNCE is positive
    assert losses[0.5] - losses[0.0] == pytest.approx((losses[1.0] - losses[0.0]) / 2, rel=1e-5)
