"""The official rules (error-set count, query scale per head group), Loki, and bad input."""

import pytest
import torch

from icml26.binarypc import BinaryPCConfig, apply_binarypc, remove_binarypc
from icml26.binarypc.codes import binary_pcs, hash_keys, unpack_signs
from icml26.binarypc.methods import error_count, make_method, metadata_bytes, worst_first
from icml26.binarypc.select import code_scores, select_tokens
from icml26.core.hfcache import cache_kw
from icml26.core.lm import tiny_llama


def _gen(s=0):
    return torch.Generator().manual_seed(s)


@pytest.mark.parametrize(
    ("k", "floor", "rnd"),
    [(128, 12, 13), (5, 1, 0), (1, 1, 0), (163, 16, 16), (655, 65, 66), (15, 1, 2)],
)
def test_error_count_rules(k, floor, rnd):
    """Official: max(int(err_ratio·k), 1) (bpc_pytorch.LayerCache._compute_budget); ours: round."""
    assert error_count(0.1, k, "floor") == floor
    assert error_count(0.1, k, "round") == rnd
    assert error_count(0.0, k, "floor") == 0 == error_count(0.0, k, "round")  # the ablation


@pytest.mark.parametrize("rule", ["floor", "round"])
def test_error_set_is_the_worst_reconstructed_keys(rule):
    g = _gen(1)
    keys = torch.randn(1, 2, 300, 16, generator=g)
    m = make_method(BinaryPCConfig(err_count=rule, err_ratio=0.1))
    meta = m.prepare(keys, _gen(2))
    q = torch.randn(1, 4, 16, generator=g)
    k = 45  # floor: 4 tokens, round: 4 (0.1·45 = 4.5 rounds to even)
    k = 47 if rule == "round" else k  # round(4.7) = 5
    _, forced = m.score(q, meta, k)
    n = error_count(0.1, k, rule)
    assert forced.sum(-1).tolist() == [[n, n]]
    worst = torch.topk(meta["err"], n, dim=-1).indices
    assert torch.equal(forced.nonzero()[:, -1].reshape(1, 2, n), worst.sort(-1).values)


def test_worst_first_ties_to_later_token():
    err = torch.tensor([[1.0, 5.0, 5.0, 0.0, 5.0]])
    assert worst_first(err).tolist() == [[4, 2, 1, 0, 3]]


def _official_scores(q, codes, V, G):
    """bpc_pytorch.compute_hashscores_pytorch restated: probe = q·V per head group, one absmax
    over the group's heads and bits, round(probe·127/max), ±1 codes, max over the group."""
    B, Hq, D = q.shape
    Hkv = codes.shape[1]
    probe = torch.einsum("bhgd,bhkd->bhgk", q.reshape(B, Hkv, G, D), V)
    mx = probe.abs().reshape(B, Hkv, -1).amax(-1)[..., None, None].clamp(min=1e-6)
    quant = torch.round(probe * (127 / mx))
    signs = unpack_signs(codes, 64, torch.float64)
    return torch.einsum("bhgk,bhlk->bhgl", quant, signs).amax(2), mx[..., 0, 0] / 127


def test_group_scale_is_the_official_score():
    g = _gen(3)
    B, Hkv, G, D, P = 2, 3, 3, 64, 400
    keys = torch.randn(B, Hkv, P, D, generator=g, dtype=torch.float64)
    V = binary_pcs(keys, 64, generator=_gen(4))
    codes = hash_keys(keys, V)
    q = torch.randn(B, Hkv * G, D, generator=g, dtype=torch.float64)
    off, step = _official_scores(q, codes, V, G)
    ours = code_scores(q, codes, V, quantize=True, qscale="group", backend="torch")
    assert torch.equal(torch.round(ours / step[..., None]), off)  # integers × one group scale
    assert torch.allclose(ours, off * step[..., None], rtol=1e-12)
    head = code_scores(q, codes, V, quantize=True, qscale="head", backend="torch")
    assert not torch.equal(head, ours)  # the per-head scale is a different rule
    # the same budget selects from the official integer scores under the shared tie rule
    for k in (10, 57):
        a = select_tokens(ours.float(), k, P, backend="torch")
        b = select_tokens(off.float(), k, P, backend="torch")
        assert torch.equal(a, b)


def test_defaults_are_the_official_rules():
    cfg = BinaryPCConfig()
    assert (cfg.err_count, cfg.qscale, cfg.err_ratio, cfg.mask_out, cfg.min_remain) == (
        "floor",
        "group",
        0.1,
        0.98,
        128,
    )
    with pytest.raises(ValueError, match="err_count must be one of floor, round"):
        BinaryPCConfig(err_count="ceil")
    with pytest.raises(ValueError, match="qscale must be one of group, head"):
        BinaryPCConfig(qscale="token")
    with pytest.raises(ValueError, match="backend must be one of auto, cpp, torch"):
        BinaryPCConfig(backend="cuda")
    with pytest.raises(ValueError, match="loki_rank must be >= 1"):
        BinaryPCConfig(loki_rank=0)


def test_loki_full_rank_is_the_oracle_and_low_rank_is_a_projection():
    g = _gen(5)
    keys = torch.randn(2, 3, 200, 16, generator=g, dtype=torch.float64)
    keys = keys * torch.linspace(3, 0.1, 16, dtype=torch.float64)  # a decaying spectrum
    q = torch.randn(2, 6, 16, generator=g, dtype=torch.float64)
    full = make_method(BinaryPCConfig(method="loki", loki_rank=16))
    orc = make_method(BinaryPCConfig(method="oracle"))
    s_full, _ = full.score(q, full.prepare(keys, None), 20)
    s_orc, _ = orc.score(q, orc.prepare(keys, None), 20)
    assert torch.allclose(s_full, s_orc, atol=1e-9)
    low = make_method(BinaryPCConfig(method="loki", loki_rank=4))
    meta = low.prepare(keys, None)
    U = meta["U"]  # (B, Hkv, D, r) orthonormal, the top eigenvectors of KᵀK
    assert torch.allclose(U.transpose(-1, -2) @ U, torch.eye(4, dtype=torch.float64), atol=1e-9)
    ev = torch.linalg.eigvalsh(torch.einsum("bhld,bhle->bhde", keys, keys))
    captured = ((keys @ U) ** 2).sum((-1, -2))
    assert torch.allclose(captured, ev[..., -4:].sum(-1), rtol=1e-9)
    s_low, _ = low.score(q, meta, 20)
    qr = torch.einsum("bhgd,bhdr->bhgr", q.reshape(2, 3, 2, 16), U)
    want = torch.einsum("bhgr,bhlr->bhgl", qr, keys @ U).amax(2)
    assert torch.allclose(s_low, want, atol=1e-12)
    assert metadata_bytes(BinaryPCConfig(method="loki", loki_rank=16), 64) == 32.0


def test_loki_recall_grows_with_rank():
    g = _gen(6)
    keys = torch.randn(1, 1, 2000, 32, generator=g) * torch.linspace(4, 0.2, 32)
    q = torch.randn(1, 1, 32, generator=g) * torch.linspace(4, 0.2, 32)
    w = torch.softmax((q[0, 0] @ keys[0, 0].T) / 32**0.5, -1)
    mass = []
    for r in (2, 8, 32):
        m = make_method(BinaryPCConfig(method="loki", loki_rank=r))
        s, _ = m.score(q, m.prepare(keys, None), 40)
        mass.append(float(w[select_tokens(s, 40, 2000)[0, 0]].sum()))
    assert mass[0] <= mass[1] + 1e-6 <= mass[2] + 2e-6


@pytest.fixture(scope="module")
def tiny():
    m, _ = tiny_llama(64, 2, 4, 2, 128, 512, vocab="bytes", seed=0)
    return m.float().eval()


def test_unsupported_attention_implementation_is_refused(tiny):
    tiny.config._attn_implementation = "flash_attention_2"
    try:
        with pytest.raises(ValueError, match="attention implementations sdpa, eager.*'flash_att"):
            apply_binarypc(tiny, BinaryPCConfig())
    finally:
        tiny.config._attn_implementation = "sdpa"
    apply_binarypc(tiny, BinaryPCConfig())  # sdpa works, and so does applying twice
    apply_binarypc(tiny, BinaryPCConfig(token_budget=8))
    remove_binarypc(tiny)


def test_unsupported_head_dim_is_refused():
    m, _ = tiny_llama(60, 2, 3, 1, 128, 512, vocab="bytes", seed=0)  # head_dim 20
    with pytest.raises(ValueError, match=r"supports head_dim 16, 32, .*256 .*head_dim 20"):
        apply_binarypc(m.float(), BinaryPCConfig())


def test_recode_new_hashes_only_the_new_tokens(tiny):
    """A second prefill on the same cache keeps the first prefill's directions and codes and
    hashes only the appended tokens on them; ``recode="all"`` rebuilds everything."""
    from icml26.binarypc import BinaryPCCache
    from icml26.binarypc.codes import hash_keys, recon_error

    g = torch.Generator().manual_seed(7)
    a, b = torch.randint(3, 250, (1, 40), generator=g), torch.randint(3, 250, (1, 9), generator=g)
    apply_binarypc(tiny, BinaryPCConfig(token_budget=8, dense_layers=(0,)))
    try:
        cache = BinaryPCCache(tiny)
        with torch.no_grad():
            tiny(input_ids=a, **cache_kw(tiny, cache), use_cache=True)
            first = {k: v.clone() for k, v in cache.layers[1].meta.items() if torch.is_tensor(v)}
            tiny(input_ids=b, **cache_kw(tiny, cache), use_cache=True)
        lay = cache.layers[1]
        assert lay.P == 49
        assert torch.equal(lay.meta["V"], first["V"])
        assert torch.equal(lay.meta["codes"][..., :40], first["codes"])
        new_k = lay.keys[:, :, 40:].float()
        assert torch.equal(lay.meta["codes"][..., 40:], hash_keys(new_k, first["V"]))
        assert torch.allclose(
            lay.meta["err"][..., 40:], recon_error(new_k, lay.meta["codes"][..., 40:], first["V"])
        )
        assert torch.equal(lay.meta["err_order"], worst_first(lay.meta["err"]))
        full = BinaryPCCache(tiny, BinaryPCConfig(token_budget=8, dense_layers=(0,), recode="all"))
        with torch.no_grad():
            tiny(input_ids=a, **cache_kw(tiny, full), use_cache=True)
            tiny(input_ids=b, **cache_kw(tiny, full), use_cache=True)
        assert full.layers[1].P == 49 and not torch.equal(full.layers[1].meta["V"], first["V"])
    finally:
        remove_binarypc(tiny)


def test_code_decode_hashes_decode_tokens_in_batches(tiny):
    from icml26.binarypc import BinaryPCCache
    from icml26.binarypc.codes import hash_keys

    ids = torch.randint(3, 250, (1, 60), generator=torch.Generator().manual_seed(8))
    apply_binarypc(tiny, BinaryPCConfig(token_budget=8, dense_layers=(0,), code_decode=3))
    try:
        cache = BinaryPCCache(tiny)
        with torch.no_grad():
            out = tiny(input_ids=ids, **cache_kw(tiny, cache), use_cache=True)
            Ps = []
            for _ in range(7):
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                out = tiny(input_ids=nxt, **cache_kw(tiny, cache), use_cache=True)
                Ps.append(cache.layers[1].P)
        assert Ps == [60, 60, 63, 63, 63, 66, 66]
        lay = cache.layers[1]
        assert torch.equal(
            lay.meta["codes"][..., 60:], hash_keys(lay.keys[:, :, 60:66].float(), lay.meta["V"])
        )
        with pytest.raises(ValueError, match="code_decode"):
            from icml26.binarypc import sparse_replay

            sparse_replay(tiny, ids, prefix_len=50)
    finally:
        remove_binarypc(tiny)
    with pytest.raises(ValueError, match="recode must be one of new, all"):
        BinaryPCConfig(recode="some")
