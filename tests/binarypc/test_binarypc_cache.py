"""BinaryPCCache: the per-request state lives in a transformers Cache.

``generate`` with a BinaryPCCache (and with the default cache of a patched model) equals the
pre-cache implementation token for token and score for score (float64), on a tiny Llama and a
SmolLM2-shaped config; batches, padding, beams, reorder / select / repeat, crop, reuse of a
cache across generate calls, and two caches or two models side by side.
"""

import copy
from contextlib import nullcontext

import pytest
import torch
from transformers import AttentionInterface, DynamicCache
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from icml26.binarypc import BinaryPCCache, BinaryPCConfig, apply_binarypc, prime, remove_binarypc
from icml26.binarypc.methods import make_method
from icml26.binarypc.patch import _allowed, calibrate, sparse_decode, sparse_replay
from icml26.binarypc.select import budget
from icml26.core.hfcache import cache_kw, cache_kwarg, output_cache
from icml26.core.lm import tiny_llama


class RefPatch:
    """The implementation before the cache existed, kept as the reference: per-layer state in a
    dict (it lived on the attention modules), one generator per patch, plain DynamicCache."""

    def __init__(self, cfg: BinaryPCConfig, directions=None):
        self.cfg, self.method, self.directions = cfg, make_method(cfg), directions
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.state: dict[int, tuple] = {}

    def attention(self, module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kw):
        kw.pop("binarypc_layer", None)
        cfg, i = self.cfg, module.layer_idx

        def dense():
            sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]
            return sdpa(
                module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kw
            )

        q_len, L = query.shape[2], key.shape[2]
        if q_len > 1:
            d = None if self.directions is None else self.directions[i]
            meta = None if i in cfg.dense_layers else self.method.prepare(key, self.gen, d)
            self.state[i] = (meta, L)
            return dense()
        meta, P = self.state.get(i, (None, 0))
        k = budget(L, cfg.mask_out, cfg.min_remain, cfg.token_budget)
        if meta is None or cfg.min_context > L or k >= L:
            return dense()
        out, _ = sparse_decode(
            self.method, meta, P, query[:, :, 0], key, value,
            module.scaling if scaling is None else scaling, k,
            allowed=_allowed(attention_mask, L),
        )  # fmt: skip
        return out.unsqueeze(1), None


def ref_generate(model, cfg, ids, directions=None, **kw):
    ref = RefPatch(cfg, directions)
    AttentionInterface.register("bpc_ref", ref.attention)
    AttentionMaskInterface.register("bpc_ref", ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    prev = model.config._attn_implementation
    model.set_attn_implementation("bpc_ref")
    try:
        return model.generate(ids, **kw)
    finally:
        model.set_attn_implementation(prev)


def _gen(model, ids, mask, seed=None, **kw):
    if seed is not None:
        torch.manual_seed(seed)
    return model.generate(
        ids,
        attention_mask=mask,
        return_dict_in_generate=True,
        output_scores=True,
        pad_token_id=0,
        **kw,
    )


MODELS = {
    # (hidden, layers, heads, kv_heads, ffn): tiny GQA 2:1, head_dim 16; SmolLM2-135M's attention
    # shape (9 query / 3 KV heads, head_dim 64, hidden 576, ffn 1536) with 3 layers
    "tiny-llama": (64, 3, 4, 2, 128),
    "smollm2-shape": (576, 3, 9, 3, 1536),
}


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    h, n, q, kv, f = MODELS[request.param]
    m, _ = tiny_llama(h, n, q, kv, f, 1024, vocab="bytes", seed=7)
    return m.double().eval()


def _prompts(B=2, L=100, pad=(0, 11), seed=0):
    """Left-padded batch (row b has pad[b] pad tokens) and its attention mask."""
    ids = torch.randint(3, 250, (B, L), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    for b, p in enumerate(pad[:B]):
        ids[b, :p] = 0
        mask[b, :p] = 0
    return ids, mask


CFGS = [
    BinaryPCConfig(token_budget=16, dense_layers=(0,)),
    BinaryPCConfig(method="quest", token_budget=24, page=4, dense_layers=(0,)),
]


@pytest.mark.parametrize("cfg", CFGS, ids=lambda c: c.method)
def test_generate_with_cache_equals_existing_path(model, cfg):
    ids, mask = _prompts()
    kw = dict(max_new_tokens=6, do_sample=False)
    ref = ref_generate(model, cfg, ids, attention_mask=mask, return_dict_in_generate=True,
                       output_scores=True, pad_token_id=0, **kw)  # fmt: skip
    apply_binarypc(model, BinaryPCConfig())  # the model's default config differs from cfg ...
    try:
        cache = BinaryPCCache(model, cfg)  # ... the cache's own config is the one used
        got = _gen(model, ids, mask, **cache_kw(model, cache), **kw)
        apply_binarypc(model, cfg)
        default = _gen(model, ids, mask, **kw)  # generate's own cache, upgraded by the patch
    finally:
        remove_binarypc(model)
    dense = _gen(model, ids, mask, **kw)
    assert torch.equal(got.sequences, ref.sequences)
    assert torch.equal(default.sequences, ref.sequences)
    for a, b, c in zip(got.scores, ref.scores, default.scores, strict=True):
        assert torch.equal(a, b) and torch.equal(c, b)
    # the cache is the one generate used and returned, and sparse decoding mattered
    assert output_cache(got) is cache and ids.shape[1] == cache.layers[1].P
    assert cache.get_seq_length() == ids.shape[1] + 5
    assert (
        max((a - d).abs().max() for a, d in zip(got.scores[1:], dense.scores[1:], strict=True))
        > 1e-6
    )
    assert got.scores[0].equal(dense.scores[0])  # the first token comes from the dense prefill


def test_sampling_and_past_key_values_name(model):
    """Sampled tokens are equal too (same RNG use), and generate's deprecated past_key_values=
    name works."""
    cfg = BinaryPCConfig(token_budget=12, dense_layers=(0,))
    ids, mask = _prompts(seed=3)
    torch.manual_seed(11)
    ref = ref_generate(model, cfg, ids, attention_mask=mask, max_new_tokens=8, do_sample=True,
                       top_k=0, pad_token_id=0)  # fmt: skip
    apply_binarypc(model, cfg)
    try:
        torch.manual_seed(11)
        # transformers >= 5.2x: a deprecated alias of `cache`; 5.17: the name itself, no warning
        renamed = cache_kwarg(model) == "cache"
        warns = pytest.warns(FutureWarning, match="past_key_values") if renamed else nullcontext()
        with warns:
            got = model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=True,
                                 top_k=0, pad_token_id=0, past_key_values=BinaryPCCache(model))  # fmt: skip
    finally:
        remove_binarypc(model)
    assert torch.equal(got, ref)
    assert len(set(got[0, -8:].tolist())) > 2  # the sample is not one repeated token


@pytest.mark.parametrize("method", ["bpc-offline", "quest"])
def test_beam_search_equals_existing_path(model, method):
    """Beam search. The existing path never reordered its codes, which is only right when the
    beams of one prompt have identical codes: offline directions or Quest. (With online
    directions each batch row draws its own initial directions, so the old path scored beams
    with another beam's codes after a reorder; test_reorder_select_and_repeat_... checks that
    the cache moves them.)"""
    cfg = BinaryPCConfig(method=method.split("-")[0], token_budget=16, page=4, dense_layers=(0,))
    ids, mask = _prompts(L=100, seed=4)
    d = None
    if method == "bpc-offline":
        d = calibrate(model, [ids[0]]).double()
    kw = dict(max_new_tokens=4, num_beams=3, do_sample=False, attention_mask=mask, pad_token_id=0)
    ref = ref_generate(model, cfg, ids, directions=d, **kw)
    apply_binarypc(model, cfg, directions=d)
    try:
        got = model.generate(ids, **cache_kw(model, BinaryPCCache(model)), **kw)
    finally:
        remove_binarypc(model)
    assert torch.equal(got, ref)


def _step(model, cache, toks):
    with torch.no_grad():
        return model(input_ids=toks, **cache_kw(model, cache), use_cache=True).logits[:, -1]


def test_reorder_select_and_repeat_move_the_codes_with_the_rows():
    """Rows of one cache have different codes; reorder / select / repeat must carry them."""
    m, _ = tiny_llama(64, 3, 4, 2, 128, 1024, vocab="bytes", seed=8)
    m = m.double().eval()
    cfg = BinaryPCConfig(token_budget=12, dense_layers=(0,))
    ids = torch.randint(3, 250, (3, 120), generator=torch.Generator().manual_seed(9))
    toks = torch.tensor([[5], [6], [7]])
    apply_binarypc(m, cfg)
    try:

        def prefilled():
            c = BinaryPCCache(m)
            with torch.no_grad():
                m(input_ids=ids, **cache_kw(m, c), use_cache=True)
            return c

        base = _step(m, prefilled(), toks)

        def same(a, b):  # batch size changes may reorder float sums: 1e-10 in float64
            return (a - b).abs().max() < 1e-10

        perm = torch.tensor([2, 0, 1])
        c = prefilled()
        c.reorder_cache(perm)
        assert same(_step(m, c, toks[perm]), base[perm])
        c = prefilled()
        c.batch_select_indices(torch.tensor([False, True, True]))
        assert same(_step(m, c, toks[1:]), base[1:])
        c = prefilled()
        c.batch_repeat_interleave(2)
        rep = torch.tensor([0, 0, 1, 1, 2, 2])
        assert same(_step(m, c, toks[rep]), base[rep])
        # the test can fail: without moving the codes, the reordered step differs
        c = prefilled()
        for layer in c.layers:
            layer.keys, layer.values = layer.keys[perm], layer.values[perm]
        assert not same(_step(m, c, toks[perm]), base[perm])
    finally:
        remove_binarypc(m)


def test_cache_reuse_across_generate_calls(model):
    """A second generate call on the same cache prefills only the new tokens; with
    ``recode="all"`` the codes are rebuilt over the whole cache, as the existing path did with a
    reused DynamicCache (``recode="new"``, the default, is tested in test_binarypc_methods)."""
    cfg = BinaryPCConfig(token_budget=16, dense_layers=(0,), recode="all")
    ids, mask = _prompts(B=1, pad=(0,), seed=5)
    more = torch.randint(3, 250, (1, 7), generator=torch.Generator().manual_seed(6))
    kw = dict(max_new_tokens=5, do_sample=False, pad_token_id=0)
    ref_cache = DynamicCache()
    ref = RefPatch(cfg)
    AttentionInterface.register("bpc_ref", ref.attention)
    AttentionMaskInterface.register("bpc_ref", ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    model.set_attn_implementation("bpc_ref")
    try:
        r1 = model.generate(ids, **cache_kw(model, ref_cache), **kw)
        r2 = model.generate(torch.cat([r1, more], 1), **cache_kw(model, ref_cache), **kw)
    finally:
        model.set_attn_implementation("sdpa")
    apply_binarypc(model, cfg)
    try:
        cache = BinaryPCCache(model)
        g1 = model.generate(ids, **cache_kw(model, cache), **kw)
        n1 = cache.get_seq_length()
        g2 = model.generate(torch.cat([g1, more], 1), **cache_kw(model, cache), **kw)
    finally:
        remove_binarypc(model)
    assert torch.equal(g1, r1) and torch.equal(g2, r2)
    assert n1 == ids.shape[1] + 4
    # the second prefill coded every cached token (prompt, first answer, new turn)
    assert r1.shape[1] + more.shape[1] == cache.layers[1].P
    assert cache.get_seq_length() == g2.shape[1] - 1


def test_two_caches_and_two_models_do_not_share_state():
    m1, _ = tiny_llama(64, 3, 4, 2, 128, 1024, vocab="bytes", seed=10)
    m1 = m1.double().eval()
    m2 = copy.deepcopy(m1)
    ids_a = torch.randint(3, 250, (1, 130), generator=torch.Generator().manual_seed(1))
    ids_b = torch.randint(3, 250, (1, 90), generator=torch.Generator().manual_seed(2))
    apply_binarypc(m1, BinaryPCConfig(token_budget=10, dense_layers=(0,)))
    apply_binarypc(m2, BinaryPCConfig(token_budget=30, dense_layers=(1,), seed=3))
    try:

        def run(model, ids, n=4):
            c = BinaryPCCache(model)
            with torch.no_grad():
                out = [model(input_ids=ids, **cache_kw(model, c), use_cache=True).logits[:, -1]]
            return c, out

        def cont(model, c, out):
            out.append(_step(model, c, out[-1].argmax(-1, keepdim=True)))

        alone = {}
        for key, model, ids in (("a", m1, ids_a), ("b", m1, ids_b), ("c", m2, ids_a)):
            c, out = run(model, ids)
            for _ in range(4):
                cont(model, c, out)
            alone[key] = torch.stack(out)
        # interleaved: three requests, two models, decode steps alternating
        runs = {k: (model, *run(model, ids)) for k, model, ids in
                (("a", m1, ids_a), ("b", m1, ids_b), ("c", m2, ids_a))}  # fmt: skip
        for _ in range(4):
            for model, c, out in runs.values():
                cont(model, c, out)
        for k, (_, _, out) in runs.items():
            assert torch.equal(torch.stack(out), alone[k]), k
        assert not torch.equal(alone["a"], alone["c"])  # the two configs do differ
    finally:
        remove_binarypc(m1)
        remove_binarypc(m2)


def test_crop_keeps_or_rebuilds_the_codes():
    m, _ = tiny_llama(64, 3, 4, 2, 128, 1024, vocab="bytes", seed=12)
    m = m.double().eval()
    ids = torch.randint(3, 250, (1, 100), generator=torch.Generator().manual_seed(13))
    toks = torch.tensor([[4], [9], [17]])
    apply_binarypc(m, BinaryPCConfig(token_budget=12, dense_layers=(0,)))
    try:
        c = BinaryPCCache(m)
        with torch.no_grad():
            m(input_ids=ids, **cache_kw(m, c), use_cache=True)
        first = [_step(m, c, t[None]) for t in toks]
        c.crop(-3)  # decode tokens only: the codes stay
        assert c.get_seq_length() == 100 and c.layers[1].P == 100
        assert all(torch.equal(_step(m, c, t[None]), f) for t, f in zip(toks, first, strict=True))
        # into the coded prefix: the kept 60 keys are coded as a prefill of them would be
        g = c.state.gen.get_state()
        c.crop(-(c.get_seq_length() - 60))
        ref = BinaryPCCache(m)
        ref.state.gen.set_state(g)
        for mine, theirs in zip(ref.layers, c.layers, strict=True):
            mine.prefill(theirs.keys)
            assert theirs.P == 60 and mine.P == 60
            if theirs.meta is not None:
                assert torch.equal(mine.meta["codes"], theirs.meta["codes"])
                assert theirs.meta["codes"].shape[-1] == 60
        c.crop(-60)
        assert c.layers[1].meta is None and c.layers[1].P == 0
    finally:
        remove_binarypc(m)


def test_prime_shares_the_dense_prefill_without_changing_it():
    m, _ = tiny_llama(64, 3, 4, 2, 128, 1024, vocab="bytes", seed=14)
    m = m.double().eval()
    ids = torch.randint(3, 250, (1, 90), generator=torch.Generator().manual_seed(15))
    with torch.no_grad():
        past = output_cache(m(input_ids=ids, use_cache=True))
    k0 = [layer.keys for layer in past.layers]
    cfg = BinaryPCConfig(token_budget=12, dense_layers=(0,))
    apply_binarypc(m, cfg)
    try:
        c = prime(m, past)
        a = [_step(m, c, torch.tensor([[t]])) for t in (5, 6, 7)]
        own = BinaryPCCache(m)
        with torch.no_grad():
            m(input_ids=ids, **cache_kw(m, own), use_cache=True)
        b = [_step(m, own, torch.tensor([[t]])) for t in (5, 6, 7)]
    finally:
        remove_binarypc(m)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert past.get_seq_length() == 90
    assert all(layer.keys is k for layer, k in zip(past.layers, k0, strict=True))
    assert isinstance(past, DynamicCache) and not isinstance(past, BinaryPCCache)


def test_bad_cache_inputs():
    m, _ = tiny_llama(64, 3, 4, 2, 128, 1024, vocab="bytes", seed=0)
    m = m.float().eval()
    ids = torch.randint(3, 250, (1, 40), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="patched with apply_binarypc"):
        BinaryPCCache(m)
    with pytest.raises(ValueError, match="patched with apply_binarypc"):
        sparse_replay(m, ids, 10)
    with torch.no_grad():
        past = output_cache(m(input_ids=ids, use_cache=True))
    apply_binarypc(m, BinaryPCConfig(token_budget=8))
    try:
        with pytest.raises(ValueError, match=r"DynamicCache holding 40 tokens.*prime"):
            m(input_ids=ids[:, :1], **cache_kw(m, past), use_cache=True)
        with pytest.raises(ValueError, match="out of range"):
            BinaryPCCache(m, BinaryPCConfig(dense_layers=(5,)))
        with pytest.raises(ValueError, match=r"\(3, 2, 64, 16\)"):
            BinaryPCCache(m, directions=torch.zeros(3, 2, 64, 8))
        # no cache and use_cache=False: dense, nothing kept anywhere
        with torch.no_grad():
            a = m(input_ids=ids, use_cache=False).logits
    finally:
        remove_binarypc(m)
    with torch.no_grad():
        assert torch.equal(a, m(input_ids=ids, use_cache=False).logits)
    assert not hasattr(m, "_bpc_applied") and not any(
        hasattr(x.self_attn, "_bpc_state") for x in m.model.layers
    )
