"""compressed-tensors pack-quantized export (icml26.cat.export), reloaded without icml26."""

import copy
import json

import pytest
import torch

from icml26.cat.export import export_compressed_tensors, pack_codes, unpack_codes
from icml26.cat.model import (
    build_transforms,
    collect_covariances,
    fake_quantize,
    group_hessians,
    load_quantized,
    save_quantized,
)
from icml26.core.lm import tiny_llama

IDS = torch.randint(0, 250, (2, 48), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("bits", [4, 8])
def test_pack_roundtrip_and_layout(bits):
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    codes = torch.randint(lo, hi + 1, (3, 64), generator=torch.Generator().manual_seed(1))
    packed = pack_codes(codes.to(torch.int8), bits)
    assert packed.dtype == torch.int32 and packed.shape == (3, 64 * bits // 32)
    assert torch.equal(unpack_codes(packed, bits, 64), codes.to(torch.int8))
    # the first word holds code 0 + offset in its lowest bits
    assert int(packed[0, 0]) & ((1 << bits) - 1) == int(codes[0, 0]) + (1 << (bits - 1))
    ct = pytest.importorskip("compressed_tensors.compressors.pack_quantized.helpers")
    assert torch.equal(ct.pack_to_int32(codes.to(torch.int8), bits), packed)


@pytest.fixture(scope="module")
def base():
    model = tiny_llama(hidden=64, layers=2, heads=4, kv_heads=2, ffn=96, seed=0)[0]
    groups = collect_covariances(model, [IDS[:1], IDS[1:]])  # 96 tokens >= width 96
    return model, groups


def _quantized(base, arm, w_bits, a_bits, gptq=False, w_gran="channel", gs=None):
    model, groups = base
    m = copy.deepcopy(model)
    tr = {} if arm == "rtn" else build_transforms(m, groups, arm, block=16)
    fake_quantize(
        m,
        w_bits,
        a_bits,
        w_gran=w_gran,
        w_group_size=gs,
        transforms=tr,
        hessians=group_hessians(groups) if gptq else None,
    )
    return m


def _reload(folder):
    """The checkpoint through transformers + compressed-tensors only (no icml26)."""
    from compressed_tensors.transform import TransformConfig, apply_transform_config
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    conf = json.loads((folder / "config.json").read_text())["quantization_config"]
    if conf["transform_config"]:
        apply_transform_config(model, TransformConfig.model_validate(conf["transform_config"]))
        sd = load_file(str(folder / "model.safetensors"))
        res = model.load_state_dict(
            {k: v for k, v in sd.items() if k.endswith("_input.weight")}, strict=False
        )
        assert not res.unexpected_keys
    return model.eval()


@pytest.mark.parametrize(
    "arm, w_bits, gptq, w_gran, gs",
    [
        ("rtn", 4, False, "channel", None),
        ("cat", 4, True, "channel", None),
        ("smoothquant", 8, False, "channel", None),
        ("hadamard", 4, False, "group", 16),
    ],
)
def test_weight_only_export_reloads_to_the_same_logits(
    base, tmp_path, arm, w_bits, gptq, w_gran, gs
):
    pytest.importorskip("compressed_tensors")
    m = _quantized(base, arm, w_bits, None, gptq, w_gran, gs)
    folder = export_compressed_tensors(m, tmp_path / "out", arm)
    r = _reload(folder)
    with torch.no_grad():
        ours, theirs = m(input_ids=IDS).logits, r(input_ids=IDS).logits
        fp = base[0](input_ids=IDS).logits
    # equal to the scale's float32 rounding; quantization itself moves them far more
    assert (ours - theirs).abs().max() < 1e-5 * ours.abs().max()
    assert (ours - fp).abs().max() > 1e-3 * ours.abs().max()
    conf = json.loads((folder / "config.json").read_text())["quantization_config"]
    assert conf["format"] == "pack-quantized" and conf["quant_method"] == "compressed-tensors"


def test_w4a4_export_quantizes_activations_on_the_library_grid(base, tmp_path):
    pytest.importorskip("compressed_tensors")
    m4 = _quantized(base, "cat", 4, 4)
    m16 = _quantized(base, "cat", 4, None)
    r = _reload(export_compressed_tensors(m4, tmp_path / "a4", "cat"))
    with torch.no_grad():
        ours4, ours16, theirs = (x(input_ids=IDS).logits for x in (m4, m16, r))
    # the reloaded model quantizes its activations (it is not the weight-only model) on its own
    # INT4 grid (/7.5, -8..7 against our /7, -7..7): close to ours, not equal
    assert (theirs - ours16).abs().max() > 1e-3
    assert (theirs - ours4).abs().max() < 0.5 * (ours16 - ours4).abs().max() + 0.1


def test_export_without_an_integer_form_names_the_arm(base, tmp_path):
    m = _quantized(base, "cat", None, 4)  # activation-only fake quantization
    with pytest.raises(ValueError, match="arm 'cat-a4' has no integer form"):
        export_compressed_tensors(m, tmp_path / "x", "cat-a4")
    m = _quantized(base, "rtn", 4, None)
    save_quantized(m, tmp_path / "saved", {})
    r = load_quantized(tmp_path / "saved", copy.deepcopy(base[0]))
    with pytest.raises(ValueError, match="arm 'reloaded': .* no integer codes"):
        export_compressed_tensors(r, tmp_path / "y", "reloaded")
    with pytest.raises(ValueError, match="arm 'w3': .* supports bits"):
        export_compressed_tensors(_quantized(base, "rtn", 3, None), tmp_path / "z", "w3")


def test_quarot_export_keeps_the_untied_rotated_head(base, tmp_path):
    pytest.importorskip("compressed_tensors")
    from icml26.cat.quarot import quarot_rotate_

    m = copy.deepcopy(base[0])
    online = quarot_rotate_(m, seed=0)
    fake_quantize(m, 4, None, transforms=online)
    folder = export_compressed_tensors(m, tmp_path / "q", "quarot")
    assert json.loads((folder / "config.json").read_text())["tie_word_embeddings"] is False
    r = _reload(folder)
    with torch.no_grad():
        ours, theirs = m(input_ids=IDS).logits, r(input_ids=IDS).logits
    assert (ours - theirs).abs().max() < 1e-5 * ours.abs().max()
