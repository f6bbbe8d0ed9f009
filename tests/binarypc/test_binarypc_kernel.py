"""The compiled CPU path (kernel.py, csrc/bpc_cpu.cpp) against the tensor reference, bit for bit.

The scores of an int8 query are exact integers times a float32 scale, so the kernel must equal
``select.int_code_scores`` exactly; the selection has one total order with ties to the later
token, so the kernel's partial selection must equal ``select.select_tokens`` (tensor path)
index for index, ties, NaN, ±inf, forced and masked tokens included. Tests that need the build
skip where no compiler exists (the fallback itself is tested without one).
"""

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.binarypc import kernel
from icml26.binarypc.codes import unpack_signs
from icml26.binarypc.select import (
    code_scores,
    int_code_scores,
    project_query,
    select_tokens,
    sparse_attention,
    topk_later_ties,
)
from icml26.core.hfcache import cache_kw

needs_kernel = pytest.mark.skipif(
    not kernel.available(),
    reason="C++ kernel unavailable (no toolchain, or ICML26_BPC_KERNEL=torch)",
)


def _codes(g, B, Hkv, P, bits, pool):
    """Random codes of ``bits`` bits drawn from a pool of ``pool`` distinct codes (ties)."""
    base = torch.randint(0, 2**62, (pool,), generator=g) * 4 + torch.randint(
        0, 4, (pool,), generator=g
    )
    base = base ^ (torch.randint(0, 2, (pool,), generator=g) << 63)  # the sign bit too
    if bits < 64:
        base = base & ((1 << bits) - 1)
    return base[torch.randint(0, pool, (B, Hkv, P), generator=g)]


@needs_kernel
@settings(max_examples=120, deadline=None)
@given(
    B=st.integers(1, 3),
    Hkv=st.integers(1, 3),
    G=st.integers(1, 4),
    P=st.integers(1, 300),
    bits=st.sampled_from([1, 7, 8, 33, 63, 64]),
    pool=st.integers(1, 40),
    shared=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_kernel_scores_equal_reference(B, Hkv, G, P, bits, pool, shared, seed):
    g = torch.Generator().manual_seed(seed)
    codes = _codes(g, 1 if shared else B, Hkv, P, bits, pool)
    if shared and B > 1:
        codes = codes.expand(B, -1, -1)  # a broadcast batch (the claim's expanded metadata)
    pint = torch.randint(-127, 128, (B, Hkv * G, bits), generator=g, dtype=torch.int32)
    scale = torch.rand(B, Hkv * G, generator=g) * 3 + 1e-3
    if seed % 2:  # one scale per group: integer ties across the group's heads
        scale = scale.reshape(B, Hkv, G)[..., :1].expand(B, Hkv, G).reshape(B, Hkv * G)
    got = kernel.scores(pint, scale.contiguous(), codes)
    ref = int_code_scores(pint, scale, codes)
    assert got.dtype == ref.dtype == torch.float32
    assert torch.equal(got, ref)
    # and the integers are Σ_b p_b·sign_b
    ints = torch.einsum(
        "bhk,bhlk->bhl",
        pint.double(),
        unpack_signs(codes, bits, torch.float64).repeat_interleave(G, 1),
    )
    best = (ints * scale.double()[..., None].float().double()).reshape(B, Hkv, G, P)
    assert torch.allclose(got.double(), best.amax(2), rtol=1e-6, atol=0)


def _brute(scores, k, n_total, forced, allowed):
    """The documented order, by sorting Python tuples: (class, score, index), largest first."""
    B, H, P = scores.shape
    out = torch.empty((B, H, min(k, n_total)), dtype=torch.long)
    for b in range(B):
        for h in range(H):
            keys = []
            for i in range(n_total):
                ok = allowed is None or bool(allowed[b, i])
                if not ok:
                    keys.append((0, 0.0, i))
                elif i >= P:
                    keys.append((3, 0.0, i))
                elif forced is not None and bool(forced[b, h, i]):
                    keys.append((2, 0.0, i))
                else:
                    s = float(scores[b, h, i])
                    keys.append((1, -1e300 if s != s else max(min(s, 1e299), -1e299), i))
            keys.sort(reverse=True)
            out[b, h] = torch.tensor(sorted(t[2] for t in keys[: min(k, n_total)]))
    return out


@st.composite
def _selection_case(draw):
    B, H = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    P = draw(st.integers(1, 60))
    n_total = P + draw(st.integers(0, 5))
    k = draw(st.integers(0, n_total + 2))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    levels = draw(st.integers(1, 6))  # few distinct values: many ties
    scores = (torch.randint(0, levels, (B, H, P), generator=g).float() - levels / 2) * 0.37
    if draw(st.booleans()):
        scores = scores + torch.randn(B, H, P, generator=g) * draw(
            st.sampled_from([0.0, 1e-7, 1.0])
        )
    specials = draw(st.integers(0, 3))
    for v in [float("nan"), float("inf"), float("-inf"), -0.0][:specials]:
        scores.view(-1)[torch.randint(0, scores.numel(), (2,), generator=g)] = v
    forced = None
    if draw(st.booleans()):
        forced = torch.rand(B, H, P, generator=g) < draw(st.sampled_from([0.05, 0.3, 0.9]))
    allowed = None
    if draw(st.booleans()):
        allowed = torch.rand(B, n_total, generator=g) < draw(st.sampled_from([0.5, 0.95]))
    return scores, k, n_total, forced, allowed


@settings(max_examples=200, deadline=None)
@given(_selection_case())
def test_reference_selection_is_the_documented_order(case):
    scores, k, n_total, forced, allowed = case
    got = select_tokens(scores, k, n_total, forced=forced, allowed=allowed, backend="torch")
    assert torch.equal(got, _brute(scores, k, n_total, forced, allowed))


@needs_kernel
@settings(max_examples=300, deadline=None)
@given(_selection_case())
def test_kernel_selection_equals_reference(case):
    scores, k, n_total, forced, allowed = case
    ref = select_tokens(scores, k, n_total, forced=forced, allowed=allowed, backend="torch")
    got = select_tokens(scores, k, n_total, forced=forced, allowed=allowed, backend="cpp")
    assert got.dtype == torch.int64 and torch.equal(got, ref)


@needs_kernel
@pytest.mark.parametrize("qscale", ["group", "head"])
@pytest.mark.parametrize("P", [1, 129, 5000])
def test_full_path_equal_on_long_rows_with_ties(qscale, P):
    """Projection → kernel scores → kernel selection equals the tensor path on rows long enough
    for the histogram selection (and, with group scales, full of integer ties)."""
    g = torch.Generator().manual_seed(P)
    B, Hkv, G, D = 2, 3, 3, 64
    q = torch.randn(B, Hkv * G, D, generator=g)
    V = torch.randn(B, Hkv, 64, D, generator=g) / 8
    codes = _codes(g, B, Hkv, P, 64, max(2, P // 3))
    s_t = code_scores(q, codes, V, qscale=qscale, backend="torch")
    s_c = code_scores(q, codes, V, qscale=qscale, backend="cpp")
    assert torch.equal(s_t, s_c)
    forced = torch.zeros(B, Hkv, P, dtype=torch.bool)
    forced[..., : P // 10] = True
    for k in {1, 7, P // 50 + 1, P // 2 + 1, P + 3}:
        a = select_tokens(s_t, k, P + 3, forced=forced, backend="torch")
        b = select_tokens(s_c, k, P + 3, forced=forced, backend="cpp")
        assert torch.equal(a, b), k


def test_topk_later_ties_small():
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0, 0.0]])
    assert topk_later_ties(x, 2).tolist() == [[2, 4]]
    assert topk_later_ties(x, 4).tolist() == [[1, 2, 3, 4]]
    assert topk_later_ties(x, 0).shape == (1, 0)
    assert topk_later_ties(x, 9).tolist() == [[0, 1, 2, 3, 4, 5]]


def test_sparse_attention_broadcast_kv_equals_per_row():
    g = torch.Generator().manual_seed(3)
    K, V = torch.randn(1, 2, 30, 8, generator=g), torch.randn(1, 2, 30, 8, generator=g)
    q = torch.randn(4, 6, 8, generator=g)
    idx = torch.stack([torch.randperm(30, generator=g)[:5] for _ in range(8)]).reshape(4, 2, 5)
    out = sparse_attention(q, K.expand(4, -1, -1, -1), V.expand(4, -1, -1, -1), idx, 0.3)
    for b in range(4):
        ref = sparse_attention(q[b : b + 1], K, V, idx[b : b + 1], 0.3)
        assert torch.allclose(out[b : b + 1], ref, atol=1e-6)


def test_project_query_scales():
    g = torch.Generator().manual_seed(4)
    q, V = torch.randn(1, 6, 16, generator=g), torch.randn(1, 2, 64, 16, generator=g)
    pg, sg = project_query(q, V, 2, qscale="group")
    ph, sh = project_query(q, V, 2, qscale="head")
    assert pg.dtype == torch.int32 and pg.abs().max() <= 127
    assert torch.equal(sg.reshape(1, 2, 3), sg.reshape(1, 2, 3)[..., :1].expand(1, 2, 3))
    assert (ph.abs().amax(-1) == 127).all()  # every head uses its full range
    assert (pg.reshape(1, 2, 3, 64).abs().amax((-1, -2)) == 127).all()  # one head per group does
    with pytest.raises(ValueError, match="qscale must be one of group, head"):
        project_query(q, V, 2, qscale="token")


def test_fallback_without_a_compiler(monkeypatch):
    """A failed build warns once, in one line, and the tensor path gives the same selection."""
    from torch.utils import cpp_extension

    g = torch.Generator().manual_seed(5)
    q, V = torch.randn(1, 6, 16, generator=g), torch.randn(1, 2, 64, 16, generator=g) / 4
    codes = _codes(g, 1, 2, 50, 64, 10)
    want = select_tokens(code_scores(q, codes, V, backend="torch"), 9, 52, backend="torch")

    def no_compiler(*a, **k):
        raise RuntimeError("g++: command not found\nmore detail")

    monkeypatch.setattr(cpp_extension, "load", no_compiler)
    monkeypatch.setattr(kernel, "_MOD", None)
    monkeypatch.setattr(kernel, "_TRIED", False)
    monkeypatch.delenv("ICML26_BPC_KERNEL", raising=False)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert not kernel.available()
        assert not kernel.available()  # tried once
        got = select_tokens(code_scores(q, codes, V), 9, 52)
    msgs = [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)]
    assert len(msgs) == 1 and "\n" not in msgs[0] and "g++: command not found" in msgs[0]
    assert torch.equal(got, want)
    with pytest.raises(RuntimeError, match="backend 'cpp'"):
        code_scores(q, codes, V, backend="cpp")
    monkeypatch.setenv("ICML26_BPC_KERNEL", "cpp")
    with pytest.raises(RuntimeError, match="could not be built"):
        kernel.load()


def test_kernel_env_switch(monkeypatch):
    monkeypatch.setenv("ICML26_BPC_KERNEL", "torch")
    assert kernel.load() is None
    monkeypatch.setenv("ICML26_BPC_KERNEL", "fast")
    with pytest.raises(ValueError, match="auto, cpp or torch"):
        kernel.load()


def test_build_key_names_source_and_torch():
    key = kernel.build_key()
    assert len(key) == 16 and key == kernel.build_key()


def test_stale_build_lock_is_cleared(tmp_path):
    import os
    import time

    lock = tmp_path / "lock"
    lock.write_text("")
    kernel._clear_stale_lock(lock)
    assert lock.exists()  # a fresh lock belongs to a running build
    old = time.time() - 3600
    os.utime(lock, (old, old))
    kernel._clear_stale_lock(lock)
    assert not lock.exists()
    kernel._clear_stale_lock(lock)  # absent: nothing to do


@needs_kernel
@pytest.mark.parametrize("method", ["bpc", "simhash", "quest", "loki"])
def test_patched_generate_is_identical_on_both_backends(method):
    """float32 decode through the patch (a left-padded batch of 2, greedy, scores returned):
    the kernel and the tensor path give the same tokens and bit-identical scores."""
    from icml26.binarypc import BinaryPCCache, BinaryPCConfig, apply_binarypc, remove_binarypc
    from icml26.core.lm import tiny_llama

    model, _ = tiny_llama(64, 3, 4, 2, 128, 1024, vocab="bytes", seed=1)
    model = model.float().eval()
    g = torch.Generator().manual_seed(9)
    ids = torch.randint(3, 250, (2, 300), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :17] = 0
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0, attention_mask=mask)
    kw.update(output_scores=True, return_dict_in_generate=True)
    apply_binarypc(model, BinaryPCConfig(method=method, token_budget=20, dense_layers=(0,)))
    try:
        out = {}
        for be in ("torch", "cpp"):
            cfg = BinaryPCConfig(method=method, token_budget=20, dense_layers=(0,), backend=be)
            with torch.no_grad():
                out[be] = model.generate(ids, **cache_kw(model, BinaryPCCache(model, cfg)), **kw)
    finally:
        remove_binarypc(model)
    assert torch.equal(out["cpp"].sequences, out["torch"].sequences)
    for a, b in zip(out["cpp"].scores, out["torch"].scores, strict=True):
        assert torch.equal(a, b)
