import json

from typer.testing import CliRunner

from icml26.core.lm import tiny_llama
from icml26.echo.cli import app


def test_generate_check_and_knee(tmp_path):
    m, tok = tiny_llama(hidden=64, layers=3, heads=4, kv_heads=2, seed=2)
    m.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    r = CliRunner().invoke(app, ["generate", "-p", "hello there", "-p", "abc", "--model", str(tmp_path / "m"),
                                 "--exit-layer", "2", "--policy", "echo", "--k-max", "10",
                                 "--max-new-tokens", "12", "--check", "--gates", "1:0.2,3:0.4"])
    assert r.exit_code == 0, r.output
    assert "2/2 outputs identical to transformers generate" in r.output
    r = CliRunner().invoke(app, ["knee", "--batch-sizes", "1,128"])
    assert r.exit_code == 0 and "K_max" in r.output


def test_bad_gates(tmp_path):
    bad = tmp_path / "g.json"
    bad.write_text(json.dumps({"depths": [1]}))
    r = CliRunner().invoke(app, ["generate", "-p", "x", "--gates-file", str(bad), "--model", str(tmp_path / "nope")])
    assert r.exit_code != 0
    import pytest

    from icml26.core.errors import UserError
    from icml26.echo.cli import _gates

    with pytest.raises(UserError, match="gate_depths"):
        _gates(None, bad)
    with pytest.raises(UserError, match="depth:tau"):
        _gates("2-0.3", None)
    assert _gates("2:0.3,5:0.6", None) == ((2, 5), (0.3, 0.6))

