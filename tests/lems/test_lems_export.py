"""Compress -> save -> load round trips on tiny Llama, Qwen2 and GPT-2 (Conv1D) models."""

import json
import subprocess
import sys

import pytest
import torch

from icml26.core.errors import UserError
from icml26.lems import CompressConfig, compress, load_compressed, save_compressed, target_layers
from icml26.lems.layers import EXCLUDE


def _model(kind):
    import transformers as tf

    torch.manual_seed(0)
    if kind == "llama":
        cfg = tf.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
        return tf.LlamaForCausalLM(cfg)
    if kind == "qwen2":
        cfg = tf.Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2)
        return tf.Qwen2ForCausalLM(cfg)
    cfg = tf.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    return tf.GPT2LMHeadModel(cfg)


def _batches(n=2):
    gen = torch.Generator().manual_seed(0)
    return [torch.randint(0, 64, (2, 16), generator=gen) for _ in range(n)]


@pytest.mark.parametrize("kind,method", [("llama", "svd"), ("qwen2", "svd_llm"), ("gpt2", "kfac")])
def test_round_trip(kind, method, tmp_path):
    model = _model(kind).eval()
    batches = _batches()
    rep = compress(model, batches, CompressConfig(target=0.6, decomposition=method, allocator="uniform",
                                                  multiple=4))
    assert rep.kept_fraction <= 0.6 and rep.params_after < rep.params_before
    assert rep.params_after == round(rep.kept_fraction * rep.params_before)
    ids = batches[0]
    with torch.no_grad():
        ref = model(input_ids=ids).logits
    n_params = sum(p.numel() for p in model.parameters())
    save_compressed(model, None, tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert cfg["rank_dict"] and "AutoModelForCausalLM" in cfg["auto_map"]
    loaded, _ = load_compressed(tmp_path / "m")
    with torch.no_grad():
        assert torch.allclose(loaded(input_ids=ids).logits, ref, atol=1e-5)
    assert sum(p.numel() for p in loaded.parameters()) == n_params
    emb, head = loaded.get_input_embeddings(), loaded.get_output_embeddings()
    if loaded.config.tie_word_embeddings:
        assert emb.weight.data_ptr() == head.weight.data_ptr()
    out = loaded.generate(ids[:1, :4], max_new_tokens=3, do_sample=False)
    assert out.shape == (1, 7)
    with pytest.raises(UserError, match="not empty"):
        save_compressed(loaded, None, tmp_path / "m")


def test_fresh_process_loads_without_icml26(tmp_path):
    model = _model("llama").eval()
    compress(model, _batches(), CompressConfig(target=0.5, decomposition="svd", allocator="uniform",
                                               multiple=4))
    save_compressed(model, None, tmp_path / "m")
    with torch.no_grad():
        ref = model(input_ids=_batches()[0]).logits
    torch.save(_batches()[0], tmp_path / "ids.pt")
    code = (
        "import sys, torch; sys.modules['icml26'] = None\n"
        "from transformers import AutoModelForCausalLM\n"
        f"m = AutoModelForCausalLM.from_pretrained({str(tmp_path / 'm')!r}, trust_remote_code=True)\n"
        f"ids = torch.load({str(tmp_path / 'ids.pt')!r})\n"
        f"torch.save(m(input_ids=ids).logits.detach(), {str(tmp_path / 'out.pt')!r})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={"HF_HUB_OFFLINE": "1", "PATH": ""})
    assert torch.allclose(torch.load(tmp_path / "out.pt"), ref, atol=1e-5)


def test_ratio_one_gives_back_the_original():
    model = _model("llama").eval()
    ids = _batches()[0]
    with torch.no_grad():
        ref = model(input_ids=ids).logits
    rep = compress(model, _batches(), CompressConfig(target=1.0, decomposition="svd", allocator="uniform"))
    assert all(r is None for r in rep.ranks.values()) and rep.params_after == rep.params_before
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, ref)


def test_target_layers_exclude_embeddings_and_head():
    for kind in ("llama", "qwen2", "gpt2"):
        model = _model(kind)
        names = [lay.name for lay in target_layers(model)]
        assert names and not any(key in n for n in names for key in EXCLUDE)
        per_block = len(names) // 2
        assert per_block == (4 if kind == "gpt2" else 7)


def test_bad_input_is_refused():
    model = _model("llama")
    with pytest.raises(UserError, match="achievable minimum"):
        compress(model, _batches(), CompressConfig(target=0.01, decomposition="svd", allocator="uniform"))
    with pytest.raises(UserError, match="fraction kept"):
        CompressConfig(target=0.0)
    with pytest.raises(UserError, match="allocator"):
        CompressConfig(allocator="random")
    with pytest.raises(UserError, match="no target layers"):
        target_layers(torch.nn.Sequential(torch.nn.ModuleList([torch.nn.Linear(2, 2)])),
                      blocks=lambda b: b > 5)
    q = _model("llama")
    up = q.model.layers[0].mlp.up_proj
    up.weight = torch.nn.Parameter(up.weight.detach().to(torch.int8), requires_grad=False)
    with pytest.raises(UserError, match="quantized"):
        target_layers(q)


def test_config_round_trips():
    cfg = CompressConfig(target=0.7, decomposition="asvd", allocator="uniform", trials=3)
    assert CompressConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
