"""``icml26 cat`` commands on a tiny saved model: quantize, reload, same logits; bad input."""

import pytest
import torch
from typer.testing import CliRunner

from icml26.cat.cli import app, quantize_to_folder
from icml26.cat.model import load_quantized
from icml26.core.lm import tiny_llama

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    model, tok = tiny_llama(hidden=64, layers=1, heads=4, kv_heads=2, ffn=128, seed=0)
    model.save_pretrained(d / "model")
    tok.save_pretrained(d / "model")
    (d / "calib.txt").write_text("The quick brown fox jumps over the lazy dog. " * 80)
    return d


@pytest.mark.parametrize("transform", ["cat", "quarot"])
def test_quantize_reload_same_logits(tiny_dir, tmp_path, transform):
    """The folder `icml26 cat quantize` writes reloads to exactly the in-memory model."""
    args = [
        "quantize",
        "--model",
        str(tiny_dir / "model"),
        "--transform",
        transform,
        "--calib",
        str(tiny_dir / "calib.txt"),
        "--n-calib",
        "4",
        "--seq-len",
        "128",
        "--block",
        "16",
        "--dtype",
        "float32",
        "-o",
        str(tmp_path / "cli"),
    ]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    # the same call in-process keeps the quantized model in memory
    mem = quantize_to_folder(
        tmp_path / "lib",
        model=str(tiny_dir / "model"),
        transform=transform,
        calib=tiny_dir / "calib.txt",
        n_calib=4,
        seq_len=128,
        block=16,
        dtype="float32",
    )
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_dir / "model", dtype=torch.float32).eval()
    ids = torch.randint(0, 250, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        fp = base(input_ids=ids).logits
        want = mem(input_ids=ids).logits
        for folder in ("cli", "lib"):  # base model named in the manifest, loaded by load_quantized
            got = load_quantized(tmp_path / folder)(input_ids=ids).logits
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert 0 < (want - fp).abs().max() < 10  # quantized, not broken
    res = runner.invoke(app, args)  # refuses to overwrite
    assert res.exit_code != 0 and "--overwrite" in str(res.exception) + res.output


def test_q4_1_small_groups_refused(tmp_path):
    res = runner.invoke(app, ["quantize", "--w-group-size", "32", "-o", str(tmp_path / "x")])
    assert res.exit_code != 0
    assert "Q4_1" in str(res.exception) + res.output


@pytest.mark.parametrize("transform", ["cat", "quarot"])
def test_quantize_gptq_compressed_tensors_folder(tiny_dir, tmp_path, transform):
    """`--weights gptq --format compressed-tensors --a-bits 16` writes a pack-quantized folder."""
    import json

    args = ["quantize", "--model", str(tiny_dir / "model"), "--transform", transform,
            "--calib", str(tiny_dir / "calib.txt"), "--n-calib", "4", "--seq-len", "128",
            "--block", "16", "--a-bits", "16", "--weights", "gptq",
            "--format", "compressed-tensors", "--dtype", "float32", "-o", str(tmp_path / "ct")]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    conf = json.loads((tmp_path / "ct" / "config.json").read_text())["quantization_config"]
    assert conf["format"] == "pack-quantized"
    assert conf["config_groups"]["group_0"]["input_activations"] is None
    bad = runner.invoke(app, [*args[:-1], str(tmp_path / "x"), "--weights", "obq"])
    assert bad.exit_code != 0 and "--weights must be rtn or gptq" in str(bad.exception)
