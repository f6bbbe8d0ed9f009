"""`icml26 lems compress` / `show` on a tiny saved Llama with a calibration text file."""

import json

import torch
from typer.testing import CliRunner

from icml26.core.lm import tiny_llama
from icml26.lems.cli import app


def _saved_model(tmp_path):
    model, tok = tiny_llama(hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, seed=0)
    model.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    (tmp_path / "calib.txt").write_text("The quick brown fox jumps over the lazy dog. " * 40)
    return tmp_path / "base"


def test_compress_and_show(tmp_path):
    base = _saved_model(tmp_path)
    runner = CliRunner()
    args = ["compress", "--model", str(base), "--ratio", "0.6", "--calib", str(tmp_path / "calib.txt"),
            "--n-calib", "4", "--n-search", "2", "--seq-len", "32", "--trials", "1", "--dtype", "fp32",
            "--cache-dir", str(tmp_path / "cache"), "--kl-offload", str(tmp_path / "kl"),
            "-o", str(tmp_path / "out")]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["icml26_lems"]["kept_fraction"] <= 0.6
    assert (tmp_path / "cache" / "stats.safetensors").is_file()
    assert sorted(p.name for p in (tmp_path / "kl").iterdir()) == ["batch0.safetensors"]  # on disk
    shown = runner.invoke(app, ["show", str(tmp_path / "out")])
    assert shown.exit_code == 0 and "kept fraction" in shown.output
    again = runner.invoke(app, args)  # OUT is not empty now
    assert again.exit_code == 2 and "not empty" in again.output
    short = runner.invoke(app, args[:-2] + ["--n-calib", "400", "-o", str(tmp_path / "o2")])
    assert short.exit_code == 2 and "tokens" in short.output
    bad = runner.invoke(app, args[:-2] + ["--ratio", "1.5", "-o", str(tmp_path / "o3")])
    assert bad.exit_code == 2 and "(0, 1]" in bad.output
    assert torch.isfinite(torch.tensor(cfg["icml26_lems"]["kept_fraction"]))
