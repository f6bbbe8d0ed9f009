import json

import pytest
import torch

from icml26.core.claims import Claim, run_claim


def test_tiny_claim_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    from icml26.uds.claim import run

    rec = run_claim(Claim("uds", "p", "s", "f", run=run), scale="tiny", out_root=tmp_path / "res")
    assert rec["error"] is None, rec["error"]
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive")
    arms = {(r["selector"], r["budget"]) for r in rec["rows"]}
    assert {
        ("full", 1.0),
        ("random", 0.25),
        ("maxloss", 0.25),
        ("gradnorm", 0.25),
        ("uds", 0.25),
    } <= arms
    lo, hi = rec["headline"]["spread"]
    assert lo <= rec["headline"]["value"] <= hi
    assert all((tmp_path / "res" / f).exists() for f in rec["figures"])
    # every budget arm trained on exactly budget x the candidates of the full arm
    full = next(r for r in rec["rows"] if r["selector"] == "full")
    assert full["scoring s"] == 0.0
    # cached runs make the rerun resume without training
    n = len(list((tmp_path / "cache" / "icml26" / "uds" / "runs").glob("*.json")))
    assert n == 2 * (len(rec["rows"]) - 1)  # last row: the step-cost measurement


def test_cli_sft_writes_adapter_that_reloads(tmp_path):
    pytest.importorskip("peft")
    from peft import PeftModel
    from typer.testing import CliRunner

    from icml26.core.lm import tiny_llama
    from icml26.uds.cli import app

    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"{i}+1=", "response": str(i + 1)}) + "\n" for i in range(8))
    )
    out = tmp_path / "out"
    res = CliRunner().invoke(
        app,
        [
            "sft",
            "--data",
            str(data),
            "-o",
            str(out),
            "--model",
            "tiny",
            "--candidates",
            "4",
            "--budget",
            "0.5",
            "--max-len",
            "16",
            "--lr",
            "1e-2",
        ],
    )
    assert res.exit_code == 0, res.output
    log = json.loads((out / "uds_selection.json").read_text())
    assert len(log["selected"]) == 4 and len(set(log["selected"])) == 4
    base, _ = tiny_llama(128, 4, 4, max_len=24, seed=0)
    model = PeftModel.from_pretrained(base, out)
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert lora_b and any(
        float(p.abs().max()) > 0 for p in lora_b
    )  # trained away from the zero init
    bad = CliRunner().invoke(app, ["sft", "--data", str(tmp_path / "none.jsonl"), "-o", str(out)])
    assert bad.exit_code != 0
    assert torch.is_tensor(lora_b[0])


def _capture_saved(monkeypatch):
    """Record the model object that `uds sft` saves, to compare it with the reloaded adapter."""
    from peft import PeftModel

    saved = []
    original = PeftModel.save_pretrained

    def save(self, *args, **kwargs):
        saved.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(PeftModel, "save_pretrained", save)
    return saved


def test_cli_sft_adapter_reloads_with_identical_logits(tmp_path, monkeypatch):
    """The adapter written by `icml26 uds sft --lora` reloads with peft onto a fresh base model
    and gives the trained model's logits exactly (fp32, CPU)."""
    pytest.importorskip("peft")
    from peft import PeftModel
    from typer.testing import CliRunner

    from icml26.core.lm import tiny_llama
    from icml26.uds.cli import app

    saved = _capture_saved(monkeypatch)
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(
            json.dumps({"messages": [{"role": "user", "content": f"{i}*3="},
                                     {"role": "assistant", "content": str(3 * i)}]}) + "\n"
            for i in range(12)
        )
    )  # fmt: skip
    out = tmp_path / "adapter"
    args = ["sft", "--data", str(data), "-o", str(out), "--model", "tiny", "--candidates", "4"]
    args += ["--budget", "0.25", "--max-len", "16", "--lr", "3e-2", "--seed", "3"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert (out / "adapter_config.json").exists()
    assert len(saved) == 1
    trained = saved[0].eval()
    base, _ = tiny_llama(128, 4, 4, max_len=24, seed=3)  # the CLI's base for --model tiny
    ids = torch.randint(3, 259, (3, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        base_logits = base(input_ids=ids).logits.clone()
        reloaded = PeftModel.from_pretrained(base, out).eval()
        want = trained(input_ids=ids).logits
        got = reloaded(input_ids=ids).logits
    assert torch.equal(got, want)
    assert not torch.allclose(got, base_logits)  # the adapter changed the model
    # 12 examples, 4 candidates per step, budget 1/4: 3 steps of one pick each
    log = json.loads((out / "uds_selection.json").read_text())
    assert len(log["selected"]) == 3
