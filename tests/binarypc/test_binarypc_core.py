"""BinaryPC codes, scoring and selection against float64 / brute-force references."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.binarypc.codes import (
    binary_pcs,
    hash_keys,
    pack_signs,
    recon_error,
    reconstruct,
    unpack_signs,
)
from icml26.binarypc.methods import BinaryPCConfig, make_method
from icml26.binarypc.select import (
    budget,
    code_scores,
    dense_attention,
    lut_scores,
    select_tokens,
    sparse_attention,
)


def _gen(s=0):
    return torch.Generator().manual_seed(s)


@given(st.lists(st.integers(0, 1), min_size=64, max_size=64))
def test_pack_roundtrip(bits):
    s = torch.tensor([1.0 - 2 * b for b in bits], dtype=torch.float64)
    c = pack_signs(s)
    assert c.dtype == torch.int64
    assert torch.equal(unpack_signs(c, 64, torch.float64), s)
    assert (c < 0).item() == bool(bits[63])


def test_least_squares_and_monotone_residual():
    A = torch.randn(200, 16, generator=_gen(), dtype=torch.float64)
    V, U = binary_pcs(A, bits=12, generator=_gen(1), return_signs=True)
    R = A.clone()
    prev = R.norm()
    for b in range(12):
        u, v = U[b], V[b]
        assert torch.allclose(v, torch.linalg.lstsq(u[:, None], R).solution[0], atol=1e-10)
        R = R - torch.outer(u, v)
        assert R.norm() <= prev + 1e-12
        prev = R.norm()


def test_v_is_ls_optimum_for_its_u():
    A = torch.randn(100, 8, generator=_gen(2), dtype=torch.float64)
    torch.manual_seed(0)
    V = binary_pcs(A, bits=1, iters=4, generator=_gen(3))
    # replay the algorithm to get u
    v = torch.randn((1, 8), generator=_gen(3), dtype=torch.float64)[0]
    for _ in range(4):
        u = torch.where(A @ v >= 0, 1.0, -1.0).double()
        v = A.T @ u
    assert torch.allclose(V[0], A.T @ u / 100, atol=1e-12)
    # and that is the least-squares solution of min_v ||A - u vᵀ||
    sol = torch.linalg.lstsq(u[:, None], A).solution[0]
    assert torch.allclose(V[0], sol, atol=1e-10)


def test_binary_rank1_recovered():
    g = _gen(4)
    u = torch.where(torch.randn(300, generator=g) >= 0, 1.0, -1.0).double()
    v = torch.randn(32, generator=g, dtype=torch.float64)
    A = torch.outer(u, v)
    V = binary_pcs(A, bits=2, generator=_gen(5))
    assert torch.allclose(V[0].abs(), v.abs(), atol=1e-10)
    assert V[1].norm() < 1e-10


def test_hash_and_scores_match_float64_reference():
    g = _gen(6)
    keys = torch.randn(2, 3, 50, 64, generator=g, dtype=torch.float64)
    V = binary_pcs(keys, bits=64, generator=_gen(7))
    codes = hash_keys(keys, V)
    # reference residual quantization, written independently
    for b_, h, l_ in [(0, 0, 0), (1, 2, 49), (0, 1, 17)]:
        r = keys[b_, h, l_].clone()
        khat = torch.zeros(64, dtype=torch.float64)
        for b in range(64):
            s = 1.0 if float(r @ V[b_, h, b]) >= 0 else -1.0
            r -= s * V[b_, h, b]
            khat += s * V[b_, h, b]
        assert torch.allclose(reconstruct(codes, V)[b_, h, l_], khat, atol=1e-12)
        assert math.isclose(
            float(recon_error(keys, codes, V)[b_, h, l_]), float(r.norm()), rel_tol=1e-9
        )
    q = torch.randn(2, 6, 64, generator=g, dtype=torch.float64)  # GQA 2:1
    khat = reconstruct(codes, V)
    ref = torch.einsum("bhgd,bhld->bhgl", q.reshape(2, 3, 2, 64), khat).amax(2)
    s = code_scores(q.double(), codes, V.double(), quantize=False)
    assert torch.allclose(s.double(), ref, rtol=1e-4, atol=1e-3)
    sq = code_scores(q, codes, V, quantize=True)
    p = torch.einsum("bhd,bhkd->bhk", q, V.repeat_interleave(2, 1))
    bound = (p.abs().amax(-1) / 127 / 2 * 64).reshape(2, 3, 2).amax(-1)  # |Δp_b| ≤ step/2
    assert ((sq.double() - ref).abs() <= bound[..., None] + 1e-3).all()


def test_lut_equals_unpacked():
    g = _gen(8)
    codes = torch.randint(-(2**62), 2**62, (1, 2, 40), generator=g) * 2 + 1
    p = torch.randn(1, 4, 64, generator=g, dtype=torch.float64)
    s = lut_scores(p, codes)
    ref = torch.einsum(
        "bhk,bhlk->bhl", p, unpack_signs(codes, 64, torch.float64).repeat_interleave(2, 1)
    )
    assert torch.allclose(s, ref, atol=1e-10)


def test_selection_brute_force_and_forced():
    g = _gen(9)
    scores = torch.randn(2, 3, 40, generator=g)
    forced = torch.zeros(2, 3, 40, dtype=torch.bool)
    forced[..., 5] = True
    idx = select_tokens(scores, 12, 45, forced=forced)
    for b in range(2):
        for h in range(3):
            got = set(idx[b, h].tolist())
            assert {40, 41, 42, 43, 44, 5} <= got and len(got) == 12
            s = scores[b, h].clone()
            s[5] = -math.inf
            assert got - {40, 41, 42, 43, 44, 5} == set(torch.topk(s, 6).indices.tolist())


def test_full_budget_equals_dense():
    g = _gen(10)
    q = torch.randn(2, 9, 64, generator=g)
    K = torch.randn(2, 3, 70, 64, generator=g)
    Vv = torch.randn(2, 3, 70, 64, generator=g)
    for name in ("bpc", "oracle", "simhash", "quest", "streaming"):
        m = make_method(BinaryPCConfig(method=name))
        meta = m.prepare(K[:, :, :60], _gen(0))
        sc, fo = m.score(q, meta, 70)
        idx = select_tokens(sc, 70, 70, forced=fo)
        o = sparse_attention(q, K, Vv, idx, 0.125)
        ref, _ = dense_attention(q, K, Vv, 0.125)
        assert torch.allclose(o, ref, atol=1e-5), name


def test_oracle_recall_is_max():
    g = _gen(11)
    q = torch.randn(1, 3, 16, generator=g)
    K = torch.randn(1, 1, 100, 16, generator=g)
    m = make_method(BinaryPCConfig(method="oracle"))
    sc, _ = m.score(q, m.prepare(K, None), 10)
    idx = select_tokens(sc, 10, 100)
    _, w = dense_attention(q, K, K, 1.0)
    best = (q[0] @ K[0, 0].T).amax(0).topk(10).indices
    assert set(idx[0, 0].tolist()) == set(best.tolist())


@settings(max_examples=20, deadline=None)
@given(st.floats(0.2, 2.9), st.integers(0, 1000))
def test_simhash_collision_rate(theta, seed):
    g = _gen(seed)
    d = 32
    a = torch.randn(d, generator=g, dtype=torch.float64)
    a /= a.norm()
    o = torch.randn(d, generator=g, dtype=torch.float64)
    o -= (o @ a) * a
    o /= o.norm()
    b = math.cos(theta) * a + math.sin(theta) * o
    R = torch.randn(d, 20000, generator=g, dtype=torch.float64)
    rate = ((a @ R >= 0) == (b @ R >= 0)).double().mean().item()
    assert abs(rate - (1 - theta / math.pi)) < 0.02


def test_bad_inputs():
    with pytest.raises(ValueError, match="bits"):
        BinaryPCConfig(bits=65)
    with pytest.raises(ValueError, match="mask_out"):
        BinaryPCConfig(mask_out=1.0)
    with pytest.raises(ValueError, match="token_budget"):
        BinaryPCConfig(token_budget=0)
    with pytest.raises(ValueError, match="bits"):
        binary_pcs(torch.randn(5, 4), bits=0)
    assert budget(4096) == 128 and budget(10000) == 200 and budget(100) == 100


def test_quest_page_score_bounds_every_key():
    g = _gen(12)
    q = torch.randn(1, 2, 8, generator=g)
    K = torch.randn(1, 1, 37, 8, generator=g)
    m = make_method(BinaryPCConfig(method="quest", page=5))
    s, _ = m.score(q, m.prepare(K, None), 10)
    exact = (q[0] @ K[0, 0].T).amax(0)  # (37,)
    assert (s[0, 0] >= exact - 1e-5).all()
    for p0 in range(0, 37, 5):  # the bound is tight for a one-key "page" max per channel
        assert torch.allclose(
            s[0, 0, p0 : p0 + 5], s[0, 0, p0].expand(len(range(p0, min(p0 + 5, 37))))
        )


def _mp(**kw):
    return make_method(BinaryPCConfig(method="magicpig", **kw))


def test_magicpig_sampling_probability_matches_collision_frequency():
    """The estimator's p_i is the true inclusion probability of the LSH sample (Monte Carlo
    over independent hash draws; binomial tail of (1 − θ/π)^K per table)."""
    from icml26.binarypc.methods import _binom_tail

    g = _gen(3)
    keys = torch.randn(1, 1, 40, 8, generator=g, dtype=torch.float64)
    q = keys[0, 0, 5] + 0.5 * torch.randn(8, generator=g, dtype=torch.float64)
    q = q.reshape(1, 1, 8)
    m = _mp(lsh_k=3, lsh_l=5, min_collisions=2, sinks=0, window=0, center=False)
    n, freq = 800, torch.zeros(40, dtype=torch.float64)
    for s in range(n):
        meta = m.prepare(keys, _gen(1000 + s))
        _, sel = m.attend(q, keys, keys, meta, 40, 1.0, positions=torch.tensor([39]))
        freq += sel[0, 0].double()
    cos = (keys[0, 0] @ q[0, 0]) / (keys[0, 0].norm(dim=-1) * q[0, 0].norm())
    p = _binom_tail((1 - torch.arccos(cos) / math.pi) ** 3, 5, 2)
    se = (p * (1 - p) / n).sqrt()
    assert ((freq / n - p).abs() <= 4.5 * se + 1e-3).all()
    assert p.max() > 0.7 and p.min() < 0.2  # the check covers a wide range of p


def test_magicpig_dense_when_window_covers_and_budget_respected():
    g = _gen(4)
    keys = torch.randn(2, 2, 60, 16, generator=g)
    vals = torch.randn(2, 2, 60, 16, generator=g)
    q = torch.randn(2, 4, 16, generator=g)
    m = _mp(sinks=4, window=60)
    o, sel = m.attend(q, keys, vals, m.prepare(keys[:, :, :50], _gen(0)), 20, 0.25)
    ref, _ = dense_attention(q, keys, vals, 0.25)
    assert sel.all() and torch.allclose(o, ref, atol=1e-5)
    m = _mp(sinks=2, window=4, lsh_k=2, lsh_l=10, min_collisions=1)
    o, sel = m.attend(q, keys, vals, m.prepare(keys[:, :, :50], _gen(0)), 20, 0.25)
    n = sel.sum(-1)
    assert (n <= 20).all() and (n == 20).any()  # thinned to the budget, never above it
    # sinks, the last 4 tokens and the decode tokens (>= 50) are always attended
    assert sel[..., :2].all() and sel[..., 50:].all()
