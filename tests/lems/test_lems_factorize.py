"""Whitened SVD against closed forms: Eckart-Young under the K-FAC norm, special cases."""

import pytest
import torch

from icml26.lems.factorize import factorize_weight, shrink, whitened_svd, whitening_factor

torch.manual_seed(0)


def _spd(n, gen, cond=50.0):
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    lam = torch.logspace(0, torch.log10(torch.tensor(cond)).item(), n, dtype=torch.float64)
    return q @ torch.diag(lam) @ q.T


def _kfac_err(dw, a, g):
    return float(torch.trace(dw.T @ g @ dw @ a))


@pytest.mark.parametrize("shape", [(12, 8), (8, 12), (10, 10)])
def test_transpose_meets_eckart_young_and_beats_official(shape):
    gen = torch.Generator().manual_seed(sum(shape))
    n_out, n_in = shape
    w = torch.randn(n_out, n_in, generator=gen, dtype=torch.float64)
    a, g = _spd(n_in, gen), _spd(n_out, gen)
    sa, sg = shrink(a, 0.1), shrink(g, 0.3)  # the K-FAC norm the factors whiten
    lt, rt, st, _ = factorize_weight(w, method="kfac", a=a, g=g, left_factor="transpose")
    lo, ro, so, _ = factorize_weight(w, method="kfac", a=a, g=g, left_factor="official")
    for r in range(1, min(shape)):
        err_t = _kfac_err(w - lt[:, :r] @ rt[:r], sa, sg)
        err_o = _kfac_err(w - lo[:, :r] @ ro[:r], sa, sg)
        bound = float((st[r:] ** 2).sum())
        assert err_t == pytest.approx(bound, rel=1e-8)
        assert err_t <= err_o * (1 + 1e-10)
    # full rank reproduces W for both
    k = min(shape)
    assert torch.allclose(lt @ rt, w, atol=1e-9) and torch.allclose(lo[:, :k] @ ro[:k], w, atol=1e-9)


def test_identity_g_is_svd_llm_and_identities_are_svd():
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(9, 7, generator=gen, dtype=torch.float64)
    a = _spd(7, gen)
    eye_g = torch.eye(9, dtype=torch.float64)
    kf = factorize_weight(w, method="kfac", a=a, g=eye_g, shrink_a=0.0, shrink_g=0.0)
    sl = factorize_weight(w, method="svd_llm", a=a)
    sv = factorize_weight(w, method="svd")
    ki = factorize_weight(w, method="kfac", a=torch.eye(7, dtype=torch.float64), g=eye_g)
    u, s, vh = torch.linalg.svd(w, full_matrices=False)
    for r in (1, 3, 5):
        assert torch.allclose(kf[0][:, :r] @ kf[1][:r], sl[0][:, :r] @ sl[1][:r], atol=1e-9)
        best = (u[:, :r] * s[:r]) @ vh[:r]
        assert torch.allclose(sv[0][:, :r] @ sv[1][:r], best, atol=1e-9)
        assert torch.allclose(ki[0][:, :r] @ ki[1][:r], best, atol=1e-9)


def test_diagonal_methods_minimise_their_weighted_norm():
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(8, 6, generator=gen, dtype=torch.float64)
    act = torch.rand(6, generator=gen, dtype=torch.float64) + 0.1
    fis = torch.rand(8, generator=gen, dtype=torch.float64) + 0.1
    left, right, s, _ = factorize_weight(w, method="asvd", act_abs=act)
    q = act.sqrt()
    err = ((w - left[:, :2] @ right[:2]) * q).pow(2).sum()
    assert float(err) == pytest.approx(float((s[2:] ** 2).sum()), rel=1e-9)
    left, right, s, _ = factorize_weight(w, method="fwsvd", row_fisher=fis)
    err = ((w - left[:, :2] @ right[:2]) * fis.sqrt().unsqueeze(1)).pow(2).sum()
    assert float(err) == pytest.approx(float((s[2:] ** 2).sum()), rel=1e-9)


def test_whitening_falls_back_and_never_fails():
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(3, 10, generator=gen, dtype=torch.float64)
    singular = x.T @ x  # rank 3 of 10
    lf, info = whitening_factor(singular)
    assert info != "cholesky"
    assert torch.isfinite(lf).all()
    assert torch.allclose(lf @ lf.T, singular, atol=1e-3 * float(singular.diagonal().mean()))
    indefinite = torch.diag(torch.tensor([1.0, -1.0, 2.0], dtype=torch.float64))
    lf, info = whitening_factor(indefinite, retries=0)
    assert info == "eigh" and torch.isfinite(lf).all()
    good = _spd(5, gen)
    lf, info = whitening_factor(good)
    assert info == "cholesky" and torch.allclose(lf @ lf.T, good, atol=1e-10)


def test_shrink_keeps_trace_and_rejects_bad_alpha():
    gen = torch.Generator().manual_seed(9)
    c = _spd(6, gen)
    assert float(torch.trace(shrink(c, 0.3))) == pytest.approx(float(torch.trace(c)))
    with pytest.raises(ValueError, match="alpha"):
        shrink(c, 1.5)
    with pytest.raises(ValueError, match="method"):
        factorize_weight(c, method="nope")


def test_whitened_svd_singular_values_descend_and_split_symmetrically():
    gen = torch.Generator().manual_seed(11)
    w = torch.randn(7, 5, generator=gen, dtype=torch.float64)
    left, right, s = whitened_svd(w)
    assert (s[:-1] >= s[1:]).all()
    # symmetric split: column norms of left equal row norms of right (both sqrt(s))
    assert torch.allclose(left.norm(dim=0), right.norm(dim=1), atol=1e-10)
