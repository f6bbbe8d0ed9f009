"""BinaryPC on a transformers-5.17-shaped model: forwards take ``past_key_values`` (a ``cache=``
keyword would be silently ignored, i.e. decoding would run dense on a fresh cache), outputs have
no ``.cache``, and the decoder calls ``cache.update(k, v, layer_idx)`` without the attention
kwargs. The patch, the decode evaluation and the passkey study must give the installed
transformers' results exactly."""

import numpy as np
import torch

from icml26.binarypc import BinaryPCCache, BinaryPCConfig, apply_binarypc, remove_binarypc
from icml26.binarypc.cache import BinaryPCLayer
from icml26.binarypc.decode_eval import passkey_config, passkey_study, perplexity_study
from icml26.core.hfcache import cache_kw, output_cache
from icml26.core.lm import tiny_llama

CFG = BinaryPCConfig(token_budget=16, dense_layers=(0,))


def _old_decoder(monkeypatch):
    """5.17's attention modules call ``cache.update(k, v, layer_idx)``: no kwargs dict reaches the
    cache layer (so the layer cannot hand itself to the attention function that way)."""
    orig = BinaryPCLayer.update

    def update(self, key_states, value_states, *args, **kwargs):
        return orig(self, key_states, value_states)

    monkeypatch.setattr(BinaryPCLayer, "update", update)


def _model(max_len=1024):
    m, tok = tiny_llama(64, 3, 4, 2, 128, max_len, vocab="bytes", seed=7)
    return m.double().eval(), tok


def _decode(model, ids, n=4, cache=None):
    """Prefill + ``n`` greedy steps, the cache read back from each output (as generate does)."""
    with torch.no_grad():
        kw = {} if cache is None else cache_kw(model, cache)
        out = model(input_ids=ids, use_cache=True, **kw)
        cache, logs = output_cache(out), [out.logits[:, -1]]
        for _ in range(n):
            nxt = logs[-1].argmax(-1, keepdim=True)
            out = model(input_ids=nxt, use_cache=True, **cache_kw(model, cache))
            cache = output_cache(out)
            logs.append(out.logits[:, -1])
    return torch.stack(logs), cache


def test_patched_decode_on_an_old_cache_api_model(monkeypatch, old_cache_api):
    ids = torch.randint(3, 250, (2, 100), generator=torch.Generator().manual_seed(1))
    model, _ = _model()
    dense, _ = _decode(model, ids)
    apply_binarypc(model, CFG)
    try:
        ref, _ = _decode(model, ids)
    finally:
        remove_binarypc(model)
    old = old_cache_api(_model()[0])
    _old_decoder(monkeypatch)
    apply_binarypc(old, CFG)
    try:
        got, cache = _decode(old, ids)  # the patch's own cache (made by its pre-hook)
        mine, own = _decode(old, ids, cache=BinaryPCCache(old))  # a cache passed in
    finally:
        remove_binarypc(old)
    for c in (cache, own):
        assert isinstance(c, BinaryPCCache) and ids.shape[1] == c.layers[1].P
    assert torch.equal(got, ref) and torch.equal(mine, ref)
    assert (got[1:] - dense[1:]).abs().max() > 1e-6  # sparse decoding did happen


def test_decode_eval_on_an_old_cache_api_model(monkeypatch, old_cache_api):
    seqs = [torch.randint(3, 250, (111,), generator=torch.Generator().manual_seed(2))]
    variants = {"BinaryPC": CFG}
    ref = perplexity_study(_model()[0], seqs, 100, variants)
    model, tok = _model(max_len=320)
    filler = torch.tensor(tok("the quick brown fox jumps over the lazy dog. " * 40).input_ids)
    pk = {"BinaryPC": passkey_config(0.5, method="bpc", dense_layers=(0,), min_context=16)}
    ref_pk = passkey_study(model, tok, filler, [320], [1], pk, max_new=4)
    _old_decoder(monkeypatch)
    got = perplexity_study(old_cache_api(_model()[0]), seqs, 100, variants)
    got_pk = passkey_study(old_cache_api(model), tok, filler, [320], [1], pk, max_new=4)
    assert set(got) == {"Dense", "BinaryPC"}
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k])
    assert not np.array_equal(ref["BinaryPC"], ref["Dense"])
    assert got_pk == ref_pk
