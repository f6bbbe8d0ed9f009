import json

from typer.testing import CliRunner

from icml26.core.lm import tiny_llama
from icml26.corrsteer.cli import app
from icml26.corrsteer.sae import load_sae


def test_train_and_eval_sae_cli(tmp_path):
    model, tok = tiny_llama(hidden=32, layers=3, heads=4, seed=0)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    runner = CliRunner()
    out = tmp_path / "sae"
    res = runner.invoke(app, ["train-sae", "--model", str(tmp_path / "m"), "--layer", "1", "--d-sae", "64",
                              "--k", "8", "--tokens", "4096", "--epochs", "2", "--batch-size", "256",
                              "--lr", "3e-3", "--seq-len", "64", "--eval-tokens", "1024", "--dtype", "fp32",
                              "-o", str(out)])
    assert res.exit_code == 0, res.output
    sae = load_sae(out)
    assert (sae.layer, sae.d_sae, sae.k) == (1, 64, 8)
    res = runner.invoke(app, ["eval-sae", str(out), "--model", str(tmp_path / "m"), "--tokens", "1024",
                              "--seq-len", "64", "--dtype", "fp32"])
    assert res.exit_code == 0, res.output
    met = json.loads(res.output[res.output.index("{\n"):])  # progress bars may precede it
    assert 0.0 < met["explained_variance"] <= 1.0 and met["l0"] <= 8
    res = runner.invoke(app, ["eval-sae", str(tmp_path / "nope"), "--model", str(tmp_path / "m")])
    assert res.exit_code != 0 and "missing cfg.json" in str(res.exception)
