import json

import torch
from typer.testing import CliRunner

from icml26.core.lm import tiny_llama
from icml26.tie.cli import app
from icml26.tie.predictor import LengthPredictor
from icml26.tie.sampling import prompt_key


def test_fit_and_train_commands(tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, tok = tiny_llama(hidden=32, layers=1, heads=2, seed=0)
        model.save_pretrained(tmp_path / "m")
        tok.save_pretrained(tmp_path / "m")
        prompts = [f"prompt number {i}" for i in range(8)]
        (tmp_path / "p.jsonl").write_text("\n".join(json.dumps({"prompt": p}) for p in prompts))
        lengths = {prompt_key(p): {"lengths": [3 + i, 5 + 2 * i, 9, 4 + i, 30], "censored": [False] * 4 + [True]}
                   for i, p in enumerate(prompts)}
        (tmp_path / "l.json").write_text(json.dumps(lengths))
        r = CliRunner()
        res = r.invoke(app, ["fit", str(tmp_path / "l.json"), "-o", str(tmp_path / "f.json")])
        assert res.exit_code == 0, res.output
        fits = json.loads((tmp_path / "f.json").read_text())
        assert set(fits) == set(lengths) and all(v["sigma"] > 0 for v in fits.values())
        res = r.invoke(app, ["train", "--prompts", str(tmp_path / "p.jsonl"), "--fits", str(tmp_path / "f.json"),
                             "--model", str(tmp_path / "m"), "--epochs", "3", "-o", str(tmp_path / "pred.safetensors")])
        assert res.exit_code == 0, (res.output, res.exception)
        lp = LengthPredictor.load(tmp_path / "pred.safetensors")
        assert lp.x_mean_.numel() == 3 * 32
        bad = tmp_path / "bad.jsonl"
        bad.write_text("not json\n")
        res = r.invoke(app, ["train", "--prompts", str(bad), "--fits", str(tmp_path / "f.json")])
        assert res.exit_code != 0 and "line 1" in str(res.exception)
    finally:
        torch.set_num_threads(threads)
