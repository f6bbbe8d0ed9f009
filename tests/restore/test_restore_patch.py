"""The RESTORE patch on real (tiny, random) HF LLaVA / LLaVA-NeXT models, against float64
references."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.restore import RestoreConfig, apply_restore, distance_bias, remove_restore, rope_decay
from icml26.restore.attention import STATE_KWARG, RestoreState, restore_attention, rope_params
from icml26.restore.patch import restore_state
from icml26.restore.reducers import Reduction
from icml26.restore.vlm import tiny_llava, tiny_llava_next

N = 64  # 32x32 image, patch 4


@pytest.fixture(scope="module")
def model():
    return tiny_llava(dtype=torch.float64, layers=3)


def inputs(batch=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.tensor([[1, 2, 3] + [63] * N + [4, 5, 6, 7, 8]] * batch)
    return ids, torch.randn(batch, 3, 32, 32, generator=g, dtype=torch.float64)


class Keep:
    """Test reducer: keep a fixed subset (no merging), or merge fixed groups."""

    def __init__(self, groups):
        self.groups = torch.as_tensor(groups)

    def reduce(self, feats, keep, cls_attn=None):
        return Reduction.from_groups(self.groups.clone())


# ---------------------------------------------------------------------------- calibration math


@settings(max_examples=30, deadline=None)
@given(
    delta=st.integers(0, 100_000),
    hd=st.sampled_from([16, 64, 128]),
    base=st.sampled_from([1e4, 1e5]),
)
def test_rope_decay_bounds(delta, hd, base):
    d = float(rope_decay(torch.tensor(delta), hd, base))
    ref = sum(math.cos(delta * base ** (-2 * j / hd)) for j in range(hd // 2)) * 2 / hd
    assert abs(d - ref) < 1e-9 and abs(d) <= 1 + 1e-12
    if delta == 0:
        assert d == 1.0


def test_rope_params_and_bias():
    from transformers import LlamaConfig

    llava = LlamaConfig(hidden_size=4096, num_attention_heads=32, rope_theta=10000.0)
    smol = LlamaConfig(hidden_size=576, num_attention_heads=9, rope_theta=100000.0)
    assert rope_params(llava) == (128, 10000.0) and rope_params(smol) == (64, 100000.0)
    pos = torch.tensor([[0, 5, 9, 300]])
    b = distance_bias(pos, pos, 128, 1e4, c=2.0)
    assert b[0, 1, 1] == 0.0  # log(2 - D(0)) = log 1
    assert torch.allclose(b[0, 3, 0], torch.log(2 - rope_decay(torch.tensor(300), 128, 1e4)))
    with pytest.raises(ValueError, match="c must be > 1"):
        distance_bias(pos, pos, 128, 1e4, c=1.0)


def test_identical_keys_merged_with_size_equal_unmerged():
    """k identical keys at one position == one key with log s = log k (distance off)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 3, 8, generator=g, dtype=torch.float64)
    a, b, c = (torch.randn(1, 2, 1, 8, generator=g, dtype=torch.float64) for _ in range(3))
    va, vb, vc = (torch.randn(1, 2, 1, 8, generator=g, dtype=torch.float64) for _ in range(3))

    class M(torch.nn.Module):
        layer_idx, training = 1, False

    def run(keys, vals, sizes):
        mod = M()
        k = keys.shape[2]
        cfg = RestoreConfig(reducer="none", calibrate=True, distance_bias=False)
        s = RestoreState(
            config=cfg,
            head_dim=8,
            base=1e4,
            phase="prefill",
            log_size=torch.log(torch.tensor([sizes], dtype=torch.float64)),
            log_size0=torch.zeros(1, k, dtype=torch.float64),
            pos=torch.zeros(1, k, dtype=torch.long),
            valid=torch.ones(1, k, dtype=torch.bool),
            visual=torch.zeros(1, k, dtype=torch.bool),
        )
        # queries see every key (they sit after all keys): pass Q rows as the last Q of K+Q
        kk = torch.cat([keys, torch.zeros(1, 2, 3, 8, dtype=torch.float64)], 2)
        vv = torch.cat([vals, torch.zeros(1, 2, 3, 8, dtype=torch.float64)], 2)
        s.log_size = torch.cat([s.log_size, torch.full((1, 3), -1e4, dtype=torch.float64)], 1)
        s.log_size0, s.pos = (
            torch.zeros(1, k + 3, dtype=torch.float64),
            torch.zeros(1, k + 3, dtype=torch.long),
        )
        s.valid, s.visual = (
            torch.ones(1, k + 3, dtype=torch.bool),
            torch.zeros(1, k + 3, dtype=torch.bool),
        )
        return restore_attention(mod, q, kk, vv, None, scaling=0.3, **{STATE_KWARG: s})[0]

    merged = run(torch.cat([a, b, c], 2), torch.cat([va, vb, vc], 2), [1.0, 3.0, 1.0])
    unmerged = run(torch.cat([a, b, b, b, c], 2), torch.cat([va, vb, vb, vb, vc], 2), [1.0] * 5)
    torch.testing.assert_close(merged, unmerged, rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------- patch vs references


def test_keep_all_uncalibrated_equals_unpatched_and_remove_is_exact(model):
    ids, px = inputs(batch=2)
    ref = model(input_ids=ids, pixel_values=px).logits
    apply_restore(model, RestoreConfig(reducer="none", calibrate=False))
    try:
        out = model(input_ids=ids, pixel_values=px).logits
    finally:
        remove_restore(model)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(model(input_ids=ids, pixel_values=px).logits, ref)
    assert model.config.text_config._attn_implementation == "sdpa"


def test_retained_pruning_equals_masked_full_sequence(model):
    """Pruning with retained positions, no calibration == the full model with the pruned visual
    tokens masked out (same rotary positions), at every text position, prefill and decode."""
    keep = torch.tensor([0, 5, 6, 17, 30, 31, 50, 63])
    groups = torch.full((N,), -1)
    groups[keep] = torch.arange(keep.numel())
    ids, px = inputs()
    mask = torch.ones_like(ids)
    mask[0, 3 + torch.tensor([i for i in range(N) if i not in keep.tolist()])] = 0
    pos = torch.arange(ids.shape[1])[None]
    ref = model(input_ids=ids, pixel_values=px, attention_mask=mask, position_ids=pos).logits
    apply_restore(model, RestoreConfig(reducer=Keep(groups), keep=8, gamma=None, calibrate=False))
    try:
        res = model(input_ids=ids, pixel_values=px)
        out = res.logits
        torch.testing.assert_close(out[0, -5:], ref[0, -5:], rtol=1e-9, atol=1e-9)
        st_ = restore_state(res)
        assert (
            st_.pos[0, 3:11].tolist() == (3 + keep).tolist()
            and int(st_.next_pos[0]) == ids.shape[1]
        )
        gen = model.generate(
            input_ids=ids,
            pixel_values=px,
            max_new_tokens=3,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
    finally:
        remove_restore(model)
    # decode: continue the masked full sequence token by token
    seq, m = ids, mask
    for t in range(3):
        full = model(
            input_ids=seq,
            pixel_values=px,
            attention_mask=m,
            position_ids=torch.arange(seq.shape[1])[None],
        ).logits[:, -1]
        torch.testing.assert_close(
            gen.logits[t].double(), full, rtol=1e-6, atol=1e-6
        )  # float32 out
        nxt = gen.sequences[:, ids.shape[1] + t : ids.shape[1] + t + 1]
        seq, m = torch.cat([seq, nxt], 1), torch.cat([m, torch.ones_like(nxt)], 1)


def _rot(x, pos, base):
    d = x.shape[-1]
    inv = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = pos[:, None].double() * inv[None]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def brute_force_lm(model, embeds, pos, log_s, log_s0, c, dist=True):
    """float64 Llama forward with softmax(z + log s + log(c - D(|m-n|))) in every layer."""
    lm = model.model.language_model
    hd, base = rope_params(lm.config)
    h = embeds[0]
    n = h.shape[0]
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    dterm = torch.log(c - rope_decay((pos[:, None] - pos[None]).abs(), hd, base)) if dist else 0.0
    for li, layer in enumerate(lm.layers):
        a = layer.self_attn
        x = layer.input_layernorm(h)
        q = a.q_proj(x).view(n, -1, hd).transpose(0, 1)
        k = a.k_proj(x).view(n, -1, hd).transpose(0, 1)
        v = a.v_proj(x).view(n, -1, hd).transpose(0, 1)
        rep = q.shape[0] // k.shape[0]
        k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
        q, k = _rot(q, pos, base), _rot(k, pos, base)
        z = q @ k.transpose(-1, -2) / math.sqrt(hd) + (log_s0 if li == 0 else log_s)[None] + dterm
        z = z.masked_fill(~causal, -float("inf"))
        o = (z.softmax(-1) @ v).transpose(0, 1).reshape(n, -1)
        h = h + a.o_proj(o)
        h = h + layer.mlp(layer.post_attention_layernorm(h))
    return model.lm_head(lm.norm(h))


@pytest.mark.parametrize("positions", ["retained", "reindexed"])
def test_calibrated_forward_matches_brute_force(model, positions):
    # tokens 0..7 kept (size 1); the other 56 merged into 8 groups of 7 by index mod 8
    groups = torch.full((N,), -1)
    groups[:8] = torch.arange(8)
    groups[8:] = 8 + torch.arange(56) % 8
    red = Reduction.from_groups(groups.clone())
    ids, px = inputs(seed=3)
    cfg = RestoreConfig(reducer=Keep(groups), keep=16, gamma=None, positions=positions, c=2.0)
    apply_restore(model, cfg)
    try:
        out = model(input_ids=ids, pixel_values=px).logits[0]
        feats = model.model.get_image_features(pixel_values=px, return_dict=True).pooler_output[0]
    finally:
        remove_restore(model)
    emb = model.model.get_input_embeddings()(ids)[0]
    rel = red.positions("lower")
    assert rel[8:].tolist() == [8 + 8 * 3 + j for j in range(8)]  # lower median of {8+j, 16+j, ...}
    x = torch.cat([emb[:3], red.merge(feats), emb[3 + N :]])[None]
    pos = torch.cat([torch.arange(3), 3 + rel, 3 + N + torch.arange(5)])
    if positions == "reindexed":
        pos = torch.arange(x.shape[1])
    log_s = torch.cat([torch.zeros(3), torch.log(red.sizes.double()), torch.zeros(5)]).double()
    log_s0 = torch.cat(
        [torch.zeros(3), torch.full((16,), math.log(N / 16)), torch.zeros(5)]
    ).double()
    ref = brute_force_lm(model, x, pos, log_s, log_s0, 2.0)
    # HF computes rotary cos/sin in float32, hence 1e-6 rather than 1e-12
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    wrong = brute_force_lm(model, x, pos, log_s, log_s, 2.0)  # no uniform layer-0 sizes
    assert (out - wrong).abs().max() > 1e-3


def test_cached_decode_equals_recompute_log_s_only(model):
    ids, px = inputs(seed=5)
    apply_restore(model, RestoreConfig(reducer="divprune", keep=12, distance_bias=False))
    try:
        gen = model.generate(
            input_ids=ids,
            pixel_values=px,
            max_new_tokens=4,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
        for t in range(4):
            seq = gen.sequences[:, : ids.shape[1] + t]
            full = model(input_ids=seq, pixel_values=px).logits[:, -1]
            torch.testing.assert_close(gen.logits[t].double(), full, rtol=1e-6, atol=1e-6)
    finally:
        remove_restore(model)


@pytest.mark.parametrize(
    "cfg",
    [
        RestoreConfig(reducer="divprune", keep=16),
        RestoreConfig(reducer="visionzip", keep=16),
        RestoreConfig(reducer="tome", keep=16, gamma=None),
        RestoreConfig(reducer="fastv", keep=8, calibrate=False),
        RestoreConfig(reducer="pdrop", keep=8, calibrate=False),
        RestoreConfig(reducer="divprune", keep=16, select_on="projected", positions="reindexed"),
    ],
)
def test_generate_batched_runs(model, cfg):
    ids, px = inputs(batch=2, seed=1)
    apply_restore(model, cfg)
    try:
        out = model.generate(input_ids=ids, pixel_values=px, max_new_tokens=3, do_sample=False)
        logits = model(input_ids=ids, pixel_values=px).logits
    finally:
        remove_restore(model)
    assert out.shape == (2, ids.shape[1] + 3) and torch.equal(out[:, : ids.shape[1]], ids)
    assert torch.isfinite(logits).all()


def test_llava_next_generate_keeps_newlines():
    m = tiny_llava_next(dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    px = torch.randn(1, 3, 3, 16, 16, generator=g, dtype=torch.float64)  # base + 2 tiles
    sizes = torch.tensor([[16, 32]])
    feats = m.model.get_image_features(
        pixel_values=px, image_sizes=sizes, return_dict=True
    ).pooler_output[0]
    ids = torch.tensor([[1, 2] + [63] * feats.shape[0] + [4, 5]])
    apply_restore(m, RestoreConfig(reducer="divprune", keep=20, select_on="projected"))
    try:
        gen = m.generate(
            input_ids=ids,
            pixel_values=px,
            image_sizes=sizes,
            max_new_tokens=3,
            do_sample=False,
            return_dict_in_generate=True,
        )
        out, red = gen.sequences, restore_state(gen).reductions[0]
    finally:
        remove_restore(m)
    nl = (feats == m.model.image_newline).all(-1)
    assert out.shape[1] == ids.shape[1] + 3 and red.n == 20
    assert nl.any() and (red.sizes[torch.unique(red.groups[nl])] == 1).all()


# ---------------------------------------------------------------------------- bad input


def test_bad_config_values():
    for kw, msg in [
        ({"keep": 0}, "keep.*got 0"),
        ({"gamma": 1.5}, "gamma.*1.5"),
        ({"c": 1.0}, "c must be > 1.*1.0"),
        ({"positions": "x"}, "positions"),
        ({"reducer": "bogus"}, "unknown reducer"),
        ({"reducer": "fastv"}, "in-LLM"),
        ({"reducer": "tome"}, "gamma=None"),
    ]:
        with pytest.raises(ValueError, match=msg):
            RestoreConfig(**kw)


def test_bad_models_and_inputs(model):
    from transformers import LlamaConfig, LlamaForCausalLM

    with pytest.raises(ValueError, match="LlavaForConditionalGeneration.*LlamaForCausalLM"):
        apply_restore(
            LlamaForCausalLM(
                LlamaConfig(
                    hidden_size=32,
                    num_attention_heads=2,
                    num_hidden_layers=1,
                    intermediate_size=64,
                    vocab_size=10,
                )
            ),
            RestoreConfig(),
        )
    fa = tiny_llava()
    fa.model.language_model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="flash_attention_2.*sdpa"):
        apply_restore(fa, RestoreConfig())
    apply_restore(model, RestoreConfig(keep=N))
    try:
        with pytest.raises(ValueError, match="already patched"):
            apply_restore(model, RestoreConfig())
        ids, px = inputs()
        with pytest.raises(ValueError, match=f"keep must be.*got {N}"):
            model(input_ids=ids, pixel_values=px)
        with pytest.raises(ValueError, match="placeholder"):
            model(input_ids=torch.cat([ids[:, :3], ids[:, 4:]], 1), pixel_values=px)
    finally:
        remove_restore(model)
