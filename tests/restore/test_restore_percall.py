"""Per-call state (two requests on one patched model), the FlexAttention ``score_mod`` path
against the float-bias path, ``keep_ratio`` and models / inputs without visual tokens."""

import warnings

import pytest
import torch

from icml26.core.hfcache import cache_kw, output_cache
from icml26.restore import RestoreConfig, apply_restore, remove_restore
from icml26.restore.attention import STATE_KWARG, RestoreState, flex_available, restore_attention
from icml26.restore.patch import restore_state
from icml26.restore.vlm import tiny_llava

N = 64  # 32x32 image, patch 4
IMG = 63

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


@pytest.fixture(scope="module")
def model():
    return tiny_llava(dtype=torch.float64, layers=3)


def inputs(batch=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.tensor([[1, 2, 3] + [IMG] * N + [4, 5, 6, 7, 8]] * batch)
    return ids, torch.randn(batch, 3, 32, 32, generator=g, dtype=torch.float64)


A = RestoreConfig(reducer="divprune", keep=8)
B = RestoreConfig(reducer="divprune", keep=20, gamma=None, positions="reindexed", calibrate=False)


def _prefill(model, ids, px, cfg):
    out = model(input_ids=ids, pixel_values=px, restore_config=cfg, use_cache=True)
    return out.logits[:, -1], output_cache(out)


def _step(model, tok, cache):
    return model(input_ids=tok, **cache_kw(model, cache), use_cache=True).logits[:, -1]


def test_interleaved_requests_equal_sequential(model):
    """Prefill A, prefill B, decode A, decode B (each on its own cache) == A then B."""
    ids, px = inputs(seed=1)
    apply_restore(model, A)
    try:
        seq = []
        for cfg in (A, B):
            lp, cache = _prefill(model, ids, px, cfg)
            tok = lp.argmax(-1, keepdim=True)
            l1 = _step(model, tok, cache)
            l2 = _step(model, l1.argmax(-1, keepdim=True), cache)
            seq.append((lp, tok, l1, l2))
        (la, ca), (lb, cb) = _prefill(model, ids, px, A), _prefill(model, ids, px, B)
        a1 = _step(model, seq[0][1], ca)
        b1 = _step(model, seq[1][1], cb)
        a2 = _step(model, a1.argmax(-1, keepdim=True), ca)
        b2 = _step(model, b1.argmax(-1, keepdim=True), cb)
        sa, sb = restore_state(ca), restore_state(cb)
    finally:
        remove_restore(model)
    for got, want in zip(
        (la, a1, a2, lb, b1, b2), (*seq[0][:1], *seq[0][2:], *seq[1][:1], *seq[1][2:]), strict=True
    ):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert sa is not sb and sa.config is A and sb.config is B
    assert sa.prefill_len == 3 + 8 + 5 and sb.prefill_len == 3 + 20 + 5
    assert not torch.allclose(seq[0][2], seq[1][2])  # the two configs really differ


def test_generate_with_per_call_config_equals_patching_with_it(model):
    ids, px = inputs(seed=2)
    kw = dict(
        input_ids=ids,
        pixel_values=px,
        max_new_tokens=3,
        do_sample=False,
        output_logits=True,
        return_dict_in_generate=True,
    )
    apply_restore(model, B)
    try:
        ref = model.generate(**kw)
    finally:
        remove_restore(model)
    apply_restore(model, A)
    try:
        got = model.generate(**kw, restore_config=B)
    finally:
        remove_restore(model)
    assert torch.equal(got.sequences, ref.sequences)
    for x, y in zip(got.logits, ref.logits, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


# ---------------------------------------------------------------------------- FlexAttention


def test_flex_runs_on_cpu():
    """torch's FlexAttention runs on CPU without torch.compile (unfused, for testing)."""
    assert flex_available()


@pytest.mark.parametrize("layer", [0, 1])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_score_mod_equals_bias(layer, phase):
    """The score_mod path == the float-bias SDPA path on a random state (GQA 4:2, padding,
    merged sizes, retained positions with gaps, in-LLM dropped keys)."""
    g = torch.Generator().manual_seed(layer)
    b, h, hkv, d, k = 2, 4, 2, 8, 12
    q = 1 if phase == "decode" else k
    cfg = RestoreConfig(reducer="none", calibrate=True)
    pos = torch.stack(
        [
            torch.tensor([0, 0, 1, 2, 7, 9, 30, 31, 32, 33, 34, 35]),
            torch.tensor([0, 1, 2, 3, 4, 5, 6, 40, 41, 42, 43, 44]),
        ]
    )
    valid = torch.ones(b, k, dtype=torch.bool)
    valid[0, :2] = False  # left padding
    drop = torch.zeros(b, k, dtype=torch.bool)
    drop[1, 4] = True
    st = RestoreState(
        config=cfg,
        head_dim=d,
        base=1e4,
        phase=phase,
        pos=pos,
        valid=valid,
        log_size=torch.log(torch.randint(1, 5, (b, k), generator=g).double()),
        log_size0=torch.full((b, k), 1.3, dtype=torch.float64),
        visual=torch.zeros(b, k, dtype=torch.bool),
        drop=[(1, drop)],
    )

    class M(torch.nn.Module):
        training = False

    mod = M()
    mod.layer_idx = layer
    qq = torch.randn(b, h, q, d, generator=g, dtype=torch.float64)
    kk, vv = (torch.randn(b, hkv, k, d, generator=g, dtype=torch.float64) for _ in range(2))
    ref = restore_attention(mod, qq, kk, vv, None, scaling=0.4, **{STATE_KWARG: st})[0]
    st.backend = "flex"
    got = restore_attention(mod, qq, kk, vv, None, scaling=0.4, **{STATE_KWARG: st})[0]
    rows = valid[:, -q:]  # padding query rows see no key: undefined in both paths
    torch.testing.assert_close(got[rows], ref[rows], rtol=1e-10, atol=1e-10)


def test_flex_backend_equals_sdpa_backend_end_to_end(model):
    ids, px = inputs(batch=2, seed=3)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # row 0 left-padded
    kw = dict(
        input_ids=ids,
        pixel_values=px,
        attention_mask=mask,
        max_new_tokens=2,
        do_sample=False,
        output_logits=True,
        return_dict_in_generate=True,
    )
    outs = {}
    for backend in ("sdpa", "flex"):
        apply_restore(model, RestoreConfig(reducer="divprune", keep=8, backend=backend))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                outs[backend] = model.generate(**kw)
                assert restore_state(outs[backend]).backend == backend
        finally:
            remove_restore(model)
    assert torch.equal(outs["flex"].sequences, outs["sdpa"].sequences)
    for x, y in zip(outs["flex"].logits, outs["sdpa"].logits, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-9)


def test_auto_backend_is_sdpa_on_cpu_flex_on_cuda():
    cfg = RestoreConfig()
    assert cfg.resolved_backend("cpu") == "sdpa"
    assert cfg.resolved_backend("cuda:0") == ("flex" if flex_available() else "sdpa")


# ---------------------------------------------------------------------------- keep_ratio, bad input


@pytest.mark.parametrize("ratio", [0, 0.0, -0.1, 1.5, 2])
def test_keep_ratio_outside_unit_interval(ratio):
    with pytest.raises(ValueError, match=rf"keep_ratio must be in \(0, 1\]; got {ratio}"):
        RestoreConfig(keep_ratio=ratio)


def test_keep_ratio_matches_keep_and_one_keeps_all(model):
    ids, px = inputs(seed=4)

    def logits(cfg):
        apply_restore(model, cfg)
        try:
            return model(input_ids=ids, pixel_values=px).logits[:, -1]
        finally:
            remove_restore(model)

    torch.testing.assert_close(
        logits(RestoreConfig(keep_ratio=8 / N)), logits(RestoreConfig(keep=8)), rtol=0, atol=0
    )
    full = model(input_ids=ids, pixel_values=px).logits[:, -1]
    torch.testing.assert_close(
        logits(RestoreConfig(keep_ratio=1.0, calibrate=False)), full, rtol=1e-9, atol=1e-9
    )
    assert RestoreConfig(keep_ratio=0.001).keep_for(144) == 1


def test_models_and_inputs_without_visual_tokens(model):
    from transformers import LlamaConfig, LlamaForCausalLM

    lm = LlamaForCausalLM(
        LlamaConfig(
            hidden_size=32,
            num_attention_heads=2,
            num_hidden_layers=1,
            intermediate_size=64,
            vocab_size=10,
        )
    )
    with pytest.raises(ValueError, match="got LlamaForCausalLM.*no vision tower.*no visual tokens"):
        apply_restore(lm, RestoreConfig())
    with pytest.raises(TypeError, match="RestoreConfig; got dict"):
        apply_restore(model, {"keep": 8})
    ids, px = inputs()
    text = ids[:, [0, 1, 2, -1]]
    plain = model(input_ids=text).logits
    apply_restore(model, RestoreConfig(keep=8))
    try:
        with pytest.raises(ValueError, match=f"no image token \\(image_token_id={IMG}\\)"):
            model(input_ids=text, pixel_values=px)
        with pytest.raises(TypeError, match="restore_config must be a RestoreConfig; got int"):
            model(input_ids=ids, pixel_values=px, restore_config=8)
        # text only (no pixel_values) on a patched model: the plain model, unreduced
        torch.testing.assert_close(model(input_ids=text).logits, plain, rtol=1e-9, atol=1e-9)
    finally:
        remove_restore(model)
