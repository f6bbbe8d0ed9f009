"""Whole-network checks on tiny random models: exact function preservation, fusion, save/load."""

import pytest
import torch

from icml26.cat.model import (
    apply_transform,
    build_transforms,
    collect_covariances,
    fake_quantize,
    find_groups,
    layer_sqnr,
    load_quantized,
    save_quantized,
)
from icml26.cat.quant import QuantLinear
from icml26.core.lm import tiny_llama


def _llama(dtype):
    return tiny_llama(hidden=64, layers=2, heads=4, kv_heads=2, ffn=96, seed=0, dtype=dtype)[0]


def _qwen2(dtype):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=259,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    m = Qwen2ForCausalLM(cfg)
    with torch.no_grad():  # non-trivial biases and norm gains
        for n, p in m.named_parameters():
            if n.endswith("bias") or "norm" in n:
                p.add_(0.1 * torch.randn_like(p))
    return m.to(dtype).eval()


IDS = torch.randint(0, 250, (4, 64), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def groups():
    return {
        k: collect_covariances(f(torch.float64), [IDS[:2], IDS[2:]])
        for k, f in (("llama", _llama), ("qwen2", _qwen2))
    }


CASES = [
    (a, torch.float64, 1e-9, m, kw)
    for a in ("llama", "qwen2")
    for m, kw in (
        ("smoothquant", {}),
        ("hadamard", {}),
        ("cat", {"block": 16}),
        ("cat", {"block": None}),
    )
]
CASES.append(("llama", torch.float32, 1e-4, "cat", {"block": 16}))


@pytest.mark.parametrize(("arch", "dtype", "tol", "method", "kw"), CASES)
def test_transforms_preserve_logits(groups, arch, dtype, tol, method, kw):
    make = {"llama": _llama, "qwen2": _qwen2}[arch]
    ref_model = make(dtype)
    with torch.no_grad():
        ref = ref_model(input_ids=IDS).logits
        m = make(dtype)
        apply_transform(m, build_transforms(m, groups[arch], method, **kw), fuse=True)
        out = m(input_ids=IDS).logits
    assert sum(isinstance(x, QuantLinear) for x in m.modules()) == 14
    assert (out - ref).abs().max() <= tol * max(1.0, float(ref.abs().max()))


def test_quantization_changes_logits(groups):  # so the equality checks above can fail
    ref_model = _qwen2(torch.float64)
    q = _qwen2(torch.float64)
    fake_quantize(q, 3, 3, transforms=build_transforms(q, groups["qwen2"], "cat", block=16))
    with torch.no_grad():
        assert (q(input_ids=IDS).logits - ref_model(input_ids=IDS).logits).abs().max() > 1e-3


def test_groups_follow_shared_inputs():
    names = [g.names for g in find_groups(_llama(torch.float32), IDS[:1, :8])]
    assert names[0] == [f"model.layers.0.self_attn.{p}_proj" for p in "qkv"]
    assert names[2] == ["model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj"]
    assert len(names) == 8


def test_smoothquant_fuses_into_norm_and_up_proj(groups):
    m = _llama(torch.float64)
    apply_transform(m, build_transforms(m, groups["llama"], "smoothquant"), fuse=True)
    kinds = {
        n.rsplit(".", 1)[-1]: x.transform_kind
        for n, x in m.named_modules()
        if isinstance(x, QuantLinear)
    }
    assert kinds["q_proj"].endswith("-fused") and kinds["down_proj"].endswith("-fused")
    assert not kinds["o_proj"].endswith("-fused")  # GQA: no exact producer fold for o_proj


def test_save_load_roundtrip(tmp_path, groups):
    m = _llama(torch.float32)
    fake_quantize(m, 4, 4, transforms=build_transforms(m, groups["llama"], "cat", block=16))
    with torch.no_grad():
        ref = m(input_ids=IDS).logits
    out = save_quantized(m, tmp_path / "q", {"model": "tiny"})
    with pytest.raises(FileExistsError, match="overwrite"):
        save_quantized(m, out, {})
    m2 = load_quantized(out, _llama(torch.float32))
    with torch.no_grad():
        torch.testing.assert_close(m2(input_ids=IDS).logits, ref, rtol=0, atol=0)


def test_layer_sqnr_rows(groups):
    m = _llama(torch.float64)
    arms = {"rtn": {}, "cat": build_transforms(m, groups["llama"], "cat", block=16)}
    rows = layer_sqnr(m, [IDS], arms, 4, 4)
    assert len(rows) == 2 * 14
    by = {(r["arm"], r["layer"]): r for r in rows}
    for (arm, layer), r in by.items():
        if arm == "cat":  # CAT raises the alignment term (its objective) in every layer
            assert r["alignment"] >= by[("rtn", layer)]["alignment"] * 0.999


def test_cat_needs_enough_calibration_tokens():
    m = _llama(torch.float64)
    few = collect_covariances(m, [IDS[:1, :8]])
    with pytest.raises(ValueError, match="calibration tokens, need at least 2 x block"):
        build_transforms(m, few, "cat", block=16)


def test_layer_sqnr_builds_one_arm_at_a_time(groups):
    """Arms given as callables are built when their pass starts and give the same rows as
    prebuilt dicts; no two arms' statistics are alive at once (the claim's memory bound)."""
    import gc

    import icml26.cat.model as model_mod

    m = _llama(torch.float64)
    built = {"rtn": {}, "cat": build_transforms(m, groups["llama"], "cat", block=16),
             "hadamard": build_transforms(m, groups["llama"], "hadamard", block=16)}
    eager = layer_sqnr(m, [IDS], built, 4, 4)
    events, alive, peak = [], set(), [0]
    real = model_mod.SQNRStats

    class Counted(real):
        def __post_init__(self):
            super().__post_init__()
            alive.add(id(self))
            peak[0] = max(peak[0], sum(1 for o in gc.get_objects() if isinstance(o, Counted)))

    def lazy(arm):
        def make():
            events.append(arm)
            return built[arm]

        return make

    model_mod.SQNRStats = Counted
    try:
        rows = layer_sqnr(m, iter([IDS]), {a: lazy(a) for a in built}, 4, 4)
    finally:
        model_mod.SQNRStats = real
    assert events == ["rtn", "cat", "hadamard"]
    assert rows == eager  # same order, bit-identical terms
    assert peak[0] <= 14  # one arm's linears (a one-shot iterator of batches serves every pass)
