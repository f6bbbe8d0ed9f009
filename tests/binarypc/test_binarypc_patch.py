"""The HF patch: dense paths equal HF exactly, sparse decode equals the offline evaluation."""

import pytest
import torch

from icml26.binarypc import BinaryPCConfig, apply_binarypc, remove_binarypc
from icml26.binarypc.methods import make_method
from icml26.binarypc.patch import capture_qkv, sparse_decode
from icml26.binarypc.select import budget
from icml26.core.hfcache import cache_kw, output_cache
from icml26.core.lm import tiny_llama


@pytest.fixture(scope="module")
def model():
    m, _ = tiny_llama(64, 3, 4, 2, 128, 1024, vocab="bytes", seed=0)
    return m.float().eval()


def _decode(model, ids, n=4):
    """Greedy decode; returns (n+1, B, vocab) last-position logits and the generated ids."""
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        cache, logs, toks = output_cache(out), [out.logits[:, -1]], []
        for _ in range(n):
            nxt = logs[-1].argmax(-1, keepdim=True)
            toks.append(nxt)
            out = model(input_ids=nxt, **cache_kw(model, cache), use_cache=True)
            cache = output_cache(out)
            logs.append(out.logits[:, -1])
    return torch.stack(logs), torch.cat(toks, 1)


def test_dense_paths_equal_hf_exactly(model):
    ids = torch.randint(0, 250, (2, 200), generator=torch.Generator().manual_seed(0))
    ref, _ = _decode(model, ids)
    for cfg in (
        BinaryPCConfig(token_budget=10_000, dense_layers=()),
        BinaryPCConfig(dense_layers=(0, 1, 2), token_budget=8),
        BinaryPCConfig(min_context=10_000, dense_layers=(), token_budget=8),
    ):
        apply_binarypc(model, cfg)
        try:
            got, _ = _decode(model, ids)
        finally:
            remove_binarypc(model)
        assert torch.equal(got, ref)
    assert model.config._attn_implementation == "sdpa"


def test_sparse_decode_matches_offline_evaluation(model):
    """The patched step-by-step decode equals sparse_decode over the K/V of a dense forward."""
    ids = torch.randint(0, 250, (1, 300), generator=torch.Generator().manual_seed(1))
    cfg = BinaryPCConfig(token_budget=40, dense_layers=(0, 1))
    apply_binarypc(model, cfg)
    try:
        logits, toks = _decode(model, ids, n=3)
    finally:
        remove_binarypc(model)
    full = torch.cat([ids, toks], 1)
    # layer 2 is the only sparse layer: replay its last decode step offline
    apply_binarypc(model, cfg)
    attn = model.model.layers[2].self_attn
    seen = []
    hook = attn.register_forward_hook(lambda mod, args, out: seen.append(out[0].detach()))
    try:
        with torch.no_grad():
            out = model(input_ids=ids, use_cache=True)
            cache = output_cache(out)
            for t in range(3):
                out = model(input_ids=toks[:, t : t + 1], **cache_kw(model, cache), use_cache=True)
        meta, P = cache.layers[2].meta, cache.layers[2].P
    finally:
        hook.remove()
        remove_binarypc(model)
    assert P == 300 and torch.equal(out.logits[:, -1], logits[-1])
    # decode tokens are always among the selection
    qkv, _ = capture_qkv(model, full)
    q, k, v = qkv[2]
    m = make_method(cfg)
    o, idx = sparse_decode(
        m, meta, P, q[:, :, -1], k, v, attn.scaling, budget(k.shape[2], token_budget=40)
    )
    # layers 0-1 are dense, so layer 2's q/k/v equal the dense forward's: same output
    with torch.no_grad():
        got = attn.o_proj(o.reshape(1, 1, -1))
    assert torch.allclose(got, seen[-1], atol=1e-5)
    assert {300, 301, 302} <= set(idx[0, 0].tolist()) and idx.shape[-1] == 40


def test_bad_inputs(model):
    with pytest.raises(ValueError, match="out of range"):
        apply_binarypc(model, BinaryPCConfig(dense_layers=(7,)))
    with pytest.raises(ValueError, match=r"\(3, 2, 64, 16\)"):
        apply_binarypc(model, BinaryPCConfig(), directions=torch.zeros(3, 2, 64, 8))
    with pytest.raises(ValueError, match="cannot patch Linear"):
        apply_binarypc(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        capture_qkv(model, torch.zeros(1, 2000, dtype=torch.long))


REPLAY_CFGS = [
    BinaryPCConfig(method="bpc", token_budget=24, dense_layers=(0,)),
    BinaryPCConfig(method="bpc", mask_out=0.9, min_remain=16, dense_layers=(1,)),
    BinaryPCConfig(method="quest", token_budget=24, page=4, dense_layers=(0,)),
    BinaryPCConfig(method="simhash", token_budget=24, dense_layers=(0,)),
    BinaryPCConfig(method="streaming", token_budget=24, dense_layers=(0,)),
    BinaryPCConfig(method="oracle", token_budget=24, dense_layers=(0,)),
    BinaryPCConfig(
        method="magicpig",
        token_budget=24,
        dense_layers=(0,),
        lsh_k=3,
        lsh_l=12,
        min_collisions=2,
        sinks=2,
        window=6,
    ),
    BinaryPCConfig(method="bpc", token_budget=24, dense_layers=(0,), min_context=106),
]


@pytest.mark.parametrize("cfg", REPLAY_CFGS, ids=lambda c: f"{c.method}-{c.token_budget}")
def test_per_query_replay_equals_step_by_step_decode(cfg):
    """One forward with per-query selections == dense prefill + teacher-forced decode steps."""
    from icml26.binarypc.patch import sparse_replay

    m, _ = tiny_llama(64, 3, 4, 2, 128, 1024, vocab="bytes", seed=3)
    m = m.double().eval()
    ids = torch.randint(0, 250, (1, 112), generator=torch.Generator().manual_seed(5))
    P = 100
    apply_binarypc(m, cfg)
    try:
        with torch.no_grad():
            out = m(input_ids=ids[:, :P], use_cache=True)
            cache, steps = output_cache(out), [out.logits[:, -1]]
            for t in range(P, ids.shape[1] - 1):
                out = m(input_ids=ids[:, t : t + 1], **cache_kw(m, cache), use_cache=True)
                cache = output_cache(out)
                steps.append(out.logits[:, -1])
    finally:
        remove_binarypc(m)
    apply_binarypc(m, cfg)
    try:
        rep = sparse_replay(m, ids[:, :-1], P, chunk=5)
    finally:
        remove_binarypc(m)
    step = torch.stack(steps, 1)
    diff = (rep[:, P - 1 :] - step).abs().amax()
    assert diff < 1e-5, diff
    # and it is not dense: the dense forward differs on the continuation
    with torch.no_grad():
        dense = m(input_ids=ids[:, :-1]).logits
    assert torch.allclose(rep[:, : P - 1], dense[:, : P - 1], atol=1e-9)
    if cfg.min_context <= P:
        assert (rep[:, P:] - dense[:, P:]).abs().max() > 1e-6


def test_replay_bad_inputs(model):
    from icml26.binarypc.patch import sparse_replay

    ids = torch.zeros(1, 50, dtype=torch.long)
    with pytest.raises(ValueError, match="patched"):
        sparse_replay(model, ids, 10)
    apply_binarypc(model, BinaryPCConfig(token_budget=8))
    try:
        with pytest.raises(ValueError, match="prefix_len"):
            sparse_replay(model, ids, 50)
    finally:
        remove_binarypc(model)


@pytest.mark.parametrize("method", ["bpc", "magicpig"])
def test_replay_from_a_shared_dense_prefill_and_prime(method):
    """One dense prefill serves every method: the cached replay equals the full replay, the
    dense cache is left unchanged, and prime() + step decode equals the patched prefill + step
    decode."""
    from icml26.binarypc.patch import prime, sparse_replay

    m, _ = tiny_llama(64, 3, 4, 2, 128, 1024, vocab="bytes", seed=4)
    m = m.double().eval()
    ids = torch.randint(0, 250, (1, 90), generator=torch.Generator().manual_seed(6))
    P = 80
    cfg = BinaryPCConfig(
        method=method, token_budget=20, dense_layers=(0,), sinks=2, window=4, lsh_k=3, lsh_l=12
    )
    apply_binarypc(m, cfg)
    full = sparse_replay(m, ids, P)
    remove_binarypc(m)
    with torch.no_grad():
        past = output_cache(m(input_ids=ids[:, :P], use_cache=True))
    apply_binarypc(m, cfg)
    cached = sparse_replay(m, ids[:, P:], P, past=past)
    remove_binarypc(m)
    assert past.get_seq_length() == P
    assert (cached - full[:, P:]).abs().max() < 1e-9
    # prime + decode vs patched prefill + decode
    apply_binarypc(m, cfg)
    primed = prime(m, past)
    with torch.no_grad():
        a = m(input_ids=ids[:, P : P + 1], **cache_kw(m, primed), use_cache=True).logits
    remove_binarypc(m)
    assert past.get_seq_length() == P and primed.get_seq_length() == P + 1
    apply_binarypc(m, cfg)
    with torch.no_grad():
        c2 = output_cache(m(input_ids=ids[:, :P], use_cache=True))
        b = m(input_ids=ids[:, P : P + 1], **cache_kw(m, c2), use_cache=True).logits
    remove_binarypc(m)
    assert (a - b).abs().max() < 1e-9
